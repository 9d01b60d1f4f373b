"""The grouped GEMM over rows sorted by expert, on the shared GEMM engine
(``common/gemm/grouped.py`` on ``pipeline.py``'s mainloop, the
``mma_sync`` form: ``ldmatrix`` + warp MMA ``mma.sync`` m16n8k16, fp16
inputs, f32 accumulators)::

    out[p, n] = act( sum_k A[row(p), k] * W[e(p), n, k] )    for sorted rows p of expert e

Two warpgroups (256 threads, the whole block) per ``TILE_M x BN`` tile of
one expert's rows (``TILE_M`` = 64, ``BN`` = 32 output columns), each on
half of its columns (gated: half the gate columns and the same half of the
up columns); where a launch's experts average at most 8 rows, the
engine's 16-row decode tile, one warpgroup whose four warps split K
(``GG.DECODE_M``): the operands come
in through the engine's multi-stage ``cp.async`` pipeline into 128-byte
swizzled shared-memory stages, the transformed ones through its fp16
stagers (``wgmma_gemm``): NVFP4 (E2M1 x E4M3, exact in fp16), E4M3 (exact),
float32 (rounded once to fp16). Rows of a tile past its expert's rows and
columns past ``N`` are zero-filled and not stored.

Precision: NVFP4 and E4M3 operands enter the MMA exactly, their tensor
scales (``w_ts[e]``, ``a_ts[0]``) and per-row scales (E4M3: ``a_sc[p]``,
``w_sc[e, n]``) applied in f32 by the epilogue; fp16 activations enter
exactly; the float32 intermediate of the down projection rounds once to
fp16 (2^-11 relative, as ``moe._experts_tc``'s down does). A value past
fp16's range (65504) would enter as inf: the layer's activations are far
inside it.

Compile-time switches (``launcher``'s arguments):

* ``SCHED``: ``BOUNDED`` launches ``E * max_m_tiles`` tile rows and a block
  whose tile starts past its expert's rows leaves at once; rows past
  ``max_m_tiles * BM`` get no block and are never computed (``bounds``:
  the engine's bound, in its tiles of ``BM`` = 8 rows, whatever this
  kernel's tile height).
  ``GROUPED`` is the single-launch grouped GEMM: a fixed grid whose blocks
  walk the exact tile list (computed from ``off`` as they go), so every row
  of every expert is computed, however the routing falls.
* ``GATHER``: A's row ``row(p)`` is ``tok[p]`` (the token of sorted row
  ``p``: the gate/up projection reads the tokens' activations in place,
  fp16 rows by ``cp.async`` through the row map, NVFP4 ones through
  ``wgmma_gemm``'s ``nvfp4_f16_rows`` stager); otherwise ``p``.
* ``ACT`` (the epilogue hook): ``NONE``; ``SILU_GLU`` (the weights hold gate
  rows ``0 .. N-1`` and up rows ``N .. 2N-1``, side by side in one B tile,
  the engine's ``b_parts = 2``: ``silu(gate) * up``); ``RELU2``
  (``max(x, 0)^2``, Nemotron's experts).
* ``AFMT``: A as float (fp16 ``[rows, K]``, or float32 for the down
  projection's intermediate, gathered too through the ``f32_f16_rows``
  stager); ``E4M3`` codes times a float32 scale per row (not gathered);
  ``NVFP4`` (packed E2M1 pairs, an E4M3 scale per 16, one float32 tensor
  scale: activations quantised by ``common.nvfp4_act``).
* ``WFMT``: ``NVFP4`` weights (``[E, N, K/2]`` packed, ``[E, N, K/16]``
  scales, ``[E]`` tensor scales); ``E4M3`` (``[E, N, K]`` codes, ``[E, N]``
  float32 scales per output row: the FP8 grouped GEMM's weights); ``INT4``
  (W4A16 words ``[E, N, K/8]``, fp16 scales per 128 of K, ``int4_f16``);
  ``E4M3_BLOCK`` (``[E, N, K]`` codes, float32 scales per 128 x 128 block,
  ``e4m3_blk_f16``): the routed FFN's expert formats (``moe._experts_tc``).
* ``SCATTER``: sorted row ``p``'s outputs go to ``out[dest[p]]`` (the
  assignment it came from) rather than ``out[p]``.

``out`` is float32 ``[rows, N]``. ``K`` a multiple of 16; ``N`` any.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda

from ...common import unroll
from ...common import wgmma as wg
from ...common import wgmma_gemm as P
from ...common.gemm import grouped as GG
from ...common.gemm import mma_sync
from ...common.launch import device_inline
from .bounds import BM

FORM = mma_sync
BN = 32  # output columns of a tile (the gated tile holds 64 B rows: gate and up)
STAGES = 3
TENSOR_CORES, TC_DTYPE = "mma.sync", "f16"  # what every launch runs on (the records' claim)

TILE_M = GG.BM  # the kernel's tile: 64 rows
# Two consumer warpgroups a block, side by side along the tile's columns
# (each 64 rows by half of them; gated, half the gate columns and the same
# half of the up columns): the tile and its traffic stay one warpgroup's,
# a thread holds half the accumulators and stages half the bytes.
WGS, WN = 2, 2
# Two resident blocks an SM (128 registers a thread, 16 warps): one
# warpgroup a block held the gated NVFP4 gate/up's carried loads in 168.
MIN_BLOCKS = 2

BOUNDED, GROUPED = 0, 1
NONE, SILU_GLU, RELU2 = 0, 1, 2
FLOAT, E4M3, NVFP4 = 0, 1, 2
INT4, E4M3_BLOCK = 3, 4  # weights only: W4A16 words and fp16 group scales; E4M3 with 128 x 128 block scales


@lru_cache(maxsize=None)
def _hooks(SCATTER: bool, n_acc: int, wide: bool = True):
    """The epilogue hooks (``ACT``) for a thread's ``n_acc`` accumulators
    (the gated ones: gate, then up, half each), writing row ``p`` at
    ``y[p]`` or, with ``SCATTER``, at ``y[dest[p]]`` (``dest`` the last of
    ``ep``: the assignment a sorted row came from); 16 bytes a lane where
    ``wide``, else element by element (the decode tile)."""
    HALF_ACC = n_acc // 2
    store, store_to = (P.store, P.store_to) if wide else (P.store_narrow, P.store_to_narrow)

    @device_inline
    def put(y, ep, row_end, ncols, row0, n0, v, rs, cs, t):
        if SCATTER:
            store_to(y, ep[5], row_end, ncols, row0, n0, v, rs, cs, t)
        else:
            store(y, row_end, ncols, row0, n0, v, rs, cs, t, False)

    @device_inline
    def scaled(y, ep, acc, row0, row_end, n0, ncols, e):
        """``acc * rs[p] * cs[e, c] * (ts[e] * ats[0])``."""
        rs, cs, ts, ats = ep[0], ep[1], ep[2], ep[3]
        put(y, ep, row_end, ncols, row0, n0, acc, rs, cs[e], ts[e] * ats[0])

    @device_inline
    def relu2(y, ep, acc, row0, row_end, n0, ncols, e):
        rs, cs, ts, ats, ones = ep[0], ep[1], ep[2], ep[3], ep[4]
        at = (cuda.threadIdx.x & 127, rs, cs[e], ts[e] * ats[0], row0, n0, row_end, ncols)
        v = unroll.each_map(_relu2_one, acc, acc, at)  # (each_map pairs two: the one twice)
        put(y, ep, row_end, ncols, row0, n0, v, ones, ones, np.float32(1.0))

    @device_inline
    def glu(y, ep, acc, row0, row_end, n0, ncols, e):
        """Gate (the first half of the accumulators) and up (the second, the
        same places) to ``silu(gate) * up``; ``cs[e]`` holds 2N column scales."""
        rs, cs, ts, ats, ones = ep[0], ep[1], ep[2], ep[3], ep[4]
        at = (cuda.threadIdx.x & 127, cs[e], ts[e] * ats[0], n0, ncols)
        v = unroll.each_map(_glu_one, acc[:HALF_ACC], acc[HALF_ACC:], at)
        put(y, ep, row_end, ncols, row0, n0, v, rs, ones, np.float32(1.0))

    return {NONE: scaled, SILU_GLU: glu, RELU2: relu2}


@device_inline
def _relu2_one(i, v, _same, at):
    tid, rs, cs, t, row0, n0, row_end, ncols = at
    r, c = wg.acc_elem(tid, i)
    r = min(row0 + r, row_end - 1)
    c = min(n0 + c, ncols - 1)
    x = max(np.float32(v) * rs[r] * cs[c] * t, np.float32(0.0))
    return x * x


@device_inline
def _glu_one(i, gate, up, at):
    tid, cs, t, n0, ncols = at
    _r, c = wg.acc_elem(tid, i)
    col = min(n0 + c, ncols - 1)
    g = np.float32(gate) * cs[col] * t
    return g / (np.float32(1.0) + math.exp(-g)) * (np.float32(up) * cs[ncols + col] * t)


A_KIND = {
    (FLOAT, 2): "copy",
    (FLOAT, 4): "f32_f16",
    (E4M3, 1): "e4m3_f16",
    (NVFP4, 1): "nvfp4_f16",
}
W_KIND = {NVFP4: "nvfp4_f16", E4M3: "e4m3_f16", INT4: "int4_f16", E4M3_BLOCK: "e4m3_blk_f16"}
W_K_PER = {NVFP4: 2, E4M3: 1, INT4: 8, E4M3_BLOCK: 1}  # k per element of the weights' array
W_BLOCK_SCALES = (NVFP4, INT4, E4M3_BLOCK)  # the stager reads the weights' scales (else the epilogue)


def a_kind(afmt: int, itemsize: int, gather: bool) -> str:
    """The engine's A kind of an activation format (``itemsize``: the
    array's bytes per element)."""
    if gather and afmt == NVFP4:
        return "nvfp4_f16_rows"
    if gather and afmt == FLOAT and itemsize == 4:
        return "f32_f16_rows"
    kind = A_KIND.get((afmt, itemsize))
    if kind is None or (gather and kind != "copy"):
        raise ValueError(f"grouped GEMM: no activation format {afmt} of {itemsize}-byte elements (gather {gather})")
    return kind


@lru_cache(maxsize=None)
def make_grouped(SCHED: int, GATHER: bool, ACT: int, AFMT: int, WFMT: int, A_ITEMSIZE: int = 2, SCATTER: bool = False):
    """The engine's kernel of one configuration (see the module notes):
    ``kernel(y, a32, b32, bsc, asc, rowmap, off, max_m_tiles, ep)``."""
    if (
        SCHED not in (BOUNDED, GROUPED)
        or ACT not in (NONE, SILU_GLU, RELU2)
        or AFMT not in (FLOAT, E4M3, NVFP4)
        or WFMT not in W_KIND
    ):
        raise ValueError(f"grouped GEMM: no such configuration {(SCHED, GATHER, ACT, AFMT, WFMT)}")
    kind = a_kind(AFMT, A_ITEMSIZE if AFMT == FLOAT else 1, GATHER)
    parts = 2 if ACT == SILU_GLU else 1
    return GG.make_kernel(
        FORM,
        "f16",
        WGS,
        BN * parts,
        STAGES,
        GG.BOUNDED if SCHED == BOUNDED else GG.GROUPED,
        b_kind=W_KIND[WFMT],
        a_kind=kind,
        gather=GATHER and kind == "copy",
        b_parts=parts,
        epilogue_of=lambda n_acc, wide: _hooks(SCATTER, n_acc, wide)[ACT],
        unit=BM,
        min_blocks=MIN_BLOCKS,
        wn=WN,
    )


def _words(a):
    """fp16 or byte-coded rows as uint32 words (the last axis reinterpreted);
    float32 as it is (the ``f32_f16`` stager reads values)."""
    return a.view(np.uint32) if a.dtype in (np.float16, np.uint8) else a


def launcher(sched: int, gather: bool, act: int, afmt: int, wfmt: int, scatter: bool = False):
    """``run(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, off, tile_off, max_m_tiles, rows, dest=None)``
    on the grid the schedule needs (``max_m_tiles``, in ``BM``-row tiles,
    is read by ``BOUNDED`` only; ``rows`` is every routed row, which sizes
    the single-launch grid; ``tile_off`` is not read: the walk computes the
    tile list from ``off``). ``tok``: the gathered A row of each sorted row
    (``gather``); ``dest``: the output row of each (``scatter``).
    ``run.tensor_cores``, ``run.tc_dtype``: what it runs on."""
    launches: dict = {}
    ones: dict = {}

    def ones_of(shape):
        if shape not in ones:
            ones[shape] = cuda.to_device(np.ones(shape, np.float32))
        return ones[shape]

    def run(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, off, tile_off, max_m_tiles, rows, dest=None):
        experts = off.shape[0] - 1
        n = out.shape[1]
        nw = w.shape[1]  # weight rows of an expert: 2N gated
        k = w.shape[2] * W_K_PER[wfmt]
        kern = make_grouped(sched, gather, act, afmt, wfmt, a.dtype.itemsize, scatter)
        key = (kern, experts, rows, n, k)
        if key not in launches:
            launches[key] = GG.make_launch(kern, experts, rows, n, k)
        one = ones_of((max(int(rows), nw, out.shape[0], 1),))
        rs = a_sc if afmt == E4M3 else one
        cs = w_sc if wfmt == E4M3 else ones_of((experts, nw))
        ts = w_ts if wfmt == NVFP4 else ones_of((experts,))
        ats = a_ts if afmt == NVFP4 else ones_of((1,))
        asc = None
        if afmt == NVFP4:
            asc = (a_sc, tok) if gather else a_sc
        elif gather and afmt == FLOAT and a.dtype.itemsize == 4:
            asc = tok  # the f32 rows' stager reads its row map there
        launches[key](
            out,
            _words(a),
            _words(w),
            w_sc if wfmt in W_BLOCK_SCALES else None,
            asc,
            tok,
            off,
            max_m_tiles,
            (rs, cs, ts, ats, one, off if dest is None else dest),
        )

    run.tensor_cores, run.tc_dtype = TENSOR_CORES, TC_DTYPE
    return run
