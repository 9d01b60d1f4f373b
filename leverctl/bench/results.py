"""Result files: reading, appending and merging records.

A record (docs/records.md) is one run of one (kernel path, variant, shape,
lever set). Two containers hold them:

* the bench document (``leverctl bench --format json``): one JSON object
  whose ``results`` is a list of records;
* a sweep directory: ``plan.json`` (written once, atomically) and
  ``results.jsonl`` (one record per line, appended, flushed and fsynced as
  each configuration finishes).

A killed sweep can leave at most a partial last line (each record is written
with a single ``write`` of one line). Reading ignores such a tail and says so;
resuming cuts it off before appending. Anything else that does not parse is
not ours, and is refused with one line naming the file and the line, without
touching the file.

Everything here is a function of files and records: nothing re-resolves
levers or re-runs kernels.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import UserError
from ..levers.files import read_input_file, write_atomically

PLAN_FILE = "plan.json"
RESULTS_FILE = "results.jsonl"
PLAN_SCHEMA = "leverctl.sweep-plan/1"
BENCH_SCHEMA_PREFIX = "leverctl.bench/"
STATUSES = ("pass", "fail")

Identity = tuple[str, str, str]  # (kernel, shape label, config)


# ── records ─────────────────────────────────────────────────────────────────


def identity(rec: Mapping[str, Any]) -> Identity:
    """What makes two records the same measurement across runs."""
    return (rec["kernel"], rec["shape"]["label"], rec["config"])


def check_record(rec: Any, where: str) -> dict:
    """``rec`` if it has what every report needs, else a UserError at ``where``."""
    if not isinstance(rec, dict):
        raise UserError(f"not a leverctl record (a JSON {type(rec).__name__}, not an object)", where)
    missing = [k for k in ("kernel", "variant", "levers", "config", "shape", "status") if k not in rec]
    if missing:
        raise UserError(f"not a leverctl record (no {', '.join(missing)})", where)
    if not isinstance(rec["shape"], dict) or not isinstance(rec["shape"].get("label"), str):
        raise UserError("not a leverctl record (`shape` has no label)", where)
    if not isinstance(rec["levers"], dict):
        raise UserError("not a leverctl record (`levers` is not an object)", where)
    if rec["status"] not in STATUSES:
        raise UserError(f"record status {rec['status']!r} is neither pass nor fail", where)
    for k in ("kernel", "variant", "config"):
        if not isinstance(rec[k], str):
            raise UserError(f"not a leverctl record (`{k}` is not a string)", where)
    timing = rec.get("timing")
    if timing is not None and not (isinstance(timing, dict) and _num(timing.get("median_us"))):
        raise UserError("record `timing` has no median_us", where)
    return rec


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def timed(rec: Mapping[str, Any]) -> bool:
    t = rec.get("timing")
    return isinstance(t, dict) and _num(t.get("median_us")) and t["median_us"] > 0


def median_us(rec: Mapping[str, Any]) -> float | None:
    return float(rec["timing"]["median_us"]) if timed(rec) else None


def spread(rec: Mapping[str, Any]) -> float:
    """Relative spread of a record's samples: (p80 - p20) / median, or the
    recorded ``noise`` when the percentiles are absent; 0 without timing."""
    t = rec.get("timing")
    if not timed(rec):
        return 0.0
    med = float(t["median_us"])
    if _num(t.get("p20_us")) and _num(t.get("p80_us")):
        return max(0.0, (float(t["p80_us"]) - float(t["p20_us"])) / med)
    if _num(t.get("noise")):
        return max(0.0, float(t["noise"]))
    return 0.0


# ── writing ─────────────────────────────────────────────────────────────────


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomically(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def record_line(rec: Mapping[str, Any]) -> bytes:
    # allow_nan=False: a NaN would make the line unreadable by strict JSON parsers.
    return (json.dumps(rec, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


class Appender:
    """Appends records to a JSONL file, each durable before ``append`` returns:
    one ``write`` of the whole line, then flush and fsync. A process killed at
    any instant leaves every earlier record intact and at most a partial last
    line."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._f = open(self.path, "ab", buffering=0)

    def append(self, rec: Mapping[str, Any]) -> None:
        self._f.write(record_line(rec))
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "Appender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ── reading ─────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Jsonl:
    records: list[dict]
    good_bytes: int  # length of the intact prefix (every complete line)
    tail_bytes: int  # bytes of a partial last line, ignored (0: none)


def read_jsonl(path: Path) -> Jsonl:
    """The records of a results file. A partial last line (no newline: the
    writer was killed mid-line) is ignored; any other line that is not a
    record is refused."""
    path = Path(path)
    data = read_input_file(path, "results file", binary=True)
    end = data.rfind(b"\n") + 1  # everything up to the last newline is complete
    records: list[dict] = []
    for n, line in enumerate(data[:end].split(b"\n")[:-1], 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            rec = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise UserError("not a leverctl results file (not UTF-8 text)", where) from None
        except json.JSONDecodeError as e:
            raise UserError(f"not a leverctl results file (line is not JSON: {e.msg})", where) from None
        records.append(check_record(rec, where))
    return Jsonl(records, end, len(data) - end)


def cut_partial_tail(path: Path, good_bytes: int) -> None:
    """Drop a partial last line so that the next append starts a fresh line."""
    with open(path, "r+b") as f:
        f.truncate(good_bytes)
        f.flush()
        os.fsync(f.fileno())


def read_plan(directory: Path) -> dict | None:
    path = Path(directory) / PLAN_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UserError("not a leverctl sweep plan (not JSON)", str(path)) from None
    if not isinstance(doc, dict) or doc.get("schema") != PLAN_SCHEMA or not isinstance(doc.get("hash"), str):
        raise UserError(f"not a leverctl sweep plan (schema is not {PLAN_SCHEMA})", str(path))
    return doc


@dataclass
class ResultSet:
    """Records from one file or directory, with what is known of their run."""

    source: str
    records: list[dict]
    plan: dict | None = None  # a sweep's plan.json
    device: dict = field(default_factory=dict)  # {"kind": "gpu"|"sim"|None, "name": str|None}
    catalog: str | None = None
    tail_bytes: int = 0  # a partial last line that was ignored

    @property
    def device_kind(self) -> str | None:
        if self.device.get("kind"):
            return self.device["kind"]
        if self.records:
            return "gpu" if any(timed(r) for r in self.records) else None
        return None

    @property
    def device_name(self) -> str | None:
        if self.device.get("name"):
            return self.device["name"]
        names = {r.get("device") for r in self.records if r.get("device")}
        return names.pop() if len(names) == 1 else None


def load_results(path: str | Path) -> ResultSet:
    """A bench JSON document, a sweep directory, or a sweep's results.jsonl."""
    p = Path(path)
    if p.is_dir():
        plan = read_plan(p)
        res = p / RESULTS_FILE
        if not res.exists():
            if plan is None:
                raise UserError(f"not a sweep directory (no {PLAN_FILE}, no {RESULTS_FILE})", str(p))
            return _from_plan(str(p), plan, Jsonl([], 0, 0))
        return _from_plan(str(p), plan, read_jsonl(res))
    if not p.exists():
        raise UserError("no such results file or directory", str(p))
    data = read_input_file(p, "results file", binary=True)
    if p.suffix == ".jsonl" or _first_line_is_record(data):
        plan = read_plan(p.parent) if p.name == RESULTS_FILE else None
        return _from_plan(str(p), plan, read_jsonl(p))
    return _from_bench(p, data)


def _first_line_is_record(data: bytes) -> bool:
    try:
        obj = json.loads(data.split(b"\n", 1)[0])
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(obj, dict) and "kernel" in obj and "config" in obj


def _from_plan(source: str, plan: dict | None, jl: Jsonl) -> ResultSet:
    device = dict(plan.get("device") or {}) if plan else {}
    catalog = (plan.get("catalog") or {}).get("digest") if plan else None
    if plan is not None:
        for n, rec in enumerate(jl.records, 1):
            if rec.get("plan") not in (None, plan["hash"]):
                raise UserError(f"record {n} belongs to plan {rec.get('plan')}, not this directory's "
                                f"{plan['hash']}", source)
    return ResultSet(source, jl.records, plan, device, catalog, jl.tail_bytes)


def _from_bench(p: Path, data: bytes) -> ResultSet:
    where = str(p)
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError("not a leverctl results file (not UTF-8 text)", where) from None
    except json.JSONDecodeError as e:
        raise UserError(f"not a leverctl results file (not JSON, or truncated: {e.msg} at line {e.lineno})",
                        where) from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith(BENCH_SCHEMA_PREFIX):
        raise UserError("not a leverctl bench document or sweep results file "
                        f"(no `schema: {BENCH_SCHEMA_PREFIX}N`)", where)
    results = doc.get("results")
    if not isinstance(results, list):
        raise UserError("bench document has no `results` list", where)
    records = [check_record(r, f"{where}: results[{i}]") for i, r in enumerate(results)]
    device = doc.get("device") if isinstance(doc.get("device"), dict) else {}
    levers = doc.get("levers") if isinstance(doc.get("levers"), dict) else {}
    catalog = (levers.get("catalog") or {}).get("digest") if isinstance(levers.get("catalog"), dict) else None
    return ResultSet(where, records, None, {"kind": device.get("kind"), "name": device.get("name")},
                     catalog, 0)


# ── merging ─────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Merged:
    plan: dict
    records: list[dict]  # in plan order
    missing: list[dict]  # planned items no input holds
    duplicates: int  # records seen in more than one input (the last input wins)


def merge(sets: Sequence[ResultSet]) -> Merged:
    """Join shards or resumed pieces of one sweep. Refuses inputs that are not
    sweep results, or that come from different plans, catalogs or devices."""
    if not sets:
        raise UserError("report merge needs at least one sweep results directory")
    for s in sets:
        if s.plan is None:
            raise UserError(f"has no {PLAN_FILE}: merge joins sweep results directories "
                            "(a bench document is one run already)", s.source)
    first = sets[0]
    for s in sets[1:]:
        a, b = first.plan, s.plan
        if a["catalog"]["digest"] != b["catalog"]["digest"]:
            raise UserError(f"was swept with a different lever catalog than {first.source} "
                            f"({b['catalog']['digest'][:12]} vs {a['catalog']['digest'][:12]}): "
                            "results from different catalogs do not merge", s.source)
        if a["hash"] != b["hash"]:
            raise UserError(f"comes from a different sweep plan than {first.source} "
                            f"({b['hash']} vs {a['hash']}): same engine, recipe, levers, kernels and "
                            "shapes are needed to merge", s.source)
        ka, kb = (a.get("device") or {}).get("kind"), (b.get("device") or {}).get("kind")
        if ka != kb:
            raise UserError(f"ran on {kb}, {first.source} on {ka}: a result set holds one device's runs",
                            s.source)
        na, nb = (a.get("device") or {}).get("name"), (b.get("device") or {}).get("name")
        if ka == "gpu" and na != nb:
            raise UserError(f"ran on {nb}, {first.source} on {na}: timings from different GPUs do not "
                            "make one result set", s.source)
    by_id: dict[Identity, dict] = {}
    duplicates = 0
    for s in sets:
        for rec in s.records:
            key = identity(rec)
            if key in by_id:
                duplicates += 1
            by_id[key] = rec
    plan = dict(first.plan)
    plan["shard"] = None
    plan["merged_from"] = [s.source for s in sets]
    order = [(it["kernel"], it["shape"], it["config"]) for it in plan.get("items", [])]
    planned = set(order)
    records = [by_id[k] for k in order if k in by_id]
    strays = [r for k, r in by_id.items() if k not in planned]
    if strays:
        k = identity(strays[0])
        raise UserError(f"holds {len(strays)} record(s) outside its plan (first: {k[0]} {k[2]} at {k[1]})",
                        first.source)
    missing = [it for it in plan.get("items", []) if (it["kernel"], it["shape"], it["config"]) not in by_id]
    return Merged(plan, records, missing, duplicates)


def write_result_dir(directory: Path, plan: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> None:
    """A complete sweep directory (merge's output): refuses a directory that
    already holds results, writes results.jsonl and then plan.json atomically."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise UserError("exists and is not a directory", str(d))
    for name in (PLAN_FILE, RESULTS_FILE):
        if (d / name).exists():
            raise UserError(f"already holds {name}; choose an empty --out directory", str(d))
    d.mkdir(parents=True, exist_ok=True)
    write_atomically(d / RESULTS_FILE, b"".join(record_line(r) for r in records))
    write_json_atomic(d / PLAN_FILE, dict(plan))
