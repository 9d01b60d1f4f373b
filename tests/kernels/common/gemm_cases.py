"""What the mainloop tests of both forms share (``test_gemm_wgmma_async``,
``test_gemm_mma_sync``): operands of each input type with their float64
values, one run of a form's kernel against the float64 matmul, and the
relative error."""

from __future__ import annotations

import numpy as np
from numba import cuda

from leverctl_kernels.common import bits

E4M3_CODES = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)


def operands(dtype: str, rows: int, k: int, rng):
    """(packed uint32 [rows, k * bytes / 4], float64 values)."""
    if dtype == "e4m3":
        codes = rng.choice(E4M3_CODES, (rows, k)).astype(np.uint8)
        return codes.view(np.uint32), bits.e4m3_to_f32_np(codes).astype(np.float64)
    if dtype == "s8":
        q = rng.integers(-128, 128, (rows, k)).astype(np.int8)
        return q.view(np.uint32), q.astype(np.float64)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    if dtype == "f16":
        h = x.astype(np.float16)
        return h.view(np.uint32), h.astype(np.float64)
    b = bits.f32_to_bf16_np(x)
    return b.view(np.uint32), bits.bf16_to_f32_np(b).astype(np.float64)


def run(form, dtype, m, n, k, wgs, bn, stages, swap=False, fault="", seed=0, **kw):
    """``form`` (``wgmma_async`` or ``mma_sync``)'s kernel over ``m x n x k``
    -> (what it stored, oriented as ``y[m, n]``; the float64 reference).
    ``wgs``: the warpgroups, or ``(warpgroups, of them along BN)``; ``kw``:
    more of the form's ``make_kernel`` arguments (``copy``)."""
    wgs, wn = wgs if isinstance(wgs, tuple) else (wgs, 1)
    rng = np.random.default_rng(seed)
    a32, a = operands(dtype, m, k, rng)
    b32, b = operands(dtype, n, k, rng)
    rs = rng.uniform(0.5, 1.5, m).astype(np.float32)
    cs = rng.uniform(0.5, 1.5, n).astype(np.float32)
    ts = np.array([0.75], np.float32)
    exact = a @ b.T
    if dtype == "s8":  # the epilogue's own f32 arithmetic: the int32 sums are exact
        exact = exact.astype(np.float32).astype(np.float64)
    ref = exact * rs[:, None] * cs[None, :] * 0.75
    y = cuda.to_device(np.full((n, m) if swap else (m, n), np.nan, np.float32))
    kern = form.make_kernel(dtype, wgs, bn, stages, swap, fault=fault, wn=wn, **kw)
    launch = form.make_launch(m, n, k, kern)
    launch(y, *[cuda.to_device(x) for x in (a32, b32, np.zeros((1, 1), np.uint8), rs, cs, ts)])
    got = y.copy_to_host()
    return (got.T if swap else got), ref


def err(got, ref) -> float:
    return float(np.nanmax(np.abs(got - ref)) / np.abs(ref).max()) if np.isfinite(got).all() else np.inf
