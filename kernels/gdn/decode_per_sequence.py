"""``gdn.decode`` variant ``per_sequence`` (lever ``gdn_batched_fla`` off):
one launch per sequence of the batch, each stepping that sequence's state.

Same layouts and per-block work as ``batched`` (see there); the sequence
index is a kernel argument instead of a block coordinate::

    for n in 0..N-1:   launch Hv * dv/BV blocks of BV * KSPLIT threads on
                       pool[slots[n]] and row n of q, k, v, g, beta, o

Memory-bound like ``batched`` and moves the same bytes; what it adds is
``N`` launch overheads and ``N`` tails in which a launch of ``Hv * dv/BV``
blocks (128 at the model shape) cannot fill the GPU.
"""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ._layout import check_launch, group_of, tile_for
from ._step import make_step
from .decode_batched import shared_bytes

NAME = "per_sequence"
SUMMARY = "one launch per sequence, block per (head, column slice), state in registers"


@lru_cache(maxsize=None)
def make_decode_per_sequence(DK: int, DV: int):
    """Compile the one-sequence decode step at ``DK x DV``."""
    tile = tile_for(DK, DV)
    BV, KS, NSL, R = tile.bv, tile.ksplit, tile.slices, tile.rows
    offset, load, store, partials, finish = make_step(DK, DV, BV, KS)

    @cuda.jit
    def gdn_decode_one(n, q, k, v, g, beta, slots, state, o):
        hv = v.shape[1]
        group = hv // q.shape[1]
        bid = cuda.blockIdx.x
        h = bid // NSL
        v0 = (bid - h * NSL) * BV
        hk = h // group
        tid = cuda.threadIdx.x
        j = tid % BV
        p = tid // BV

        red = cuda.shared.array((2, KS, BV), float32)
        nrm = cuda.shared.array((3, KS), float32)
        Sr = cuda.local.array(R, float32)
        o0 = offset(slots[n], h, hv, p, v0 + j)
        load(Sr, state, o0)
        partials(Sr, q[n, hk], k[n, hk], p, j, red, nrm)
        cuda.syncthreads()
        oj = finish(Sr, k[n, hk], p, j, red, nrm, v[n, h, v0 + j], g[n, h], beta[n, h])
        store(Sr, state, o0)
        if p == 0:
            o[n, h, v0 + j] = oj

    return gdn_decode_one


def build(shape):
    N, dk, dv, hk, hv = shape["n"], shape["dk"], shape["dv"], shape["hk"], shape["hv"]
    group_of(hk, hv)
    tile = tile_for(dk, dv)
    grid, nt = check_launch(hv * tile.slices, tile.threads, shared_bytes(tile.bv, tile.ksplit))
    kern = make_decode_per_sequence(dk, dv)

    def launch(b):
        st = b["state"]
        args = (b["q"], b["k"], b["v"], b["g"], b["beta"], b["slots"], st.reshape(st.size), b["o"])
        for n in range(N):
            kern[grid, nt](n, *args)

    return launch
