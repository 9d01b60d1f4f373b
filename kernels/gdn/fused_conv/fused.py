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

Launch: ``N * Hk`` blocks of ``NT = dv * KSF`` threads (``KSF = 4`` row
parts: 512 threads with 32 state registers each at d = 128, launch-bounded
to 128 registers so one block fits an SM's register file; ptxas for sm_90
needs exactly 128, no spills)::

    block (n, hk), slot = slots[n]
      channels  [q_hk (dk) | k_hk (dk) | v_2hk (dv) | v_2hk+1 (dv)]  = 2dk+2dv
      1. thread e < 2dk+2dv: conv1d over conv_state[slot] and x -> silu -> xs[e];
         state shifted in place                                   barrier
      2. for each value head hh = 0, 1 (h = 2hk+hh), thread (p, j):
           load rows p*R.. of column j, partials -> red[hh]        barrier
           finish: delta_j, rows updated and stored, o_j -> orow[hh, j]
         (red/nrm are per head: no barrier between the heads)     barrier
      3. threads p = 0, 1: out[h = 2hk+p] = o_j / rms(orow[p]) * w_j * silu(z_j)
         (Qwen3-Next's order: RMS-normalise, scale, then gate)

The two heads go one after the other: both at once would need 64 state
registers per thread (ptxas spills at 128) or 1024 threads of 64.

Memory-bound like the plain decode; against ``separate`` it saves the
activation and ``o`` round trips and two launches, and loses parallelism at
small batches (``N * Hk`` blocks of 512 threads: 16 blocks at N = 1).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ...selection.gdn import FUSED_ELIGIBLE
from .._conv import make_conv_step, make_gated_rmsnorm
from .._layout import check_launch, jit_bounded
from .._step import make_step

NAME = "fused"
SUMMARY = "conv1d+SiLU, GDN step and gated RMSNorm in one kernel, block per (sequence, q/k head)"
KSF = 4  # row parts per state column in the fused block


def eligible(shape) -> tuple[bool, str]:
    """Whether the fused kernel applies at ``shape``, and why not: the
    decision table's conditions (``selection.gdn.FUSED_ELIGIBLE``)."""
    why = [c.why(shape) for c in FUSED_ELIGIBLE if not c.test(shape)]
    return not why, why[0] if why else ""


def threads(DK: int, DV: int) -> int:
    return DV * KSF


def shared_bytes(DK: int, DV: int) -> int:
    return 4 * (2 * DK + 2 * DV + 2 * 2 * KSF * DV + 2 * 3 * KSF + 2 * DV)


@lru_cache(maxsize=None)
def make_fused_conv(W: int, DK: int, DV: int):
    """Compile the fused decode mixer for conv width ``W`` at ``DK x DV``."""
    if DK % KSF:
        raise ValueError(f"dk={DK} does not split into {KSF} row parts")
    NT = threads(DK, DV)
    LC = 2 * DK + 2 * DV
    R = DK // KSF
    conv_step = make_conv_step(W)
    offset, load, store, partials, finish = make_step(DK, DV, DV, KSF)
    gated = make_gated_rmsnorm(DV)

    @jit_bounded(NT)  # 512 threads at d = 128: at most 128 registers each
    def gdn_fused_conv(x, w, cs, g, beta, z, nw, slots, state, out):
        hkn = g.shape[1] // 2  # q/k heads; Hv == 2 Hk
        group = g.shape[1] // hkn
        bid = cuda.blockIdx.x
        n = bid // hkn
        hk = bid - n * hkn
        tid = cuda.threadIdx.x
        p = tid // DV
        j = tid - p * DV
        slot = slots[n]

        xs = cuda.shared.array(LC, float32)
        red = cuda.shared.array((2, 2, KSF, DV), float32)
        nrm = cuda.shared.array((2, 3, KSF), float32)
        orow = cuda.shared.array((2, DV), float32)
        Sr = cuda.local.array(R, float32)

        # 1. conv1d + SiLU on this block's channels.
        for e in range(tid, LC, NT):
            if e < DK:
                c = hk * DK + e
            elif e < 2 * DK:
                c = hkn * DK + hk * DK + (e - DK)
            else:
                c = 2 * hkn * DK + 2 * hk * DV + (e - 2 * DK)
            xs[e] = conv_step(x, w, cs, n, slot, c)
        cuda.syncthreads()

        # 2. the GDN step on both value heads, q/k from xs[0:DK], xs[DK:2DK].
        qr = xs[0:DK]
        kr = xs[DK : 2 * DK]
        for hh in range(group):  # 2; a runtime bound keeps the loop rolled (no spills)
            h = 2 * hk + hh
            o0 = offset(slot, h, 2 * hkn, p, j)
            load(Sr, state, o0)
            partials(Sr, qr, kr, p, j, red[hh], nrm[hh])
            cuda.syncthreads()
            oj = finish(Sr, kr, p, j, red[hh], nrm[hh], xs[2 * DK + hh * DV + j], g[n, h], beta[n, h])
            store(Sr, state, o0)
            if p == 0:
                orow[hh, j] = oj
        cuda.syncthreads()

        # 3. gated RMSNorm over each head's dv outputs, one head per row part.
        if p < 2:
            h = 2 * hk + p
            out[n, h, j] = gated(orow[p], orow[p, j], z[n, h, j], nw[j])

    return gdn_fused_conv


def build(shape):
    ok, why = eligible(shape)
    if not ok:
        raise ValueError(why)
    N, dk, dv, hk, W = (shape[x] for x in ("n", "dk", "dv", "hk", "conv_width"))
    grid, nt = check_launch(N * hk, threads(dk, dv), shared_bytes(dk, dv))
    kern = make_fused_conv(W, dk, dv)

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
