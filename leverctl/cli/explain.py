"""`leverctl explain NAME`: one lever in plain words.

NAME is a field (`gdn_wy17`) or a variable (`ATLAS_GDN_WY17`, case and the
engine prefix forgiven, and the output says what the name matched: the
engine itself reads only the exact variable), optionally with a value
(`ATLAS_GDN_WY17=false`) to hear what that exact spelling does. A near miss
is an error that suggests the nearest name.

What each value selects on the kernel paths the lever steers is worded from
the decision table the path's ``select()`` runs (``leverctl_kernels.selection``).
"""

from __future__ import annotations

import enum
import json
from typing import Annotated

import typer

from ..errors import UserError
from . import common
from .common import CatalogOpt, EngineOpt, robust_output, write


class Format(str, enum.Enum):
    text = "text"
    json = "json"


def _catalogs(engine, catalog, name: str):
    from ..levers import load_catalog
    from ..levers.catalog import SHIPPED

    common.check_catalog_options(engine, catalog)
    if catalog is not None:
        return [load_catalog(path=catalog)]
    if engine is not None:
        return [load_catalog(engine)]
    cats = [load_catalog(e) for e in SHIPPED]
    # A variable's prefix names its engine; put that catalog first.
    up = name.upper()
    cats.sort(key=lambda c: 0 if up.startswith(c.prefix.upper()) else 1)
    return cats


def render(x) -> None:
    from rich.table import Table
    from rich.text import Text

    out = common.out
    head = Text()
    head.append(x.field, style="bold")
    head.append(f"  ({x.engine_title}, {x.group})")
    out.print(head)
    out.print(Text(x.summary))
    out.print()

    def line(label: str, value: str, style: str = "") -> None:
        t = Text()
        t.append(f"{label}: ", style="bold")
        t.append(value, style=style)
        out.print(t)

    if x.matched is not None:
        line("Matched", x.matched.text)
    if x.vars:
        line("Variable" + ("s" if len(x.vars) > 1 else ""), ", ".join(x.vars))
    line("Rule", x.rule)
    line("Default", x.default)
    line("Steers", ", ".join(_steered(s) for s in x.selects) if x.selects else "no kernel path")
    if x.requires:
        line("Needs", ", ".join(x.requires) + " on, or it has no effect")
    if x.needed_by:
        line("Needed by", ", ".join(x.needed_by))
    if x.diagnostic:
        line("Diagnostic", "yes: meant for investigations, not for serving")
    if x.current is not None:
        line("In this environment", x.current)
    if x.asked is not None:
        out.print()
        line(x.asked, x.asked_result or "", "bold yellow")
        if x.asked_verdict:
            out.print(Text("  trap: " + x.asked_verdict, style="yellow"))
    out.print()
    out.print(Text("What each kind of value does", style="bold"))
    for what, effect in x.values:
        out.print(Text(f"  {what}  ->  {effect}"))
    if x.examples:
        out.print()
        table = Table(title=None, show_header=True, box=None, pad_edge=False)
        table.add_column("for example", overflow="fold")
        table.add_column(x.field)
        for a, v in x.examples:
            table.add_row(Text("  " + a), Text(v))
        out.print(table)
    if x.traps:
        out.print()
        out.print(Text("Traps", style="bold"))
        for t in x.traps:
            out.print(Text(f"  - {t}"))
    _render_selects(x, out)
    if x.notes:
        out.print()
        out.print(Text("Notes", style="bold"))
        out.print(Text("  " + x.notes))
    if x.also_in:
        out.print()
        out.print(Text(f"Also a lever of {', '.join(x.also_in)}: add --engine to see that one."))


def _steered(s) -> str:
    from ..levers.explain import steered_name

    return steered_name(s)


def _render_selects(x, out) -> None:
    """Per steered path with kernels: what each value of the lever selects."""
    from rich.text import Text

    from ..levers.explain import defaults_text, selection_lines

    shown = [s for s in x.selects if s.selected]
    if not shown:
        return
    out.print()
    out.print(Text("What each value selects (from the table select() runs)", style="bold"))
    for s in shown:
        head = Text(f"  {s.path}")
        if s.defaults:
            head.append("  " + defaults_text(s))
        out.print(head)
        for line in selection_lines(x.field, s):
            out.print(Text(f"    {line}"))


def register(app: typer.Typer) -> None:
    @app.command("explain")
    def explain(
        name: Annotated[
            str,
            typer.Argument(
                metavar="NAME",
                help="A lever field or variable, optionally with =VALUE.",
                autocompletion=common.complete.assignments_or_variables,
            ),
        ],
        engine: EngineOpt = None,
        catalog: CatalogOpt = None,
        fmt: Annotated[Format, typer.Option("--format", "-f", metavar="FORMAT", help="text or json.")] = Format.text,
    ) -> None:
        """One lever: its rule in plain words, what each value does, the traps, the default, what it steers.

        Examples: explain ATLAS_BF16_TC_PROJ; explain gdn_wy17 --engine metrale;
        explain ATLAS_GDN_WY17=false (what that exact spelling does).
        """
        from ..levers.explain import explain as build
        from ..levers.explain import lookup
        from ..levers.sources import read_process_env

        robust_output()
        asked_value = None
        key = name
        if "=" in name:
            key, asked_value = name.split("=", 1)
        if not key.strip():
            raise UserError(f"explain needs a lever field or variable name, not {name!r}")
        cats = _catalogs(engine, catalog, key)
        cat, lv, matched = lookup(cats, key)
        asked = None
        if asked_value is not None:
            if not lv.vars:
                raise UserError(
                    f"{lv.field} reads no variable ({lv.summary[:1].lower() + lv.summary[1:]}); "
                    "it cannot be given a value",
                    name,
                )
            asked = (matched.var or lv.vars[0], asked_value)
        env = read_process_env()
        current = {v: env[v] for v in lv.vars if v in env}
        x = build(cat, lv, asked=asked, current=current, others=cats, matched=matched)
        if fmt is Format.json:
            write(json.dumps(x.to_json(), indent=2) + "\n")
        else:
            render(x)
