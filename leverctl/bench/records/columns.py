"""Records held as columns: a cluster sweep's million records in arrays.

A report or a comparison reads a dozen fields of each record. Held as a
dict each, a million records cost seconds to build and a gigabyte to keep;
held here, each field is one numpy array over the records (the names that
repeat, a kernel's, a shape's, a configuration's, a lever set, are numbered
once in :class:`Tables`), and the rare fields (a failing record's note and
error, a baseline's batch invariance, what the arm view reads) are kept by
record in ``extras``. Which field goes where is the schema's
(``schema.Field.column``).

:class:`Builder` takes the records of a results file as ``read.read_jsonl``
reads them: a piece of lines that msgspec decoded at once is taken column by
column (:meth:`Builder.batch`, no Python work per field of a record where
the standard library's C loops will do it), and anything else one record at
a time (:meth:`Builder.one`, a record the standard path checked). Both give
the same columns: a test holds them to each other and to the records.
Its :meth:`Builder.finish` keeps one record per identity (:func:`distinct`:
the rule, for a merge too) and finds a record of another plan.

:class:`Records` is the result: a sequence of records (each made a dict as
it is asked for, for the callers that want one) whose arrays the reports
read directly. :class:`Items` holds a plan's items alike.
"""

from __future__ import annotations

import json
import operator
from functools import partial
from typing import Any, Iterator, Mapping, NamedTuple, Sequence

import numpy as np
from msgspec import Raw

from .decode import UNSET, Item, loads, value
from .made import Made
from .rules import NO_FIGURES, timing_fine
from .rules import figures as dict_figures
from .schema import ARM_VIEW_KERNELS, FIELDS, FIGURES, FLAG, IDENTITY, NAME, PASSED, SIM_NAME, TIMING

_ABSENT = -1  # a device column's value for a record that names none


class Names:
    """Values numbered as first seen (hashable ones: strings, bytes)."""

    __slots__ = ("index", "values")

    def __init__(self) -> None:
        self.index: dict[Any, int] = {}
        self.values: list[Any] = []

    def __len__(self) -> int:
        return len(self.values)

    def add(self, x: Any) -> int:
        i = self.index.get(x)
        if i is None:
            i = self.index[x] = len(self.values)
            self.values.append(x)
        return i

    def ids(self, xs: Sequence[Any]) -> list[int]:
        """Each of ``xs`` numbered (new ones added), by C loops: the distinct
        values once through Python, the rest by ``map``."""
        index = self.index
        for x in dict.fromkeys(xs):
            if x not in index:
                index[x] = len(self.values)
                self.values.append(x)
        return list(map(index.__getitem__, xs))


class Tables:
    """The numbering the columns share (a merge's parts share one, so that
    their numbers compare)."""

    def __init__(self) -> None:
        self.kernels = Names()
        self.shapes = Names()
        self.configs = Names()
        self.variants = Names()
        self.devices = Names()  # strings
        self.lever_texts = Names()  # a lever set's JSON text -> its number
        self.levers: list[dict] = []  # number -> the lever set (parsed once)
        self.shape_objs: list[dict] = []  # number -> {"label": ...}, shared by every record of that shape
        # (kernel, variant) numbers -> (tensor_cores, tc_dtype) where its records name tensor cores: a
        # variant's instruction form, read back into every record of it (no per-record field).
        self.cores: dict[tuple[int, int], tuple[Any, Any]] = {}

    def note_cores(self, kernels: Sequence[int], variants: Sequence[int], recs: Sequence[Any]) -> None:
        """Remember the tensor cores of each (kernel, variant) the records name."""
        for k, v, r in zip(kernels, variants, recs):
            get = r.get if type(r) is dict else (lambda f, r=r: getattr(r, f, UNSET))
            tc = value(get("tensor_cores"))
            if tc not in (UNSET, None):
                dt = value(get("tc_dtype"))
                self.cores[(int(k), int(v))] = (tc, None if dt is UNSET else dt)

    def lever_ids(self, texts: Sequence[bytes]) -> list[int] | None:
        """Each lever set's number by its text; None where a text new here
        is not a JSON object (the standard path says what it is)."""
        known = self.lever_texts.index
        for t in dict.fromkeys(texts):
            if t not in known:
                if t[:1] != b"{":
                    return None
                self._new_levers(t, loads(t))
        return list(map(known.__getitem__, texts))

    def lever_id(self, levers: dict) -> int:
        t = json.dumps(levers, separators=(",", ":")).encode()
        i = self.lever_texts.index.get(t)
        return self._new_levers(t, levers) if i is None else i

    def _new_levers(self, text: bytes, levers: dict) -> int:
        self.levers.append(levers)
        return self.lever_texts.add(text)

    def adopt(self, recs: "Records") -> "Records":
        """``recs`` (numbered in other tables: another process's) numbered in these."""
        src = recs.tables
        if src is self:
            return recs
        cols = dict(recs.cols)
        for col, names in (("kernel", "kernels"), ("shape", "shapes"), ("config", "configs"), ("variant", "variants")):
            remap = np.array(getattr(self, names).ids(getattr(src, names).values), np.int32)
            cols[col] = remap[cols[col]] if len(remap) else cols[col]
        if len(src.devices):
            remap = np.array(self.devices.ids(src.devices.values) + [_ABSENT], np.int32)  # [-1]: none
            cols["device"] = remap[cols["device"]]
        known = self.lever_texts.index
        remap = np.array(
            [known[t] if t in known else self._new_levers(t, lv) for t, lv in zip(src.lever_texts.values, src.levers)],
            np.int32,
        )
        if len(remap):
            cols["levers"] = remap[cols["levers"]]
        if src.cores:
            kmap = self.kernels.ids(src.kernels.values)
            vmap = self.variants.ids(src.variants.values)
            for (k, v), tc in src.cores.items():
                self.cores[(kmap[k], vmap[v])] = tc
        return Records(self, cols, recs.extras)

    def shape(self, i: int) -> dict:
        objs = self.shape_objs
        while len(objs) <= i:
            objs.append({"label": self.shapes.values[len(objs)]})
        return objs[i]


_FIG_COLUMNS = tuple(f.column for f in TIMING)


def _columns() -> dict[str, Any]:
    """The columns the schema's fields make (``schema.Field.column``), each
    with its dtype, and the place of each record's line in its file."""
    out: dict[str, Any] = {}
    for f in FIELDS:
        if f.column == NAME:
            out[f.name] = np.int32  # numbered in the Tables (-1: the record names none)
        elif f.column == PASSED:
            out["passed"] = np.bool_
        elif f.column == FLAG:
            out[f.name] = np.bool_
        elif f.column == FIGURES:
            out.update(dict.fromkeys(_FIG_COLUMNS, np.float64))  # NaN: none
    # ``line``: the line it was read from (a bench document: its place in ``results``, from 1);
    # ``offset`` and ``length``: the bytes of its line in its results file (a bench document: its place
    # in ``results``, from 0, and 0).
    return {**out, "line": np.int64, "offset": np.int64, "length": np.int64}


# The columns, each with its dtype; every Builder and Records holds all of them.
COLUMNS = _columns()
_FIELDS = operator.attrgetter(
    "kernel", "variant", "levers", "config", "shape", "status", "timing", "device", "plan", "baseline"
)
_LABEL = operator.attrgetter("label")
_PASS = "pass".__eq__
_FIGURES_OF = operator.attrgetter(*(f.name for f in TIMING))


def _figures(t: Any) -> tuple:
    return _FIGURES_OF(t) if t else NO_FIGURES  # t: None or UNSET, none


class Builder:
    """Columns gathered as a results file is read (see the module notes)."""

    def __init__(self, tables: Tables | None = None, plan_hash: str | None = None):
        self.tables = tables if tables is not None else Tables()
        self.plan_hash = plan_hash
        self._done: dict[str, list[np.ndarray]] = {k: [] for k in COLUMNS}
        self._rows: dict[str, list] = {k: [] for k in COLUMNS}  # records taken one at a time, not yet arrays
        self.count = 0
        self.extras: dict[int, dict] = {}  # record number -> its rare fields
        self.plans: dict[int, Any] = {}  # record number -> the plan it names, where that is not plan_hash

    # ── a piece of lines decoded at once ────────────────────────────────────

    def batch(
        self, recs: list, lengths: list[int], first_line: int, offset: int, kind: str | None, places: bool = False
    ) -> bool:
        """Take ``recs`` (``decode.record`` structures, one per line, of
        ``lengths`` bytes each with its newline; the first on line
        ``first_line`` at byte ``offset``; with ``places``, the elements of a
        bench document's ``results`` from place ``offset``, whose ``offset``
        column is each one's place, as :func:`gather` gives it), or take nothing and say False
        where one of them is not for this path: its lever set is not an
        object, it names a device that is not a string, or its timing is
        not certainly usable (``rules.timing_fine``); the standard path
        then decides each line."""
        if not recs:
            return True
        t = self.tables
        (kernels, variants, levers, configs, shapes, statuses, timings, devices, plans, baselines) = zip(
            *map(_FIELDS, recs)
        )
        lever_ids = t.lever_ids(list(map(bytes, levers)))
        if lever_ids is None:
            return False
        devs = set(devices)
        devs.discard(UNSET)
        if not all(type(d) is str for d in devs):
            return False
        if not all(map(partial(timing_fine, kind=kind), recs)):
            return False
        passed = list(map(_PASS, statuses))
        self._flush()
        n = len(recs)
        start = self.count
        done = self._done
        done["kernel"].append(np.array(t.kernels.ids(kernels), np.int32))
        done["shape"].append(np.array(t.shapes.ids(list(map(_LABEL, shapes))), np.int32))
        done["config"].append(np.array(t.configs.ids(configs), np.int32))
        done["variant"].append(np.array(t.variants.ids(variants), np.int32))
        done["levers"].append(np.array(lever_ids, np.int32))
        with_cores = [i for i, r in enumerate(recs) if r.tensor_cores is not UNSET and r.tensor_cores is not None]
        if with_cores:  # a variant's form once a batch, not once a record (a million of them)
            idx = np.array(with_cores)
            ks, vs = done["kernel"][-1][idx], done["variant"][-1][idx]
            _, first = np.unique((ks.astype(np.int64) << 32) | vs.astype(np.int64), return_index=True)
            t.note_cores(ks[first].tolist(), vs[first].tolist(), [recs[i] for i in idx[first].tolist()])
        if devs:
            index = t.devices.index
            for d in devs:
                t.devices.add(d)
            done["device"].append(np.array([_ABSENT if d is UNSET else index[d] for d in devices], np.int32))
        else:
            done["device"].append(np.full(n, _ABSENT, np.int32))
        done["passed"].append(np.array(passed, np.bool_))
        done["baseline"].append(np.array(list(map(bool, baselines)), np.bool_))
        figs = np.array(list(map(_figures, timings)), np.float64).reshape(n, len(_FIG_COLUMNS))  # None -> NaN
        for i, k in enumerate(_FIG_COLUMNS):
            done[k].append(figs[:, i])
        done["line"].append(np.arange(first_line, first_line + n, dtype=np.int64))
        lens = np.array(lengths, np.int64)
        done["length"].append(lens)
        done["offset"].append(
            np.arange(offset, offset + n, dtype=np.int64) if places else offset + np.cumsum(lens) - lens
        )
        # The rare fields, record by record: failing records, baselines, arm-view kernels, profiles.
        arm_ids = [t.kernels.index[k] for k in ARM_VIEW_KERNELS if k in t.kernels.index]
        rare = [i for i in range(n) if not passed[i] or baselines[i]] if not all(passed) or any(baselines) else []
        profiled = [i for i, r in enumerate(recs) if r.profile is not UNSET and bytes(r.profile) != b"null"]
        if arm_ids:
            ks = done["kernel"][-1]
            rare = sorted(set(rare) | set(np.flatnonzero(np.isin(ks, arm_ids)).tolist()))
        if profiled:
            rare = sorted(set(rare) | set(profiled))
        for i in rare:
            extra = _extras(recs[i])
            if extra:
                self.extras[start + i] = extra
        if self.plan_hash is not None:
            ph = self.plan_hash
            for i, p in enumerate(plans):
                if p is not UNSET and p is not None and p != ph:
                    self.plans[start + i] = p
        self.count += n
        return True

    # ── one record at a time ────────────────────────────────────────────────

    def one(self, r: Any, line: int, offset: int, length: int) -> None:
        """A record that a check accepted: a ``decode.record`` structure
        (whose timing ``rules.timing_fine`` found usable) or a dict
        (``rules.check_record``'s)."""
        t = self.tables
        rows = self._rows
        if type(r) is dict:
            kernel, variant, config, label, status = (
                r["kernel"],
                r["variant"],
                r["config"],
                r["shape"]["label"],
                r["status"],
            )
            lever = t.lever_id(r["levers"])
            timing = r.get("timing")
            figs = dict_figures(timing)
            if figs is None:  # a timing no check passed (a record made in memory): kept as it is
                figs = NO_FIGURES
                timing_kept = True
            else:
                timing_kept = False
            device, plan, baseline = r.get("device", UNSET), r.get("plan", UNSET), r.get("baseline")
        else:
            kernel, variant, config, label, status = r.kernel, r.variant, r.config, r.shape.label, r.status
            lever = t.lever_ids([bytes(r.levers)])[0]
            figs = _figures(r.timing)
            device, plan, baseline = r.device, r.plan, r.baseline
            timing_kept = False
        rows["kernel"].append(t.kernels.add(kernel))
        rows["shape"].append(t.shapes.add(label))
        rows["config"].append(t.configs.add(config))
        rows["variant"].append(t.variants.add(variant))
        rows["levers"].append(lever)
        t.note_cores([rows["kernel"][-1]], [rows["variant"][-1]], [r])
        extra = _extras(r)
        if timing_kept:
            extra["timing"] = r["timing"]
        if type(device) is str:
            rows["device"].append(t.devices.add(device))
        else:
            rows["device"].append(_ABSENT)
            if device is not UNSET:
                extra["device"] = device  # a device that is not a name (null, a number...), kept as it is
        rows["passed"].append(status == "pass")
        rows["baseline"].append(bool(baseline))
        for k, x in zip(_FIG_COLUMNS, figs):
            rows[k].append(x)
        rows["line"].append(line)
        rows["offset"].append(offset)
        rows["length"].append(length)
        if extra:
            self.extras[self.count] = extra
        if self.plan_hash is not None and plan is not UNSET and plan is not None and plan != self.plan_hash:
            self.plans[self.count] = plan
        self.count += 1

    def _flush(self) -> None:
        rows = self._rows
        if rows["kernel"]:
            for k, dtype in COLUMNS.items():
                self._done[k].append(np.array(rows[k], dtype))
                rows[k] = []

    # ── the records ─────────────────────────────────────────────────────────

    def finish(self, dedup: bool = True) -> "Gathered":
        """The records, one per identity (:func:`distinct`): a record
        repeating an earlier one's identity takes the earlier's place (the
        later kept), its line listed in ``duplicates``; and the first kept
        record naming a plan other than ``plan_hash``, if any. Without
        ``dedup``, every record as taken."""
        self._flush()
        cols = {k: (np.concatenate(v) if v else np.zeros(0, COLUMNS[k])) for k, v in self._done.items()}
        self._done = {k: [] for k in COLUMNS}
        n = self.count
        if not dedup:
            return Gathered(Records(self.tables, cols, self.extras), [], None)
        each = distinct(identity_keys(cols))
        if len(each.first) == n:  # no repeats: the usual file
            records = Records(self.tables, cols, self.extras)
            return Gathered(records, [], self._foreign(np.arange(n)))
        place = np.argsort(each.first, kind="stable")  # identities in the order first seen
        take = each.last[place]
        repeated = np.ones(n, np.bool_)
        repeated[each.first] = False
        duplicates = np.sort(cols["line"][repeated]).tolist()
        kept = {k: v[take] for k, v in cols.items()}
        kept["line"] = cols["line"][each.first[place]]  # the kept record stands in the first one's place
        at = {int(old): i for i, old in enumerate(take.tolist()) if int(old) in self.extras}
        extras = {i: self.extras[old] for old, i in at.items()}
        return Gathered(Records(self.tables, kept, extras), duplicates, self._foreign(take))

    def _foreign(self, take: np.ndarray) -> tuple[int, Any] | None:
        """The first kept record (1-based place) that names another plan, and that plan."""
        if not self.plans:
            return None
        where = np.flatnonzero(np.isin(take, np.fromiter(self.plans, np.int64)))
        if not len(where):
            return None
        i = int(where[0])
        return i + 1, self.plans[int(take[i])]


class Gathered(tuple):
    """(records, line numbers of repeats, the first foreign record or None)."""

    def __new__(cls, records: "Records", duplicates: list[int], foreign: tuple[int, Any] | None):
        return super().__new__(cls, (records, duplicates, foreign))


def identity_keys(cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """Each record's identity (``schema.IDENTITY``: kernel, shape, config)
    as one integer (its numbers side by side, or their rank where they
    would not fit)."""
    k, s, c = (cols[x].astype(np.int64) for x in IDENTITY)
    if not len(k):
        return np.zeros(0, np.int64)
    if max(int(k.max()), int(s.max()), int(c.max())) < 1 << 21:
        return (k << 42) | (s << 21) | c
    return np.unique(np.stack([k, s, c], axis=1), axis=0, return_inverse=True)[1].reshape(-1)


class Distinct(NamedTuple):
    keys: np.ndarray  # each identity's key once, ascending
    first: np.ndarray  # the place of its first record
    last: np.ndarray  # the place of its last record: the one kept


def distinct(keys: np.ndarray) -> Distinct:
    """The rule for records that repeat an identity, wherever records are
    gathered (a results file or a bench document read, the parts of a
    merge): one record per identity, the last kept. ``keys``: the records'
    :func:`identity_keys`, in record order."""
    n = len(keys)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if n else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], n] if n else starts
    return Distinct(sk[starts], order[starts], order[ends - 1])


def _extras(r: Any) -> dict:
    """What a report or a comparison reads of ``r`` beyond the columns:
    a failing record's note and error, a baseline's batch invariance, for a
    kernel of the arm view its error, tensor cores and roofline, and the
    summary of a profile (``bench --profile``; leverctl.profile.block)."""
    get = r.get if type(r) is dict else (lambda k, d=UNSET: getattr(r, k, d))
    out: dict = {}
    passed = get("status") == "pass"
    arm = get("kernel") in ARM_VIEW_KERNELS
    if not passed:
        note = get("note", UNSET)
        if note is not UNSET:
            out["note"] = note
    if not passed or arm:
        err = get("error", UNSET)
        if err is not UNSET:
            out["error"] = value(err)
    if get("baseline", UNSET) not in (UNSET, None, False) and get("baseline"):
        bi = get("batch_invariance", UNSET)
        if bi is not UNSET:
            out["batch_invariance"] = value(bi)
    if arm:
        for k in ("tensor_cores", "tc_dtype"):
            v = get(k, UNSET)
            if v is not UNSET:
                out[k] = value(v)
        roof = value(get("roofline", UNSET))
        if isinstance(roof, dict):
            out["roofline"] = {"pct_of_floor": roof.get("pct_of_floor")}
    prof = get("profile", UNSET)
    if prof not in (UNSET, None):
        from ...profile.block import summary

        got = summary(value(prof))
        if got is not None:
            out["profile"] = got
    return out


_MEDIAN = next(f for f in TIMING if f.required)
_FIG_KEYS = tuple((f.column, f.name) for f in TIMING if f is not _MEDIAN)


class Records(Made):
    """Records as columns (see the module notes). Indexing or iterating
    makes each record a dict: its identity, variant, status, lever set,
    timing figures, device and rare fields, as the reports read them."""

    def __init__(self, tables: Tables, cols: dict[str, np.ndarray], extras: dict[int, dict]):
        self.tables = tables
        self.cols = cols
        self.extras = extras

    @classmethod
    def empty(cls, tables: Tables | None = None) -> "Records":
        """No records (numbered in ``tables``, new ones where not given)."""
        return Builder(tables).finish()[0]

    def __len__(self) -> int:
        return len(self.cols["kernel"])

    def made(self, i: int) -> dict:
        return self.record(i)

    def record(self, i: int, cores: bool = False) -> dict:
        """Record ``i`` as the reports read it; with ``cores``, also its
        variant's ``tensor_cores``/``tc_dtype`` (the report's cores column)."""
        c, t = self.cols, self.tables
        rec: dict[str, Any] = {
            "kernel": t.kernels.values[c["kernel"][i]],
            "variant": t.variants.values[c["variant"][i]],
            "config": t.configs.values[c["config"][i]],
            "shape": t.shape(int(c["shape"][i])),
            "status": "pass" if c["passed"][i] else "fail",
            "levers": t.levers[c["levers"][i]],
        }
        m = c[_MEDIAN.column][i]
        if m == m:  # not NaN: a timing
            timing = {_MEDIAN.name: float(m)}
            for k, name in _FIG_KEYS:
                x = c[k][i]
                if x == x:
                    timing[name] = float(x)
            rec["timing"] = timing
        d = c["device"][i]
        if d != _ABSENT:
            rec["device"] = t.devices.values[d]
        if c["baseline"][i]:
            rec["baseline"] = True
        tc = t.cores.get((int(c["kernel"][i]), int(c["variant"][i]))) if cores and t.cores else None
        if tc is not None:
            rec["tensor_cores"], rec["tc_dtype"] = tc
        extra = self.extras.get(i)
        if extra:
            rec.update(extra)
        return rec

    def take(self, idx: np.ndarray) -> "Records":
        """These records, in this order (``idx``: places in this set)."""
        idx = np.asarray(idx, np.int64)
        cols = {k: v[idx] for k, v in self.cols.items()}
        extras = {}
        if self.extras:
            for new, old in enumerate(idx.tolist()):
                e = self.extras.get(old)
                if e:
                    extras[new] = e
        return Records(self.tables, cols, extras)

    # ── what the reports ask of all of them ─────────────────────────────────

    @property
    def passed(self) -> np.ndarray:
        return self.cols["passed"]

    @property
    def timed(self) -> np.ndarray:
        """Whether each record carries a usable median."""
        m = self.cols["median"]
        return m == m

    def ran_on_gpu(self, idx: np.ndarray, kind: str | None) -> np.ndarray:
        """``rules.ran_on_gpu`` of the records at ``idx``, each of them
        timed, in a run of device ``kind``: not where the run or the record
        names the simulator."""
        if kind == "sim":
            return np.zeros(len(idx), np.bool_)
        return self.cols["device"][idx] != self.tables.devices.index.get(SIM_NAME, -2)

    def spreads(self, idx: np.ndarray) -> np.ndarray:
        """``rules.spread_of`` of the records at ``idx`` (0 without figures)."""
        med, p20, p80, noise = (self.cols[k][idx] for k in _FIG_COLUMNS)
        with np.errstate(invalid="ignore", divide="ignore"):
            pct = (p80 - p20) / med
        out = np.where((p20 == p20) & (p80 == p80), pct, np.where(noise == noise, noise, 0.0))
        return np.where(out > 0.0, out, 0.0)  # max(0.0, x), as Python takes it (-0.0 is 0.0)

    def failed_count(self) -> int:
        return int(len(self) - np.count_nonzero(self.cols["passed"]))

    def device_names(self) -> set:
        """The truthy devices the records name."""
        used = np.unique(self.cols["device"])
        out = {self.tables.devices.values[d] for d in used.tolist() if d != _ABSENT}
        for e in self.extras.values():
            if "device" in e and _hashable(e["device"]):
                out.add(e["device"])
        return {d for d in out if d}

    def kernels_used(self) -> set[str]:
        return {self.tables.kernels.values[k] for k in np.unique(self.cols["kernel"]).tolist()}

    def of_kernels(self, kernels: Sequence[str]) -> list[dict]:
        """The records of these kernels, as dicts, in record order."""
        ids = [self.tables.kernels.index[k] for k in kernels if k in self.tables.kernels.index]
        if not ids:
            return []
        return [self.record(i) for i in np.flatnonzero(np.isin(self.cols["kernel"], ids)).tolist()]

    def texts(self, column: str, idx: np.ndarray | None = None) -> list:
        """The column's values by name (``kernel``, ``shape``, ``config``, ``variant``, ``levers``)."""
        names = {
            "kernel": self.tables.kernels.values,
            "shape": self.tables.shapes.values,
            "config": self.tables.configs.values,
            "variant": self.tables.variants.values,
            "levers": self.tables.levers,
        }[column]
        ids = self.cols[column] if idx is None else self.cols[column][idx]
        return list(map(names.__getitem__, ids.tolist()))


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def of_dicts(recs: Sequence[Mapping[str, Any]], tables: Tables | None = None, dedup: bool = False) -> Records:
    """Records already checked (a bench document's, or a test's) as columns,
    every one of them (``dedup``: one per identity, the later kept), each
    with its place in ``recs`` as its ``line`` (from 1) and ``offset`` (from 0)."""
    return gather(recs, tables, dedup)[0]


def gather(recs: Sequence[Mapping[str, Any]], tables: Tables | None = None, dedup: bool = True) -> "Gathered":
    """:meth:`Builder.finish` of ``recs`` (records already checked), each
    taken with its place in ``recs`` as its ``line`` (from 1) and ``offset`` (from 0)."""
    b = Builder(tables)
    for i, r in enumerate(recs):
        b.one(dict(r), i + 1, i, 0)
    return b.finish(dedup)


# ── a plan's items ──────────────────────────────────────────────────────────

_NO_VARIANT = -1  # the item lists no variant
_ODD_VARIANT = -2  # a variant that is not a string: kept by item in ``odd``


class Items:
    """A plan's items (``decode.Item``) as columns: ``n`` (the place in the
    sweep), and the kernel, shape, configuration, variant and lever set as
    numbers in ``tables`` (a lever set by its text as the plan spells it;
    -1: the item lists none). A merged plan lists a million items: held so,
    they take some 30 bytes each, not a kilobyte, and are written back by
    joining the spelled names (:meth:`lines`), the text msgspec gives each
    ``decode.Item``."""

    def __init__(self, tables: Tables, cols: dict[str, np.ndarray], odd: dict[int, Any] | None = None):
        self.tables = tables
        self.cols = cols
        self.odd = odd or {}

    @classmethod
    def of(cls, items: Sequence[Any], tables: Tables) -> "Items":
        """``decode.Item``s (each with its place ``n``, and a lever set that is an object) as columns."""
        get = operator.attrgetter("n", "kernel", "shape", "config", "variant", "levers")
        if not items:
            return cls(tables, {k: np.zeros(0, np.int64 if k == "n" else np.int32) for k in _ITEM_COLUMNS})
        ns, kernels, shapes, configs, variants, levers = zip(*map(get, items))
        odd = {}
        distinct = list(dict.fromkeys(variants)) if _hashable_all(variants) else None
        if distinct is not None and all(type(v) is str or v is UNSET for v in distinct):
            look = {v: _NO_VARIANT if v is UNSET else tables.variants.add(v) for v in distinct}
            vids = list(map(look.__getitem__, variants))
        else:
            vids = []
            for i, v in enumerate(variants):
                if type(v) is str:
                    vids.append(tables.variants.add(v))
                elif v is UNSET:
                    vids.append(_NO_VARIANT)
                else:
                    vids.append(_ODD_VARIANT)
                    odd[i] = v
        texts = [None if lv is UNSET else bytes(lv) for lv in levers]
        if None in texts:
            lids = [-1 if t is None else tables.lever_ids([t])[0] for t in texts]
        else:
            lids = tables.lever_ids(texts)
        return cls(
            tables,
            {
                "n": np.array(ns, np.int64),
                "kernel": np.array(tables.kernels.ids(kernels), np.int32),
                "shape": np.array(tables.shapes.ids(shapes), np.int32),
                "config": np.array(tables.configs.ids(configs), np.int32),
                "variant": np.array(vids, np.int32),
                "levers": np.array(lids, np.int32),
            },
            odd,
        )

    @classmethod
    def concat(cls, parts: Sequence["Items"]) -> "Items":
        odd: dict[int, Any] = {}
        base = 0
        for p in parts:
            odd.update({base + i: v for i, v in p.odd.items()})
            base += len(p)
        return cls(parts[0].tables, {k: np.concatenate([p.cols[k] for p in parts]) for k in _ITEM_COLUMNS}, odd)

    def __len__(self) -> int:
        return len(self.cols["n"])

    def take(self, idx: np.ndarray) -> "Items":
        odd = {}
        if self.odd:
            for new, old in enumerate(np.asarray(idx).tolist()):
                if old in self.odd:
                    odd[new] = self.odd[old]
        return Items(self.tables, {k: v[idx] for k, v in self.cols.items()}, odd)

    def __iter__(self) -> Iterator[Any]:
        """Each item as a ``decode.Item``."""
        t, c = self.tables, self.cols
        for i in range(len(self)):
            v, lv = int(c["variant"][i]), int(c["levers"][i])
            variant = self.odd[i] if v == _ODD_VARIANT else UNSET if v == _NO_VARIANT else t.variants.values[v]
            yield Item(
                n=int(c["n"][i]),
                kernel=t.kernels.values[c["kernel"][i]],
                variant=variant,
                config=t.configs.values[c["config"][i]],
                shape=t.shapes.values[c["shape"][i]],
                levers=UNSET if lv < 0 else Raw(t.lever_texts.values[lv]),
            )

    def lines(self, size: int = 8192) -> Iterator[list[bytes]]:
        """Each item's compact JSON text (what msgspec encodes of its
        ``decode.Item``: n, kernel, variant, config, shape, levers, the
        absent left out), ``size`` items at a time."""
        import msgspec

        enc = msgspec.json.encode
        t, c = self.tables, self.cols
        spelled = {name: [enc(x) for x in getattr(t, name).values] for name in ("kernels", "shapes", "configs")}
        variants = [b',"variant":' + enc(x) for x in t.variants.values] + [b"", b""]  # [-2], [-1]: odd, none
        levers = [b',"levers":' + x for x in t.lever_texts.values] + [b""]  # [-1]: none
        fmt = b'{"n":%d,"kernel":%b%b,"config":%b,"shape":%b%b}'.__mod__
        for start in range(0, len(self), size):
            s = slice(start, start + size)
            v = c["variant"][s].tolist()
            vtext = list(map(variants.__getitem__, v))
            for i, x in enumerate(v):
                if x == _ODD_VARIANT:
                    vtext[i] = b',"variant":' + enc(self.odd[start + i])
            yield list(
                map(
                    fmt,
                    zip(
                        c["n"][s].tolist(),
                        map(spelled["kernels"].__getitem__, c["kernel"][s].tolist()),
                        vtext,
                        map(spelled["configs"].__getitem__, c["config"][s].tolist()),
                        map(spelled["shapes"].__getitem__, c["shape"][s].tolist()),
                        map(levers.__getitem__, c["levers"][s].tolist()),
                    ),
                )
            )


_ITEM_COLUMNS = ("n", "kernel", "shape", "config", "variant", "levers")


def _hashable_all(xs: Sequence[Any]) -> bool:
    try:
        dict.fromkeys(xs)
    except TypeError:
        return False
    return True
