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
quantised activations arrive by TMA; the weights by the
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
from numba import cuda, float32, uint32

from ...common import cvt, int4, tc, unroll, vload
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
    """Dynamic shared memory a block asks for: its stages and their scale tables."""
    return G.shared_bytes(WGS, bn, STAGES, G.tile_rows(WGS, WN)) + STAGES * GroupScales.side_bytes(0, bn)


# deliberate bugs of the scale table, for the tests that prove the checks:
# every stage of a window takes the window's first group's scale
SCALE_FAULTS = ("window_first",)


class GroupScales:
    """The arm's per-stage fold (``pipeline``'s ``fold`` with a table): a
    stage is one scale group, so each stage's ``BN`` column scales are put
    once into a table of float32 in shared memory (after the operand
    stages, one table a stage), and the fold, after the stage's MMAs are
    waited for, adds each accumulator times its column's entry into the
    running f32 sums. The fold read each column's scale from global memory,
    2 bytes a sector, for every accumulator of every thread.

    Two threads a column load its scales (``tid = 2 col + h``). Where a
    row of ``scales`` is whole 8-byte units (its groups a multiple of four,
    the array 16-byte aligned: uniform for the launch), thread ``h`` loads
    groups ``4h .. 4h + 3`` of a window of eight at the window's first stage,
    8 bytes, carries them to the window's end in the stagers' ``win``, and
    the thread holding the stage's group writes its entry; a column's scales
    then cost 16 bytes every eight stages. Otherwise the stage's scale alone
    is loaded, by the thread and into the place a window would hold it."""

    ahead = True  # two words a thread: carried across an iteration beside B's chunks

    def __init__(self, fault: str = ""):
        if fault and fault not in SCALE_FAULTS:
            raise ValueError(f"scale fault {fault!r}: one of {SCALE_FAULTS}")
        self.fault = fault

    @staticmethod
    def side_bytes(a_rows: int, bn: int) -> int:
        return bn * 4

    def stager(self, threads: int, a_rows: int, bn: int):
        total = 2 * bn
        slots = tuple(range(-(-total // threads)))
        first = self.fault == "window_first"

        @device_inline
        def _fetch_one(i, win, _y, ctx):
            bsc, n, n0, kt, tid, windowed = ctx
            idx = tid + i * threads
            c = n0 + (idx >> 1)
            h = idx & 1
            gi = kt & 7  # the stage's group's place in its window of eight
            ok = idx < total and c < n
            v0, v1 = win
            if windowed:
                if gi == 0:
                    g = kt + 4 * h
                    v0 = v1 = uint32(0)
                    if ok and g < bsc.shape[1]:
                        v0, v1 = vload.ldg_v2(bsc, c * bsc.shape[1] + g)
            else:
                v0 = v1 = uint32(0)
                if ok and h == (gi >> 2) and kt < bsc.shape[1]:
                    s = float32(bsc[c, kt])
                    z = float32(0)
                    word = cvt.f32x2_to_f16x2(z, s) if gi & 1 else cvt.f32x2_to_f16x2(s, z)  # exact: an fp16
                    if gi & 2:
                        v1 = word
                    else:
                        v0 = word
            return v0, v1

        @device_inline
        def fetch(asc, bsc, m, n, k, r0, n0, kt, tid, win):
            windowed = bsc.shape[1] % 4 == 0 and vload.aligned16(bsc)
            return unroll.each_map(_fetch_one, win, slots, (bsc, n, n0, kt, tid, windowed))

        @device_inline
        def _put_one(i, raw, ctx):
            smem, w0, tid, kt = ctx
            idx = tid + i * threads
            gi = 0 if first else kt & 7
            if idx < total and (idx & 1) == (gi >> 2):
                v0, v1 = raw
                lo, hi = cvt.f16x2_to_f32x2(v1 if gi & 2 else v0)
                smem[w0 + (idx >> 1)] = hi if gi & 1 else lo  # a warp's 16 columns: 16 consecutive words

        @device_inline
        def put(smem, at, raw, kt, tid):
            unroll.each(_put_one, raw, (smem, at >> 2, tid, kt))

        return (fetch, put, *P.carried_windows(slots, 2))

    @staticmethod
    def fold(bn: int):
        """``fold(total, acc, fx, kt)``: ``fx = (smem, at, row0, col0)``, the
        stage's table at byte ``at`` of the float32 view ``smem``, this
        warpgroup's first column ``col0`` of the tile."""

        @device_inline
        def fold(total, acc, fx, kt):
            smem, at, _row0, col0 = fx
            return unroll.each_map(_fold_one, total, acc, (smem, (at >> 2) + col0, cuda.threadIdx.x & 127))

        return fold


@device_inline
def _fold_one(i, tot, st, ctx):
    smem, w0, tid = ctx
    _r, c = wg.acc_elem(tid, i)
    return tot + st * smem[w0 + c]


def make_gemm(bn: int = BN, fault: str = "", scale_fault: str = ""):
    """Compile the kernel ``(c, aq32, qweight, scales, sa, ones_n, ones_1)``;
    ``fault`` (``wgmma_async.FAULTS``) and ``scale_fault``
    (:data:`SCALE_FAULTS`), tests only, plant a bug the check must see."""
    fold = GroupScales(scale_fault)
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
