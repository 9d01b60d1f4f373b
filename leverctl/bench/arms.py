"""The arms of a path side by side: per shape, one row per variant, fastest
first, with its error beside its time, so a path whose variants trade
accuracy for speed (the dense-FFN prefill arms: W4A16, BF16, FP8, int8,
Q4_K, NVFP4) shows the trade on one screen.

A variant's row is its fastest passing record at that shape (a sweep runs
one variant under many lever settings; they run the same kernel), else its
first failing one. Passing rows come first: by ``median_us`` when every one
of them is timed, else (simulator records, or some without a usable timing)
by relative error, and the view says the timing is absent. Failing rows
follow, never ranked. A function of records alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

# ARM_VIEW_KERNELS: the paths whose reports show this view, their variants
# differing in arithmetic, not only in schedule (the columns keep the fields
# this view reads of their records).
from .records.rules import median_us
from .records.schema import ARM_VIEW_KERNELS


@dataclass(frozen=True)
class Arm:
    variant: str
    status: str
    us: float | None
    pct_of_floor: float | None
    rel: float | None
    max_abs: float | None
    tensor_cores: str | None
    tc_dtype: str | None
    config: str

    @property
    def cores(self) -> str:
        if not self.tensor_cores:
            return "FP32"
        return f"{self.tensor_cores} {self.tc_dtype}" if self.tc_dtype else self.tensor_cores

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "status": self.status,
            "median_us": self.us,
            "pct_of_floor": self.pct_of_floor,
            "rel_error": self.rel,
            "max_abs_error": self.max_abs,
            "tensor_cores": self.tensor_cores,
            "tc_dtype": self.tc_dtype,
            "config": self.config,
        }


@dataclass(frozen=True)
class ArmRanking:
    kernel: str
    shape: str
    timed: bool  # ranked by time (else by error)
    arms: list[Arm]

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "shape": self.shape,
            "ranked_by": "time" if self.timed else "error",
            "arms": [a.to_json() for a in self.arms],
        }


def _arm(r: Mapping[str, Any]) -> Arm:
    err = r.get("error") if isinstance(r.get("error"), dict) else {}
    roof = r.get("roofline") if isinstance(r.get("roofline"), dict) else {}
    return Arm(
        r["variant"],
        r["status"],
        median_us(r),
        roof.get("pct_of_floor"),
        err.get("rel"),
        err.get("max_abs"),
        r.get("tensor_cores"),
        r.get("tc_dtype"),
        r.get("config", ""),
    )


def _inf(x: float | None) -> float:
    return float("inf") if x is None else float(x)


def arm_rankings(records: Sequence[Mapping[str, Any]], kernels: Sequence[str] = ARM_VIEW_KERNELS) -> list[ArmRanking]:
    groups: dict[tuple[str, str], dict[str, list[Arm]]] = {}
    for r in records:
        if r.get("kernel") in kernels and r.get("variant"):
            by_variant = groups.setdefault((r["kernel"], r["shape"]["label"]), {})
            by_variant.setdefault(r["variant"], []).append(_arm(r))
    out = []
    for (kernel, shape), by_variant in groups.items():
        rows = []
        for arms in by_variant.values():
            passing = [a for a in arms if a.status == "pass"]
            rows.append(min(passing, key=lambda a: _inf(a.us)) if passing else arms[0])
        passing = [a for a in rows if a.status == "pass"]
        failing = [a for a in rows if a.status != "pass"]
        timed = bool(passing) and all(a.us is not None for a in passing)
        passing.sort(key=(lambda a: (a.us, _inf(a.rel))) if timed else (lambda a: (_inf(a.rel), a.variant)))
        out.append(ArmRanking(kernel, shape, timed, passing + sorted(failing, key=lambda a: a.variant)))
    return out


def rows(ranking: ArmRanking) -> tuple[list[str], list[list[str]]]:
    """The view's columns and cells (table and Markdown alike)."""
    cols = ["#", "arm", "µs", "% of floor", "rel error", "max error", "tensor cores", "check"]

    def g(x: float | None, spec: str) -> str:
        return "–" if x is None else format(x, spec)

    out = []
    for i, a in enumerate(ranking.arms, 1):
        out.append(
            [
                str(i) if a.status == "pass" else "–",
                a.variant,
                g(a.us, ".4g"),
                g(a.pct_of_floor, ".1f"),
                g(a.rel, ".2e"),
                g(a.max_abs, ".2e"),
                a.cores,
                a.status.upper(),
            ]
        )
    return cols, out


def title(ranking: ArmRanking) -> str:
    how = "fastest first" if ranking.timed else "no timings (simulator or untimed records): ranked by error"
    return f"{ranking.kernel} arms at {ranking.shape}, {how}:"
