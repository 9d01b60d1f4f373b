"""The BF16 tensor-core GEMM body of the ``bf16_v1`` and ``bf16_v2`` arms:
``c[m, n] = a[m, k] @ W[n, k].T`` on Hopper's ``wgmma.mma_async``
m64nNk16 with bf16 inputs and f32 accumulators (sm_90a), on the project's
asynchronous mainloop (``common/gemm/wgmma_async.py``). ``a`` is bf16
(bits in a uint16 array, passed as uint32 pairs), ``W`` the int4 weights as
stored (``common/int4``), dequantised to bf16 in registers while they are
staged; ``c`` fp16, rounded once from f32.

A block is ``WGS`` warpgroups (128 threads each), ``WN`` of them along the
columns (``common/gemm/pipeline.py``'s geometry), and owns ``64 WGS / WN``
rows by ``BN`` columns. v1: 64 x 128 tiles (the engine's M64 tiling), two
warpgroups on the column halves, each a wgmma m64n64k16 on the shared A
tile. v2: two warpgroups, 128 x 64 tiles (the 128-row tile the engine's v2
prefers: each staged weight tile feeds twice the rows). K goes by in stages
of 64 (128 bytes of bf16, one 128-byte swizzle atom), ``STAGES`` of them in
dynamic shared memory (97 KiB for either tile)::

    A: TMA, a stage's tile in one copy into the swizzled stage, STAGES - 1
       stages ahead, zero-filled past m and k
    W: ``wgmma_gemm.stager("int4_bf16")``: one packed word (8 k) per
       16-byte chunk, ``(q - 8) x scale`` exact in f32, rounded once to bf16
       (``cvt.rn.bf16x2.f32``, <= 2^-9 relative), ``st.shared.v4`` at the
       swizzled offset, for a later stage while the tensor cores work
    4 x wgmma m64nBNk16 per stage; the accumulators tied to the wait
    store: one fp16 rounding per element (its scales are ones: exact)

The weights' rounding is the arm's only one besides the output's.
``k % 16 == 0``; a stage never straddles a scale group (128 is a multiple
of 64).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...common import wgmma as wg
from ...common import wgmma_gemm as P
from ...common.gemm import wgmma_async as G

STAGES = 4


def shared_bytes(wgs: int, bn: int, wn: int = 1) -> int:
    return G.shared_bytes(wgs, bn, STAGES, G.tile_rows(wgs, wn))


def make_gemm(wgs: int, bn: int, group_shift: int = 7, fault: str = "", wn: int = 1):
    """Compile the kernel ``(c, a32, qweight, scales, rs, cs, ts)`` for
    ``64 wgs / wn x bn`` tiles; ``group_shift`` (a wrong scale group) and
    ``fault`` (``wgmma_async.FAULTS``) exist for the tests' broken variants."""
    stage_b = P.stager("int4_bf16", wg.WARPGROUP * wgs, group_shift=group_shift)
    kern = G.make_kernel("bf16", wgs, bn, STAGES, b_kind="int4_bf16", fault=fault, stage_b=stage_b, wn=wn)
    kern.tile = (kern.a_rows, bn)
    return kern


@lru_cache(maxsize=None)
def kernel(wgs: int, bn: int, wn: int = 1):
    kern = G.kernel("bf16", wgs, bn, STAGES, b_kind="int4_bf16", wn=wn)
    kern.tile = (kern.a_rows, bn)
    return kern


def supports(k: int) -> str:
    if k <= 0 or k % wg.K_BF16:
        return f"k={k} is not a positive multiple of {wg.K_BF16} (16-byte rows of bf16 and of packed weights)"
    return ""


def build_with(shape, wgs: int, bn: int, kern=None, wn: int = 1):
    why = supports(shape["k"])
    if why:
        raise ValueError(f"bf16 wgmma GEMM: {why}")
    m, n, k = shape["m"], shape["n"], shape["k"]
    run = G.unscaled(G.make_launch(m, n, k, kern or kernel(wgs, bn, wn)), m, n)

    def launch(bufs):
        run(bufs["c"], bufs["a_bf16"].view(np.uint32), bufs["qweight"], bufs["scales"])

    launch.tensor_cores = "wgmma"
    launch.tc_dtype = "bf16"
    return launch
