"""The chunked GDN prefill kernel, compiled with the state slice either kept
on chip for the whole chunk loop or round-tripped through global memory at
every chunk (the two ``gdn.prefill`` variants).

Launch: one block per (value head, column slice), ``Hv * dv/BV`` blocks of
``BV * KSPLIT`` threads (``_layout``); at Qwen3-Next shapes 128 blocks of
128 threads. Each block walks the sequence's chunks in order::

    block (h, s)                       chunk 0      chunk 1      ...   chunk n-1
      S slice -> [Ssh] --chunk()-->  [Ssh] --chunk()--> ... --> [Ssh] -> state   resident
      state   -------> chunk() <-> state <-> chunk() <-> ...  <-> state          global

The blocks of one head share nothing but the q/k/v/g/beta reads (L2 hits);
``A``, ``T`` and ``P`` are recomputed per column slice, which buys 4x the
blocks at dv = 128 (and a quarter of the state slice per block).

Compute-bound at model shapes: the per-chunk work is dense fp32 dot
products on CUDA cores (no tensor cores from Numba).
"""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ._chunk import make_chunk, shared_bytes
from ._layout import check_launch, group_of, tile_for


@lru_cache(maxsize=None)
def make_prefill(C: int, DK: int, DV: int, RESIDENT: bool):
    """Compile the chunked prefill for chunks of ``C`` tokens at head dims
    ``DK x DV``; ``RESIDENT`` keeps the state slice in shared memory."""
    tile = tile_for(DK, DV)
    BV, NT, NSL = tile.bv, tile.threads, tile.slices
    chunk = make_chunk(C, DK, BV, NT, RESIDENT)
    SSH = (DK, BV) if RESIDENT else (1, 1)

    @cuda.jit
    def gdn_prefill(q, k, v, g, beta, state, o):
        T = v.shape[0]
        group = v.shape[1] // q.shape[1]
        bid = cuda.blockIdx.x
        h = bid // NSL
        v0 = (bid - h * NSL) * BV
        hk = h // group
        tid = cuda.threadIdx.x

        M = cuda.shared.array((C, C), float32)
        D = cuda.shared.array((C, BV), float32)
        Gs = cuda.shared.array(C, float32)
        Bs = cuda.shared.array(C, float32)
        Rk = cuda.shared.array(C, float32)
        Rq = cuda.shared.array(C, float32)
        Ek = cuda.shared.array(C, float32)
        Ssh = cuda.shared.array(SSH, float32)
        S2 = state[h]

        if RESIDENT:  # one read of the slice; the first chunk's barrier orders it
            for e in range(tid, DK * BV, NT):
                d = e // BV
                Ssh[d, e - d * BV] = S2[d, v0 + e - d * BV]
        for c0 in range(0, T, C):
            L = min(C, T - c0)
            chunk(q, k, v, g, beta, S2, Ssh, o, M, D, Gs, Bs, Rk, Rq, Ek, h, hk, v0, c0, L, tid)
        if RESIDENT:  # one write (same element mapping as the chunk's last phase)
            for e in range(tid, DK * BV, NT):
                d = e // BV
                S2[d, v0 + e - d * BV] = Ssh[d, e - d * BV]

    return gdn_prefill


def build_prefill(shape, resident: bool):
    """``launch(bufs)`` for ``q, k, v, g, beta, state`` (in place) -> ``o``."""
    dk, dv, hk, hv, C = shape["dk"], shape["dv"], shape["hk"], shape["hv"], shape["chunk"]
    group_of(hk, hv)
    tile = tile_for(dk, dv)
    grid, nt = check_launch(hv * tile.slices, tile.threads, shared_bytes(C, dk, tile.bv, resident))
    kern = make_prefill(C, dk, dv, resident)

    def launch(b):
        kern[grid, nt](b["q"], b["k"], b["v"], b["g"], b["beta"], b["state"], b["o"])

    return launch
