"""``gdn.verify`` variant ``recurrent``: the token-by-token kernel, taken when
the WY levers are off (or do not cover ``T``).

Launch: one block per (value head, column slice), ``Hv * dv/BV`` blocks of
``BV * KSPLIT`` threads (``_layout``). The block stages the ``T`` tokens'
``q``/``k`` (raw, fp32), its ``v`` columns, ``g`` and ``beta`` in shared
memory with one round of loads, then walks the tokens with the state slice
in registers::

    thread (j, p): Sr[0..R-1] = state[h, p*R : p*R+R, v0+j]    (read once)
    for t in 0..T-1:                                           (T compile-time)
        partials(t) -> red[t % 2]     barrier     finish(t): Sr updated, o[t]
    state[h, p*R : p*R+R, v0+j] = Sr                           (written once)

One barrier per token (``red``/``nrm`` double-buffered by token parity). The
state is read and written once per call, like the WY kernels; what differs is
the dependency chain: ``T`` sequential steps, each waiting on a block-wide
reduction, instead of the WY form's parallel dot products.

Bandwidth-bound on the state, like every ``gdn.verify`` variant (the
figures are in the package docstring).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from .._layout import TOKEN_ARGS, bind, make_head_slice, slice_launch, tile_for
from .._step import make_step

NAME = "recurrent"
SUMMARY = "token-by-token recurrence, state slice in registers, one barrier per token"


def shared_bytes(T: int, DK: int, BV: int, KSPLIT: int) -> int:
    return 4 * (2 * T * DK + T * BV + 2 * T + 2 * 2 * KSPLIT * BV + 2 * 3 * KSPLIT)


@lru_cache(maxsize=None)
def make_verify_recurrent(T: int, DK: int, DV: int):
    """Compile the token-by-token verify for ``T`` tokens at ``DK x DV``."""
    tile = tile_for(DK, DV)
    BV, KS, NT, NSL, R = tile.bv, tile.ksplit, tile.threads, tile.slices, tile.rows
    offset, load, store, partials, finish = make_step(DK, DV, BV, KS)
    head_slice = make_head_slice(NSL, BV)

    @cuda.jit
    def gdn_verify_recurrent(q, k, v, g, beta, state, o):
        hv = v.shape[1]
        h, v0, hk = head_slice(cuda.blockIdx.x, hv // q.shape[1])
        tid = cuda.threadIdx.x
        j = tid % BV
        p = tid // BV

        qs = cuda.shared.array((T, DK), float32)
        ks = cuda.shared.array((T, DK), float32)
        vs = cuda.shared.array((T, BV), float32)
        gb = cuda.shared.array((2, T), float32)
        red = cuda.shared.array((2, 2, KS, BV), float32)
        nrm = cuda.shared.array((2, 3, KS), float32)
        Sr = cuda.local.array(R, float32)

        for e in range(tid, T * DK, NT):
            t = e // DK
            d = e - t * DK
            qs[t, d] = float32(q[t, hk, d])
            ks[t, d] = float32(k[t, hk, d])
        for e in range(tid, T * BV, NT):
            t = e // BV
            vs[t, e - t * BV] = float32(v[t, h, v0 + e - t * BV])
        for t in range(tid, T, NT):
            gb[0, t] = g[t, h]
            gb[1, t] = beta[t, h]
        o0 = offset(0, h, hv, p, v0 + j)  # state viewed flat: [Hv * dk * dv]
        load(Sr, state, o0)
        cuda.syncthreads()

        for t in range(T):
            par = t % 2
            partials(Sr, qs[t], ks[t], p, j, red[par], nrm[par])
            cuda.syncthreads()
            oj = finish(Sr, ks[t], p, j, red[par], nrm[par], vs[t, j], gb[0, t], gb[1, t])
            if p == 0:
                o[t, h, v0 + j] = oj
        store(Sr, state, o0)

    return gdn_verify_recurrent


def build(shape):
    T = shape["t"]
    grid, nt = slice_launch(shape, lambda t: shared_bytes(T, t.dk, t.bv, t.ksplit))
    kern = make_verify_recurrent(T, shape["dk"], shape["dv"])
    return bind(kern, grid, nt, TOKEN_ARGS, flat=("state",))
