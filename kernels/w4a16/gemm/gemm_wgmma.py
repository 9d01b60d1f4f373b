"""W4A16 GEMM on Hopper's warpgroup MMA: ``c[m, n] = a[m, k] @ W[n, k].T``
through ``wgmma.mma_async`` m64nNk16 with fp16 inputs and f32
accumulators, for sm_90a, on the project's asynchronous mainloop
(``common/gemm/wgmma_async.py``).

``a`` fp16 ``[m, k]``, ``W`` packed as in ``leverctl_kernels.common.int4``
(``qweight uint32[n, k/8]``, ``scales fp16[n, k/128]``), ``c`` fp16
``[m, n]``; ``k % 16 == 0`` (:func:`supports`), m and n free. The
activations are fp16 in this project's W4A16 layout, so the MMA is the
f16 form.

Tiling, the variants' design: one warpgroup (128 threads) per block and per
64 x ``BN`` tile of ``c`` (``BN`` = 64 for ``small_m``, 128 for
``default_tiles``; ``blockIdx.x`` along N, ``blockIdx.y`` along M). K goes
by in stages of 64 (128 bytes of fp16: one 128-byte swizzle atom wide),
``STAGES`` of them in dynamic shared memory (97 KiB at BN = 128)::

    A (activations): cp.async 16 bytes a thread-chunk into the swizzled
                     stage, STAGES - 1 stages ahead, zero-filled past m and k
    B (weights):     the int4 stager (``wgmma_gemm.stager("int4_f16")``):
                     one packed word (8 k) per 16-byte chunk, ``(q - 8) x
                     scale`` exact in f32, rounded once to fp16 in pairs
                     (``cvt.rn.f16x2.f32``), stored ``st.shared.v4`` at the
                     swizzled offset -- for a later stage, while the tensor
                     cores work on this one
    4 x wgmma m64nBNk16 per stage through mode-1 (128-byte swizzle)
    descriptors; the accumulators tied to the wait

and the epilogue rounds each f32 accumulator once to fp16 (its scales are
ones: multiplying by 1.0 is exact). Scale groups are 128 wide and stages
64, so a word never straddles a group. The dequantisation is the only
rounding the FMA GEMM (``gemm_tiled``) does not have: <= 2^-11 relative
per weight, as in the ``mma.sync`` GEMM.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...common import wgmma as wg
from ...common import wgmma_gemm as P
from ...common.gemm import wgmma_async as G

THREADS = wg.WARPGROUP
STAGES = 4
TILE_N = {"small_m": 64, "default_tiles": 128}


def shared_bytes(bn: int) -> int:
    """Dynamic shared memory of a block: ``STAGES`` stages of A and B, and
    1 KiB to align them."""
    return G.shared_bytes(1, bn, STAGES)


def make_gemm_wgmma(bn: int, group_shift: int = 7, fault: str = ""):
    """Compile the kernel ``(c, a32, qweight, scales, rs, cs, ts)`` for 64 x
    ``bn`` tiles. ``group_shift`` (a wrong scale group) and ``fault`` (one of
    ``wgmma_async.FAULTS``) exist for the tests' broken variants."""
    stage_b = P.stager("int4_f16", THREADS, group_shift=group_shift)
    kern = G.make_kernel("f16", 1, bn, STAGES, b_kind="int4_f16", fault=fault, stage_b=stage_b)
    kern.tile_n = bn
    return kern


@lru_cache(maxsize=None)
def kernel(bn: int):
    kern = G.kernel("f16", 1, bn, STAGES, b_kind="int4_f16")
    kern.tile_n = bn
    return kern


def supports(m: int, n: int, k: int) -> str:
    """Empty when the kernel can run ``m x n x k``, else why not."""
    if k <= 0 or k % wg.K_BF16:
        return f"k={k} is not a positive multiple of {wg.K_BF16} (16-byte rows of fp16 and of packed weights)"
    return ""


def make_launch(m: int, n: int, k: int, bn: int, kern=None):
    """``launch(c, a, qweight, scales)`` with 64 x ``bn`` tiles (or ``kern``
    from :func:`make_gemm_wgmma`); ``a`` fp16, passed as uint32 pairs."""
    why = supports(m, n, k)
    if why:
        raise ValueError(f"gemm_wgmma: {why}")
    run = G.unscaled(G.make_launch(m, n, k, kern or kernel(bn)), m, n)

    def launch(c, a, qweight, scales):
        run(c, a.view(np.uint32), qweight, scales)

    return launch


def _build(shape, bn: int):
    run = make_launch(shape["m"], shape["n"], shape["k"], bn)

    def launch(bufs):
        run(bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])

    launch.tensor_cores = "wgmma"
    launch.tc_dtype = "f16"
    return launch


def build_small_m(shape):
    """64 x 64 tiles: more blocks along N where m is small and the weight
    stream is the cost."""
    return _build(shape, TILE_N["small_m"])


def build_default(shape):
    """64 x 128 tiles: each staged A tile feeds twice the columns."""
    return _build(shape, TILE_N["default_tiles"])
