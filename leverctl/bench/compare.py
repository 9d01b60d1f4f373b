"""Compare two runs, record by record, against their measured noise: a gate
that CI can fail on.

Records match on their identity ``(kernel, shape label, config)``. For a pair
that passed on both sides and carries timings:

* each side's *spread* is ``(p80 - p20) / median`` of its samples (or its
  recorded ``noise`` when the percentiles are absent);
* the *change* is ``new_median / base_median - 1`` (positive: slower);
* **SAME** when ``|change|`` is within the larger spread (the difference is
  inside the noise) or within the threshold (too small to care about);
* else **NOISY** when either spread exceeds twice the threshold and the
  change is within twice that spread: the runs cannot tell, rerun them on a
  quieter machine (a change beyond twice even a large spread is real: a
  kernel three times slower fails however noisy the runs);
* else **FASTER** or **SLOWER**. A SLOWER pair is a regression: it is beyond
  both the threshold and the noise.

Status changes come first: pass -> fail is **NEW FAIL** (gates like a
regression), fail -> pass **FIXED**, fail -> fail **STILL FAILS**. Two
simulator records carry no timings; then only statuses are compared
(**PASS**), and the result says so. A passing pair whose timing is unusable
on either side (a GPU record without one, NaN, infinite, negative, or a
simulator record against a GPU one) is **UNTIMED**, a failure: the gate
never turns a pair it cannot time into a silent pass.

The gate: exit 1 when anything regressed, newly failed or is UNTIMED; when a
BASE record has no counterpart in NEW (a kernel or configuration vanished;
``allow_missing`` opts out); when a configuration only NEW has fails; or when
the runs have nothing in common. Else 0. Entries only NEW has are listed.
"""
from __future__ import annotations

import math
import operator
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from ..errors import UserError
from .decode import UNSET
from .results import RESULTS_FILE, SIM_NAME, ResultSet, identity, median_us, ran_on_gpu, spread, spread_of, timed, \
    timing_problem

DEFAULT_THRESHOLD = 5.0  # percent
NOISY_FACTOR = 2.0  # a spread beyond this many thresholds makes a pair NOISY
_EPS = 1e-9  # edges are inclusive: a change exactly at the noise is SAME

# Display and sort order: what a reviewer must see first.
VERDICTS = ("NEW FAIL", "SLOWER", "UNTIMED", "STILL FAILS", "FIXED", "NOISY", "FASTER", "SAME", "PASS")
GATING = ("NEW FAIL", "SLOWER", "UNTIMED")


class Entry(NamedTuple):  # one per matched record: a million, at cluster scale (a tuple is made fastest)
    kernel: str
    variant: str
    base_variant: str
    shape: str
    config: str
    verdict: str
    base_status: str
    new_status: str
    base_us: float | None = None
    new_us: float | None = None
    change: float | None = None  # new/base - 1
    base_spread: float | None = None
    new_spread: float | None = None
    note: str = ""

    @property
    def regressed(self) -> bool:
        return self.verdict in GATING

    def row(self) -> tuple:
        """The entry's JSON values in the order of ``_TABLE_KEYS`` (``base_variant`` None where it is the variant)."""
        (kernel, variant, base_variant, shape, config, verdict, base_status, new_status, base_us, new_us,
         change, base_spread, new_spread, note) = self
        return (kernel, variant, shape, config, verdict, base_status, new_status, base_us, new_us,
                None if change is None else round(100 * change, 3),
                None if base_spread is None else round(100 * base_spread, 3),
                None if new_spread is None else round(100 * new_spread, 3),
                base_variant if base_variant != variant else None, note)

    def to_json(self) -> dict[str, Any]:
        from ..jsontext import Table

        return Table(_TABLE_KEYS, _TABLE_KINDS, [self.row()]).as_list()[0]


_TABLE_KEYS = ("kernel", "variant", "shape", "config", "verdict", "base_status", "new_status", "base_us", "new_us",
               "change_pct", "base_spread_pct", "new_spread_pct", "base_variant", "note")
_TABLE_KINDS = ("str",) * 7 + ("num",) * 5 + ("str?", "str")


class _EntryRows:
    """The entries' rows, made a slice at a time (a million, at cluster scale)."""

    def __init__(self, entries: list[Entry]):
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, i: slice) -> list[tuple]:
        return [e.row() for e in self._entries[i]]


class OneSided(NamedTuple):
    kernel: str
    variant: str
    shape: str
    config: str
    status: str

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "variant": self.variant, "shape": self.shape,
                "config": self.config, "status": self.status}


@dataclass(frozen=True)
class Comparison:
    base: str
    new: str
    base_device: str | None
    new_device: str | None
    threshold: float  # percent
    timed: bool  # False: no matched pair carries timings on both sides, statuses only
    entries: list[Entry]  # the matched pairs
    only_base: list[OneSided]  # BASE records NEW lacks
    only_new: list[OneSided]
    notes: list[str] = field(default_factory=list)
    allow_missing: bool = False  # BASE records missing from NEW do not gate

    @property
    def regressions(self) -> list[Entry]:
        return [e for e in self.entries if e.regressed]

    @property
    def new_failures_only_new(self) -> list[OneSided]:
        return [o for o in self.only_new if o.status == "fail"]

    def gate_reasons(self) -> list[str]:
        """Why the comparison fails, one phrase each; empty when it passes."""
        out = []
        c = self.counts()
        for v in GATING:
            if c.get(v):
                out.append(f"{c[v]} {v}")
        if self.new_failures_only_new:
            out.append(f"{len(self.new_failures_only_new)} failing only in NEW")
        if self.only_base and not self.allow_missing:
            out.append(f"{len(self.only_base)} missing from NEW")
        if not self.entries:
            out.append("nothing in common")
        return out

    @property
    def gated(self) -> bool:
        return bool(self.gate_reasons())

    @property
    def exit_code(self) -> int:
        return 1 if self.gated else 0

    def counts(self) -> dict[str, int]:
        c = Counter(map(_VERDICT, self.entries))
        return {v: c[v] for v in VERDICTS if c[v]}

    def to_json(self, lazy: bool = False) -> dict[str, Any]:
        """The comparison as JSON; ``lazy``: the entries are made as
        :mod:`leverctl.jsontext` writes them, not all at once."""
        from ..jsontext import Table

        return {
            "schema": "leverctl.compare/1",
            "base": {"source": self.base, "device": self.base_device},
            "new": {"source": self.new, "device": self.new_device},
            "threshold_pct": self.threshold,
            "timed": self.timed,
            "allow_missing": self.allow_missing,
            "notes": list(self.notes),
            "matched": len(self.entries),
            "counts": self.counts(),
            "regressed": self.gated,
            "gate": self.gate_reasons(),
            "entries": Table(_TABLE_KEYS, _TABLE_KINDS, _EntryRows(self.entries)) if lazy
            else [e.to_json() for e in self.entries],
            "only_base": [o.to_json() for o in self.only_base],
            "only_new": [o.to_json() for o in self.only_new],
        }


def verdict(base_us: float, new_us: float, base_spread: float, new_spread: float,
            threshold_pct: float) -> tuple[str, float]:
    """The verdict for one pair of timed, passing records, and the change."""
    change = new_us / base_us - 1.0
    noise = max(base_spread, new_spread)
    thr = threshold_pct / 100.0
    mag = abs(change)
    if mag <= noise + _EPS or mag <= thr + _EPS:
        return "SAME", change
    if noise > NOISY_FACTOR * thr + _EPS and mag <= NOISY_FACTOR * noise + _EPS:
        return "NOISY", change
    return ("SLOWER" if change > 0 else "FASTER"), change


def check_devices(base: ResultSet, new: ResultSet, allow_different: bool) -> str | None:
    """A UserError when the runs come from different devices (unless allowed);
    else a note when they do and it was allowed, or None."""
    bk, nk = base.device_kind, new.device_kind
    bn, nn = base.device_name, new.device_name
    if bk and nk and bk != nk:
        why = (f"BASE ran on {bn or bk} ({bk}), NEW on {nn or nk} ({nk}): "
               "a simulator run has no timings to compare with a GPU's")
    elif bn and nn and bn != nn:
        why = f"BASE ran on {bn}, NEW on {nn}: timings from different devices are not comparable"
    else:
        return None
    if not allow_different:
        raise UserError(f"{why} (pass --allow-different-device to compare anyway)")
    return why


def compare(base: ResultSet, new: ResultSet, *, threshold: float = DEFAULT_THRESHOLD,
            allow_different_device: bool = False, allow_missing: bool = False,
            consume: bool = False) -> Comparison:
    """Match ``base`` and ``new`` record by record (by their ``index`` where
    they were read with one). ``consume``: the caller has no further use for
    the two sets' records, and each matched pair is let go once compared (a
    million pairs: the verdicts then take the records' place in memory)."""
    _check_threshold(threshold)
    notes: list[str] = []
    dev_note = check_devices(base, new, allow_different_device)
    if dev_note:
        notes.append(dev_note)
    names = (base.device_name, new.device_name)
    kinds = (base.device_kind, new.device_kind)
    b, n = _index(base), _index(new)
    brecs, nrecs = base.records, new.records
    entries = []
    for k, i in b.items():
        j = n.get(k)
        if j is not None:
            entries.append(_entry(brecs[i], nrecs[j], threshold, kinds))
            if consume:
                brecs[i] = nrecs[j] = None
    only_base = [_one(brecs[i]) for k, i in b.items() if k not in n]
    only_new = [_one(nrecs[j]) for k, j in n.items() if k not in b]
    return _comparison(base, new, names, threshold, entries, only_base, only_new, notes, allow_missing)


def compare_paths(base: Any, new: Any, *, threshold: float = DEFAULT_THRESHOLD,
                  allow_different_device: bool = False, allow_missing: bool = False
                  ) -> tuple[Comparison, ResultSet, ResultSet]:
    """:func:`compare` of two result paths, and the two result sets read
    (for what reading them tolerated). Where NEW is a sweep whose plan names
    its device kind, its records are compared as they are read, never held:
    each becomes its verdict at once (a million records each side: only
    BASE's stay in memory)."""
    from .results import compare_slim, load_results, read_plan

    _check_threshold(threshold)
    b = load_results(base, slim=compare_slim(), index=True)
    p = Path(new)
    plan = read_plan(p) if p.is_dir() else read_plan(p.parent) if p.name == RESULTS_FILE else None
    kind = ((plan or {}).get("device") or {}).get("kind")
    if kind is None:
        n = load_results(new, slim=compare_slim(), index=True)
        return compare(b, n, threshold=threshold, allow_different_device=allow_different_device,
                       allow_missing=allow_missing, consume=True), b, n
    bi, brecs = _index(b), b.records
    kinds = (b.device_kind, kind)
    slim = compare_slim()
    devices: set = set()
    variants: dict[str, str] = {}

    def verdict_of(rec: Any) -> Any:
        if type(rec) is not dict and rec.status == "pass" and rec.timing and kind != "sim" \
                and rec.device != SIM_NAME:
            # A passing GPU record as decoded, whose figures the reader found fine (results._timing_fine):
            # against a BASE record that passed on a GPU, its verdict without the record made a dict first.
            i = bi.get((rec.kernel, rec.shape.label, rec.config))
            if i is not None:
                base = brecs[i]
                bu = _gpu_us(base, kinds[0]) if base["status"] == "pass" else None
                if bu is not None:
                    if rec.device is not UNSET and rec.device:
                        devices.add(rec.device)
                    t, bt = rec.timing, base["timing"]
                    nu = t.median_us
                    bsp = spread_of(bu, bt.get("p20_us"), bt.get("p80_us"), bt.get("noise"))
                    nsp = spread_of(nu, *(None if x is UNSET else x for x in (t.p20_us, t.p80_us, t.noise)))
                    return _timed(base, variants.setdefault(rec.variant, rec.variant), bu, nu, bsp, nsp, threshold)
        r = slim(rec)
        if r.get("device"):
            devices.add(r["device"])
        i = bi.get(identity(r))
        return _one(r) if i is None else _entry(brecs[i], r, threshold, kinds)

    n = load_results(new, slim=verdict_of, index=True)
    made, n.records = n.records, []
    if not n.device.get("name") and len(devices) == 1:
        n.device["name"] = devices.pop()  # as ResultSet.device_name says of the records
    notes: list[str] = []
    dev_note = check_devices(b, n, allow_different_device)
    if dev_note:
        notes.append(dev_note)
    entries = [x for x in made if type(x) is Entry]
    only_new = [x for x in made if type(x) is OneSided]
    only_base = [_one(brecs[i]) for k, i in bi.items() if k not in n.index]
    return _comparison(b, n, (b.device_name, n.device_name), threshold, entries, only_base, only_new, notes,
                       allow_missing), b, n


def _check_threshold(threshold: float) -> None:
    if not threshold >= 0:
        raise UserError(f"--threshold must be a percentage of at least 0, not {threshold}")


def _comparison(base: ResultSet, new: ResultSet, names: tuple, threshold: float, entries: list[Entry],
                only_base: list[OneSided], only_new: list[OneSided], notes: list[str],
                allow_missing: bool) -> Comparison:
    # By verdict (in VERDICTS' order), then kernel, shape and configuration.
    by_verdict: dict[str, list[Entry]] = {}
    for e in entries:
        by_verdict.setdefault(e.verdict, []).append(e)
    entries = []
    for v in VERDICTS:
        got = by_verdict.pop(v, None)
        if got:
            got.sort(key=_SORT)
            entries += got
    is_timed = any(e.base_us is not None and e.new_us is not None for e in entries)
    if any(e.verdict == "PASS" for e in entries):
        notes.append("no timings on either side (simulator runs): statuses compared only")
    return Comparison(base.source, new.source, names[0], names[1], threshold,
                      is_timed, entries, only_base, only_new, notes, allow_missing)


_SORT = operator.attrgetter("kernel", "shape", "config")
_VERDICT = operator.attrgetter("verdict")


def _index(rs: ResultSet) -> dict:
    """identity -> place in rs.records (a later record of the same identity wins)."""
    if rs.index is not None:
        return rs.index
    return {identity(rec): i for i, rec in enumerate(rs.records)}


def _one(rec: Mapping[str, Any]) -> OneSided:
    return OneSided(rec["kernel"], rec["variant"], rec["shape"]["label"], rec["config"], rec["status"])


def _entry(b: Mapping[str, Any], n: Mapping[str, Any], threshold: float,
           kinds: tuple[str | None, str | None]) -> Entry:
    if b["status"] == "pass" and n["status"] == "pass":
        bu, nu = _gpu_us(b, kinds[0]), _gpu_us(n, kinds[1])
        if bu is not None and nu is not None:  # the usual pair, at a million a comparison
            return _timed(b, n["variant"], bu, nu, spread(b), spread(n), threshold)
    common = dict(kernel=n["kernel"], variant=n["variant"], base_variant=b["variant"],
                  shape=n["shape"]["label"], config=n["config"],
                  base_status=b["status"], new_status=n["status"])
    bs, ns = b["status"], n["status"]
    if bs == "pass" and ns == "fail":
        return Entry(verdict="NEW FAIL", note=n.get("note", "") or _err(n), **common)
    if bs == "fail" and ns == "pass":
        return Entry(verdict="FIXED", **common)
    if bs == "fail" and ns == "fail":
        return Entry(verdict="STILL FAILS", note=n.get("note", "") or _err(n), **common)
    if not ran_on_gpu(b, kinds[0]) and not ran_on_gpu(n, kinds[1]):
        return Entry(verdict="PASS", **common)  # two simulator records: nothing to time
    problems = [f"{side}: {why}" for side, rec, kind in (("BASE", b, kinds[0]), ("NEW", n, kinds[1]))
                if (why := _untimed(rec, kind))]
    if problems:
        return Entry(verdict="UNTIMED", note="; ".join(problems), **common)
    return _timed(b, n["variant"], median_us(b), median_us(n), spread(b), spread(n), threshold)


def _timed(b: Mapping[str, Any], variant: str, bu: float, nu: float, bsp: float, nsp: float,
           threshold: float) -> Entry:
    """The entry of a pair that passed on both sides with usable timings
    (``b`` the BASE record; NEW's kernel, shape and config are the same)."""
    v, change = verdict(bu, nu, bsp, nsp, threshold)
    note = f"variant changed: {b['variant']} -> {variant}" if b["variant"] != variant else ""
    return Entry(b["kernel"], variant, b["variant"], b["shape"]["label"], b["config"], v, "pass", "pass",
                 bu, nu, change, bsp, nsp, note)


def _gpu_us(rec: Mapping[str, Any], kind: str | None) -> float | None:
    """The median of a record that ran on a GPU with float timing figures,
    each finite and not negative (then :func:`timing_problem` finds nothing
    and :func:`_untimed` says nothing); None for any other record, which the
    general path judges."""
    if kind == "sim" or rec.get("device") == SIM_NAME:
        return None
    t = rec.get("timing")
    if type(t) is not dict:
        return None
    m = t.get("median_us")
    if not (type(m) is float and 0.0 < m < math.inf):
        return None
    for k in ("p20_us", "p80_us", "noise"):
        v = t.get(k)
        if not (v is None or (type(v) is float and 0.0 <= v < math.inf)):
            return None
    return m


def _untimed(rec: Mapping[str, Any], kind: str | None) -> str | None:
    """Why a passing record has no usable timing, or None."""
    why = timing_problem(rec, kind)
    if why or timed(rec):
        return why
    return "no timing (a simulator record)" if not ran_on_gpu(rec, kind) else "no timing"


def _err(rec: Mapping[str, Any]) -> str:
    e = rec.get("error")
    if isinstance(e, dict) and e.get("rel") is not None:
        return f"rel error {e['rel']:.3g} (tolerance {e.get('tol_rel', '?')})"
    return ""


def summary_line(c: Comparison) -> str:
    """One line: the gate's answer, what was matched and what was not."""
    counts = ", ".join(f"{v} {k}" for k, v in c.counts().items())
    matched = f"{len(c.entries)} matched" + (f" ({counts})" if counts else "")
    only_base = f"{len(c.only_base)} only in BASE"
    if c.only_base:
        only_base += " (missing from NEW" + (", allowed by --allow-missing)" if c.allow_missing else ")")
    only_new = f"{len(c.only_new)} only in NEW"
    if c.new_failures_only_new:
        only_new += f" ({len(c.new_failures_only_new)} failing)"
    reasons = c.gate_reasons()
    if not reasons:
        gate = "no regression"
    elif any(r.endswith((" SLOWER", " NEW FAIL")) for r in reasons):
        gate = "REGRESSED"
    else:
        gate = "FAILED"
    why = f" [fails on: {', '.join(reasons)}]" if reasons else ""
    basis = (f" (threshold {c.threshold:g} %)" if c.timed else
             " (statuses only: no timings)" if c.entries else "")
    return f"{gate}: {matched}; {only_base}; {only_new}{basis}{why}"
