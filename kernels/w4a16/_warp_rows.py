"""The one-warp-per-row GEMV body shared by ``gemv_sw``, ``gemv_dual_sw`` and
``ffn_fused_silu_down`` (see those modules for each kernel's layout).

``WARPS`` warps per block, warp ``w`` on row ``blockIdx.x * WARPS + w``,
blocks striding over row groups. Per K-chunk the block stages its
activations in shared memory (``common.int4_device``'s grouped layout), then
the warp walks its row; one shuffle reduction per row and output, lane 0
writes. When ``k <= KCHUNK`` the chunk is staged once per block and reused
for every row group the block visits.

How a lane reads the row (the weights are the streamed operand: ``k / 2``
bytes a row against ``2 k`` bytes of ``x`` per block):

* **16-byte loads** when the rows are 16-byte aligned (``k % 32 == 0``, the
  row's words a multiple of 4, and the matrix's first word aligned): lane
  ``l`` owns the 4-word groups ``l, l + 32, ...`` of the chunk and reads
  each with one ``ld.global.nc.v4.u32`` (``common.vload``; SASS
  ``LDG.E.128.CONSTANT``). A warp step reads 512 contiguous bytes (16 whole
  sectors). ``UNROLL`` groups per lane are loaded before the first is used
  (two loads in flight per lane and matrix, four in the dual kernel); at the
  default ``KCHUNK = 2048`` (64 groups) that is the whole chunk. A group
  lies in one scale group (32 inputs, scales per 128), so one scale per
  load. The chunk's last step is partial when its groups are not a multiple
  of ``32 * UNROLL``: a load past the chunk's end is skipped, not clamped.
* **32-bit loads** otherwise (lane ``l`` on words ``l, l + 32, ...``, as
  before): with ``k % 32 != 0``, row ``r`` starts at word ``r * k / 8``, so
  consecutive rows start at different 16-byte phases (``k = 264``: 33 words,
  phases 0, 1, 2, 3 words); every recipe's ``k`` (512 ... 18432) is a
  multiple of 32, so only such test shapes and unaligned views take it. The
  choice is uniform per launch (a register compare, no divergence).

Two compile-time switches pick the kernel:

* ``DUAL``: two weight matrices against the same staged activations (the
  gate and up projections); each lane loads both groups (or words) of a
  column, used against the same staged activations.
* ``SILU``: the staged activations are ``silu(gate) * up`` (fp32) instead of
  ``x``: the SiLU-multiply fused into the down GEMV.

``TAIL_FAULT`` (tests only, default 0) plants a fault in the 16-byte path's
tail: 1 drops each chunk's last group, 2 lets the lane one past the end
load the last group again (a clamped index) and count it twice.

The kernels pass their arrays as tuples: ``outs`` (one output vector per
matrix), ``mats`` (``(qweight, scales)`` or ``(qw_gate, s_gate, qw_up,
s_up)``) and ``src`` (``(x,)`` or ``(gate, up)``); the switches are
constants, so the branches they guard compile away.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from ..common import index32
from ..common import launch as L
from ..common.int4_device import (
    GROUP_BYTES,
    UNSCALE,
    dot_group_at,
    dot_word_at,
    dot_word_regs,
    group_layout,
    load_x8_at,
    stage_x_grouped,
    stage_x_grouped_v4,
    word_at,
)
from ..common.launch import device_inline
from ..common.smem import ALIGN16, smem_addr
from ..common.vload import aligned16, ldg_v4
from ..common.warp import warp_sum
from ._device import stage_silu_mul_grouped, stage_silu_mul_grouped_v4

DEFAULT_WARPS = 4
DEFAULT_KCHUNK = 2048
# 16-byte groups a lane loads before using the first: at KCHUNK = 2048 a
# chunk has 64 groups, two per lane, so two is the whole chunk.
UNROLL = 2
# Grid cap for the row-group stride: 132 SMs (H200) x 16 resident 128-thread
# blocks; more blocks would only queue.
MAX_RESIDENT_BLOCKS = 132 * 16
TAIL_FAULTS = (0, 1, 2)


@device_inline
def put4(v, i, words):
    """The four words of a 16-byte load into ``v[i .. i + 3]``."""
    w0, w1, w2, w3 = words
    v[i] = w0
    v[i + 1] = w1
    v[i + 2] = w2
    v[i + 3] = w3


def check_config(WARPS: int, KCHUNK: int) -> None:
    L.check_block(WARPS * L.WARP_SIZE, warps=True)
    group_layout(KCHUNK)


@lru_cache(maxsize=None)
def make_warp_rows(WARPS: int, KCHUNK: int, DUAL: bool, SILU: bool, TAIL_FAULT: int = 0):
    """The device function ``rows(outs, mats, src)``: the whole kernel body
    for a block of ``WARPS`` warps and K-chunks of ``KCHUNK`` inputs."""
    check_config(WARPS, KCHUNK)
    if TAIL_FAULT not in TAIL_FAULTS:
        raise ValueError(f"TAIL_FAULT={TAIL_FAULT}: one of {TAIL_FAULTS}")
    NT = WARPS * 32
    KWC, _, XS = group_layout(KCHUNK)
    STEP = 32 * UNROLL
    WV = 4 * UNROLL  # the words of a step's groups

    @cuda.jit(device=True)
    def stage(xs, src, c0, k, tid, xvec):
        if SILU and xvec:
            stage_silu_mul_grouped_v4(xs, src[0], src[1], c0, k, tid, NT, KCHUNK)
        elif SILU:
            stage_silu_mul_grouped(xs, src[0], src[1], c0, k, tid, NT, KCHUNK)
        elif xvec:
            stage_x_grouped_v4(xs, src[0], c0, k, tid, NT, KCHUNK)
        else:
            stage_x_grouped(xs, src[0], c0, k, tid, NT, KCHUNK)

    def make_step(GUARD: bool):
        """A step's loads and sums; ``GUARD``: the chunk's last step, whose
        groups past ``lim`` are skipped (a whole step needs no test)."""

        @device_inline
        def load(wv, sv, uv, su, qr, sr, ur, tr, g, lim, g1):
            """The loads of a step's groups (``UNROLL`` per lane from group
            ``g``): every one issued before any is used. ``qr``, ``sr``
            (``ur``, ``tr``): the row of each matrix and of its scales;
            32-bit indices (``common/index32.py``)."""
            for u in range(UNROLL):
                gu = np.int32(g + 32 * u)
                if not GUARD or gu < lim:
                    gi = min(gu, np.int32(g1 - 1)) if TAIL_FAULT == 2 else gu
                    put4(wv, 4 * u, ldg_v4(qr, index32.u32(4 * gi)))
                    sv[u] = float32(sr[index32.u32(gi >> 2)])
                    if DUAL:
                        put4(uv, 4 * u, ldg_v4(ur, index32.u32(4 * gi)))
                        su[u] = float32(tr[index32.u32(gi >> 2)])

        @device_inline
        def use(acc, acc2, wv, sv, uv, su, xb, g, g0, lim, g1):
            """The step's sums, each group against its staged activations."""
            for u in range(UNROLL):
                gu = np.int32(g + 32 * u)
                if not GUARD or gu < lim:
                    gi = min(gu, np.int32(g1 - 1)) if TAIL_FAULT == 2 else gu
                    at = xb + uint32(GROUP_BYTES) * index32.u32(gi - g0)
                    acc += sv[u] * dot_group_at(wv[4 * u], wv[4 * u + 1], wv[4 * u + 2], wv[4 * u + 3], at)
                    if DUAL:
                        acc2 += su[u] * dot_group_at(uv[4 * u], uv[4 * u + 1], uv[4 * u + 2], uv[4 * u + 3], at)
            return acc, acc2

        return load, use

    load_step, use_step = make_step(True)
    load_whole, use_whole = make_step(False)

    @cuda.jit(device=True)
    def rows(outs, mats, src):
        qw = mats[0]
        sc = mats[1]
        n = qw.shape[0]
        kw = qw.shape[1]
        k = src[0].shape[0]
        xs = cuda.shared.array(XS, dtype=float32, alignment=ALIGN16)
        xb = smem_addr(xs)
        xv = cuda.local.array(8, dtype=float32)  # DUAL, 32-bit path: a column's activations
        wv = cuda.local.array(WV, dtype=uint32)  # the step's groups (first matrix)
        uv = cuda.local.array(WV, dtype=uint32)  # DUAL: the second matrix's
        sv = cuda.local.array(UNROLL, dtype=float32)  # the groups' scales
        su = cuda.local.array(UNROLL, dtype=float32)  # DUAL: the second matrix's
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        nchunks = (k + KCHUNK - 1) // KCHUNK
        vec = (kw & 3) == 0 and aligned16(qw)
        if DUAL:
            vec = vec and aligned16(mats[2])
        xvec = aligned16(src[0])  # x (or gate and up) by 16-byte loads
        if SILU:
            xvec = xvec and aligned16(src[1])
        staged = False
        rb = cuda.blockIdx.x * WARPS
        while rb < n:  # block-uniform: every thread reaches the barriers
            row = rb + warp
            acc = float32(0.0)
            acc2 = float32(0.0)
            rr = min(row, n - 1)  # the rows' views (a warp past the end uses none)
            qr = index32.row(qw[rr])
            sr = index32.row(sc[rr])
            ur = index32.row(mats[2][rr]) if DUAL else qr
            tr = index32.row(mats[3][rr]) if DUAL else sr
            for c in range(nchunks):
                c0 = c * KCHUNK
                w0 = c * KWC
                w1 = min(kw, w0 + KWC)
                g0 = np.int32(w0 >> 2)
                g1 = np.int32(w1 >> 2)
                lim = np.int32(g1 - 1 if TAIL_FAULT == 1 else (g1 + 1 if TAIL_FAULT == 2 else g1))
                if vec and row < n:
                    # The chunk's first step of weights (at the default
                    # KCHUNK, all of it) is loaded before the activations
                    # are staged: the two latencies overlap.
                    load_step(wv, sv, uv, su, qr, sr, ur, tr, np.int32(g0 + lane), lim, g1)
                if nchunks > 1 or not staged:
                    cuda.syncthreads()  # previous chunk fully consumed
                    stage(xs, src, c0, k, tid, xvec)
                    cuda.syncthreads()
                    staged = True
                if row < n:
                    if vec:
                        first = np.int32(g0 + lane)
                        g = first
                        # whole steps (every group below lim) by a 32-bit
                        # counter (Numba's range counts in 64 bits), then the
                        # chunk's partial last one, outside the loop
                        whole = np.int32(lim - 32 * (UNROLL - 1))
                        while g < whole:
                            if g != first:
                                load_whole(wv, sv, uv, su, qr, sr, ur, tr, g, lim, g1)
                            acc, acc2 = use_whole(acc, acc2, wv, sv, uv, su, xb, g, g0, lim, g1)
                            g = np.int32(g + STEP)
                        if g < lim:
                            if g != first:
                                load_step(wv, sv, uv, su, qr, sr, ur, tr, g, lim, g1)
                            acc, acc2 = use_step(acc, acc2, wv, sv, uv, su, xb, g, g0, lim, g1)
                    else:
                        for gw in range(w0 + lane, w1, 32):
                            col = gw - w0
                            if DUAL:
                                wg = qw[row, gw]
                                wu = mats[2][row, gw]
                                load_x8_at(xv, word_at(xb, col))
                                gs = gw >> 4
                                acc += float32(sc[row, gs]) * dot_word_regs(wg, xv)
                                acc2 += float32(mats[3][row, gs]) * dot_word_regs(wu, xv)
                            else:
                                acc += float32(sc[row, gw >> 4]) * dot_word_at(qw[row, gw], word_at(xb, col))
            if row < n:  # warp-uniform
                acc = warp_sum(acc) * float32(UNSCALE)
                if DUAL:
                    acc2 = warp_sum(acc2) * float32(UNSCALE)
                if lane == 0:
                    outs[0][row] = acc
                    if DUAL:
                        outs[1][row] = acc2
            rb += cuda.gridDim.x * WARPS

    return rows


def launch_config(n: int, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    grid = L.check_grid(min(L.blocks_for(n, WARPS), MAX_RESIDENT_BLOCKS))
    block = (L.check_block(WARPS * L.WARP_SIZE, warps=True),)
    L.check_shared(4 * group_layout(KCHUNK)[2])
    return grid, block
