"""Correctness: run a variant once on poisoned outputs and compare it with
the family's float64 reference.

* Every output the bench allocates is filled with a *poison* bit pattern
  before the run: a NaN with a payload no arithmetic produces (floats), or
  all ones (integers). An element still holding the pattern afterwards was
  never written (``unwritten``); any other NaN or Inf is ``nonfinite``.
  Neither ever passes.
* Device scratch a variant allocates (``launch.workspace``, see
  ``common/path.py``) is poisoned the same way before every run: a kernel
  reading scratch that no kernel of this call wrote gets NaN and fails,
  where last call's leftovers would have let it pass.
* An output whose name is also an input is updated in place (a carried
  recurrent state): it starts from the input's values and is checked after
  the run like the others.
* Error figures are taken over the finite, written elements, per output:
  ``rel = ||y - ref||_2 / ||ref||_2`` (the plain norm ``||y - ref||_2`` when
  the reference is all zeros) and ``max_abs = max |y - ref|``, against that
  output's absolute bound ``tol.abs + tol.abs_of_max * max|ref|`` -- the
  bound follows each output's scale at each shape. Pass when every output
  has ``rel <= tol.rel`` and ``max_abs <=`` its bound, and nothing is
  unwritten or nonfinite. The record shows the largest ``rel``, and the
  ``max_abs`` and bound (``tol_abs``) of the output nearest its bound.
* A path may declare ``extra["decode"] = {output: fn(array) -> float64
  array}`` for an output stored encoded (bf16 as raw uint16 bits, say);
  other outputs are compared as ``astype(float64)``.
* A path may declare ``extra["align"] = fn(shape, inputs, got, ref) ->
  (got, ref)``: what is compared, made from the outputs and the reference,
  where outputs cannot be compared element by element (a router's top-k,
  whose near-tied experts may come in either order or swap). It runs before
  the comparison sees the outputs, so it turns an element still holding its
  poison into NaN itself (counted as ``nonfinite``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from leverctl_kernels.common.path import KernelPath, Shape, Tolerance, workspace_of

# Quiet NaNs carrying a payload (0xDEAD-ish); CUDA arithmetic produces the
# canonical NaN (all-ones mantissa), never these.
_POISON_BITS = {
    np.dtype(np.float16): np.uint16(0x7E5B),
    np.dtype(np.float32): np.uint32(0x7FC0DEAD),
    np.dtype(np.float64): np.uint64(0x7FF80000DEADBEEF),
}


def poison(shape: tuple[int, ...], dtype: str | np.dtype) -> np.ndarray:
    """A host array of ``shape`` filled with the poison pattern of ``dtype``."""
    dt = np.dtype(dtype)
    out = np.empty(shape, dtype=dt)
    if dt in _POISON_BITS:
        bits = _POISON_BITS[dt]
        out.view(bits.dtype)[...] = bits
    else:
        out.view(np.uint8)[...] = 0xFF
    return out


def _unwritten_mask(y: np.ndarray) -> np.ndarray:
    dt = y.dtype
    if dt in _POISON_BITS:
        bits = _POISON_BITS[dt]
        return y.view(bits.dtype) == bits
    raw = y.view(np.uint8).reshape(*y.shape, dt.itemsize) if y.ndim else y.view(np.uint8)
    return np.all(raw == 0xFF, axis=-1)


@dataclass(frozen=True)
class Figures:
    """The record's ``error`` object, and whether it passes."""

    rel: float
    max_abs: float
    tol: Tolerance
    nonfinite: int
    unwritten: int
    rechecked: bool = False
    worst: str = ""  # the output the figures come from
    # The absolute bound of the output ``max_abs`` comes from (the output
    # nearest its bound); None: ``tol.abs`` (figures built by hand).
    abs_bound: float | None = None

    @property
    def tol_abs(self) -> float:
        return self.tol.abs if self.abs_bound is None else self.abs_bound

    @property
    def passed(self) -> bool:
        return self.nonfinite == 0 and self.unwritten == 0 and self.rel <= self.tol.rel and self.max_abs <= self.tol_abs

    def why(self) -> str:
        """One phrase saying why it failed ('' when it passed)."""
        parts = []
        if self.unwritten:
            parts.append(f"{self.unwritten} element(s) never written")
        if self.nonfinite:
            parts.append(f"{self.nonfinite} NaN/Inf element(s)")
        if self.rel > self.tol.rel:
            parts.append(f"rel error {self.rel:.3g} > {self.tol.rel:g}")
        if self.max_abs > self.tol_abs:
            parts.append(f"max abs error {self.max_abs:.3g} > {self.tol_abs:.3g}")
        where = f" in {self.worst}" if parts and self.worst else ""
        return ", ".join(parts) + where

    def to_json(self) -> dict[str, Any]:
        return {
            "rel": _num(self.rel),
            "max_abs": _num(self.max_abs),
            "tol_rel": self.tol.rel,
            "tol_abs": _num(self.tol_abs),
            "tol_abs_of_max": self.tol.abs_of_max,
            "nonfinite": self.nonfinite,
            "unwritten": self.unwritten,
            "rechecked": self.rechecked,
        }


def _num(x: float) -> float | None:
    return float(f"{x:.4g}") if np.isfinite(x) else None


def compare(
    got: Mapping[str, np.ndarray],
    ref: Mapping[str, np.ndarray],
    tol: Tolerance,
    decode: Mapping[str, Callable[[np.ndarray], np.ndarray]] | None = None,
) -> Figures:
    """Error figures of the outputs ``got`` against the reference ``ref``."""
    decode = decode or {}
    rel = 0.0
    max_abs, abs_bound, abs_key = 0.0, tol.abs_bound(0.0), -1.0
    nonfinite = unwritten = 0
    worst = ""
    worst_key = (-1.0, -1.0)
    for name, expected in ref.items():
        if name not in got:
            raise KeyError(f"the reference has output {name!r} that the path does not declare")
        y_raw = np.asarray(got[name])
        miss = _unwritten_mask(y_raw)
        y = decode[name](y_raw) if name in decode else y_raw.astype(np.float64)
        r = np.asarray(expected, dtype=np.float64)
        if y.shape != r.shape:
            raise ValueError(f"output {name}: shape {y.shape} but the reference has {r.shape}")
        bad = ~np.isfinite(y) & ~miss
        n_miss, n_bad = int(miss.sum()), int(bad.sum())
        ok = ~(miss | bad)
        d = np.where(ok, y - r, 0.0)
        rn = float(np.linalg.norm(np.where(ok, r, 0.0)))
        dn = float(np.linalg.norm(d))
        o_rel = dn / rn if rn > 0 else dn
        o_abs = float(np.max(np.abs(d))) if d.size else 0.0
        if not np.all(np.isfinite(r)):
            raise ValueError(f"the reference for {name} is not finite")
        bound = tol.abs_bound(r)
        unwritten += n_miss
        nonfinite += n_bad
        o_abs_ratio = _ratio(o_abs, bound)
        key = (n_miss + n_bad, max(_ratio(o_rel, tol.rel), o_abs_ratio))
        if key > worst_key:
            worst_key, worst = key, name
        if o_abs_ratio > abs_key:
            abs_key, max_abs, abs_bound = o_abs_ratio, o_abs, bound
        rel = max(rel, o_rel)
    return Figures(rel, max_abs, tol, nonfinite, unwritten, worst=worst, abs_bound=abs_bound)


def _ratio(err: float, bound: float) -> float:
    """How far ``err`` is along to ``bound`` (> 1: over it)."""
    if bound > 0:
        return err / bound
    return math.inf if err > 0 else 0.0


def run_once(
    path: KernelPath,
    shape: Shape,
    launch: Callable[[dict], None],
    inputs: Mapping[str, np.ndarray],
    cuda: Any,
) -> tuple[dict, dict[str, np.ndarray]]:
    """Upload ``inputs``, poison the outputs and the launch's workspace,
    launch once, synchronize, and read every output back. Returns (device
    buffers, host outputs)."""
    bufs = staged(path, shape, launch, inputs, cuda)
    launch(bufs)
    cuda.synchronize()
    return bufs, {name: bufs[name].copy_to_host() for name in path.outputs(shape)}


def staged(
    path: KernelPath,
    shape: Shape,
    launch: Callable[[dict], None],
    inputs: Mapping[str, np.ndarray],
    cuda: Any,
) -> dict:
    """The device buffers a call runs on: ``inputs`` uploaded, the outputs
    and the launch's workspace poisoned, and the model's load-time work for
    them done where the launch has some (``launch.load(bufs)``: weights
    rotated or an adapter merged once per weight buffer, which a call would
    otherwise do first), so that what follows is a warm call."""
    bufs = {name: cuda.to_device(np.ascontiguousarray(a)) for name, a in inputs.items()}
    for name, (oshape, dtype) in path.outputs(shape).items():
        if name not in bufs:  # in-place outputs start from their input
            bufs[name] = cuda.to_device(poison(tuple(oshape), dtype))
    for scratch in workspace_of(launch).values():
        scratch.copy_to_device(poison(tuple(scratch.shape), scratch.dtype))
    load = getattr(launch, "load", None)
    if load is not None:
        load(bufs)
        cuda.synchronize()
    return bufs


def check(
    path: KernelPath,
    variant: str,
    shape: Shape,
    launch: Callable[[dict], None],
    inputs: Mapping[str, np.ndarray],
    cuda: Any,
) -> tuple[dict, Figures]:
    """Run ``launch`` once on ``inputs`` and compare with the reference.
    Returns the device buffers (reused for timing) and the figures."""
    bufs, got = run_once(path, shape, launch, inputs, cuda)
    # The reference may update a state in place: give it copies.
    ref = path.reference(shape, {k: np.array(v, copy=True) for k, v in inputs.items()})
    decode = dict(path.extra.get("decode", {}))
    align = path.extra.get("align")
    if align is not None:
        got, ref = align(shape, inputs, got, ref)
    return bufs, compare(got, ref, path.variant_tolerance(variant), decode)
