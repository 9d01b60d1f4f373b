"""What makes a record usable, each rule written once (docs/records.md):

* :func:`identity`: what makes two records the same measurement across runs
  (a result set holds one record per identity: ``columns.distinct``);
* :func:`check_record`: what every report needs of a record read;
* :func:`ran_on_gpu` and :func:`timing_problem`: whether its timing can be
  used; :func:`timing_fine` asks the same of a record the fast decoder took;
* :func:`median_us`, :func:`timed` and :func:`spread`: the figures a report
  takes from a record's timing.

Each rule reads the fields and figures :mod:`.schema` lists. This module
imports neither numpy nor msgspec.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ...errors import UserError
from .schema import REQUIRED, SIM_NAME, STATUSES, STRINGS, TIMING

Identity = tuple[str, str, str]  # (kernel, shape label, config): schema.IDENTITY


def identity(rec: Mapping[str, Any]) -> Identity:
    """What makes two records the same measurement across runs."""
    return (rec["kernel"], rec["shape"]["label"], rec["config"])


def check_record(rec: Any, where: str, kind: str | None = None) -> dict:
    """``rec`` if it has what every report needs, else a UserError at ``where``.
    ``kind`` is the run's device kind ("gpu", "sim", or None: unknown), which
    decides whether the record must carry a timing (:func:`timing_problem`)."""
    if not isinstance(rec, dict):
        raise UserError(f"not a leverctl record (a JSON {type(rec).__name__}, not an object)", where)
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        raise UserError(f"not a leverctl record (no {', '.join(missing)})", where)
    if not isinstance(rec["shape"], dict) or not isinstance(rec["shape"].get("label"), str):
        raise UserError("not a leverctl record (`shape` has no label)", where)
    if not isinstance(rec["levers"], dict):
        raise UserError("not a leverctl record (`levers` is not an object)", where)
    if rec["status"] not in STATUSES:
        raise UserError(f"record status {rec['status']!r} is neither pass nor fail", where)
    for k in STRINGS:
        if not isinstance(rec[k], str):
            raise UserError(f"not a leverctl record (`{k}` is not a string)", where)
    problem = timing_problem(rec, kind)
    if problem:
        raise UserError(f"unusable record: {problem}", where)
    return rec


# ── where it ran, and its timing ────────────────────────────────────────────


def ran_on_gpu(rec: Mapping[str, Any], kind: str | None) -> bool:
    """Whether ``rec`` ran on a GPU: the simulator's name in its ``device``
    says no; else the run's device kind says (a bench document's or sweep
    plan's ``device.kind``); else (a results.jsonl read without its plan)
    the record itself: one with a timing ran on a GPU, one without is taken
    for a simulator record."""
    return _on_gpu(rec.get("device"), rec.get("timing") is not None, kind)


def _on_gpu(device: Any, has_timing: bool, kind: str | None) -> bool:
    """:func:`ran_on_gpu` of a record naming ``device``, with a timing or not."""
    if device == SIM_NAME:
        return False
    if kind == "gpu" or kind == "sim":
        return kind == "gpu"
    return has_timing


def timing_problem(rec: Mapping[str, Any], kind: str | None) -> str | None:
    """Why ``rec``'s timing cannot be used, or None. The rule (docs/records.md):
    a record that passed on a GPU must carry a timing; a simulator record
    carries none; and a timing, wherever present, has the figures that
    ``schema.TIMING`` requires and each of its figures, where present, is
    finite and as the schema bounds it (:func:`figure_problem`). A record
    that failed may lack a timing on any device."""
    t = rec.get("timing")
    if t is None:
        if rec.get("status") == "pass" and _on_gpu(rec.get("device"), False, kind):
            return (
                f"it passed on a GPU ({rec.get('device') or 'device unnamed'}) but has no timing; "
                "a GPU run times every passing record"
            )
        return None
    if not _on_gpu(rec.get("device"), True, kind):
        return "a simulator record with a timing (the simulator times nothing)"
    if not isinstance(t, dict):
        return f"`timing` is a JSON {type(t).__name__}, not an object"
    return figure_problem(t)


def timing_fine(r: Any, kind: str | None) -> bool:
    """True where :func:`timing_problem` certainly finds nothing wrong with
    the timing of ``r``, a record the fast decoder took (``decode.record``:
    the decoding checked its timing's figures); False leaves the judgement
    to the standard path, which says what is wrong, if anything."""
    if not r.timing:  # None or absent: wrong only for a record that passed on a GPU
        return not (r.status == "pass" and _on_gpu(r.device, False, kind))
    return _on_gpu(r.device, True, kind)  # a timing, where the simulator times nothing


def figure_problem(t: Mapping[str, Any]) -> str | None:
    """What is wrong with a timing's figures (``schema.TIMING``), or None:
    a required figure absent; a figure that is not a number, NaN, infinite
    or negative; a required one that is 0."""
    for f in TIMING:
        v = t.get(f.name)
        if type(v) is float and 0.0 <= v < math.inf:  # the usual figure: nothing to say (NaN fails 0 <= v)
            continue
        if v is None:
            if f.required:
                return f"timing has no {f.name}"
            continue
        if not _num(v):
            return f"timing {f.name} is not a number ({v!r})"
        if math.isnan(v):
            return f"timing {f.name} is NaN"
        if math.isinf(v):
            return f"timing {f.name} is infinite"
        if v < 0:
            return f"timing {f.name} is negative ({v:g})"
    for f in TIMING:
        if f.required and t[f.name] == 0:
            return f"timing {f.name} is 0"
    return None


NO_FIGURES = (None,) * len(TIMING)


def figures(t: Any) -> tuple | None:
    """A timing's figures (``schema.TIMING``, in order) as floats, None
    where absent: every one None without a timing; None where the timing
    is one :func:`figure_problem` refuses."""
    if t is None:
        return NO_FIGURES
    if not isinstance(t, dict) or figure_problem(t) is not None:
        return None
    return tuple(None if t.get(f.name) is None else float(t[f.name]) for f in TIMING)


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# ── what the reports take from a timing ─────────────────────────────────────


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
    """:func:`spread` of a timed record's figures (None where it has none);
    ``columns.Records.spreads`` is the same on arrays."""
    if _num(p20) and _num(p80):
        return max(0.0, (float(p80) - float(p20)) / med)
    if _num(noise):
        return max(0.0, float(noise))
    return 0.0
