"""``gdn.verify`` variant ``wy17``: the WY kernel specialised at compile time
for 17-token verify steps (16 MTP drafts + 1).

17 is one past a power of two, so instead of a 17-wide chunk the kernel runs
the WY form on the first 16 tokens -- a 16 x 16 ``A``/``T``/``P`` tile, all
loop bounds constant -- and applies token 16 as one delta-rule step on the
state slice, still on chip::

    block (h, s):  state slice -> Ssh                         (read once)
                   chunk(c0 = 0, L = 16)  on Ssh               (_chunk)
                   Sr <- own rows of Ssh; token 16: partials | barrier | finish
                   Sr -> state slice                           (written once)

Launch: one block per (value head, column slice), ``Hv * dv/BV`` blocks of
``BV * KSPLIT`` threads; thread ``(j, p)`` of the last step holds rows
``p*R .. p*R+R-1`` of column ``j`` (``_layout``, ``_step``). Building it for
any other ``T`` is refused: ``select`` only picks it at ``T == 17``.

Bandwidth-bound on the state: one call reads and writes each value head's
``dk x dv`` fp32 state once (2 MiB per sequence and layer at Qwen3-Next
shapes, read + written = 4 MiB, ~0.9 us at 4.8 TB/s) against ``T`` single
decode steps moving ``2 T`` times the state (17 tokens: 68 MiB). The
arithmetic, ~7 flops per state element per token, only catches up at
``T ~ 17`` (~60 MFLOP, ~1 us of fp32 on an H200).
"""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ._chunk import make_chunk, shared_bytes
from ._layout import check_launch, group_of, tile_for
from ._step import make_step

NAME = "wy17"
SUMMARY = "17-token verify: 16-token WY chunk (constant bounds) + one delta step, state on chip"
TOKENS = 17
WY = 16  # tokens handled in the WY chunk; the last one is a single step


@lru_cache(maxsize=None)
def make_verify_wy17(DK: int, DV: int):
    """Compile the 17-token verify at ``DK x DV``."""
    tile = tile_for(DK, DV)
    BV, KS, NT, NSL, R = tile.bv, tile.ksplit, tile.threads, tile.slices, tile.rows
    chunk = make_chunk(WY, DK, BV, NT, True)
    _, _, _, partials, finish = make_step(DK, DV, BV, KS)
    LAST = TOKENS - 1

    @cuda.jit
    def gdn_verify_wy17(q, k, v, g, beta, state, o):
        group = v.shape[1] // q.shape[1]
        bid = cuda.blockIdx.x
        h = bid // NSL
        v0 = (bid - h * NSL) * BV
        hk = h // group
        tid = cuda.threadIdx.x
        j = tid % BV
        p = tid // BV

        M = cuda.shared.array((WY, WY), float32)
        D = cuda.shared.array((WY, BV), float32)
        Gs = cuda.shared.array(WY, float32)
        Bs = cuda.shared.array(WY, float32)
        Rk = cuda.shared.array(WY, float32)
        Rq = cuda.shared.array(WY, float32)
        Ek = cuda.shared.array(WY, float32)
        Ssh = cuda.shared.array((DK, BV), float32)
        red = cuda.shared.array((2, KS, BV), float32)
        nrm = cuda.shared.array((3, KS), float32)
        Sr = cuda.local.array(R, float32)
        S2 = state[h]
        for e in range(tid, DK * BV, NT):
            d = e // BV
            Ssh[d, e - d * BV] = S2[d, v0 + e - d * BV]
        chunk(q, k, v, g, beta, S2, Ssh, o, M, D, Gs, Bs, Rk, Rq, Ek, h, hk, v0, 0, WY, tid)
        # chunk() ended on a barrier: Ssh holds the state after token 15.
        for r in range(R):
            Sr[r] = Ssh[p * R + r, j]
        partials(Sr, q[LAST, hk], k[LAST, hk], p, j, red, nrm)
        cuda.syncthreads()
        oj = finish(Sr, k[LAST, hk], p, j, red, nrm, v[LAST, h, v0 + j], g[LAST, h], beta[LAST, h])
        for r in range(R):
            S2[p * R + r, v0 + j] = Sr[r]
        if p == 0:
            o[LAST, h, v0 + j] = oj

    return gdn_verify_wy17


def shared_bytes_wy17(DK: int, BV: int, KS: int) -> int:
    return shared_bytes(WY, DK, BV, True) + 4 * (2 * KS * BV + 3 * KS)


def build(shape):
    T, dk, dv, hk, hv = shape["t"], shape["dk"], shape["dv"], shape["hk"], shape["hv"]
    if T != TOKENS:
        raise ValueError(f"wy17 is compiled for {TOKENS} tokens, not T={T}")
    group_of(hk, hv)
    tile = tile_for(dk, dv)
    grid, nt = check_launch(hv * tile.slices, tile.threads, shared_bytes_wy17(dk, tile.bv, tile.ksplit))
    kern = make_verify_wy17(dk, dv)

    def launch(b):
        kern[grid, nt](b["q"], b["k"], b["v"], b["g"], b["beta"], b["state"], b["o"])

    return launch
