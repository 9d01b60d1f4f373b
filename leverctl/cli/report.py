"""``leverctl report``: what a set of records says, and the sweep's files.

* ``report show RESULTS``: per kernel path and shape, the fastest correct
  configuration and its speedup over the recipe's own, the failing ones
  apart, and each lever's effect (as bars in the terminal);
* ``report merge DIR... --out DIR``: join shards or resumed pieces of one
  sweep, refusing results of different plans, catalogs or devices;
* ``report plot RESULTS --out FILE.svg``: the lever effects as a chart.

RESULTS is a bench JSON document, a sweep directory or its results.jsonl.
Every view is a function of the records (and the sweep's plan.json).
"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer

from ..errors import UserError
from ..levers.files import check_output_path, write_atomically
from . import common

report_app = typer.Typer(
    name="report",
    help="Rankings, lever effects and charts from bench or sweep results; merge sweep shards.",
    no_args_is_help=True,
)


# ── rendering a result set ──────────────────────────────────────────────────


def _us(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def _x(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}×"


def _header(rs, planned: int | None) -> str:
    plan = rs.plan or {}
    engine = plan.get("engine") or ", ".join(sorted({k.split(".")[0] for k in rs.records.kernels_used()}))
    kind = rs.device_kind
    where = rs.device_name or kind or "unknown device"
    if kind == "sim":
        where += " (correctness only, no timings)"
    failed = rs.records.failed_count()
    of = f" of {planned} planned" if planned is not None else ""
    tail = f" [plan {plan['hash']}]" if plan.get("hash") else ""
    return f"{engine if plan else 'results'} on {where}: {len(rs.records) - failed} pass, {failed} fail{of}{tail}"


def _planned(rs) -> int | None:
    if not rs.plan:
        return None
    shard = rs.plan.get("shard")
    if shard:
        return shard["items"]
    total = rs.plan.get("total")  # the whole sweep's (a partial merge lists fewer items)
    return total if type(total) is int else rs.item_count


def results_json(rs, rankings, effects, lazy: bool = False) -> dict[str, Any]:
    """The JSON report; ``lazy``: each ranking's rows are made as
    :mod:`leverctl.jsontext` writes them, not all at once."""
    from ..jsontext import Rows

    failed = rs.records.failed_count()
    return {
        "schema": "leverctl.sweep-report/1",
        "source": rs.source,
        "plan": (rs.plan or {}).get("hash"),
        "engine": (rs.plan or {}).get("engine"),
        "device": {"kind": rs.device_kind, "name": rs.device_name},
        "counts": {
            "records": len(rs.records),
            "pass": len(rs.records) - failed,
            "fail": failed,
            "planned": _planned(rs),
        },
        "timed": any(r.timed for r in rankings),
        "rankings": Rows(len(rankings), lambda: (r.to_json(flat=True) for r in rankings))
        if lazy
        else [r.to_json() for r in rankings],
        "effects": [e.to_json() for e in effects],
        "not_benchmarked": (rs.plan or {}).get("not_benchmarked", []),
        "arms": [a.to_json() for a in _arms(rs)],
        "profiles": _profiles(rs),
    }


PROFILE_ROWS_SHOWN = 200  # the table and Markdown list this many variants' profiles; JSON all of them


def _profiles(rs) -> list[dict]:
    """The profile view: each (kernel path, variant, shape) whose records
    carry a profile (``bench --profile``), once however many lever sets
    chose it, its summary (leverctl.profile.block.summary) and how many
    records share it."""
    extras = rs.records.extras
    if not extras:
        return []
    seen: dict[tuple, dict] = {}
    for i, extra in extras.items():
        prof = extra.get("profile")
        if not prof:
            continue
        rec = rs.records.record(i)
        key = (rec["kernel"], rec["variant"], rec["shape"]["label"])
        if key in seen:
            seen[key]["records"] += 1
        else:
            seen[key] = {"kernel": key[0], "variant": key[1], "shape": key[2], "records": 1, **prof}
    return [seen[k] for k in sorted(seen)]


def _profile_cols() -> list[str]:
    return ["kernel", "variant", "shape", "arch", "kernels (regs, occupancy)", "spills+local", "load bits", "sectors",
            "128-bit share", "extra wavefronts", "flags"]  # fmt: skip


def _profile_rows(profiles: list[dict]) -> list[list[str]]:
    rows = []
    for p in profiles[:PROFILE_ROWS_SHOWN]:
        ks = p["kernels"]
        eff, extra, wide = p["sector_efficiency"], p["extra_wavefronts"], p.get("wide_load_share")
        rows.append(
            [
                p["kernel"],
                p["variant"],
                p["shape"],
                p["arch"] or "?",
                ", ".join(
                    f"{n} {k['registers'] if k['registers'] is not None else '?'}r "
                    + (f"{k['occupancy']:.0%}" if k["occupancy"] is not None else "?")
                    for n, k in ks.items()
                )
                or "–",
                str(sum(k["spills"] + k["local"] for k in ks.values())),
                "/".join(str(b) for b in sorted({b for k in ks.values() for b in k["load_bits"]})) or "–",
                f"{eff:.0%}" if eff is not None else "–",
                f"{wide:.0%}" if wide is not None else "–",
                f"{extra:g}" if extra is not None else "–",
                "; ".join(p["flags"]) or "–",
            ]
        )
    return rows


def _profiles_left(profiles: list[dict]) -> str:
    left = len(profiles) - PROFILE_ROWS_SHOWN
    return f"... and {left} more profiles (-f json lists them all)" if left > 0 else ""


def _arms(rs):
    from ..bench.arms import ARM_VIEW_KERNELS, arm_rankings

    return arm_rankings(rs.records.of_kernels(ARM_VIEW_KERNELS))  # only the arm view's kernels made dicts


def _versus_recipe(record, recipe_levers) -> str:
    """A configuration as its differences from the recipe's own (the full
    key when the recipe's values are unknown)."""
    from ..bench.rank import canon, value_text

    if not recipe_levers:
        return record["config"]
    diff = [
        f"{f}={value_text(v)}"
        for f, v in record["levers"].items()
        if f in recipe_levers and canon(v) != canon(recipe_levers[f])
    ]
    return ", ".join(diff) if diff else "the recipe's own"


def _rank_rows(rankings, plan=None) -> tuple[list[str], list[list[str]]]:
    from ..bench.rank import kernel_info
    from ..bench.report import cores_text

    info = kernel_info(plan)
    timed = any(r.timed for r in rankings)
    # Where the arithmetic ran (as bench shows it), once any record used tensor cores.
    cores = any(x.record.get("tensor_cores") for r in rankings for x in (*r.ranked, *r.baselines))
    if timed:
        cols = ["kernel", "shape", "fastest correct", "variant", "µs", "recipe µs", "speedup", "pass", "fail"]
    else:
        cols = ["kernel", "shape", "configurations", "pass", "fail", "variants checked"]
    if cores:
        cols.insert(4 if timed else 6, "cores")
    rows = []
    for r in rankings:
        n = len(r.ranked) + len(r.failing) + len(r.baselines)
        if timed:
            b = r.best
            recipe_levers = (info.get(r.kernel) or {}).get("recipe_levers")
            rows.append(
                [
                    r.kernel,
                    r.shape,
                    _versus_recipe(b.record, recipe_levers) if b else "(none passed)",
                    b.record["variant"] if b else "–",
                    _us(b.us if b else None),
                    _us(r.recipe_us),
                    _x(b.speedup if b else None),
                    str(len(r.ranked) + len(r.baselines)),
                    str(len(r.failing)),
                ]
            )
            if cores:
                rows[-1].insert(4, cores_text(b.record) if b else "–")
        else:
            variants = sorted({x.record["variant"] for x in r.ranked})
            variants += sorted({f"{x.record['variant']} (baseline)" for x in r.baselines})
            rows.append(
                [
                    r.kernel,
                    r.shape,
                    str(n),
                    str(len(r.ranked) + len(r.baselines)),
                    str(len(r.failing)),
                    ", ".join(variants) or "–",
                ]
            )
            if cores:
                rows[-1].append(", ".join(sorted({cores_text(x.record) for x in (*r.ranked, *r.baselines)})) or "–")
    return cols, rows


def _fail_rows(rankings) -> list[list[str]]:
    rows = []
    for r in rankings:
        for f in r.failing:
            err = f.get("error") or {}
            figure = f"rel {err['rel']:.2e}" if isinstance(err, dict) and err.get("rel") is not None else ""
            rows.append([r.kernel, r.shape, f["config"], f["variant"] or "–", figure, f.get("note", "")])
    return rows


def results_table(rs, rankings, effects, *, width: int | None = None, color: bool = False) -> str:
    from rich.console import Console
    from rich.table import Table

    from ..bench.plot import terminal_bars
    from ..tables import fit

    buf = io.StringIO()
    c = Console(
        file=buf, width=width or 200, force_terminal=color, no_color=not color, soft_wrap=False, highlight=False
    )
    c.print(_header(rs, _planned(rs)), markup=False)
    cols, rows = _rank_rows(rankings, rs.plan)
    t = Table(title=None)
    for col in cols:
        t.add_column(
            col,
            no_wrap=col != "fastest correct",
            justify="left"
            if col in ("kernel", "shape", "variant", "variants checked", "fastest correct", "cores")
            else "right",
        )
    for row in rows:
        t.add_row(*row)
    if rows:
        c.print(fit(t, c.width))
    fails = _fail_rows(rankings)
    if fails:
        c.print("Failing configurations (never ranked):", markup=False)
        ft = Table()
        for col in ("kernel", "shape", "config", "variant", "error", "note"):
            ft.add_column(col, no_wrap=col != "note")
        for row in fails:
            ft.add_row(*row, style="red" if color else None)
        c.print(fit(ft, c.width))
    _arms_table(c, rs, fit, Table)
    profiles = _profiles(rs)
    if profiles:
        c.print(f"Profiles (bench --profile: machine code, simulated memory accesses; {len(profiles)}):", markup=False)
        pt = Table()
        for col in _profile_cols():
            pt.add_column(col, no_wrap=col not in ("flags", "kernels (regs, occupancy)"))
        for row in _profile_rows(profiles):
            pt.add_row(*row)
        c.print(fit(pt, c.width))
        if _profiles_left(profiles):
            c.print(_profiles_left(profiles), markup=False)
    if effects:
        c.print(
            "Lever effects (median speedup of the value over its reference, across the other levers):", markup=False
        )
        c.print(terminal_bars(effects))
    elif rankings and not any(r.timed for r in rankings):
        c.print("No timings (simulator): every configuration was checked for correctness only.", markup=False)
    for why, fields in _skipped(rs).items():
        c.print(f"Not benchmarked, {why} ({len(fields)}): {', '.join(fields)}", markup=False)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def _arms_table(c, rs, fit, Table) -> None:
    """Each arm view (``bench.arms``): the arms ranked with their errors."""
    from ..bench.arms import rows, title

    for ranking in _arms(rs):
        c.print(title(ranking), markup=False)
        cols, cells = rows(ranking)
        t = Table()
        for col in cols:
            t.add_column(col, no_wrap=True, justify="left" if col in ("arm", "tensor cores", "check") else "right")
        for row in cells:
            t.add_row(*row)
        c.print(fit(t, c.width))


def _skipped(rs) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in (rs.plan or {}).get("not_benchmarked") or []:
        out.setdefault(s["why"], []).append(s["lever"])
    return out


def _md_table(cols: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(x).replace("|", "\\|") for x in row) + " |")
    return out


def results_markdown(rs, rankings, effects) -> str:
    out = [f"### leverctl: {_header(rs, _planned(rs))}", ""]
    cols, rows = _rank_rows(rankings, rs.plan)
    if rows:
        out += _md_table(cols, rows) + [""]
    fails = _fail_rows(rankings)
    if fails:
        out += ["**Failing configurations** (never ranked):", ""]
        out += _md_table(["kernel", "shape", "config", "variant", "error", "note"], fails) + [""]
    from ..bench.arms import rows as arm_rows
    from ..bench.arms import title as arm_title

    for ranking in _arms(rs):
        out += [f"**{arm_title(ranking)}**", ""] + _md_table(*arm_rows(ranking)) + [""]
    profiles = _profiles(rs)
    if profiles:
        out += [f"**Profiles** (bench --profile: machine code, simulated memory accesses; {len(profiles)}):", ""]
        out += _md_table(_profile_cols(), _profile_rows(profiles)) + [""]
        if _profiles_left(profiles):
            out += [_profiles_left(profiles), ""]
    if effects:
        out += ["**Lever effects** (median speedup of the value over its reference, across the other levers):", ""]
        out += _md_table(
            ["kernel", "shape", "lever", "speedup", "settings"],
            [[e.kernel, e.shape, e.label, _x(e.speedup), str(e.pairs)] for e in effects],
        ) + [""]
    for why, fields in _skipped(rs).items():
        out.append(f"- Not benchmarked, {why} ({len(fields)}): " + ", ".join(f"`{f}`" for f in fields))
    return "\n".join(out).rstrip("\n") + "\n"


def render_results(rs, fmt: str, *, width: int | None = None, color: bool = False) -> str:
    return "".join(render_pieces(rs, fmt, width=width, color=color))


def render_pieces(
    rs, fmt: str, *, width: int | None = None, color: bool = False, ranked: tuple | None = None
) -> Iterator[str]:
    """The report in ``fmt``, in pieces to write as they come: JSON (a row
    per record ranked) is laid out piece by piece, never whole in memory.
    ``ranked``: the rankings and lever effects, where they are made already
    (:func:`rankings`)."""

    if fmt == "csv":  # the records themselves, one row each (docs/records.md), as they are read again
        from ..bench.records.read import whole_records
        from ..bench.report import csv_pieces

        yield from csv_pieces(whole_records(rs, rs.source))
        return

    rankings, effects = ranked or rankings_of(rs)
    if fmt == "json":
        from .. import jsontext

        yield from jsontext.pieces(results_json(rs, rankings, effects, lazy=True), allow_nan=False)
        yield "\n"
    elif fmt == "markdown":
        yield results_markdown(rs, rankings, effects)
    else:
        yield results_table(rs, rankings, effects, width=width, color=color)


def rankings_of(rs) -> tuple:
    """The result set's rankings and lever effects (``bench.rank``)."""
    from ..bench.rank import lever_effects, rank

    return rank(rs.records, rs.plan), lever_effects(rs.records, rs.plan)


# ── commands ────────────────────────────────────────────────────────────────

ResultsArg = Annotated[
    Path, typer.Argument(metavar="RESULTS", help="A bench JSON document, a sweep directory, or its results.jsonl.")
]


def say_notes(rs) -> None:
    """What reading ``rs`` tolerated (a partial last line, repeated records),
    one warning line each on stderr."""
    for note in rs.notes():
        common.warn(note)


@report_app.command("show")
def show(
    results: ResultsArg,
    fmt: common.RecordFormatOpt = None,
    out: Annotated[
        Optional[Path],
        typer.Option(
            "--out",
            "-o",
            metavar="FILE",
            help="Write the report to this file (atomically) instead of stdout, in the format its suffix "
            "names (.txt .json .md .csv) unless --format says.",
            parser=lambda s: check_output_path(s, "--out"),
        ),
    ] = None,
) -> None:
    """Per kernel path and shape: the fastest correct configuration, its
    speedup over the recipe's own, the failing ones, and each lever's effect."""
    from ..bench.records.read import load_results

    fmt = common.output_format(fmt, out, common.RECORD_FORMATS)
    with common.many_records():
        # Every view reads a few fields of each record, held as columns; CSV, the records themselves, reads
        # each line again as it writes its row.
        rs = load_results(results)
        say_notes(rs)
        if out is not None:
            write_atomically(out, render_pieces(rs, fmt))
            common.err.print(f"leverctl report: wrote {out}", markup=False, highlight=False)
            return
        width, color = common.tty_table(fmt)
        common.write_pieces(render_pieces(rs, fmt, width=width, color=color))


@report_app.command("merge")
def merge(
    parts: Annotated[list[Path], typer.Argument(metavar="DIR...", help="Sweep directories of one plan.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            metavar="DIR",
            help="The merged sweep directory (must not hold results).",
            parser=lambda s: check_output_path(s, "--out", directory=True),
        ),
    ],
    fmt: common.FormatOpt = "table",
    partial: Annotated[
        bool,
        typer.Option(
            "--partial", help="Merge what the parts hold even if shards or records are missing, saying which."
        ),
    ] = False,
) -> None:
    """Join the shards (or resumed pieces) of one sweep into one result set;
    refused while shards or records are missing, unless --partial."""
    from ..bench.records.write import check_free_result_dir

    common.check_format(fmt)
    check_free_result_dir(out)
    with common.many_records():
        _merge(parts, out, fmt, partial)


def _merge(parts: list[Path], out: Path, fmt: str, partial: bool) -> None:
    from ..bench.records.columns import Tables
    from ..bench.records.merge import merge as merge_sets
    from ..bench.records.merge import shard_gaps, write_result_dir
    from ..bench.records.read import ResultSet, load_all

    # The parts' records as columns, numbered alike; their lines stay in the parts' files until written.
    tables = Tables()
    sets = []
    for rs in load_all(parts, tables, plan_items=True):
        if isinstance(rs, UserError):
            raise rs
        say_notes(rs)
        sets.append(rs)
    merged = merge_sets(sets)
    gaps = shard_gaps(sets, merged.missing)
    if gaps and not partial:
        raise UserError(f"report merge: {gaps}; run or --resume them, or pass --partial to merge what is here")
    plan = {**merged.plan, "partial": gaps} if gaps else merged.plan
    # The report of what is being written, from memory rather than read back (the plan's items are
    # written; the report needs only how many there were). Its rankings are made while the files are
    # written (mostly the system's time: the thread writing holds the interpreter little), and it is
    # shown once the records are handed to the system, while the disk catches up; a failure to write
    # still ends the command with its one line, after the report.
    head = {k: v for k, v in plan.items() if k != "items"}
    rs = ResultSet(
        str(out),
        merged.records,
        head,
        dict(head.get("device") or {}),
        (head.get("catalog") or {}).get("digest"),
        item_count=len(plan["items"]),
    )
    failed: list[BaseException] = []
    written = threading.Event()

    def write() -> None:
        try:
            write_result_dir(out, merged, plan, written.set)
        except BaseException as e:  # noqa: BLE001 -- raised below, in the command's thread
            failed.append(e)
        finally:
            written.set()

    writer = threading.Thread(target=write, name="merge-writer")
    writer.start()
    try:
        ranked = rankings_of(rs)
        written.wait()
        if failed:
            raise failed[0]
        width, color = common.tty_table(fmt)
        common.write_pieces(render_pieces(rs, fmt, width=width, color=color, ranked=ranked))
    finally:
        writer.join()
    if failed:
        raise failed[0]
    planned = len(merged.records) + merged.missing
    line = f"merged {len(sets)} part(s): {len(merged.records)} of {planned} planned records into {out}"
    if gaps:
        line += f"; partial: {gaps}"
    if merged.duplicates:
        line += f"; {merged.duplicates} record(s) present in more than one part (the last part's kept)"
    common.err.print(f"leverctl report: {line}", markup=False, highlight=False)
    if rs.records.failed_count():
        raise typer.Exit(1)


@report_app.command("plot")
def plot(
    results: ResultsArg,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            metavar="FILE.svg",
            help="The chart file (.svg).",
            parser=lambda s: check_output_path(s, "--out"),
        ),
    ],
    title: Annotated[Optional[str], typer.Option("--title", metavar="TEXT", help="The chart's title.")] = None,
) -> None:
    """Write the per-lever speedups as a horizontal bar chart (SVG)."""
    from ..bench.plot import write_chart
    from ..bench.rank import lever_effects
    from ..bench.records.read import load_results

    if out.suffix.lower() != ".svg":
        write_chart([], out, "")  # raises the one-line explanation
    with common.many_records():
        rs = load_results(results)
        say_notes(rs)
        effects = lever_effects(rs.records, rs.plan)
    plan = rs.plan or {}
    name = title or (
        f"leverctl: lever effects, {plan.get('engine', '')} {plan.get('shapes', '')} sweep on "
        f"{rs.device_name or 'unknown device'}"
    ).replace("  ", " ")
    write_chart(effects, out, name)
    common.err.print(f"leverctl report: wrote {out} ({len(effects)} lever effect(s))", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(report_app, name="report")
