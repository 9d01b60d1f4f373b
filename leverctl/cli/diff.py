"""`leverctl diff A B`: the levers whose values differ between two setups.

A side is a recipe file (or the name of one in recipes/), `env` (this
process's environment), `env:FILE` (an env file of KEY=VALUE lines),
`defaults` (nothing set), or a JSON document written by `show --format json`
or by `bench` (whose `levers` key holds the show object). Exit 0 when every
lever resolves alike, 1 when some differ, 2 on bad input.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import UserError
from ..levers.files import read_input_file
from . import common
from .common import CatalogOpt, EngineOpt, robust_output, warn, write

SIDE_HELP = (
    "a recipe file (or recipes/ name), env, env:FILE, defaults, or a JSON written by show --format json or bench"
)


# A side is a recipe (itself capped at 1 MiB when loaded) or a show/bench
# JSON document, which carries the bench's records: generous, but a cap.
SIDE_CAP = 64 << 20


class Format(str, enum.Enum):
    table = "table"
    json = "json"


@dataclass
class Side:
    spec: str
    kind: str  # recipe | env | env-file | defaults | json
    engine: str | None = None
    recipe: Any = None
    env: Any = None
    doc: dict | None = None
    path: str | None = None

    def label(self) -> str:
        return self.spec


def _read_side(spec: str) -> Side:
    """What a side names, read far enough to know its engine."""
    from ..levers import load_recipe
    from ..levers.sources import read_env_file, read_process_env

    if spec == "env":
        return Side(spec, "env", env=read_process_env())
    if spec == "defaults":
        return Side(spec, "defaults", env={})
    if spec.startswith("env:"):
        path = spec[4:]
        return Side(spec, "env-file", env=read_env_file(path), path=path)
    p = common.find_recipe(Path(spec))
    if not p.exists() and not p.is_symlink():  # a dangling link or a loop: read_input_file says which
        raise UserError(f"no such file (a side is {SIDE_HELP})", str(p))
    data = read_input_file(p, "recipe or JSON file", limit=SIDE_CAP)
    if data.lstrip()[:1] == b"{":
        doc = _parse_json(data, str(p))
        return Side(spec, "json", engine=doc.get("engine"), doc=doc, path=str(p))
    recipe = load_recipe(p)
    return Side(spec, "recipe", engine=recipe.engine, recipe=recipe, path=str(p))


def _parse_json(data: bytes, where: str) -> dict:
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError("is not UTF-8 text, not a JSON document", where) from None
    except json.JSONDecodeError as e:
        raise UserError(f"JSON syntax error: {e.msg} (column {e.colno})", f"{where}:{e.lineno}") from None
    if not isinstance(doc, dict):
        raise UserError("is JSON but not an object written by show or bench", where)
    # A bench document carries the show object under `levers`.
    inner = doc.get("levers")
    if isinstance(inner, dict) and isinstance(inner.get("levers"), dict) and "engine" in inner:
        doc = inner
    if not isinstance(doc.get("levers"), dict) or not isinstance(doc.get("engine"), str):
        raise UserError("is JSON but not written by show or bench (needs `engine` and a `levers` object)", where)
    return doc


def _check_value(lever, value: Any, where: str) -> Any:
    """A JSON value as the resolved value it stands for, or a UserError."""
    from ..levers.kinds import USIZE_MAX, Drafter
    from ..levers.recipes import U32_MAX

    kind = lever.kind
    f = lever.field
    if kind == "drafter":
        if (
            isinstance(value, dict)
            and set(value) == {"prefill", "carry"}
            and all(isinstance(v, bool) for v in value.values())
        ):
            return Drafter(value["prefill"], value["carry"])
        raise UserError(f'levers.{f}.value must be {{"prefill": bool, "carry": bool}}, not {value!r}', where)
    if kind == "tristate":
        if value is None or isinstance(value, bool):
            return value
        raise UserError(f"levers.{f}.value must be true, false or null, not {value!r}", where)
    if kind in ("count_opt", "count_clamped", "config"):
        # The engine's types: max_decode_seqs a u32 of at least 1, the counts usize.
        low, high = (1, U32_MAX) if kind == "config" else (0, USIZE_MAX)
        ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        if ok or (kind == "count_opt" and value is None):
            return value
        raise UserError(
            f"levers.{f}.value must be a count from {low} to {high}"
            f"{' or null' if kind == 'count_opt' else ''}, not {value!r}",
            where,
        )
    if isinstance(value, bool):
        return value
    raise UserError(f"levers.{f}.value must be true or false, not {value!r}", where)


def _json_prov(entry: dict) -> str:
    src = str(entry.get("source", "?"))
    parts = [src + (f" ({entry['file']})" if entry.get("file") else "")]
    var, raw = entry.get("var"), entry.get("raw")
    if src == "flag":
        parts = [f"--max-batch-size {raw}"]
    elif var and raw is not None:
        parts.append(f"{var}={json.dumps(raw, ensure_ascii=False)}")
    return " ".join(parts)


def _values(side: Side, catalog, max_batch_size: int | None) -> dict[str, tuple[Any, str]]:
    """field -> (value, provenance in words) for one side."""
    from ..levers import resolve
    from ..levers.present import raw_text, safe, source_text

    if side.kind == "json":
        doc = side.doc or {}
        where = side.path or side.spec
        out: dict[str, tuple[Any, str]] = {}
        levers = doc["levers"]
        unknown = [f for f in levers if f not in catalog.levers]
        for f in unknown:
            from ..levers.suggest import did_you_mean

            warn(f"{where}: field {f} is not a known {catalog.title} lever{did_you_mean(f, catalog.fields)}; ignored")
        for f, lv in catalog.levers.items():
            entry = levers.get(f)
            if entry is None:
                if doc.get("only_changed"):
                    out[f] = (lv.default, "default (not listed: only changed levers were saved)")
                else:
                    out[f] = (_MISSING, "absent from the file")
                continue
            if not isinstance(entry, dict) or "value" not in entry:
                raise UserError(f"levers.{f} must be an object with a `value`", where)
            out[f] = (_check_value(lv, entry["value"], where), safe(_json_prov(entry)))
        return out
    if side.kind == "recipe":
        common.check_known(catalog, side.recipe, [], [])
    res = resolve(catalog, recipe=side.recipe, env=side.env or {}, max_batch_size=max_batch_size)
    label = {"env": "env", "env-file": f"env-file {side.path}"}.get(side.kind, side.kind)
    for s in res.ignored:
        warn(f"{side.spec}: {s.var} is not a known {catalog.title} lever variable; ignored")
    common.flag_not_utf8(res)
    out = {}
    for f, r in res.levers.items():
        p = r.provenance
        text = source_text(p, label)
        if p.source == "default" and r.lever.vars:
            text += f" ({raw_text(p, r.lever.vars)})"
        elif p.source not in ("default", "serve", "flag", "build"):
            text += " " + raw_text(p, r.lever.vars)
        out[f] = (r.value, safe(text))
    return out


class _Missing:
    def __repr__(self) -> str:
        return "absent"


_MISSING = _Missing()


def _cell(value: Any) -> str:
    from ..levers.present import value_text

    return "(absent)" if value is _MISSING else value_text(value)


def _json_value(value: Any) -> Any:
    from ..levers.resolve import value_json

    return None if value is _MISSING else value_json(value)


def register(app: typer.Typer) -> None:
    @app.command("diff")
    def diff(
        a: Annotated[str, typer.Argument(metavar="A", help=f"One side: {SIDE_HELP}.")],
        b: Annotated[str, typer.Argument(metavar="B", help="The other side, same forms.")],
        engine: EngineOpt = None,
        catalog: CatalogOpt = None,
        max_batch_size: Annotated[
            Optional[int],
            typer.Option("--max-batch-size", metavar="N", help="Serve max batch size for sides that are not JSON."),
        ] = None,
        fmt: Annotated[Format, typer.Option("--format", "-f", metavar="FORMAT", help="table or json.")] = Format.table,
    ) -> None:
        """The levers whose values differ between A and B, with both provenances and the kernel paths they steer.

        Exit codes: 0 every lever resolves alike; 1 some differ; 2 bad input.
        """
        from ..levers import load_catalog
        from ..levers.present import infer_engine

        robust_output()
        common.check_catalog_options(engine, catalog)
        if a == b == "env:-":
            raise UserError("env:- reads standard input, which only one side can do")
        sides = [_read_side(a), _read_side(b)]
        engines = {s.engine for s in sides if s.engine}
        if catalog is not None:
            cat = load_catalog(path=catalog)
            other = next((s for s in sides if s.engine and s.engine != cat.engine), None)
            if other is not None:
                raise UserError(
                    f"is for engine {other.engine!r}, but the catalog is {cat.engine!r}", other.path or other.spec
                )
        else:
            if len(engines) > 1:
                raise UserError(
                    f"the sides are for different engines ({' vs '.join(s.engine or '?' for s in sides)}); "
                    "diff compares one engine's levers"
                )
            name = engine or (engines.pop() if engines else None)
            if name is None:
                for s in sides:
                    if s.kind in ("env", "env-file") and s.env:
                        name = infer_engine(s.env)
                        if name:
                            break
            from_recipe = next((s.recipe for s in sides if s.kind == "recipe"), None)
            if from_recipe is not None and not engine:
                cat = common.recipe_catalog(from_recipe)
            else:
                try:
                    cat = load_catalog(name or "atlas")
                except UserError as e:
                    src = next((s.path for s in sides if s.kind == "json" and s.engine == name), None)
                    raise UserError(e.message, e.where or src) from None
            if engine and engines and engine not in engines:
                raise UserError(f"--engine {engine} disagrees with the sides' engine {engines.pop()!r}")
        va, vb = (_values(s, cat, max_batch_size) for s in sides)
        rows = [f for f in cat.fields if va[f][0] != vb[f][0]]
        if fmt is Format.json:
            doc = {
                "engine": cat.engine,
                "a": a,
                "b": b,
                "equal": not rows,
                "differences": [
                    {
                        "field": f,
                        "a": {"value": _json_value(va[f][0]), "provenance": va[f][1]},
                        "b": {"value": _json_value(vb[f][0]), "provenance": vb[f][1]},
                        "steers": list(cat.lever(f).steers),
                    }
                    for f in rows
                ],
            }
            write(json.dumps(doc, indent=2) + "\n")
        elif not rows:
            common.out.print(f"{a} and {b} resolve every {cat.title} lever alike.", markup=False, highlight=False)
        else:
            from rich.table import Table
            from rich.text import Text

            from ..tables import fit

            table = Table()
            for col in ("field", f"A: {a}", "A provenance", f"B: {b}", "B provenance", "steers"):
                table.add_column(Text(col), overflow="fold")
            for f in rows:
                table.add_row(
                    Text(f),
                    Text(_cell(va[f][0]), style="bold"),
                    Text(va[f][1]),
                    Text(_cell(vb[f][0]), style="bold"),
                    Text(vb[f][1]),
                    Text(", ".join(cat.lever(f).steers) or "-"),
                )
            common.out.print(Text(f"{len(rows)} {cat.title} lever(s) differ", style="bold"))
            common.out.print(fit(table, common.out.width))
        raise typer.Exit(1 if rows else 0)
