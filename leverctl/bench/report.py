"""Render a bench document (docs/records.md) as a table, JSON, Markdown or
CSV (one row per record).

Every function here reads the document alone: nothing re-resolves levers or
re-runs a kernel.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Iterable, Iterator

FORMATS = ("table", "json", "markdown", "csv")


def counts(doc: dict[str, Any]) -> tuple[int, int]:
    """(passed, failed) over the run and its ``--against`` run."""
    recs = list(all_records(doc))
    failed = sum(1 for r in recs if r["status"] != "pass")
    return len(recs) - failed, failed


def all_records(doc: dict[str, Any]) -> Iterable[dict]:
    yield from doc["results"]
    if doc.get("against"):
        yield from doc["against"]["results"]


# The device figures a GPU run measures (device.FIGURES, in its order), as
# the reports word them. Not imported from there: rendering a document never
# loads the device code.
FIGURE_WORDS = {
    "copy_gbps": ("copy", "GB/s"),
    "fp32_tflops": ("FP32", "TFLOP/s"),
    "bf16_tflops": ("BF16 tensor cores", "TFLOP/s"),
    "fp8_tflops": ("FP8 tensor cores", "TFLOP/s"),
    "cublas_bf16_tflops": ("cuBLAS BF16 GEMM", "TFLOP/s"),
}


def describe_figures(device: dict[str, Any]) -> str:
    """The measured figures of a described device (a document's ``device``),
    in words: ``copy 4100 GB/s, FP32 60.1 TFLOP/s, ...``; empty when none
    was measured (the simulator)."""
    parts = []
    for name, (what, unit) in FIGURE_WORDS.items():
        x = device.get(name)
        if x is not None:
            parts.append(f"{what} {x:.0f} {unit}" if x >= 100 else f"{what} {x:.1f} {unit}")
    return ", ".join(parts)


def _g(x: float | None, fmt: str = ".3g") -> str:
    return "–" if x is None else format(x, fmt)


def check_text(r: dict) -> str:
    """``PASS 1.2e-04`` / ``FAIL 3.1e-02`` (the relative error) / ``FAIL``."""
    word = "PASS" if r["status"] == "pass" else "FAIL"
    err = r.get("error")
    if err and err.get("rel") is not None:
        return f"{word} {err['rel']:.1e}"
    return word


# The compute rate a floor was drawn at, as the table names it.
_RATE_WORDS = {"fp32_tflops": "FP32", "bf16_tflops": "BF16", "fp8_tflops": "FP8"}


def floor_text(r: dict) -> str:
    """The record's ``pct_of_floor``, and when its floor is the compute term
    the rate it was drawn at: ``71`` (memory- or launch-bound), ``78 BF16``,
    ``64 FP32``; an s8 record's is the FP8 rate, said so (``80 FP8 s8``)."""
    roof = r.get("roofline") or {}
    pct = _g(roof.get("pct_of_floor"), ".0f")
    if roof.get("bound") != "compute":
        return pct
    # Records written before the floor named its rate were all drawn at FP32.
    rate = roof.get("compute_rate") or ("fp32_tflops" if "fp32_tflops" in roof else "?")
    word = _RATE_WORDS.get(rate, rate)
    return f"{pct} {word}" + (" s8" if r.get("tc_dtype") == "s8" else "")


def _timing_cells(r: dict) -> list[str]:
    t, ach = r.get("timing"), r.get("achieved")
    if not t:
        return ["–"] * 4
    return [
        _g(t["median_us"], ".4g"),
        f"{_g(t['p20_us'], '.4g')}–{_g(t['p80_us'], '.4g')}",
        _g((ach or {}).get("gbps"), ".4g"),
        floor_text(r),
    ]


def _columns(doc: dict, results: list[dict]) -> tuple[list[str], bool, bool, bool]:
    """(column names, timed, has a library reference, has a speedup) for
    one run's ``results`` (the ``--against`` run shows no speedup)."""
    timed = doc["device"]["kind"] == "gpu"
    has_lib = any(r.get("reference_lib") for r in results)
    # a speedup needs timings: none in the simulator
    has_against = timed and doc.get("against") is not None and results is doc["results"]
    cols = ["kernel", "variant", "levers", "shape", "check"]
    if any(r.get("tensor_cores") for r in results):
        cols.append("cores")
    if timed:
        cols += ["median µs", "p20–p80 µs", "GB/s", "% of floor"]
        if has_lib:
            cols.append("vs cuBLAS")
    if has_against:
        cols.append("speedup")
    return cols, timed, has_lib, has_against


def cores_text(r: dict) -> str:
    """Where a record's arithmetic ran: the tensor-core instruction and its
    inputs ("wgmma f16"), or "FP32" for CUDA cores."""
    tc = r.get("tensor_cores")
    return f"{tc} {r.get('tc_dtype') or '?'}" if tc else "FP32"


def _rows(doc: dict, results: list[dict]) -> list[list[str]]:
    cols, timed, has_lib, has_against = _columns(doc, results)
    rows = []
    for r in results:
        row = [r["kernel"], r["variant"] or "–", r["config"] or "–", r["shape"]["label"], check_text(r)]
        if "cores" in cols:
            row.append(cores_text(r))
        if timed:
            row += _timing_cells(r)
            if has_lib:
                lib = r.get("reference_lib")
                row.append(f"{lib['ratio']:.2f}×" if lib else "–")
        if has_against:
            s = r.get("speedup_vs_against")
            row.append(f"{s:.2f}×" if s is not None else "–")
        rows.append(row)
    return rows


def _notes(results: list[dict]) -> list[str]:
    return [f"{r['kernel']} {r['variant'] or '?'} {r['shape']['label']}: {r['note']}" for r in results if r.get("note")]


def _sections(doc: dict) -> list[tuple[str, list[dict]]]:
    if doc.get("against"):
        return [("this run", doc["results"]), (f"against {doc['against']['name']}", doc["against"]["results"])]
    return [("", doc["results"])]


def _title(doc: dict, label: str, results: list[dict]) -> str:
    d = doc["device"]
    where = d["name"] if d["kind"] == "gpu" else f"{d['name']} (correctness only, no timings)"
    failed = sum(1 for r in results if r["status"] != "pass")
    run = f" ({label})" if label else ""
    return f"{doc['engine']}{run} on {where}: {len(results) - failed} pass, {failed} fail"


def table(doc: dict, *, width: int | None = None, color: bool = False) -> str:
    """The Rich table (plain text unless ``color``), notes below it."""
    from rich.console import Console
    from rich.table import Table

    from ..tables import Wrapped, fit

    buf = io.StringIO()
    console = Console(
        file=buf,
        width=width or 200,
        force_terminal=color,
        no_color=not color,
        soft_wrap=False,
        highlight=False,
        emoji=False,
    )
    for label, results in _sections(doc):
        cols, *_ = _columns(doc, results)
        console.print(_title(doc, label, results), markup=False)
        figures = describe_figures(doc["device"])
        if figures and not label.startswith("against"):
            console.print(f"Device: {figures}", markup=False)
        t = Table()
        for c in cols:
            t.add_column(
                Wrapped(c),
                justify="right" if c not in ("kernel", "variant", "levers", "shape", "check", "cores") else "left",
                overflow="fold",
            )
        for row in _rows(doc, results):
            style = None if not color or row[4].startswith("PASS") else "red"
            t.add_row(*map(Wrapped, row), style=style)
        console.print(fit(t, console.width))
        for line in _notes(results):
            console.print(line, markup=False)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def markdown(doc: dict) -> str:
    passed, failed = counts(doc)
    out = [f"# leverctl bench: {doc['engine']}, {passed} pass, {failed} fail", ""]
    d, v = doc["device"], doc["versions"]
    out.append(
        f"Device: {d['name']} ({d['kind']})"
        + (f", compute capability {d['compute_capability']}" if d.get("compute_capability") else "")
        + (f", driver {d['driver']}" if d.get("driver") else "")
        + (f"; {figures}" if (figures := describe_figures(d)) else "")
        + "."
    )
    if d.get("why_sim"):
        out.append(f"No GPU: {d['why_sim']}.")
    out.append("Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if val) + ".")
    out.append(f"Created {doc['created']}.")
    if doc.get("stopped"):
        out.append(f"Stopped before the plan ended: {doc['stopped']}.")
    for label, results in _sections(doc):
        cols, *_ = _columns(doc, results)
        out += ["", f"## {_title(doc, label, results)}", ""]
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + "|".join("---" for _ in cols) + "|")
        for row in _rows(doc, results):
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
        notes = _notes(results)
        if notes:
            out.append("")
            out += [f"- {n}" for n in notes]
    return "\n".join(out) + "\n"


# One CSV row per record (docs/records.md, "CSV"): plain numbers, no units,
# empty where a record has no such figure (no timings in the simulator).
CSV_COLUMNS: dict[str, tuple[str, ...]] = {
    "kernel": ("kernel",),
    "variant": ("variant",),
    "config": ("config",),
    "shape": ("shape", "label"),
    "status": ("status",),
    "rel_error": ("error", "rel"),
    "max_abs_error": ("error", "max_abs"),
    "tol_rel": ("error", "tol_rel"),
    "tol_abs": ("error", "tol_abs"),
    "median_us": ("timing", "median_us"),
    "p20_us": ("timing", "p20_us"),
    "p80_us": ("timing", "p80_us"),
    "noise": ("timing", "noise"),
    "samples": ("timing", "samples"),
    "gbps": ("achieved", "gbps"),
    "tflops": ("achieved", "tflops"),
    "pct_of_floor": ("roofline", "pct_of_floor"),
    "bound": ("roofline", "bound"),
    "compute_rate": ("roofline", "compute_rate"),
    "tensor_cores": ("tensor_cores",),
    "tc_dtype": ("tc_dtype",),
    "speedup_vs_against": ("speedup_vs_against",),
    "device": ("device",),
    "note": ("note",),
}


def records_csv(records: Iterable[dict], run: Iterable[str] | None = None) -> str:
    """The records as CSV, one row each; ``run`` names the run each record
    belongs to (a first column ``run``) when there is more than one."""
    return "".join(csv_pieces(records, run))


def csv_pieces(records: Iterable[dict], run: Iterable[str] | None = None, rows: int = 4096) -> Iterator[str]:
    """:func:`records_csv` in pieces of ``rows`` rows, made as the records
    come (a cluster sweep's million, never all held)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    runs = list(run) if run is not None else None
    w.writerow((["run"] if runs is not None else []) + list(CSV_COLUMNS))
    # Each column as (field, field within it or None), walked without a call per cell.
    columns = tuple((keys[0], keys[1] if len(keys) > 1 else None) for keys in CSV_COLUMNS.values())
    assert all(len(keys) <= 2 for keys in CSV_COLUMNS.values())
    for i, r in enumerate(records):
        cells = []
        for top, sub in columns:
            v = r.get(top) if isinstance(r, dict) else None
            if sub is not None:
                v = v.get(sub) if isinstance(v, dict) else None
            cells.append("" if v is None else v)
        w.writerow(([runs[i]] if runs is not None else []) + cells)
        if i % rows == rows - 1:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def to_csv(doc: dict) -> str:
    """A bench document's records; with ``--against``, both runs, told apart
    by the ``run`` column (``this run`` or ``against NAME``)."""
    if not doc.get("against"):
        return records_csv(doc["results"])
    rows = [(label or "this run", r) for label, results in _sections(doc) for r in results]
    return records_csv([r for _, r in rows], [label for label, _ in rows])


def to_json(doc: dict) -> str:
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def render(doc: dict, fmt: str, *, width: int | None = None, color: bool = False) -> str:
    if fmt == "json":
        return to_json(doc)
    if fmt == "markdown":
        return markdown(doc)
    if fmt == "csv":
        return to_csv(doc)
    if fmt == "table":
        return table(doc, width=width, color=color)
    raise ValueError(f"format {fmt!r}: one of {FORMATS}")
