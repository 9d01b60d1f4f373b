"""``leverctl kernels``: every kernel path, its variants, the levers that
choose between them, and the variant the current resolution selects; then
the paths the engine's levers steer that have no kernel here, which bench
and sweep therefore do not measure.

Nothing runs: the declarations are imported (in simulator mode, so listing
never initialises a GPU) and each path's ``select`` is asked.
"""

from __future__ import annotations

import itertools
import json
from typing import Annotated, Any

import typer

from . import common

FORMATS = ("table", "json")
MAX_ENUMERATED_LEVERS = 6  # 2**6 lever combinations per path at most


def _domain(value: Any) -> tuple[Any, ...]:
    """The values a lever is tried at to find which variant each one picks:
    both for an on/off lever, plus unset for a tri-state currently unset;
    other kinds stay at their resolved value."""
    if isinstance(value, bool):
        return (False, True)
    if value is None:
        return (None, False, True)
    return (value,)


def _chosen_by(path, levers: dict[str, Any], shape, catalog_fields) -> dict[str, list[str]]:
    """variant -> the lever settings that select it at ``shape``, as config
    keys with the levers that make no difference there left out
    (``decode_ffn_via_gemm=1`` rather than its four combinations). Only the
    engine's own levers vary; the path's fixed defaults stay fixed, so a
    variant no setting reaches in this engine has an empty list."""
    from ..bench.plan import config_key

    tried = [f for f in levers if f in catalog_fields][:MAX_ENUMERATED_LEVERS]
    domains = {f: _domain(levers[f]) for f in tried}
    picks: dict[str, list[dict[str, Any]]] = {}
    for combo in itertools.product(*domains.values()):
        vals = {**levers, **dict(zip(tried, combo))}
        try:
            v = path.select(vals, shape).variant
        except Exception:  # noqa: BLE001 - a select that raises chooses nothing
            continue
        picks.setdefault(v, []).append(dict(zip(tried, combo)))
    return {
        v: [config_key(path, c) or "always" for c in _drop_free_levers(combos, domains)] for v, combos in picks.items()
    }


def _drop_free_levers(combos: list[dict[str, Any]], domains: dict[str, tuple]) -> list[dict[str, Any]]:
    """Remove each lever whose every value appears with the same settings of
    the others (the choice does not depend on it), one lever at a time."""
    cur = combos
    for f, dom in domains.items():
        rest = [tuple((g, x) for g, x in c.items() if g != f) for c in cur]
        seen: dict[tuple, set] = {}
        for r, c in zip(rest, cur):
            seen.setdefault(r, set()).add(c[f])
        if all(len(vals) == len(dom) for vals in seen.values()):
            cur = [dict(r) for r in dict.fromkeys(rest)]
    return cur


def describe(res, paths, model=None) -> dict[str, Any]:
    """The ``kernels --format json`` object."""
    from ..bench.axes import axes_of
    from ..bench.plan import applies, lever_json, path_levers

    fields = res.catalog.fields
    values = res.values()
    rows = []
    for p in paths:
        applies_here = applies(p, res.engine, fields)
        entry: dict[str, Any] = {
            "name": p.name,
            "family": p.family,
            "summary": p.summary,
            "applies": applies_here,
            "levers": {},
            "selected": [],
            "variants": [],
        }
        try:
            # A path this engine does not have has no lever values in it: its
            # catalog may lack the levers altogether (Atlas and ffn.prefill).
            levers = path_levers(p, values, fields) if applies_here else {}
            shapes = list(p.shapes("model", model))
            entry["axes"] = axes_of(shapes)
        except Exception as e:  # noqa: BLE001 - a broken declaration is shown, not fatal
            entry["error"] = f"{type(e).__name__}: {e}"
            levers, shapes = {}, []
        entry["levers"] = {
            f: {"value": lever_json(v), "from": "catalog" if f in fields else "path default"} for f, v in levers.items()
        }
        for s in shapes if applies_here else []:
            try:
                c = p.select(levers, s)
                entry["selected"].append({"shape": s.label, "variant": c.variant, "note": c.note})
            except Exception as e:  # noqa: BLE001
                entry["selected"].append({"shape": s.label, "variant": None, "note": f"select() raised: {e}"})
        chosen = _chosen_by(p, levers, shapes[0], fields) if shapes and applies_here else {}
        for name, v in p.variants.items():
            entry["variants"].append(
                {
                    "name": name,
                    "summary": v.summary,
                    "chosen_by": chosen.get(name, []),
                    "baseline": name in getattr(p, "baselines", ()),
                }
            )
        rows.append(entry)
    return {
        "schema": "leverctl.kernels/1",
        "engine": res.engine,
        "recipe": res.recipe,
        "paths": rows,
        "unmeasured": unmeasured(res.catalog, paths),
    }


def unmeasured(catalog, paths) -> list[dict[str, Any]]:
    """The paths this engine's levers steer that no kernel path declares:
    ``[{"path": name, "levers": [field, ...]}]`` in catalog order."""
    declared = {p.name for p in paths}
    out: dict[str, list[str]] = {}
    for lv in catalog.levers.values():
        for name in lv.steers:
            if name not in declared:
                out.setdefault(name, []).append(lv.field)
    return [{"path": name, "levers": fields} for name, fields in out.items()]


def _selected_text(entry: dict) -> str:
    if not entry["applies"]:
        return "(not in this engine)"
    picks: dict[str, int] = {}
    for s in entry["selected"]:
        picks[s["variant"] or "?"] = picks.get(s["variant"] or "?", 0) + 1
    if len(picks) == 1:
        return next(iter(picks))
    total = len(entry["selected"])
    return ", ".join(f"{v} ({n} of {total} shapes)" for v, n in picks.items())


def table(doc: dict) -> Any:
    from rich.table import Table

    from ..bench.plan import config_value

    t = Table(
        title=f"{doc['engine']} kernel paths" + (f" ({doc['recipe']})" if doc["recipe"] else ""), title_justify="left"
    )
    for col in ("path", "levers now", "variant", "chosen by", "selected", "summary"):
        t.add_column(col, overflow="fold")
    for e in doc["paths"]:
        now = ", ".join(
            f"{f}={config_value(x['value'])}" + ("" if x["from"] == "catalog" else " (fixed)")
            for f, x in e["levers"].items()
        )
        selected = _selected_text(e)
        for i, v in enumerate(e["variants"]):
            mark = "▶ " if e["applies"] and any(s["variant"] == v["name"] for s in e["selected"]) else "  "
            t.add_row(
                e["name"] if i == 0 else "",
                now if i == 0 else "",
                mark + v["name"],
                " | ".join(c.replace(",", ", ") for c in v["chosen_by"])
                or ("no lever: bench and sweep run it beside" if v.get("baseline") else "–"),
                selected if i == 0 else "",
                v["summary"],
            )
        if "error" in e:
            t.add_row(e["name"], "", "", "", "", f"error: {e['error']}")
    return t


def unmeasured_title(doc: dict) -> str:
    from ..levers.explain import NO_KERNEL

    return f"{doc['engine']}: paths its levers steer with {NO_KERNEL}"


def unmeasured_table(doc: dict) -> Any:
    """The unmeasured paths; its title (:func:`unmeasured_title`) is printed
    as a line of its own above it: a table of short rows would fold it."""
    from rich.table import Table

    t = Table()
    t.add_column("path", overflow="fold")
    t.add_column("levers", overflow="fold")
    for e in doc["unmeasured"]:
        t.add_row(e["path"], ", ".join(e["levers"]))
    return t


def register(app: typer.Typer) -> None:
    @app.command("kernels")
    @common.with_setup
    def kernels(
        setup: common.Setup,
        kernel: common.KernelOpt = None,
        fmt: Annotated[str, typer.Option("--format", "-f", metavar="FORMAT", help="table or json.")] = "table",
    ) -> None:
        """List every kernel path, its variants and the levers that choose them,
        marking the variant the current resolution selects; with -k, those
        paths and the dimensions of their shapes (what --axis refines)."""
        common.check_format(fmt, FORMATS)
        res = setup.resolve()
        _cat, rec = setup.load()

        from ..bench import device

        device.choose("sim")  # declarations only: no GPU initialisation for a listing
        paths = common.select_paths(common.registered_paths(), kernel)
        doc = describe(res, paths, rec.model if rec and rec.model else None)
        if fmt == "json":
            common.write(json.dumps(doc, indent=2) + "\n")
        else:
            from ..tables import fit

            common.out.print(fit(table(doc), common.out.width))
            if kernel:
                for e in doc["paths"]:
                    dims = " ".join(f"{k}={','.join(map(str, v))}" for k, v in (e.get("axes") or {}).items())
                    common.out.print(
                        f"{e['name']} shape dimensions (model shapes; --axis NAME=...): {dims}", markup=False
                    )
            if doc["unmeasured"] and not kernel:
                common.out.print(unmeasured_title(doc), markup=False)
                common.out.print(fit(unmeasured_table(doc), common.out.width))
