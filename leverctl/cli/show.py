"""`leverctl show`: the resolved levers, where each value came from, and why."""

from __future__ import annotations

import enum
import json
from typing import Annotated, Any, Optional

import typer

from ..errors import UserError
from . import common
from .common import Resolved, resolve_setup, robust_output, warn, write


class Format(str, enum.Enum):
    table = "table"
    json = "json"
    toml = "toml"
    env = "env"


def only_fields(cat, patterns: list[str] | None) -> set[str] | None:
    """The lever fields ``--only`` keeps (None: every one). Each pattern is
    a group (its id or title, any case), or a field or variable: a shell
    pattern where it has ``*``, ``?`` or ``[``, else a part of the name, in
    any case. A pattern that keeps nothing is bad input, naming the groups."""
    import fnmatch

    if not patterns:
        return None
    keep: set[str] = set()
    for pat in patterns:
        low = pat.lower()
        glob = any(c in pat for c in "*?[")
        hit = set()
        for f, lv in cat.levers.items():
            names = [f.lower(), *(v.lower() for v in lv.vars)]
            group = {lv.group.lower(), str(cat.groups.get(lv.group, lv.group)).lower()}
            if low in group or any(fnmatch.fnmatchcase(n, low) if glob else low in n for n in names):
                hit.add(f)
        if not hit:
            groups = ", ".join(f"{g} ({t})" for g, t in cat.groups.items())
            raise UserError(
                f"--only {pat!r}: no {cat.title} lever's group, field or variable matches; groups: {groups}"
            )
        keep |= hit
    return keep


def show_json(r: Resolved, only_changed: bool = False, only: set[str] | None = None) -> dict[str, Any]:
    from ..levers.present import raw_display

    doc = r.res.to_json()
    if only_changed:
        doc["levers"] = {f: e for f, e in doc["levers"].items() if e["changed"]}
    if only is not None:
        doc["levers"] = {f: e for f, e in doc["levers"].items() if f in only}
    doc["only_changed"] = only_changed
    doc["environment"] = r.env_label
    doc["ignored"] = [{"var": s.var, "raw": raw_display(s.raw), "source": s.source} for s in r.res.ignored]
    return doc


def render_table(r: Resolved, only_changed: bool = False, only: set[str] | None = None) -> None:
    from rich.text import Text

    from ..levers.kinds import KINDS
    from ..levers.present import raw_text, source_text, value_text
    from ..tables import Wrapped, fit, new_table

    res = r.res
    cat = res.catalog
    title = f"{cat.title} levers" + (f" — recipe {res.recipe}" if res.recipe else "")
    common.out.print(Text(title, style="bold"))
    table = new_table("field", "value", "source", "raw string", "rule", show_lines=False)
    shown = 0
    for gid, gtitle in cat.groups.items():
        rows = [
            x
            for x in res.levers.values()
            if x.lever.group == gid and (x.changed or not only_changed) and (only is None or x.field in only)
        ]
        if not rows:
            continue
        if shown:
            table.add_section()
        table.add_row(Wrapped(gtitle, style="bold cyan"), "", "", "", "")
        for x in rows:
            val = value_text(x.value) + (" *" if x.changed else "")
            style = "bold yellow" if x.changed else ""
            table.add_row(
                Wrapped("  " + x.field),
                Wrapped(val, style=style),
                Wrapped(source_text(x.provenance, r.env_label)),
                Wrapped(raw_text(x.provenance, x.lever.vars)),
                Wrapped(KINDS[x.lever.kind].title, style="dim"),
            )
            shown += 1
    if not shown:
        which = "Every" if only is None else "Every chosen"
        common.out.print(Text(f"{which} {cat.title} lever is at its default."))
        return
    common.out.print(fit(table, common.out.width))
    common.out.print(Text("* differs from the default", style="dim"))


def render_toml(r: Resolved) -> None:
    from ..levers.freeze import dumps, freeze

    frozen = freeze(r.res, r.recipe)
    for n in frozen.notes:
        warn(n)
    write(dumps(frozen, header=_freeze_header(r)))


def _freeze_header(r: Resolved) -> str:
    res = r.res
    parts = [f"{res.catalog.title} levers as resolved by leverctl"]
    if res.recipe:
        parts.append(f"from recipe {res.recipe}")
    parts.append(
        {"env": "with the environment", "env-file": "with the env file"}.get(r.env_label, "without the environment")
    )
    from ..levers.present import safe
    from ..levers.resolve import show_raw

    sets = [f"--set {v}={safe(show_raw(s.raw) or '')}" for v, s in res.variables.items() if s.source == "set"]
    unsets = [f"--unset {v}" for v, s in res.variables.items() if s.source == "unset"]
    if sets or unsets:
        parts.append("and " + " ".join(sets + unsets))
    return " ".join(parts) + ".\nLoaded alone, this recipe resolves to the same values."


def render_env(r: Resolved) -> None:
    from ..levers.freeze import shell_lines

    res = r.res
    sets = {v: s.raw for v, s in res.variables.items()}
    comments = [f"{res.catalog.title} levers as resolved by leverctl; eval in a POSIX shell"]
    for x in res.levers.values():
        if x.lever.kind == "config" and x.provenance.source != "default":
            comments.append(f"{x.field} = {x.value} is a serve setting: pass --max-batch-size {x.value}")
    lines, notes = shell_lines(res.catalog, sets, comments=comments)
    for n in notes:
        warn(n)
    write("\n".join(lines) + "\n")


def register(app: typer.Typer) -> None:
    @app.command("show")
    @common.with_setup
    def show(
        setup: common.Setup,
        only_changed: Annotated[
            bool, typer.Option("--only-changed", help="Only the levers whose value differs from the default.")
        ] = False,
        only: Annotated[
            Optional[list[str]],
            typer.Option(
                "--only",
                metavar="GROUP|PATTERN",
                help="Only these levers: a group (gdn, attention...), or a part of a field or variable name, or a "
                "shell pattern (*WY*). Repeatable; table and json.",
            ),
        ] = None,
        fmt: Annotated[
            Format,
            typer.Option(
                "--format",
                "-f",
                metavar="FORMAT",
                help="table (grouped by subsystem), json (a stable contract), "
                "toml (a recipe that reproduces this), env (shell export/unset lines).",
            ),
        ] = Format.table,
    ) -> None:
        """The resolved levers, grouped by subsystem: value, source, raw string and rule.

        Values that differ from the engine's default are highlighted (and marked *).
        --env-file resolves as though that file's KEY=VALUE lines were the whole
        environment, as pasted from a bug report.
        """
        robust_output()
        # Shell lines can carry a value that is not UTF-8 byte for byte ($'\xff'); table, JSON and
        # TOML cannot, so there such a value is bad input after the output shows how the engine reads it.
        if only and fmt in (Format.toml, Format.env):
            raise UserError(f"--only with --format {fmt.value}: a recipe or shell lines hold every lever; give one")
        r = resolve_setup(setup, exact_bytes=fmt is Format.env)
        keep = only_fields(r.res.catalog, only)
        if fmt is Format.json:
            write(json.dumps(show_json(r, only_changed, keep), indent=2) + "\n")
        elif fmt is Format.toml:
            render_toml(r)
        elif fmt is Format.env:
            render_env(r)
        else:
            render_table(r, only_changed, keep)
