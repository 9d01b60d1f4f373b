"""A catalog's lever reference as Markdown (``leverctl catalog doc``): for
every lever, by group, its variable, parse rule, default, what each kind of
value does, its traps and the paths it steers with what each value selects
there, all from the catalog and the decision tables that ``explain`` reads
(so the page and ``explain`` cannot disagree). ``docs/levers-atlas.md`` and
``docs/levers-metrale.md`` are this function's output; a test fails when
they are stale."""

from __future__ import annotations

from .catalog import Catalog
from .explain import defaults_text, explain, selection_lines, steered_name


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if text else "``"


def markdown(cat: Catalog) -> str:
    """The reference page of ``cat``."""
    out = [
        f"# {cat.title} levers",
        "",
        f"Every lever of the {cat.title} engine (variables `{cat.prefix}*`), as the engine parses it, generated "
        f"by `leverctl catalog doc -e {cat.engine} -f markdown` from the catalog and the kernel paths' decision "
        "tables: `leverctl explain VAR` says the same for one lever, `leverctl show` how the current "
        "environment and recipe resolve them. Do not edit by hand: `make docs` writes it again.",
        "",
        "| variable | field | rule | default | steers |",
        "|---|---|---|---|---|",
    ]
    explained = {f: explain(cat, lv) for f, lv in cat.levers.items()}
    for f, x in explained.items():
        var = ", ".join(_code(v) for v in x.vars) or _no_variable(x.kind, short=True)
        steers = ", ".join(s.path for s in x.selects) or "–"
        out.append(
            f"| {var} | [`{f}`](#{f.replace('_', '-')}) | {_cell(x.rule)} | {_cell(x.default)} | {_cell(steers)} |"
        )
    out.append("")
    for group, title in cat.groups.items():
        fields = [f for f, lv in cat.levers.items() if lv.group == group]
        if not fields:
            continue
        out += [f"## {title}", ""]
        for f in fields:
            out += _lever(explained[f])
    return "\n".join(out).rstrip("\n") + "\n"


def _lever(x) -> list[str]:
    out = [f"### {x.field}", "", x.summary, ""]
    if x.vars:
        out.append(f"- **Variable{'s' if len(x.vars) > 1 else ''}:** " + ", ".join(_code(v) for v in x.vars))
    else:
        out.append(f"- **Variable:** none: {_no_variable(x.kind)}")
    out.append(f"- **Rule:** {x.rule} (`{x.kind}`)")
    out.append(f"- **Default:** {x.default}")
    if x.requires:
        out.append(f"- **Needs:** {', '.join(_code(r) for r in x.requires)} on, or it has no effect")
    if x.needed_by:
        out.append(f"- **Needed by:** {', '.join(_code(r) for r in x.needed_by)}")
    if x.diagnostic:
        out.append("- **Diagnostic:** meant for investigations, not for serving")
    out += ["", "| you write | it means |", "|---|---|"]
    out += [f"| {_cell(what)} | {_cell(effect)} |" for what, effect in x.values]
    if x.examples:
        out += ["", "| for example | " + x.field + " |", "|---|---|"]
        out += [f"| {_code(a)} | {_cell(v)} |" for a, v in x.examples]
    if x.traps:
        out += ["", "Traps:", ""]
        out += [f"- {t}" for t in x.traps]
    steers = ", ".join(steered_name(s, _code) for s in x.selects) if x.selects else "no kernel path"
    out += ["", f"Steers: {steers}."]
    for s in x.selects:
        if s.selected:
            out += ["", f"On `{s.path}`" + (f" {defaults_text(s)}" if s.defaults else "") + ":", ""]
            out += [f"- {line}" for line in selection_lines(x.field, s)]
    if x.notes:
        out += ["", x.notes]
    out.append("")
    return out


def _no_variable(kind: str, short: bool = False) -> str:
    if kind == "config":
        return "(a serve setting)" if short else "a serve setting (`--max-batch-size`, a recipe's `[serve]`)"
    return "(a build default)" if short else "a build default (a recipe's `[build]` sets it)"
