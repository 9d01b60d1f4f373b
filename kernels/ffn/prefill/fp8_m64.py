"""FP8 M64 prefill GEMM: activations quantised to FP8 E4M3 per token
(``common.rowquant``, scale ``sa``), the int4 weights' values ``q - 8`` (-8..7,
exact in E4M3) on Hopper's ``wgmma.mma_async`` m64nNk32 E4M3 with f32
accumulators (sm_90a), the fp16 group scales applied outside the tensor
cores::

    c[r, n] = fp16( sa[r] * sum_g  scale[n, g] * (sum_{k in g} aq[r, k] (q[n, k] - 8)) )

Two warpgroups per 64 x ``BN`` tile of ``c`` (the engine's M64 tiles), one
on each column half (wgmma m64n64k32 on the shared A tile), on the
project's asynchronous mainloop (``common/gemm/wgmma_async.py``): K goes by
in stages of 128 inputs (128 bytes of E4M3, one 128-byte swizzle atom, and
exactly one scale group), ``STAGES`` of them in dynamic shared memory. The
quantised activations arrive by ``cp.async``; the weights by the
``int4_e4m3`` stager (two packed words per 16-byte chunk, converted pairwise
with ``cvt.rn.satfinite.e4m3x2.f32`` of the exact ``q - 8``), for a later
stage while the tensor cores work. Each stage's 4 wgmma (K = 32 each) start
from zero; once waited for, the mainloop's per-stage hook (``fold``) adds
them into running f32 sums, each column times its group scale
(``scale[n, g]``), so no sum stays in the FP8 tensor cores' narrower
accumulator past one group; the store multiplies each row by its ``sa``.
Products of two E4M3 values are exact, so the arm's rounding is the
activations' E4M3 (3 mantissa bits) and the output's fp16.

Rows and k past the edges are zeros; ``k % 16 == 0`` (16-byte rows of the
quantised activations; a K that ends inside an instruction's 32 is
zero-filled in the last stage: a down projection with k = 48 runs).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32

from ...common import int4, tc, unroll
from ...common import rowquant as _rowquant
from ...common import wgmma as wg
from ...common import wgmma_gemm as P
from ...common.gemm import wgmma_async as G
from ...common.launch import device_inline

BN = 128
WGS = WN = 2  # warpgroups a block, both along the tile's columns (``common/gemm/pipeline.py``)
THREADS = wg.WARPGROUP * WGS
STAGES = 4
MIN_BLOCKS = 2  # the launch bound: two blocks' registers an SM (their four stages fit twice in shared memory)
assert G.STAGE_KBYTES == int4.GROUP  # one stage of E4M3 is one scale group: the fold's g is the stage


def shared_bytes(bn: int) -> int:
    return G.shared_bytes(WGS, bn, STAGES, G.tile_rows(WGS, WN))


@device_inline
def _fold_one(i, tot, st, at):
    scales, last, n0, g, tid = at
    _r, c = wg.acc_elem(tid, i)
    return tot + st * float32(scales[min(n0 + c, last), g])


@device_inline
def fold(total, stage, scales, ncols, n0, g):
    """The running sums plus each stage accumulator times its column's
    group scale (``wgmma.acc_elem``'s column; columns past ``ncols`` read the
    last column's scale: they are never stored)."""
    return unroll.each_map(_fold_one, total, stage, (scales, ncols - 1, n0, g, cuda.threadIdx.x & 127))


def make_gemm(bn: int = BN, fault: str = ""):
    """Compile the kernel ``(c, aq32, qweight, scales, sa, ones_n, ones_1)``;
    ``fault`` (``wgmma_async.FAULTS``, tests only) plants a bug the check
    must see."""
    kern = G.make_kernel(
        "e4m3", WGS, bn, STAGES, b_kind="int4_e4m3", fault=fault, fold=fold, wn=WN, min_blocks=MIN_BLOCKS
    )
    kern.tile_n = bn
    return kern


@lru_cache(maxsize=None)
def kernel(bn: int = BN):
    return make_gemm(bn)


def supports(k: int) -> str:
    return P.supports(k)


def build(shape, kern=None):
    """On wgmma only: the FP8 tensor cores are reached through it alone on
    Hopper (its mma.sync runs E4M3 through FP16), and sm_80 has no FP8 MMA;
    elsewhere the build refuses, saying so (the record is a FAIL naming it)."""
    if tc.current() != tc.WGMMA:
        raise ValueError(
            f"fp8_m64: built on wgmma (sm_90a) only; this device's tensor-core form is "
            f"{tc.current()}, and no FP8 mma.sync form is built here"
        )
    m, k = shape["m"], shape["k"]
    why = supports(k)
    if why:
        raise ValueError(f"fp8_m64: {why}")
    run = G.make_launch(m, shape["n"], k, kern or kernel())
    quant = _rowquant.launcher("e4m3")
    aq = cuda.device_array((m, k), dtype=np.uint8)
    sa = cuda.device_array(m, dtype=np.float32)
    cs, ts = P.ones(shape["n"]), P.ones(1)

    def launch(bufs):
        quant(aq, sa, bufs["a"])
        run(bufs["c"], aq.view(np.uint32), bufs["qweight"], bufs["scales"], sa, cs, ts)

    launch.workspace = {"aq": aq, "sa": sa}
    launch.tensor_cores = "wgmma"
    launch.tc_dtype = "e4m3"
    return launch
