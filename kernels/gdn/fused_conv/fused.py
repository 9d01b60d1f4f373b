"""``gdn.fused_conv`` variant ``fused``: conv1d + SiLU, the GDN decode step
and the gated RMSNorm of one decode token in one kernel, nothing
intermediate leaving the chip.

Eligibility: ``Hv == 2 * Hk`` (one block takes a q/k head and its two value
heads, so the q/k conv is done once for both) and ``dk == dv == D`` where
``D`` is the head dim the engine's fused kernel is built for -- 128 for
Qwen3-Next. ``select`` enforces it through the shape's ``fused_head_dim``
(128 unless a shape says otherwise). This kernel itself is generic in the
head dims (compile-time constants): the smoke preset runs it at d = 12 by
giving its shapes ``fused_head_dim = 12``, since d = 128 is far too slow for
the CUDA simulator. Nothing but that documented override differs.

Launch: ``N * Hk`` blocks of ``NT = dv * KSF`` threads (``KSF = 4``: 512
threads at d = 128, each with an 8 x 4 patch of the head's state, 32
registers, read and written 16 bytes a row; ``_step``), launch-bounded to
128 registers so one block fits an SM's register file::

    block (n, hk), slot = slots[n]
      channels  [q_hk (dk) | k_hk (dk) | v_2hk (dv) | v_2hk+1 (dv)]  = 2dk+2dv
      1. thread e < (2dk+2dv)/8: conv1d over conv_state[slot] and x of eight
         channels 8e.. (16 bytes a load, ``_conv.make_conv_piece``; one
         channel a thread where the rows are not 16-byte pieces) -> silu
         -> xs; state shifted in place; g, beta of both heads -> gb  barrier
      2. for each value head hh = 0, 1 (h = 2hk+hh), thread (c, p):
           load its patch, partials -> red[hh]                     barrier
           finish: delta, patch updated and stored, o -> orow[hh, 4c..]
         (red/nrm are per head: no barrier between the heads)     barrier
      3. threads p = 0, 1: out[h = 2hk+p] = o_j / rms(orow[p]) * w_j * silu(z_j)
         (Qwen3-Next's order: RMS-normalise, scale, then gate)

The two heads go one after the other: both at once would need 64 state
registers per thread (ptxas spills at 128) or 1024 threads.

Memory-bound like the plain decode; against ``separate`` it saves the
activation and ``o`` round trips and two launches, and loses parallelism at
small batches (``N * Hk`` blocks of 512 threads: 16 blocks at N = 1).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32, uint32

from ...common.launch import device_inline
from ...common.smem import smem_addr, st_shared_f32x4
from ...selection.gdn import FUSED_ELIGIBLE
from .._conv import make_conv_piece, make_conv_step, make_gated_rmsnorm
from .._layout import SHARED_ALIGN, check_launch, jit_bounded
from .._step import make_step

NAME = "fused"
SUMMARY = "conv1d+SiLU, GDN step and gated RMSNorm in one kernel, block per (sequence, q/k head)"
KSF = 4  # threads per state column in the fused block (dv * KSF in all)


def eligible(shape) -> tuple[bool, str]:
    """Whether the fused kernel applies at ``shape``, and why not: the
    decision table's conditions (``selection.gdn.FUSED_ELIGIBLE``)."""
    why = [c.why(shape) for c in FUSED_ELIGIBLE if not c.test(shape)]
    return not why, why[0] if why else ""


def threads(DK: int, DV: int) -> int:
    return make_step(DK, DV, DV, DV * KSF).tile.threads


def shared_bytes(DK: int, DV: int) -> int:
    return 4 * (2 * DK + 2 * DV + 2 * DV + 4) + 2 * make_step(DK, DV, DV, DV * KSF).shared_bytes


@lru_cache(maxsize=None)
def make_fused_conv(W: int, DK: int, DV: int, TAIL_FAULT: int = 0):
    """Compile the fused decode mixer for conv width ``W`` at ``DK x DV``
    (``TAIL_FAULT``: ``_conv.make_conv_piece``'s test-only knob)."""
    step = make_step(DK, DV, DV, DV * KSF)
    NT, R, CW = step.tile.threads, step.tile.rows, step.tile.cw
    RED, NRM = (2,) + step.red_shape, (2,) + step.nrm_shape
    LC = 2 * DK + 2 * DV
    RCW = R * CW  # state registers a thread
    conv_step = make_conv_step(W)
    wide_conv, conv_piece = make_conv_piece(W, TAIL_FAULT)
    PIECES = DK % 8 == 0 and DV % 8 == 0  # every channel segment whole 8-channel pieces
    coords, offset, load, store = step.coords, step.offset, step.load, step.store
    partials, finish = step.partials, step.finish
    gated = make_gated_rmsnorm(DV)

    @device_inline
    def channel(e, hk, hkn):
        """The input channel of the block's channel ``e``: ``[q_hk | k_hk |
        v_2hk | v_2hk+1]`` of ``[q | k | v]``."""
        if e < DK:
            return hk * DK + e
        if e < 2 * DK:
            return hkn * DK + hk * DK + (e - DK)
        return 2 * hkn * DK + 2 * hk * DV + (e - 2 * DK)

    @jit_bounded(NT)  # 512 threads at d = 128: at most 128 registers each
    def gdn_fused_conv(x, w, cs, g, beta, z, nw, slots, state, out):
        hkn = g.shape[1] // 2  # q/k heads; Hv == 2 Hk
        group = g.shape[1] // hkn
        bid = cuda.blockIdx.x
        n = bid // hkn
        hk = bid - n * hkn
        tid = cuda.threadIdx.x
        c, p, grp, lead = coords(tid)
        slot = slots[n]

        xs = cuda.shared.array(LC, float32, alignment=SHARED_ALIGN)
        gb = cuda.shared.array(4, float32)  # g, beta of value head 2hk, then of 2hk+1
        red = cuda.shared.array(RED, float32)
        nrm = cuda.shared.array(NRM, float32)
        orow = cuda.shared.array((2, DV), float32)
        Sr = cuda.local.array(RCW, float32)
        ov = cuda.local.array(CW, float32)

        # 1. conv1d + SiLU on this block's channels, eight a thread where
        #    they go 16 bytes a load, else one; g and beta of both heads.
        if PIECES and wide_conv(x, w, cs):
            ys = cuda.local.array(8, float32)
            for e8 in range(tid, LC // 8, NT):
                e = 8 * e8
                conv_piece(x, w, cs, n, slot, channel(e, hk, hkn), True, ys)
                # a quarter-warp's lanes 4-7 store their high half first (selects,
                # not a branch): lanes 4 apart, 32 bytes apart, would share banks
                at = smem_addr(xs) + uint32(4 * e)
                lo = (tid & 4) == 0
                da = at if lo else at + uint32(16)
                db = at + uint32(16) if lo else at
                st_shared_f32x4(
                    da, ys[0] if lo else ys[4], ys[1] if lo else ys[5], ys[2] if lo else ys[6], ys[3] if lo else ys[7]
                )
                st_shared_f32x4(
                    db, ys[4] if lo else ys[0], ys[5] if lo else ys[1], ys[6] if lo else ys[2], ys[7] if lo else ys[3]
                )
        else:
            for e in range(tid, LC, NT):
                xs[e] = conv_step(x, w, cs, n, slot, channel(e, hk, hkn))
        if tid < group:  # read once a block, not by every thread of the step
            gb[2 * tid] = g[n, 2 * hk + tid]
            gb[2 * tid + 1] = beta[n, 2 * hk + tid]
        cuda.syncthreads()

        # 2. the GDN step on both value heads, q/k from xs[0:DK], xs[DK:2DK].
        qr = xs[0:DK]
        kr = xs[DK : 2 * DK]
        for hh in range(group):  # 2; a runtime bound keeps the loop rolled (no spills)
            h = 2 * hk + hh
            o0 = offset(slot, h, 2 * hkn, p, c * CW)
            load(Sr, state, o0)
            partials(Sr, qr, kr, c, p, grp, lead, red[hh], nrm[hh])
            cuda.syncthreads()
            finish(Sr, kr, c, p, red[hh], nrm[hh], xs, 2 * DK + hh * DV + c * CW, gb[2 * hh], gb[2 * hh + 1], ov)
            store(Sr, state, o0)
            if p == 0:
                for w in range(CW):
                    orow[hh, c * CW + w] = ov[w]
        cuda.syncthreads()

        # 3. gated RMSNorm over each head's dv outputs, one head per thread row.
        for e in range(tid, 2 * DV, NT):
            hh = e // DV
            j = e - hh * DV
            h = 2 * hk + hh
            out[n, h, j] = gated(orow[hh], orow[hh, j], z[n, h, j], nw[j])

    return gdn_fused_conv


def build(shape, TAIL_FAULT: int = 0):
    ok, why = eligible(shape)
    if not ok:
        raise ValueError(why)
    N, dk, dv, hk, W = (shape[x] for x in ("n", "dk", "dv", "hk", "conv_width"))
    grid, nt = check_launch(N * hk, threads(dk, dv), shared_bytes(dk, dv))
    kern = make_fused_conv(W, dk, dv, TAIL_FAULT)

    def launch(b):
        kern[grid, nt](
            b["x"],
            b["conv_weight"],
            b["conv_state"],
            b["g"],
            b["beta"],
            b["z"],
            b["norm_weight"],
            b["slots"],
            b["state"].reshape(b["state"].size),
            b["out"],
        )

    return launch
