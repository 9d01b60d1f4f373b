"""Compare two runs, record by record, against their measured noise.

Records match on their identity ``(kernel, shape label, config)``. For a pair
that passed on both sides and carries timings:

* each side's *spread* is ``(p80 - p20) / median`` of its samples (or its
  recorded ``noise`` when the percentiles are absent);
* the *change* is ``new_median / base_median - 1`` (positive: slower);
* **SAME** when ``|change|`` is within the larger spread (the difference is
  inside the noise) or within the threshold (too small to care about);
* else **NOISY** when either spread exceeds twice the threshold: the runs
  cannot tell, rerun them on a quieter machine;
* else **FASTER** or **SLOWER**. A SLOWER pair is a regression: it is beyond
  both the threshold and the noise.

Status changes come first: pass -> fail is **NEW FAIL** (gates like a
regression), fail -> pass **FIXED**, fail -> fail **STILL FAILS**. Simulator
records carry no timings; then only statuses are compared (**PASS**), and the
result says so. Entries on one side only are listed, not gated (a renamed
shape is not a slowdown).

The gate: exit 1 when anything regressed or newly failed, else 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..errors import UserError
from .results import ResultSet, identity, median_us, spread, timed

DEFAULT_THRESHOLD = 5.0  # percent
NOISY_FACTOR = 2.0  # a spread beyond this many thresholds makes a pair NOISY
_EPS = 1e-9  # edges are inclusive: a change exactly at the noise is SAME

# Display and sort order: what a reviewer must see first.
VERDICTS = ("NEW FAIL", "SLOWER", "STILL FAILS", "FIXED", "NOISY", "FASTER", "SAME", "PASS")
GATING = ("NEW FAIL", "SLOWER")


@dataclass(frozen=True)
class Entry:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "variant": self.variant, "shape": self.shape, "config": self.config,
            "verdict": self.verdict, "base_status": self.base_status, "new_status": self.new_status,
            "base_us": self.base_us, "new_us": self.new_us,
            "change_pct": None if self.change is None else round(100 * self.change, 3),
            "base_spread_pct": None if self.base_spread is None else round(100 * self.base_spread, 3),
            "new_spread_pct": None if self.new_spread is None else round(100 * self.new_spread, 3),
            **({"base_variant": self.base_variant} if self.base_variant != self.variant else {}),
            "note": self.note,
        }


@dataclass(frozen=True)
class OneSided:
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
    timed: bool  # False: at least one side has no timings, statuses only
    entries: list[Entry]
    only_base: list[OneSided]
    only_new: list[OneSided]
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Entry]:
        return [e for e in self.entries if e.regressed]

    @property
    def new_failures_only_new(self) -> list[OneSided]:
        return [o for o in self.only_new if o.status == "fail"]

    @property
    def gated(self) -> bool:
        return bool(self.regressions or self.new_failures_only_new)

    @property
    def exit_code(self) -> int:
        return 1 if self.gated else 0

    def counts(self) -> dict[str, int]:
        c = {v: 0 for v in VERDICTS}
        for e in self.entries:
            c[e.verdict] += 1
        return {k: v for k, v in c.items() if v}

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "leverctl.compare/1",
            "base": {"source": self.base, "device": self.base_device},
            "new": {"source": self.new, "device": self.new_device},
            "threshold_pct": self.threshold,
            "timed": self.timed,
            "notes": list(self.notes),
            "counts": self.counts(),
            "regressed": self.gated,
            "entries": [e.to_json() for e in self.entries],
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
    if noise > NOISY_FACTOR * thr + _EPS:
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
            allow_different_device: bool = False) -> Comparison:
    if not threshold >= 0:
        raise UserError(f"--threshold must be a percentage of at least 0, not {threshold}")
    notes: list[str] = []
    dev_note = check_devices(base, new, allow_different_device)
    if dev_note:
        notes.append(dev_note)
    b = _index(base)
    n = _index(new)
    both = [k for k in b if k in n]
    passing = [k for k in both if b[k]["status"] == "pass" and n[k]["status"] == "pass"]
    is_timed = bool(passing) and all(timed(b[k]) and timed(n[k]) for k in passing)
    if passing and not is_timed:
        notes.append("no timings on one side or both (simulator runs): statuses compared only")
    entries = [_entry(b[k], n[k], threshold, is_timed) for k in both]
    entries.sort(key=lambda e: (VERDICTS.index(e.verdict), e.kernel, e.shape, e.config))
    only_base = [_one(b[k]) for k in b if k not in n]
    only_new = [_one(n[k]) for k in n if k not in b]
    return Comparison(base.source, new.source, base.device_name, new.device_name, threshold,
                      is_timed, entries, only_base, only_new, notes)


def _index(rs: ResultSet) -> dict:
    out: dict = {}
    for rec in rs.records:
        out[identity(rec)] = rec  # a later record of the same identity wins
    return out


def _one(rec: Mapping[str, Any]) -> OneSided:
    return OneSided(rec["kernel"], rec["variant"], rec["shape"]["label"], rec["config"], rec["status"])


def _entry(b: Mapping[str, Any], n: Mapping[str, Any], threshold: float, is_timed: bool) -> Entry:
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
    if not (is_timed and timed(b) and timed(n)):
        return Entry(verdict="PASS", **common)
    bu, nu = median_us(b), median_us(n)
    bsp, nsp = spread(b), spread(n)
    v, change = verdict(bu, nu, bsp, nsp, threshold)
    note = ""
    if b["variant"] != n["variant"]:
        note = f"variant changed: {b['variant']} -> {n['variant']}"
    return Entry(verdict=v, base_us=bu, new_us=nu, change=change, base_spread=bsp, new_spread=nsp,
                 note=note, **common)


def _err(rec: Mapping[str, Any]) -> str:
    e = rec.get("error")
    if isinstance(e, dict) and e.get("rel") is not None:
        return f"rel error {e['rel']:.3g} (tolerance {e.get('tol_rel', '?')})"
    return ""


def summary_line(c: Comparison) -> str:
    counts = ", ".join(f"{v} {k}" for k, v in c.counts().items()) or "nothing in common"
    extra = []
    if c.only_base:
        extra.append(f"{len(c.only_base)} only in BASE")
    if c.only_new:
        extra.append(f"{len(c.only_new)} only in NEW")
    tail = f"; {', '.join(extra)}" if extra else ""
    gate = "REGRESSED" if c.gated else "no regression"
    basis = f"threshold {c.threshold:g} %" if c.timed else "statuses only: no timings"
    return f"{gate}: {counts}{tail} ({basis})"

