"""Tensor-core-bound kernels for the bench rig's dense peaks: how many
bf16 (fp16 runs at the same rate) and FP8 E4M3 FLOP/s the device's tensor
cores reach when nothing else limits them. The rig times them once per run,
like the copy bandwidth, and a record's compute floor uses the peak of the
instruction its variant ran on.

On sm_90a (:mod:`.tc` picks ``wgmma``): each block is one warpgroup that
stages a 64 x K tile of A and a 256 x K tile of B in shared memory once
and then issues ``wgmma.mma_async`` m64n256k16 (bf16) or m64n256k32 (E4M3),
the largest tile, four to a commit group, chained on one set of 128
accumulators per thread, for ``iters`` groups. Blocks: 4 per SM, so that
while one warpgroup waits for its group another issues. The inputs are
1.0 (zeros could let the hardware idle part of the datapath); the result is
stored only if negative, which it never is, so nothing is written and
nothing is optimised away.

Elsewhere (``mma.sync``): the bf16 peak is taken with ``mma.sync``
m16n8k16, each warp running four independent accumulator chains from
fragments held in registers; there is no FP8 tensor-core form to time, and
:func:`burner` returns None for ``e4m3``.

Nothing here runs in the simulator: a peak is a GPU measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from . import tc
from .launch import device_inline

N = 256  # the widest wgmma tile: the most work per instruction issued
GROUP = 4  # wgmma per commit group
BLOCKS_PER_SM = 4
WARPS_MMA = 4  # warps per block of the mma.sync burn
CHAINS = 4  # independent accumulator chains per warp (mma.sync)
ONE = {"bf16": 0x3F803F80, "e4m3": 0x38383838}  # 1.0 in every element of a 32-bit word


def flops_per_group(kind: str, form: str) -> int:
    """FLOPs of one loop iteration of one block."""
    if form == tc.WGMMA:
        from . import wgmma as wg

        return GROUP * 2 * wg.M * N * wg.k_of(kind)
    from . import mma

    return WARPS_MMA * CHAINS * 2 * mma.M * mma.N * mma.K


@lru_cache(maxsize=None)
def wgmma_kernel(kind: str):
    """The warpgroup burn kernel ``(out float32[1], iters)`` for ``kind``."""
    import numpy as np
    from numba import cuda, float32, uint32

    from . import wgmma as wg
    from .launch import jit_bounded

    k = wg.k_of(kind)
    esize = 1 if kind == "e4m3" else 2
    a_words, b_words = wg.M * k * esize // 4, N * k * esize // 4
    lbo, sbo = wg.LBO, wg.SBO  # one instruction's K: two core matrices per 8 rows
    mma, zeros = wg.op(kind, N), wg.zeros(N)
    one = uint32(ONE[kind])
    tr = kind != "e4m3"
    align = wg.SMEM_ALIGN
    swz = wg.SWIZZLE_NONE

    @device_inline
    def issue(da, db, acc):
        if tr:  # a compile-time constant
            return mma(da, db, acc, 1, 1, 1, 0, 0)
        return mma(da, db, acc, 1, 1, 1)

    @jit_bounded(wg.WARPGROUP)
    def tc_peak(out, iters):
        As = cuda.shared.array(a_words, np.uint32, alignment=align)
        Bs = cuda.shared.array(b_words, np.uint32, alignment=align)
        tid = cuda.threadIdx.x
        for i in range(tid, a_words, wg.WARPGROUP):
            As[i] = one
        for i in range(tid, b_words, wg.WARPGROUP):
            Bs[i] = one
        wg.fence_proxy_async()
        cuda.syncthreads()
        da = wg.make_desc(wg.smem_addr(As), lbo, sbo, swz)
        db = wg.make_desc(wg.smem_addr(Bs), lbo, sbo, swz)
        acc = zeros()
        for _ in range(iters):
            wg.wgmma_fence()
            acc = issue(da, db, acc)
            acc = issue(da, db, acc)
            acc = issue(da, db, acc)
            acc = issue(da, db, acc)
            wg.wgmma_commit_group()
            wg.wgmma_wait_group(0)
        if acc[0] < float32(0.0):
            out[0] = acc[0]

    assert GROUP == 4  # the four issues above
    return tc_peak


@lru_cache(maxsize=None)
def mma_sync_kernel():
    """The warp-MMA bf16 burn kernel ``(out float32[1], iters)``."""
    from numba import cuda, float32, uint32

    from . import mma
    from .launch import jit_bounded

    one = uint32(ONE["bf16"])
    z = float32(0.0)

    @jit_bounded(WARPS_MMA * 32)
    def tc_peak_mma(out, iters):
        a = one ^ uint32(cuda.threadIdx.x & 1)  # not a constant the compiler could fold
        c0 = c1 = c2 = c3 = d0 = d1 = d2 = d3 = z
        e0 = e1 = e2 = e3 = f0 = f1 = f2 = f3 = z
        for _ in range(iters):
            c0, c1, c2, c3 = mma.mma_bf16_16816(a, a, a, a, a, a, c0, c1, c2, c3)
            d0, d1, d2, d3 = mma.mma_bf16_16816(a, a, a, a, a, a, d0, d1, d2, d3)
            e0, e1, e2, e3 = mma.mma_bf16_16816(a, a, a, a, a, a, e0, e1, e2, e3)
            f0, f1, f2, f3 = mma.mma_bf16_16816(a, a, a, a, a, a, f0, f1, f2, f3)
        s = c0 + c1 + c2 + c3 + d0 + d1 + d2 + d3 + e0 + e1 + e2 + e3 + f0 + f1 + f2 + f3
        if s < z:
            out[0] = s

    assert CHAINS == 4  # the four chains above
    return tc_peak_mma


def burner(
    kind: str, sm_count: int, form: str | None = None
) -> tuple[Callable[[int], None], Callable[[int], int]] | None:
    """``(burn, flops)`` for the ``kind`` ("bf16" or "e4m3") peak on this
    device: ``burn(iters)`` launches the kernel once (compiling it on the
    first call), ``flops(iters)`` is what one launch computes. None where
    the device has no tensor-core form of ``kind`` (FP8 without wgmma)."""
    if kind not in ONE:
        raise ValueError(f"peak kind {kind!r}: bf16 or e4m3")
    form = tc.check_form(form or tc.current())
    if form == tc.MMA_SYNC and kind == "e4m3":
        return None
    from numba import cuda

    out = cuda.device_array(1, dtype="float32")
    if form == tc.WGMMA:
        kern, threads = wgmma_kernel(kind), 128
    else:
        kern, threads = mma_sync_kernel(), WARPS_MMA * 32
    blocks = max(1, int(sm_count)) * BLOCKS_PER_SM
    per_group = flops_per_group(kind, form)

    def burn(iters: int) -> None:
        kern[blocks, threads](out, int(iters))

    def flops(iters: int) -> int:
        return blocks * int(iters) * per_group

    return burn, flops
