"""``gdn.verify`` variant ``wyn``: the general WY-N kernel, ``T`` tokens as
one chunk of the WY form, ``T`` a compile-time constant of the factory (every
loop bound and shared array is sized for it).

Launch: one block per (value head, column slice), ``Hv * dv/BV`` blocks of
``BV * KSPLIT`` threads (``_layout``)::

    block (h, s):  state slice -> Ssh (read once)
                   chunk(c0 = 0, L = T)      A, T = (I+A)^-1, delta, o, S'
                   Ssh -> state slice (written once)

The chunk's algebra and shared-memory layout are ``_chunk``'s. Against
``recurrent`` it trades the ``T`` dependent steps for parallel dot products
and a ``T x T`` triangular solve; both move the state once per call, which is
the saving over ``T`` single-token steps (``2 T`` vs ``2`` state transfers).

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

NAME = "wyn"
SUMMARY = "WY form over all T tokens as one chunk, T compile-time, state slice in shared memory"


@lru_cache(maxsize=None)
def make_verify_wyn(T: int, DK: int, DV: int):
    """Compile the WY-N verify for ``T`` tokens at ``DK x DV``."""
    tile = tile_for(DK, DV)
    BV, NT, NSL = tile.bv, tile.threads, tile.slices
    chunk = make_chunk(T, DK, BV, NT, True)

    @cuda.jit
    def gdn_verify_wyn(q, k, v, g, beta, state, o):
        group = v.shape[1] // q.shape[1]
        bid = cuda.blockIdx.x
        h = bid // NSL
        v0 = (bid - h * NSL) * BV
        hk = h // group
        tid = cuda.threadIdx.x

        M = cuda.shared.array((T, T), float32)
        D = cuda.shared.array((T, BV), float32)
        Gs = cuda.shared.array(T, float32)
        Bs = cuda.shared.array(T, float32)
        Rk = cuda.shared.array(T, float32)
        Rq = cuda.shared.array(T, float32)
        Ek = cuda.shared.array(T, float32)
        Ssh = cuda.shared.array((DK, BV), float32)
        S2 = state[h]
        for e in range(tid, DK * BV, NT):
            d = e // BV
            Ssh[d, e - d * BV] = S2[d, v0 + e - d * BV]
        chunk(q, k, v, g, beta, S2, Ssh, o, M, D, Gs, Bs, Rk, Rq, Ek, h, hk, v0, 0, T, tid)
        for e in range(tid, DK * BV, NT):
            d = e // BV
            S2[d, v0 + e - d * BV] = Ssh[d, e - d * BV]

    return gdn_verify_wyn


def build(shape):
    T, dk, dv, hk, hv = shape["t"], shape["dk"], shape["dv"], shape["hk"], shape["hv"]
    group_of(hk, hv)
    tile = tile_for(dk, dv)
    grid, nt = check_launch(hv * tile.slices, tile.threads, shared_bytes(T, dk, tile.bv, True))
    kern = make_verify_wyn(T, dk, dv)

    def launch(b):
        kern[grid, nt](b["q"], b["k"], b["v"], b["g"], b["beta"], b["state"], b["o"])

    return launch
