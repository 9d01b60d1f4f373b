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

import bisect
import json
import math
import os
import re
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from ..errors import UserError
from .decode import UNSET, batch_records, record as fast_record
from ..levers.files import open_input_file, read_input_file, write_atomically

PLAN_FILE = "plan.json"
RESULTS_FILE = "results.jsonl"
PLAN_SCHEMA = "leverctl.sweep-plan/2"
# Plans of the first schema list every item of the sweep in every shard's plan, without ``n``; they are
# read alike (an item's place is its position), and merge with plans of this one.
PLAN_SCHEMAS = ("leverctl.sweep-plan/1", PLAN_SCHEMA)
BENCH_SCHEMA_PREFIX = "leverctl.bench/"
STATUSES = ("pass", "fail")

Identity = tuple[str, str, str]  # (kernel, shape label, config)


# ── records ─────────────────────────────────────────────────────────────────


def identity(rec: Mapping[str, Any]) -> Identity:
    """What makes two records the same measurement across runs."""
    return (rec["kernel"], rec["shape"]["label"], rec["config"])


def check_record(rec: Any, where: str, kind: str | None = None) -> dict:
    """``rec`` if it has what every report needs, else a UserError at ``where``.
    ``kind`` is the run's device kind ("gpu", "sim", or None: unknown), which
    decides whether the record must carry a timing (:func:`timing_problem`)."""
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
    problem = timing_problem(rec, kind)
    if problem:
        raise UserError(f"unusable record: {problem}", where)
    return rec


# The simulator's device name, as records carry it (bench.device.SIM_NAME;
# not imported from there, so that reading results never loads the device code).
SIM_NAME = "Numba CUDA simulator"
TIMING_FIGURES = ("median_us", "p20_us", "p80_us", "noise")


def ran_on_gpu(rec: Mapping[str, Any], kind: str | None) -> bool:
    """Whether ``rec`` ran on a GPU: the simulator's name in its ``device``
    says no; else the run's device kind says (a bench document's or sweep
    plan's ``device.kind``); else (a results.jsonl read without its plan)
    the record itself: one with a timing ran on a GPU, one without is taken
    for a simulator record."""
    if rec.get("device") == SIM_NAME:
        return False
    if kind in ("gpu", "sim"):
        return kind == "gpu"
    return rec.get("timing") is not None


def _timing_fine(r: Any, kind: str | None) -> bool:
    """True where :func:`timing_problem` certainly finds nothing wrong with
    the ``decode.record`` structure ``r``'s timing (the usual record: a GPU
    run with a timing, whose figures the decoding checked; or no timing
    where none is needed). False leaves the judgement to the standard path,
    which says what is wrong, if anything."""
    if not r.timing:  # None or absent: wrong only for a record that passed on a GPU
        return not (kind == "gpu" and r.status == "pass" and r.device != SIM_NAME)
    return kind != "sim" and r.device != SIM_NAME  # a timing, where the simulator times nothing


def timing_problem(rec: Mapping[str, Any], kind: str | None) -> str | None:
    """Why ``rec``'s timing cannot be used, or None. The rule (docs/records.md):
    a record that passed on a GPU must carry a timing; a simulator record
    carries none; and a timing, wherever present, has a positive finite
    ``median_us`` and finite, non-negative ``p20_us``, ``p80_us`` and ``noise``
    where it has them. A record that failed may lack a timing on any device."""
    t = rec.get("timing")
    on_gpu = ran_on_gpu(rec, kind)
    if t is None:
        if on_gpu and rec.get("status") == "pass":
            return (f"it passed on a GPU ({rec.get('device') or 'device unnamed'}) but has no timing; "
                    "a GPU run times every passing record")
        return None
    if not on_gpu and (kind == "sim" or rec.get("device") == SIM_NAME):
        return "a simulator record with a timing (the simulator times nothing)"
    if not isinstance(t, dict):
        return f"`timing` is a JSON {type(t).__name__}, not an object"
    for k in TIMING_FIGURES:
        v = t.get(k)
        if type(v) is float and 0.0 <= v < math.inf:  # the usual figure: nothing to say (NaN fails 0 <= v)
            continue
        if v is None:
            if k == "median_us":
                return "timing has no median_us"
            continue
        if not _num(v):
            return f"timing {k} is not a number ({v!r})"
        if math.isnan(v):
            return f"timing {k} is NaN"
        if math.isinf(v):
            return f"timing {k} is infinite"
        if v < 0:
            return f"timing {k} is negative ({v:g})"
    if t["median_us"] == 0:
        return "timing median_us is 0"
    return None


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def timed(rec: Mapping[str, Any]) -> bool:
    """Whether ``rec`` carries a usable median (see :func:`timing_problem`)."""
    return median_us(rec) is not None


def median_us(rec: Mapping[str, Any]) -> float | None:
    """The record's median in µs: a positive finite number, else None (no
    timing). The reports ask this of every record, so the usual case (a
    float in a dict) is answered first."""
    t = rec.get("timing")
    if type(t) is dict or isinstance(t, dict):
        m = t.get("median_us")
        if type(m) is float:
            return m if 0.0 < m < math.inf else None
        if _num(m) and math.isfinite(m) and m > 0:
            return float(m)
    return None


def spread(rec: Mapping[str, Any]) -> float:
    """Relative spread of a record's samples: (p80 - p20) / median, or the
    recorded ``noise`` when the percentiles are absent; 0 without timing."""
    t = rec.get("timing")
    if not timed(rec):
        return 0.0
    return spread_of(float(t["median_us"]), t.get("p20_us"), t.get("p80_us"), t.get("noise"))


def spread_of(med: float, p20: Any, p80: Any, noise: Any) -> float:
    """:func:`spread` of a timed record's figures (None where it has none)."""
    if _num(p20) and _num(p80):
        return max(0.0, (float(p80) - float(p20)) / med)
    if _num(noise):
        return max(0.0, float(noise))
    return 0.0


# The kernel paths `report show` ranks arm by arm (leverctl.bench.arms); their
# records keep their errors, tensor cores and roofline (see columns._extras).
ARM_VIEW_KERNELS = ("ffn.prefill",)


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
    records: list[dict]  # one per identity: a repeated record is counted once, the last kept
    good_bytes: int  # length of the intact prefix (every complete line)
    tail_bytes: int  # bytes of a partial last line, ignored (0: none)
    duplicates: tuple[int, ...] = ()  # line numbers of records that repeat an earlier one's identity
    foreign: tuple[int, Any] | None = None  # (place, plan) of the first record of another plan (plan_hash)


def loads_line(line: bytes) -> Any:
    """One JSONL line parsed (``decode.loads``: msgspec where it takes the
    line, else the standard library, which decides)."""
    from .decode import loads

    return loads(line)


def read_jsonl(path: Path, kind: str | None = None, plan_hash: str | None = None,
               columns: Any = None) -> Jsonl:
    """The records of a results file, read 8 MiB at a time (never the whole
    file at once), the lines of each piece decoded in one call where each is
    one record object (``decode.batch_records``), else one by one. A
    partial last line (no newline: the writer was killed mid-line) is
    ignored; any other line that is not a record, or whose timing is
    unusable (``kind``: the run's device kind, see :func:`timing_problem`),
    is refused with its line number. A record repeating an earlier one's
    identity is counted once (the later kept, in the earlier's place) and
    its line listed in ``duplicates``. With ``plan_hash``, the first kept
    record (in kept order) that names another plan is returned in
    ``foreign`` as (its 1-based place, that plan).

    Without ``columns`` each record is the dict the standard parser makes
    (what resume and Slurm read). With ``columns`` (a ``columns.Builder``:
    what the reports read, a million records at cluster scale), the lines
    are decoded by msgspec into the fields the reports read, a piece at a
    time, and gathered as columns; ``records`` is a ``columns.Records``
    (each line's place in the file kept in its ``offset`` and ``length``
    columns). A line the fast path cannot take goes to the standard parser
    and :func:`check_record`, which decide (see the notes of ``decode``)."""
    path = Path(path)
    records: list[dict] = []
    seen: dict[Identity, int] = {}
    duplicates: list[int] = []
    foreign: dict[int, Any] = {}  # place in records -> the other plan its record names

    def take(r: Any, key: Identity, named: Any, n: int, offset: int, length: int) -> None:
        if columns is not None:
            columns.one(r, n, offset, length)
            return
        at = seen.setdefault(key, len(records))
        if at == len(records):
            records.append(None)
        else:
            duplicates.append(n)
        if plan_hash is not None:
            if named is None or named == plan_hash:
                if foreign:
                    foreign.pop(at, None)
            else:
                foreign[at] = named
        records[at] = r

    def one(line: bytes, n: int, offset: int, fast: bool) -> None:
        """One line, by the fast path where it takes it, else the standard one."""
        r = fast_record(line) if fast else None
        if r is not None and _timing_fine(r, kind):
            named = r.plan
            take(r, (r.kernel, r.shape.label, r.config), None if named is UNSET else named, n, offset, len(line))
            return
        if not line.strip():
            return
        where = f"{path}:{n}"
        try:
            rec = loads_line(line)
        except UnicodeDecodeError:
            raise UserError("not a leverctl results file (not UTF-8 text)", where) from None
        except json.JSONDecodeError as e:
            raise UserError(f"not a leverctl results file (line is not JSON: {e.msg})", where) from None
        rec = check_record(rec, where, kind)
        take(rec, identity(rec), rec.get("plan"), n, offset, len(line))

    good = tail = 0
    n = 0  # the last line read
    pending = b""
    with open_input_file(path, "results file") as f, closing(_pieces_of(f)) as pieces:
        for data in pieces:
            if not data:
                tail = len(pending)
                break
            if pending:
                data = pending + data
            cut = data.rfind(b"\n") + 1
            pending = data[cut:]
            if not cut:
                continue
            chunk = data[:cut] if cut < len(data) else data
            lines = chunk.split(b"\n")
            lines.pop()  # the empty text after the last newline
            count = len(lines)
            fast = columns is not None
            batch = batch_records(chunk, lines) if fast else None
            offset = good
            if batch is None or not columns.batch(batch, [len(line) + 1 for line in lines], n + 1, offset, kind):
                # Not every line a usable record for the columns' path: line by line.
                for i, line in enumerate(lines):
                    one(line + b"\n", n + i + 1, offset, fast)
                    offset += len(line) + 1
            good += cut
            n += count
    if columns is not None:
        got, dups, first_foreign = columns.finish()
        return Jsonl(got, good, tail, tuple(dups), first_foreign)
    first = min(foreign) if foreign else None
    return Jsonl(records, good, tail, tuple(duplicates),
                 None if first is None else (first + 1, foreign[first]))


_CHUNK = 1 << 23  # bytes of a results file read at a time


def _pieces_of(f: Any) -> Iterable[bytes]:
    """``f`` read _CHUNK bytes at a time, then an empty piece. A file of
    several pieces is read one piece ahead by a thread (the read waits on
    the disk without the interpreter) while the caller decodes the last:
    a cluster sweep's gigabyte is often no longer in the page cache."""
    if os.fstat(f.fileno()).st_size <= _CHUNK:
        yield f.read(_CHUNK)
        yield b""
        return
    from concurrent.futures import ThreadPoolExecutor

    try:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (AttributeError, OSError):
        pass
    with ThreadPoolExecutor(1, thread_name_prefix="results-read") as pool:
        ahead = pool.submit(f.read, _CHUNK)
        while True:
            data = ahead.result()
            if not data:
                yield b""
                return
            ahead = pool.submit(f.read, _CHUNK)
            yield data


def cut_partial_tail(path: Path, good_bytes: int) -> None:
    """Drop a partial last line so that the next append starts a fresh line."""
    with open(path, "r+b") as f:
        f.truncate(good_bytes)
        f.flush()
        os.fsync(f.fileno())


def read_plan(directory: Path, items: bool = False) -> dict | None:
    """The sweep plan in ``directory``, None if it has none; a UserError if
    ``plan.json`` is not a complete plan (see :func:`check_plan`). Without
    ``items`` the plan comes without its item list (the header: what resume,
    the reports and Slurm read); with it, ``plan["items"]`` holds
    ``decode.Item``s, each with its place ``n`` in the whole sweep."""
    got = read_plan_counted(directory, items)
    return None if got is None else got[0]


def read_plan_counted(directory: Path, items: bool = False) -> tuple[dict, int | None] | None:
    """:func:`read_plan`, and how many items the plan lists (None where the
    header alone was read and the fast path took it: the readers of the
    header go by ``total`` and ``shard.items``).

    A cluster sweep's merged plan lists a million items. The file is parsed
    by msgspec as an object of raw values: the header's values are decoded,
    and the item list is either left as text (a reader of the header: it is
    a list, and never built) or decoded into ``decode.Item``s, whose fields
    are typed, so that the decoding checks them. What the fast path cannot
    take goes to the standard library and :func:`check_plan`, which decide."""
    from . import decode as dec

    path = Path(directory) / PLAN_FILE
    if not path.exists() and not path.is_symlink():
        return None
    where = str(path)
    data = read_input_file(path, "sweep plan")
    fields = dec.plan_fields(data)
    if fields is not None and "items" in fields:
        raw = fields.pop("items")
        listed = dec.plan_items(raw) if items else ([] if memoryview(raw)[:1] == b"[" else None)
        if listed is not None:
            try:
                head = {k: dec.loads(bytes(v)) for k, v in fields.items()}
            except (UnicodeDecodeError, json.JSONDecodeError):
                head = None
            if head is not None:
                plan = check_plan({**head, "items": []}, where)
                if not items:
                    del plan["items"]
                    return plan, None
                plan["items"] = _placed(listed)
                return plan, len(listed)
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UserError("not a leverctl sweep plan (not JSON)", where) from None
    plan = check_plan(doc, where)
    listed = plan.pop("items")
    if items:
        plan["items"] = _placed([dec.item_of(it) for it in listed])
    return plan, len(listed)


def _placed(items: list) -> list:
    """``items`` (``decode.Item``) with their place ``n`` where the plan
    leaves it out (the first schema: the position)."""
    from msgspec import UNSET

    if UNSET in map(_place, items):
        for i, it in enumerate(items):
            if it.n is UNSET:
                it.n = i
    return items


def check_plan(doc: Any, where: str) -> dict:
    """``doc`` if it holds what resume, merge, compare and the reports read
    from a plan, else a UserError at ``where`` naming what it lacks."""
    if not isinstance(doc, dict) or doc.get("schema") not in PLAN_SCHEMAS or not isinstance(doc.get("hash"), str):
        raise UserError(f"not a leverctl sweep plan (schema is not {PLAN_SCHEMA})", where)

    def lacks(what: str) -> UserError:
        return UserError(f"not a complete leverctl sweep plan: {what}", where)

    catalog = doc.get("catalog")
    if not isinstance(catalog, dict) or not isinstance(catalog.get("digest"), str) or not catalog["digest"]:
        raise lacks("no `catalog.digest` (the lever catalog it was swept with)")
    items = doc.get("items")
    if not isinstance(items, list):
        raise lacks("no `items` list")
    for i, it in enumerate(items):  # a million of them at cluster scale: no per-item generator
        if not (isinstance(it, dict) and isinstance(it.get("kernel"), str) and isinstance(it.get("shape"), str)
                and isinstance(it.get("config"), str) and ("levers" not in it or isinstance(it["levers"], dict))
                and ("n" not in it or (type(it["n"]) is int and it["n"] >= 0))):
            raise lacks(f"items[{i}] is not an object with string kernel, shape and config (and a place n "
                        "that is a whole number, where it has one)")
    device = doc.get("device")
    if device is not None and not (isinstance(device, dict) and device.get("kind") in ("gpu", "sim", None)):
        raise lacks("`device` is not an object whose kind is gpu or sim")
    shard = doc.get("shard")
    if shard is not None and not (isinstance(shard, dict) and all(
            isinstance(shard.get(k), int) and not isinstance(shard.get(k), bool)
            for k in ("index", "count", "items"))):
        raise lacks("`shard` is neither null nor an object with integer index, count and items")
    kernels = doc.get("kernels", [])
    if not (isinstance(kernels, list) and all(
            isinstance(k, dict) and isinstance(k.get("kernel"), str)
            and isinstance(k.get("levers", []), list) and isinstance(k.get("recipe_levers") or {}, dict)
            for k in kernels)):
        raise lacks("`kernels` is not a list of objects naming their kernel, levers and recipe_levers")
    skipped = doc.get("not_benchmarked", [])
    if not (isinstance(skipped, list) and all(isinstance(x, dict) and isinstance(x.get("lever"), str)
                                              and isinstance(x.get("why"), str) for x in skipped)):
        raise lacks("`not_benchmarked` is not a list of objects with lever and why")
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
    duplicates: list[str] = field(default_factory=list)  # where records repeated an earlier one (counted once)
    # How many items the plan lists (None without a plan); the list itself is
    # in plan["items"] only where the reader asked for it (load_results(plan_items=True)).
    item_count: int | None = None
    path: Path | None = None  # the results.jsonl read (None: a bench document, or no results file)
    read_bytes: int = 0  # how much of it holds the records read (complete lines)

    def notes(self) -> list[str]:
        """What reading tolerated, each a line for stderr naming the source."""
        out = []
        if self.tail_bytes:
            out.append(f"{self.source}: ignored a partial last line ({self.tail_bytes} bytes) left by an "
                       "interrupted sweep")
        if self.duplicates:
            out.append(repeated_note(self.source, self.duplicates))
        return out

    @property
    def device_kind(self) -> str | None:
        if self.device.get("kind"):
            return self.device["kind"]
        if len(self.records):
            if hasattr(self.records, "timed"):  # columns.Records
                return "gpu" if self.records.timed.any() else None
            return "gpu" if any(timed(r) for r in self.records) else None
        return None

    @property
    def device_name(self) -> str | None:
        if self.device.get("name"):
            return self.device["name"]
        if hasattr(self.records, "device_names"):  # columns.Records
            names = self.records.device_names()
        else:
            names = {r.get("device") for r in self.records if r.get("device")}
        return names.pop() if len(names) == 1 else None


def repeated_note(source: str, places: Sequence[str]) -> str:
    """The warning for records that repeat an earlier one's identity."""
    shown = ", ".join(places[:5]) + (", ..." if len(places) > 5 else "")
    return (f"{source}: {len(places)} record(s) repeat an earlier one's kernel, shape and levers ({shown}); "
            "each counted once, the later kept")


def load_results(path: str | Path, plan_items: bool = False, columns: Any = None) -> ResultSet:
    """A bench JSON document, a sweep directory, or a sweep's results.jsonl.
    A sweep's plan comes without its item list (a cluster sweep's lists a
    million), their count in ``item_count``; with ``plan_items``,
    ``plan["items"]`` holds them (``decode.Item``, see :func:`read_plan`;
    with ``columns``, a ``columns.Items``).
    The records are dicts, or with ``columns`` a ``columns.Records`` (True,
    or the ``columns.Tables`` to number their names in: a merge's parts and
    a comparison's sides share one): what the reports read."""
    tables = None
    if columns is not None and columns is not False:
        from .columns import Tables

        tables = columns if isinstance(columns, Tables) else Tables()
    return _load(Path(path), plan_items, tables)


# Inputs together at least this large are read by two processes (a merge's
# shards, a comparison's two sides): reading is most of their time.
PARALLEL_BYTES = 64 << 20


def load_all(paths: Sequence[str | Path], tables: Any, plan_items: bool = False) -> list:
    """``load_results(path, plan_items=plan_items, columns=tables)`` of each
    path, in order, each a ResultSet or the UserError reading it raised.
    Where the inputs are large (``PARALLEL_BYTES``) and the machine has two
    cores, a second process reads some of them (records only: the items of
    their plans are read here) while this one reads the rest; what it read
    is numbered in ``tables`` as it arrives."""
    def here(p: Any, items: bool) -> Any:
        try:
            return load_results(p, plan_items=items, columns=tables)
        except UserError as e:
            return e

    sizes = [_input_bytes(Path(p)) for p in paths]
    if len(paths) < 2 or sum(r for r, _ in sizes) < PARALLEL_BYTES or (os.cpu_count() or 1) < 2:
        return [here(p, plan_items) for p in paths]
    import multiprocessing

    # The other process takes inputs, largest first, while its share of the work is under half (a plan's
    # items, read here, count twice their bytes: they cost about that much more per byte to read).
    weight = [r + (2 * q if plan_items else 0) for r, q in sizes]
    theirs: set[int] = set()
    share, half = 0, sum(weight) / 2
    for i in sorted(range(len(paths)), key=lambda i: -sizes[i][0]):
        if share + sizes[i][0] <= half or not theirs:
            theirs.add(i)
            share += sizes[i][0]
    from .columns import Items

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        pending = pool.map_async(_load_elsewhere, [str(paths[i]) for i in sorted(theirs)])
        got: dict[int, Any] = {i: here(p, plan_items) for i, p in enumerate(paths) if i not in theirs}
        done = pending.get()
    for i, r in zip(sorted(theirs), done):
        if isinstance(r, ResultSet):
            r.records = tables.adopt(r.records)
            if plan_items and r.plan is not None:
                try:
                    where = Path(r.source) if Path(r.source).is_dir() else Path(r.source).parent
                    r.plan["items"] = Items.of(read_plan(where, items=True)["items"], tables)
                    r.item_count = len(r.plan["items"])
                except UserError as e:
                    r = e
        got[i] = r
    return [got[i] for i in range(len(paths))]


def _load_elsewhere(path: str) -> Any:
    """What another process read: a ResultSet as columns, or its UserError."""
    from .columns import Tables

    try:
        return load_results(path, columns=Tables())
    except UserError as e:
        return e


def whole_records(rs: ResultSet, source: str | Path) -> Iterator[dict]:
    """Each of ``rs``'s records whole, as the standard parser reads its line,
    in order: ``rs`` read as columns from ``source`` (a sweep's records are
    read again from their lines, one at a time: a million of them are never
    held), or read whole again where ``rs`` is a bench document."""
    if rs.path is None or not hasattr(rs.records, "cols"):
        yield from load_results(source).records
        return
    from .decode import loads

    cols = rs.records.cols
    with open_input_file(rs.path, "results file") as f:
        if os.fstat(f.fileno()).st_size < rs.read_bytes:
            raise UserError("shrank while being read; run again", str(rs.path))
        window = _Window(f.fileno(), rs.path)
        for offset, length in zip(cols["offset"].tolist(), cols["length"].tolist()):
            yield loads(window.read(offset, length))


def _input_bytes(p: Path) -> tuple[int, int]:
    """The sizes of an input's results and plan files (0 where absent)."""
    def size(f: Path) -> int:
        try:
            return f.stat().st_size
        except OSError:
            return 0

    if p.is_dir():
        return size(p / RESULTS_FILE), size(p / PLAN_FILE)
    return size(p), size(p.parent / PLAN_FILE) if p.name == RESULTS_FILE else 0


def _load(p: Path, plan_items: bool, tables: Any = None) -> ResultSet:
    rs = _load_any(p, plan_items, tables)
    if tables is not None and rs.plan is not None and "items" in rs.plan:
        from .columns import Items

        rs.plan["items"] = Items.of(rs.plan["items"], tables)
    return rs


def _load_any(p: Path, plan_items: bool, tables: Any = None) -> ResultSet:
    def read(res: Path, plan: dict | None) -> Jsonl:
        if tables is None:
            return read_jsonl(res, _plan_kind(plan), _plan_hash(plan))
        from .columns import Builder

        return read_jsonl(res, _plan_kind(plan), plan_hash=_plan_hash(plan),
                          columns=Builder(tables, _plan_hash(plan)))

    if p.is_dir():
        plan, count = read_plan_counted(p, plan_items) or (None, None)
        res = p / RESULTS_FILE
        if not res.exists():
            if plan is None:
                raise UserError(f"not a sweep directory (no {PLAN_FILE}, no {RESULTS_FILE})", str(p))
            return _from_plan(str(p), plan, _empty(tables), count)
        return _from_plan(str(p), plan, read(res, plan), count, res)
    if not p.exists():
        raise UserError("no such results file or directory", str(p))
    if p.suffix == ".jsonl" or _first_line_is_record(p):
        plan, count = (read_plan_counted(p.parent, plan_items) if p.name == RESULTS_FILE else None) or (None, None)
        return _from_plan(str(p), plan, read(p, plan), count, p)
    rs = _from_bench(p, read_input_file(p, "results file", binary=True))
    if tables is not None:
        from .columns import of_dicts

        rs.records = of_dicts(rs.records, tables)  # one per identity already
    return rs


def _empty(tables: Any) -> Jsonl:
    if tables is None:
        return Jsonl([], 0, 0)
    from .columns import Builder

    return Jsonl(Builder(tables).finish()[0], 0, 0)


def _plan_hash(plan: Mapping[str, Any] | None) -> str | None:
    return plan["hash"] if plan is not None else None


def _plan_kind(plan: Mapping[str, Any] | None) -> str | None:
    return ((plan or {}).get("device") or {}).get("kind")


def _first_line_is_record(p: Path) -> bool:
    with open_input_file(p, "results file") as f:
        first = f.readline()
    try:
        obj = json.loads(first)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(obj, dict) and "kernel" in obj and "config" in obj


def _from_plan(source: str, plan: dict | None, jl: Jsonl, item_count: int | None = None,
               path: Path | None = None) -> ResultSet:
    device = dict(plan.get("device") or {}) if plan else {}
    catalog = (plan.get("catalog") or {}).get("digest") if plan else None
    if plan is not None and jl.foreign is not None:
        n, other = jl.foreign
        raise UserError(f"record {n} belongs to plan {other}, not this directory's {plan['hash']}", source)
    return ResultSet(source, jl.records, plan, device, catalog, jl.tail_bytes,
                     [f"line {n}" for n in jl.duplicates], item_count, path, jl.good_bytes)


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
    device = doc.get("device") if isinstance(doc.get("device"), dict) else {}
    kind = device.get("kind") if device.get("kind") in ("gpu", "sim") else None
    lines = _result_lines(data.decode("utf-8"))
    records: list[dict] = []
    seen: dict[Identity, int] = {}
    duplicates: list[str] = []
    for i, r in enumerate(results):
        at = f"{where}:{lines[i]}" if lines and i < len(lines) else where
        rec = check_record(r, f"{at}: results[{i}]", kind)
        key = identity(rec)
        if key in seen:
            records[seen[key]] = rec
            duplicates.append(f"results[{i}]")
        else:
            seen[key] = len(records)
            records.append(rec)
    levers = doc.get("levers") if isinstance(doc.get("levers"), dict) else {}
    catalog = (levers.get("catalog") or {}).get("digest") if isinstance(levers.get("catalog"), dict) else None
    return ResultSet(where, records, None, {"kind": device.get("kind"), "name": device.get("name")},
                     catalog, 0, duplicates)


_WS = re.compile(r"[ \t\n\r]*")


def _result_lines(text: str) -> list[int] | None:
    """The line on which each element of a bench document's top-level
    ``results`` list starts (so that a bad record is named by its line), or
    None where the text is not laid out as expected. The text has parsed
    already; this walks it again with the decoder's ``raw_decode``, which
    says where each value ends."""
    dec = json.JSONDecoder()
    newlines = [m.start() for m in re.finditer("\n", text)]

    def line(i: int) -> int:
        return bisect.bisect_left(newlines, i) + 1

    def skip(i: int) -> int:
        return _WS.match(text, i).end()

    found = None
    try:
        i = skip(0)
        if text[i] != "{":
            return None
        i = skip(i + 1)
        while text[i] != "}":
            key, i = dec.raw_decode(text, i)
            i = skip(i)
            i = skip(i + 1)  # the colon
            if key == "results" and text[i] == "[":
                found = []  # the last "results" key wins, as in json.loads
                i = skip(i + 1)
                while text[i] != "]":
                    found.append(line(i))
                    _, i = dec.raw_decode(text, i)
                    i = skip(i)
                    if text[i] == ",":
                        i = skip(i + 1)
                i += 1
            else:
                _, i = dec.raw_decode(text, i)
            i = skip(i)
            if text[i] == ",":
                i = skip(i + 1)
    except (ValueError, IndexError):
        return None
    return found


# ── merging ─────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Merged:
    plan: dict  # the merged plan: the parts' items, in plan order (decode.Item)
    records: Any  # columns.Records, in plan order
    missing: int  # planned items no input holds (the items of shards not given included)
    duplicates: int  # records seen in more than one input (the last input wins)
    part: Any  # numpy array: each record's part (its place in the inputs)
    files: list  # per part: (its results file or None, how many of its bytes hold the records read)


def merge(sets: Sequence[ResultSet]) -> Merged:
    """Join shards or resumed pieces of one sweep: each set read as columns
    (``load_results(columns=tables)``, every part numbering its names in the
    same ``columns.Tables``) with its plan's items. Refuses inputs that are
    not sweep results, or that come from different plans, catalogs or
    devices. The merged plan lists the union of the parts' items by their
    place in the sweep (a shard's plan lists its own); a record held by more
    than one part is the last part's. The records stay in the parts' files
    until :func:`write_result_dir` copies their lines."""
    import numpy as np

    from .columns import Items, Records, identity_keys

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
    tables = first.records.tables
    plan = {k: v for k, v in first.plan.items() if k != "items"}
    plan["schema"] = PLAN_SCHEMA
    plan["shard"] = None
    plan["merged_from"] = [s.source for s in sets]
    # The items by place; a place listed twice (plans of the first schema list every item in every
    # shard) kept once, as the first part lists it.
    every = Items.concat([s.plan["items"] for s in sets])
    places = every.cols["n"]
    order = np.argsort(places, kind="stable")
    keep = order[np.r_[True, places[order][1:] != places[order][:-1]]] if len(order) else order
    items = every.take(keep)
    del every
    item_ids = {k: items.cols[k] for k in ("kernel", "shape", "config")}
    # Every part's records, the last holding an identity kept (in the place its first holder had).
    parts = [s.records for s in sets]
    cols = {k: np.concatenate([r.cols[k] for r in parts]) for k in parts[0].cols}
    part = np.concatenate([np.full(len(r), i, np.int32) for i, r in enumerate(parts)])
    extras = {}
    base = 0
    for r in parts:
        extras.update({base + i: e for i, e in r.extras.items()})
        base += len(r)
    allr = Records(tables, cols, extras)
    # The records' identities and the items' as numbers of one numbering.
    both = identity_keys({k: np.concatenate([cols[k], item_ids[k]]) for k in item_ids})
    keys, item_keys = both[:len(part)], both[len(part):]
    by_key = np.argsort(keys, kind="stable")
    sk = keys[by_key]
    last = np.r_[sk[1:] != sk[:-1], True] if len(sk) else np.zeros(0, np.bool_)
    held, held_at = sk[last], by_key[last]  # each identity once, sorted; its last record
    duplicates = len(keys) - len(held)
    found = np.searchsorted(held, item_keys)
    found[found >= len(held)] = 0
    hit = (held[found] == item_keys) if len(held) else np.zeros(len(item_keys), np.bool_)
    take = held_at[found[hit]]
    if len(take) < len(held):  # some record is in no planned item
        planned = np.zeros(len(held), np.bool_)
        planned[found[hit]] = True
        strays = np.sort(by_key[np.r_[True, sk[1:] != sk[:-1]]][~planned])  # each stray identity's first record
        r = allr.record(int(strays[0]))
        raise UserError(f"holds {len(strays)} record(s) outside its plan (first: {r['kernel']} {r['config']} at "
                        f"{r['shape']['label']})", first.source)
    plan["items"] = items
    total = first.plan.get("total")
    total = total if type(total) is int and total >= len(items) else len(items)
    files = [(s.path, s.read_bytes) for s in sets]
    return Merged(plan, allr.take(take), total - len(take), duplicates, part[take], files)


def _place(it: Any) -> int:
    return it.n


def shard_gaps(sets: Sequence[ResultSet], missing: int) -> str:
    """What ``missing`` (how many planned items no input holds) is, by
    shard: the indices of the shards not given, and those given with fewer
    records than their plan.json says they hold. Without shard information
    (unsharded pieces, or shards of different counts), the count of records."""
    if not missing:
        return ""
    shards = [(s.plan or {}).get("shard") for s in sets]
    counts = {sh["count"] for sh in shards if sh}
    if len(counts) != 1 or not all(shards):
        return f"{missing} planned record(s) are in none of the parts"
    n = counts.pop()
    given = {sh["index"] for sh in shards}
    parts = []
    absent = [i for i in range(1, n + 1) if i not in given]
    if absent:
        parts.append(f"shard{'s' if len(absent) > 1 else ''} {', '.join(map(str, absent))} of {n} not given")
    short = [f"shard {sh['index']} has {len(s.records)} of {sh['items']}" for s, sh in zip(sets, shards)
             if len(s.records) < sh["items"]]
    parts += short
    return "; ".join(parts) + f" ({missing} record(s) missing)"


def write_result_dir(directory: Path, merged: Merged, plan: Mapping[str, Any],
                     written: Callable[[], None] | None = None) -> None:
    """A complete sweep directory (merge's output): refuses a directory that
    already holds results, writes results.jsonl (the merged records, in plan
    order, their lines copied from the parts' files) and then plan.json,
    each atomically: an interrupted merge leaves no half-written file.
    ``written()`` is called once the records are handed to the system,
    before the waits for the disk."""
    d = Path(directory)
    check_free_result_dir(d)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the directory: {e.strerror or e}", str(d)) from None
    with _Lines(merged) as lines:
        write_atomically(d / RESULTS_FILE, lines, written=written)
    write_plan(d / PLAN_FILE, plan)


class _Lines:
    """The merged records' lines, in order, read from the parts' files in
    pieces of about a MiB (each part's records come in its file's order, so
    each file is read once, front to back, through a window)."""

    def __init__(self, merged: Merged):
        self.m = merged
        self._open: list = []

    def __enter__(self) -> Iterable[bytes]:
        readers = {}
        for part, (path, end) in enumerate(self.m.files):
            if path is None:
                continue
            f = open(path, "rb")
            self._open.append(f)
            if os.fstat(f.fileno()).st_size < end:
                raise UserError("shrank while being merged; merge again", str(path))
            readers[part] = _Window(f.fileno(), path)
        return self._pieces(readers)

    def _pieces(self, readers: dict) -> Iterable[bytes]:
        cols = self.m.records.cols
        parts, offsets, lengths = self.m.part.tolist(), cols["offset"].tolist(), cols["length"].tolist()
        buf: list[bytes] = []
        size = 0
        for part, offset, length in zip(parts, offsets, lengths):
            buf.append(readers[part].read(offset, length))
            size += length
            if size >= 1 << 20:
                yield b"".join(buf)
                buf, size = [], 0
        if buf:
            yield b"".join(buf)

    def __exit__(self, *exc) -> None:
        for f in self._open:
            f.close()


class _Window:
    """Reads lines of a file by place: a MiB at a time from where the last
    read ended (each shard's records come in plan order, so a merge reads
    each part's file once, front to back), else at the place asked."""

    SIZE = 1 << 20

    def __init__(self, fd: int, path: Path):
        self._fd = fd
        self._path = path
        self._start = 0
        self._data = b""

    def read(self, offset: int, length: int) -> bytes:
        i = offset - self._start
        if 0 <= i and i + length <= len(self._data):
            return self._data[i:i + length]
        self._data = os.pread(self._fd, max(length, self.SIZE), offset)
        self._start = offset
        if len(self._data) < length:
            raise UserError("changed while being merged; merge again", str(self._path))
        return self._data[:length]


def write_plan(path: Path, plan: Mapping[str, Any]) -> None:
    """plan.json, atomically: the header laid out as ``json.dumps(indent=2)``
    lays it out, and the items (dicts or ``decode.Item``) one to a line,
    compact: a cluster sweep's plan lists a million of them."""
    write_atomically(path, plan_json_pieces(plan))


def plan_json_pieces(plan: Mapping[str, Any]) -> Iterable[bytes]:
    """The text :func:`write_plan` writes, in pieces of about a MiB."""
    import msgspec

    encode = msgspec.json.Encoder().encode
    head = {k: v for k, v in plan.items() if k != "items"}
    text = json.dumps(head, indent=2)
    items = plan.get("items")
    if items is None:
        yield (text + "\n").encode()
        return
    yield ((text[:-2] + ",\n" if head else "{\n") + '  "items": [').encode()
    sep = b"\n    "
    if hasattr(items, "lines"):  # columns.Items: spelled a batch at a time
        for lines in items.lines():
            yield sep + b",\n    ".join(lines)
            sep = b",\n    "
        yield b"\n  ]\n}\n" if len(items) else b"]\n}\n"
        return
    buf: list[bytes] = []
    size = 0
    for it in items:
        line = encode(it)
        buf.append(sep)
        buf.append(line)
        sep = b",\n    "
        size += len(line)
        if size >= 1 << 20:
            yield b"".join(buf)
            buf, size = [], 0
    buf.append(b"\n  ]\n}\n" if items else b"]\n}\n")
    yield b"".join(buf)


def check_free_result_dir(directory: Path) -> None:
    """A UserError unless ``directory`` can take a new result set: absent, or
    a directory holding neither a plan nor results."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise UserError("exists and is not a directory", str(d))
    for name in (PLAN_FILE, RESULTS_FILE):
        if (d / name).exists():
            raise UserError(f"already holds {name}; choose an empty --out directory", str(d))
