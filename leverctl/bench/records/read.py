"""Reading result files: records, always as columns.

A record (docs/records.md) is one run of one (kernel path, variant, shape,
lever set). Two containers hold them:

* the bench document (``leverctl bench --format json``): one JSON object
  whose ``results`` is a list of records;
* a sweep directory: ``plan.json`` (written once, atomically) and
  ``results.jsonl`` (one record per line, appended, flushed and fsynced as
  each configuration finishes).

Either is read into a :class:`ResultSet` whose records are
``columns.Records``, one per identity (``columns.distinct``): what every
reader takes, resume and Slurm as well as the reports. A record whole, as
its line holds it, is read again where it is wanted (:func:`whole_records`).

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
import os
import re
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import msgspec

from ...errors import UserError
from ...levers.files import open_input_file, read_input_file
from .columns import Builder, Items, Records, Tables, gather
from .decode import batch_records, loads
from .decode import record as fast_record
from .plans import read_plan, read_plan_counted
from .rules import check_record, timing_fine
from .schema import BENCH_SCHEMA_PREFIX, PLAN_FILE, RESULTS_FILE

# ── a results file ──────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Jsonl:
    records: Records  # one per identity: a repeated record is counted once, the last kept
    good_bytes: int  # length of the intact prefix (every complete line)
    tail_bytes: int  # bytes of a partial last line, ignored (0: none)
    duplicates: tuple[int, ...] = ()  # line numbers of records that repeat an earlier one's identity
    foreign: tuple[int, Any] | None = None  # (place, plan) of the first record of another plan (plan_hash)


def read_jsonl(
    path: Path, kind: str | None = None, plan_hash: str | None = None, tables: Tables | None = None
) -> Jsonl:
    """The records of a results file as columns (numbered in ``tables``,
    new ones where not given), each line's place in the file kept in their
    ``offset`` and ``length`` columns. The file is read 8 MiB at a time
    (never the whole file at once); the lines of each piece are decoded by
    msgspec in one call into the fields the reports read, where each is one
    record object (``decode.batch_records``), else one by one. A line the
    fast path cannot take goes to the standard parser and
    ``rules.check_record``, which decide (see the notes of ``decode``).

    A partial last line (no newline: the writer was killed mid-line) is
    ignored; any other line that is not a record, or whose timing is
    unusable (``kind``: the run's device kind, see ``rules.timing_problem``),
    is refused with its line number. A record repeating an earlier one's
    identity is counted once (the later kept, in the earlier's place) and
    its line listed in ``duplicates``. With ``plan_hash``, the first kept
    record (in kept order) that names another plan is returned in
    ``foreign`` as (its 1-based place, that plan)."""
    path = Path(path)
    builder = Builder(tables, plan_hash)

    def one(line: bytes, n: int, offset: int) -> None:
        """One line, by the fast path where it takes it, else the standard one."""
        r = fast_record(line)
        if r is not None and timing_fine(r, kind):
            builder.one(r, n, offset, len(line))
            return
        if not line.strip():
            return
        where = f"{path}:{n}"
        try:
            rec = loads(line)
        except UnicodeDecodeError:
            raise UserError("not a leverctl results file (not UTF-8 text)", where) from None
        except json.JSONDecodeError as e:
            raise UserError(f"not a leverctl results file (line is not JSON: {e.msg})", where) from None
        builder.one(check_record(rec, where, kind), n, offset, len(line))

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
            batch = batch_records(chunk, lines)
            offset = good
            if batch is None or not builder.batch(batch, [len(line) + 1 for line in lines], n + 1, offset, kind):
                # Not every line a usable record for the columns' path: line by line.
                for i, line in enumerate(lines):
                    one(line + b"\n", n + i + 1, offset)
                    offset += len(line) + 1
            good += cut
            n += count
    got, dups, first_foreign = builder.finish()
    return Jsonl(got, good, tail, tuple(dups), first_foreign)


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


# ── a result set ────────────────────────────────────────────────────────────


@dataclass
class ResultSet:
    """Records from one file or directory, with what is known of their run."""

    source: str
    records: Records
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
            out.append(
                f"{self.source}: ignored a partial last line ({self.tail_bytes} bytes) left by an interrupted sweep"
            )
        if self.duplicates:
            out.append(repeated_note(self.source, self.duplicates))
        return out

    @property
    def device_kind(self) -> str | None:
        if self.device.get("kind"):
            return self.device["kind"]
        if len(self.records):
            return "gpu" if self.records.timed.any() else None
        return None

    @property
    def device_name(self) -> str | None:
        if self.device.get("name"):
            return self.device["name"]
        names = self.records.device_names()
        return names.pop() if len(names) == 1 else None


def repeated_note(source: str, places: Sequence[str]) -> str:
    """The warning for records that repeat an earlier one's identity."""
    shown = ", ".join(places[:5]) + (", ..." if len(places) > 5 else "")
    return (
        f"{source}: {len(places)} record(s) repeat an earlier one's kernel, shape and levers ({shown}); "
        "each counted once, the later kept"
    )


def load_results(path: str | Path, plan_items: bool = False, tables: Tables | None = None) -> ResultSet:
    """A bench JSON document, a sweep directory, or a sweep's results.jsonl,
    its records as columns numbered in ``tables`` (new ones where not given;
    a merge's parts and a comparison's sides share one). A sweep's plan
    comes without its item list (a cluster sweep's lists a million), their
    count in ``item_count``; with ``plan_items``, ``plan["items"]`` holds
    them as ``columns.Items``."""
    tables = tables if tables is not None else Tables()
    rs = _load_any(Path(path), plan_items, tables)
    if rs.plan is not None and "items" in rs.plan:
        rs.plan["items"] = Items.of(rs.plan["items"], tables)
    return rs


# Inputs together at least this large are read by two processes (a merge's
# shards, a comparison's two sides): reading is most of their time.
PARALLEL_BYTES = 64 << 20


def load_all(paths: Sequence[str | Path], tables: Tables, plan_items: bool = False) -> list:
    """``load_results(path, plan_items, tables)`` of each path, in order,
    each a ResultSet or the UserError reading it raised. Where the inputs
    are large (``PARALLEL_BYTES``) and the machine has two cores, a second
    process reads some of them (records only: the items of their plans are
    read here) while this one reads the rest; what it read is numbered in
    ``tables`` as it arrives."""

    def here(p: Any, items: bool) -> Any:
        try:
            return load_results(p, plan_items=items, tables=tables)
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
    try:
        return load_results(path)
    except UserError as e:
        return e


def whole_records(rs: ResultSet, source: str | Path) -> Iterator[dict]:
    """Each of ``rs``'s records whole, as the standard parser reads it, in
    order: ``rs`` read from ``source``. A sweep's records are read again
    from their lines, one at a time (a million of them are never held); a
    bench document's are read whole again, and its records taken by their
    places in its ``results``."""
    offsets = rs.records.cols["offset"].tolist()
    if rs.path is None:
        if not offsets:
            return
        results = _bench_records(Path(source), read_input_file(Path(source), "results file", binary=True))[0]
        yield from map(results.__getitem__, offsets)
        return
    lengths = rs.records.cols["length"].tolist()
    with open_input_file(rs.path, "results file") as f:
        if os.fstat(f.fileno()).st_size < rs.read_bytes:
            raise UserError("shrank while being read; run again", str(rs.path))
        window = Window(f.fileno(), rs.path)
        for offset, length in zip(offsets, lengths):
            yield loads(window.read(offset, length))


class Window:
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
            return self._data[i : i + length]
        self._data = os.pread(self._fd, max(length, self.SIZE), offset)
        self._start = offset
        if len(self._data) < length:
            raise UserError("changed while being merged; merge again", str(self._path))
        return self._data[:length]


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


def _load_any(p: Path, plan_items: bool, tables: Tables) -> ResultSet:
    def read(res: Path, plan: dict | None) -> Jsonl:
        return read_jsonl(res, _plan_kind(plan), _plan_hash(plan), tables)

    if p.is_dir():
        plan, count = read_plan_counted(p, plan_items) or (None, None)
        res = p / RESULTS_FILE
        if not res.exists():
            if plan is None:
                raise UserError(f"not a sweep directory (no {PLAN_FILE}, no {RESULTS_FILE})", str(p))
            return _from_plan(str(p), plan, Jsonl(Records.empty(tables), 0, 0), count)
        return _from_plan(str(p), plan, read(res, plan), count, res)
    if not p.exists():
        raise UserError("no such results file or directory", str(p))
    if p.suffix == ".jsonl" or _first_line_is_record(p):
        plan, count = (read_plan_counted(p.parent, plan_items) if p.name == RESULTS_FILE else None) or (None, None)
        return _from_plan(str(p), plan, read(p, plan), count, p)
    return _from_bench(p, tables)


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


def _from_plan(
    source: str, plan: dict | None, jl: Jsonl, item_count: int | None = None, path: Path | None = None
) -> ResultSet:
    device = dict(plan.get("device") or {}) if plan else {}
    catalog = (plan.get("catalog") or {}).get("digest") if plan else None
    if plan is not None and jl.foreign is not None:
        n, other = jl.foreign
        raise UserError(f"record {n} belongs to plan {other}, not this directory's {plan['hash']}", source)
    return ResultSet(
        source,
        jl.records,
        plan,
        device,
        catalog,
        jl.tail_bytes,
        [f"line {n}" for n in jl.duplicates],
        item_count,
        path,
        jl.good_bytes,
    )


# ── a bench document ────────────────────────────────────────────────────────


class _BenchDoc(msgspec.Struct, gc=False):
    """A bench document as the fast path reads it: the fields the reports
    need, and each record of ``results`` left as its JSON text."""

    schema: Any = None
    device: Any = None
    levers: Any = None
    results: Optional[list[msgspec.Raw]] = None  # each record's text; not a list: the standard path says so


_bench_doc = msgspec.json.Decoder(_BenchDoc).decode


def _bench_streamed(p: Path, tables: Tables) -> tuple[Any, _BenchDoc] | None:
    """A bench document's records as columns, read the way a sweep's JSONL
    is (``read_jsonl``): the file a piece at a time, its ``results`` cut into
    record texts (``stream.split``), each batch decoded by msgspec into the
    fields the reports read and taken as columns; the rest of the document
    (schema, device, levers) decoded on its own. None where any part is not
    for this path (not JSON, no schema, a record the fast decoder or the
    columns do not take): the standard path then reads the whole document
    and says what is wrong, naming the record by its line. A million
    records take seconds and the columns' memory, not a dict each."""
    from .stream import NOT_INDENTED, split, split_indented

    builder = Builder(tables)
    state = {"kind": None, "taken": 0}

    def opened(head: bytes) -> bool:
        try:
            doc = _bench_doc(head)
        except msgspec.DecodeError:
            return False
        if not str(doc.schema or "").startswith(BENCH_SCHEMA_PREFIX) or not isinstance(doc.device, dict):
            return False
        kind = doc.device.get("kind")
        state["kind"] = kind if kind in ("gpu", "sim") else None
        return True

    def take(texts: list) -> bool:
        recs = [fast_record(t) for t in texts]
        if any(r is None for r in recs):
            return False
        start = state["taken"]
        state["taken"] += len(recs)
        return builder.batch(recs, [0] * len(recs), start + 1, start, state["kind"], places=True)

    with open_input_file(p, "results file") as f, closing(_pieces_of(f)) as pieces:
        rest = split_indented(pieces, take, opened)
    if rest == NOT_INDENTED:  # not bench's own layout: byte by byte
        with open_input_file(p, "results file") as f, closing(_pieces_of(f)) as pieces:
            rest = split(pieces, take, opened)
    if rest is None:
        return None
    try:
        doc = _bench_doc(rest)
    except msgspec.DecodeError:
        return None
    if doc.results:  # a second results list (the last wins in json.loads): the standard path
        return None
    return builder.finish(), doc


def _from_bench(p: Path, tables: Tables) -> ResultSet:
    fast = _bench_streamed(p, tables)
    if fast is not None:
        (records, duplicates, _), streamed = fast
        doc = {"device": streamed.device, "levers": streamed.levers}
    else:
        results, doc = _bench_records(p, read_input_file(p, "results file", binary=True))
        records, duplicates, _ = gather(results, tables)
    device = doc.get("device") if isinstance(doc.get("device"), dict) else {}
    levers = doc.get("levers") if isinstance(doc.get("levers"), dict) else {}
    catalog = (levers.get("catalog") or {}).get("digest") if isinstance(levers.get("catalog"), dict) else None
    return ResultSet(
        str(p),
        records,
        None,
        {"kind": device.get("kind"), "name": device.get("name")},
        catalog,
        0,
        [f"results[{n - 1}]" for n in duplicates],
    )


def _bench_records(p: Path, data: bytes) -> tuple[list[dict], dict]:
    """A bench document's records, each checked (``rules.check_record``,
    a bad one named by its line), and the document."""
    where = str(p)
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError("not a leverctl results file (not UTF-8 text)", where) from None
    except json.JSONDecodeError as e:
        raise UserError(
            f"not a leverctl results file (not JSON, or truncated: {e.msg} at line {e.lineno})", where
        ) from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith(BENCH_SCHEMA_PREFIX):
        raise UserError(
            f"not a leverctl bench document or sweep results file (no `schema: {BENCH_SCHEMA_PREFIX}N`)", where
        )
    results = doc.get("results")
    if not isinstance(results, list):
        raise UserError("bench document has no `results` list", where)
    device = doc.get("device") if isinstance(doc.get("device"), dict) else {}
    kind = device.get("kind") if device.get("kind") in ("gpu", "sim") else None
    lines = _result_lines(data.decode("utf-8"))
    for i, r in enumerate(results):
        at = f"{where}:{lines[i]}" if lines and i < len(lines) else where
        check_record(r, f"{at}: results[{i}]", kind)
    return results, doc


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
