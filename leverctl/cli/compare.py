"""``leverctl compare BASE NEW``: did anything get slower or start failing?

Each side is a bench JSON document or sweep results (a directory or its
results.jsonl). Records match on (kernel, shape, lever set), or on (kernel,
shape) when the two runs set different levers (``--by``); the verdicts and
the noise rule are in :mod:`leverctl.bench.compare`.

Exit codes, so CI can gate on it: 0 nothing regressed, 1 a regression, a
new failure, an untimed pair, a BASE record missing from NEW (unless
``--allow-missing``) or nothing in common; 2 bad input (including an
unusable record, named by its line, and runs from different devices without
``--allow-different-device``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Annotated, Iterator

import typer

from . import common

STYLE = {
    "NEW FAIL": "bold red",
    "SLOWER": "red",
    "UNTIMED": "bold red",
    "STILL FAILS": "red",
    "FIXED": "green",
    "FASTER": "green",
    "NOISY": "yellow",
    "SAME": "",
    "PASS": "",
}


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f} %"


def _spread(x: float | None) -> str:
    return "–" if x is None else f"±{100 * x:.1f} %"


def _us(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


# A comparison this size or smaller lists every entry in the table and the
# Markdown; a larger one (a cluster sweep's million) lists those that need a
# look, all of them, and counts the quiet ones (SAME, PASS): JSON holds all.
LIST_ALL_UP_TO = 100
QUIET = ("SAME", "PASS")


def _shown(c, every: bool) -> tuple[list, str]:
    """The entries the table and Markdown list, and a line on those they leave out ('' for none)."""
    if every or len(c.entries) <= LIST_ALL_UP_TO:
        return c.entries, ""
    from ..bench.compare import VERDICTS

    shown = c.entries.select([v for v in VERDICTS if v not in QUIET])
    left = len(c.entries) - len(shown)
    if not left:
        return shown, ""
    counts = c.counts()
    what = ", ".join(f"{counts[v]} {v}" for v in QUIET if counts.get(v))
    return shown, (f"{left} matched pairs not listed ({what}): --all lists them, and --format json holds every entry")


def _rows(c, entries) -> tuple[list[str], list[list[str]]]:
    if c.timed:
        cols = ["verdict", "kernel", "variant", "shape", "levers", "base µs", "new µs", "change", "noise", "note"]
    else:
        cols = ["verdict", "kernel", "variant", "shape", "levers", "base", "new", "note"]
    rows = []
    for e in entries:
        variant = e.variant if e.variant == e.base_variant else f"{e.base_variant} → {e.variant}"
        levers = e.config if not e.base_config or e.base_config == e.config else f"{e.base_config} → {e.config}"
        if c.timed:
            noise = max(e.base_spread or 0.0, e.new_spread or 0.0) if e.base_spread is not None else None
            rows.append(
                [
                    e.verdict,
                    e.kernel,
                    variant,
                    e.shape,
                    levers,
                    _us(e.base_us),
                    _us(e.new_us),
                    _pct(e.change),
                    _spread(noise),
                    e.note,
                ]
            )
        else:
            rows.append([e.verdict, e.kernel, variant, e.shape, levers, e.base_status, e.new_status, e.note])
    return cols, rows


def _one_sided(c, every: bool) -> list[tuple[str, list[list[str]]]]:
    out = []
    missing = "Only in BASE (missing from NEW" + (", allowed)" if c.allow_missing else ")")
    for label, items in ((missing, c.only_base), ("Only in NEW", c.only_new)):
        if items:
            if not every and len(items) > LIST_ALL_UP_TO:
                label += f", the first {LIST_ALL_UP_TO} of {len(items)}: --all lists them all"
                items = items[:LIST_ALL_UP_TO]
            out.append((label, [[o.kernel, o.variant, o.shape, o.config, o.status] for o in items]))
    return out


def table(c, *, width: int | None = None, color: bool = False, every: bool = False) -> str:
    from rich.console import Console
    from rich.table import Table

    from ..bench.compare import summary_line
    from ..tables import fit

    buf = io.StringIO()
    con = Console(
        file=buf, width=width or 200, force_terminal=color, no_color=not color, soft_wrap=False, highlight=False
    )
    con.print(
        f"BASE {c.base} ({c.base_device or 'device unknown'})  vs  NEW {c.new} ({c.new_device or 'device unknown'})",
        markup=False,
    )
    for n in c.notes:
        con.print(f"note: {n}", markup=False)
    entries, left = _shown(c, every)
    cols, rows = _rows(c, entries)
    if rows:
        t = Table()
        for col in cols:
            t.add_column(
                col,
                no_wrap=col != "note",
                justify="right" if col in ("base µs", "new µs", "change", "noise") else "left",
            )
        for row in rows:
            t.add_row(*row, style=(STYLE.get(row[0]) or None) if color else None)
        con.print(fit(t, con.width))
    if left:
        con.print(left, markup=False)
    if c.profile_regressions:
        con.print("Profile regressions (machine code and memory behaviour, bench --profile):", markup=False)
        t = Table()
        for col in ("kernel", "variant", "shape", "levers", "what got worse"):
            t.add_column(col, no_wrap=col != "what got worse")
        for p in c.profile_regressions:
            t.add_row(p.kernel, p.variant, p.shape, p.config, p.what, style="red" if color else None)
        con.print(fit(t, con.width))
    for label, items in _one_sided(c, every):
        con.print(f"{label}:", markup=False)
        t = Table()
        for col in ("kernel", "variant", "shape", "levers", "status"):
            t.add_column(col, no_wrap=True)
        for row in items:
            t.add_row(*row)
        con.print(fit(t, con.width))
    con.print(summary_line(c), markup=False)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def markdown(c, every: bool = False) -> str:
    from ..bench.compare import GATING, summary_line

    head = "❌" if c.gated else "✅"
    out = [
        f"### {head} leverctl compare: {summary_line(c)}",
        "",
        f"BASE `{c.base}` ({c.base_device or 'device unknown'}) vs NEW `{c.new}` ({c.new_device or 'device unknown'}).",
        "",
    ]
    for n in c.notes:
        out.append(f"> {n}")
    if c.notes:
        out.append("")
    entries, left = _shown(c, every)
    cols, rows = _rows(c, entries)
    if rows:
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + "|".join("---" for _ in cols) + "|")
        for row in rows:
            cells = [f"**{row[0]}**" if row[0] in GATING else row[0], *row[1:]]
            out.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
        out.append("")
    if left:
        out += [left, ""]
    if c.profile_regressions:
        out += ["**Profile regressions:**", "", "| kernel | variant | shape | levers | what got worse |"]
        out.append("|---|---|---|---|---|")
        for p in c.profile_regressions:
            cells = (p.kernel, p.variant, p.shape, f"`{p.config}`", p.what)
            out.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
        out.append("")
    for label, items in _one_sided(c, every):
        out.append(f"**{label}:** " + "; ".join(f"{k} {v} {s} `{cfg}` ({st})" for k, v, s, cfg, st in items))
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def render(c, fmt: str, *, width: int | None = None, color: bool = False, every: bool = False) -> str:
    return "".join(render_pieces(c, fmt, width=width, color=color, every=every))


def render_pieces(c, fmt: str, *, width: int | None = None, color: bool = False, every: bool = False) -> Iterator[str]:
    """The comparison in ``fmt``, in pieces to write as they come (JSON: an
    entry per matched record, never whole in memory). ``every``: the table
    and Markdown list every entry, however many (see :data:`LIST_ALL_UP_TO`)."""
    if fmt == "json":
        from .. import jsontext

        yield from jsontext.pieces(c.to_json(lazy=True), allow_nan=False)
        yield "\n"
    elif fmt == "markdown":
        yield markdown(c, every)
    else:
        yield table(c, width=width, color=color, every=every)


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        base: Annotated[Path, typer.Argument(metavar="BASE", help="Bench JSON or sweep results: the reference run.")],
        new: Annotated[Path, typer.Argument(metavar="NEW", help="Bench JSON or sweep results: the run under test.")],
        threshold: Annotated[
            float,
            typer.Option(
                "--threshold",
                "-t",
                metavar="PCT",
                help="Smallest change, in percent, that counts (beyond the measured noise too).",
            ),
        ] = 5.0,
        fmt: common.FormatOpt = "table",
        allow_different_device: Annotated[
            bool, typer.Option("--allow-different-device", help="Compare runs from different devices anyway.")
        ] = False,
        allow_missing: Annotated[
            bool, typer.Option("--allow-missing", help="Do not fail when a BASE record has no counterpart in NEW.")
        ] = False,
        by: Annotated[
            str,
            typer.Option(
                "--by",
                metavar="auto|path|variant",
                help="Pair records by kernel path and shape (a lever A/B: each side's variant and levers shown), "
                "or by variant (kernel, shape and lever set: sweeps, --all-variants). auto: path when every "
                "path and shape appears once a side and the runs' levers differ, else variant.",
                autocompletion=lambda incomplete: [b for b in ("auto", "path", "variant") if b.startswith(incomplete)],
            ),
        ] = "auto",
        every: Annotated[
            bool,
            typer.Option(
                "--all",
                help=f"List every matched pair in the table or Markdown; past {LIST_ALL_UP_TO} pairs "
                "they list those that are not SAME (or PASS) and count the rest.",
            ),
        ] = False,
    ) -> None:
        """Per kernel, shape and variant: FASTER, SLOWER, SAME or NOISY
        against both runs' noise (a lever A/B pairs each path's variants). Exit 1 on a regression (timing or,
        with bench --profile, machine code and memory), a new failure, an
        untimed pair, a BASE record missing from NEW, or nothing in common."""
        from ..bench.compare import compare_paths

        common.check_format(fmt)
        with common.many_records():
            c, b, n = compare_paths(
                base,
                new,
                threshold=threshold,
                allow_different_device=allow_different_device,
                allow_missing=allow_missing,
                by=by,
            )
            for rs in (b, n):
                for note in rs.notes():
                    common.warn(note)
            width, color = common.tty_table(fmt)
            common.write_pieces(render_pieces(c, fmt, width=width, color=color, every=every))
        if c.exit_code:
            raise typer.Exit(c.exit_code)
