"""``gdn.decode`` variant ``batched`` (lever ``gdn_batched_fla`` on): one
launch steps every sequence of the batch by one token.

Sequence ``n`` carries its state in the pool at ``slots[n]``::

    pool [slots, Hv, dk, dv] fp32 (updated in place; the kernel gets it
                                  flattened, see ``_step.make_step``)    slots [N] int32
    q, k [N, Hk, dk] fp16    v [N, Hv, dv] fp16    g, beta [N, Hv] fp32
    o    [N, Hv, dv] fp32

Launch: ``N * Hv * dv/BV`` blocks of ``BV * KSPLIT`` threads, block
``(n, h, s)`` owning columns ``s*BV ..`` of ``pool[slots[n], h]``; thread
``(j, p)`` holds rows ``p*R .. p*R+R-1`` of column ``j`` in registers
(``_layout``, ``_step``)::

    load own rows (coalesced: a warp reads 32 consecutive columns of a row)
    partials -> red       barrier       finish: delta_j, rows updated, o_j
    store own rows

Memory-bound: per (sequence, head) the step reads and writes the 64 KiB
state (dk = dv = 128) once and does ~7 flops per state element, far below
the H200's flop/byte balance; everything else it moves is < 1 KiB. One
launch keeps ``N * 128`` blocks in flight at the model shape, enough to
cover the SMs from N = 2 on.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from .._layout import bind, make_head_slice, slice_launch, tile_for
from .._step import make_step

NAME = "batched"
SUMMARY = "all sequences in one launch, block per (sequence, head, column slice), state in registers"
DECODE_ARGS = ("q", "k", "v", "g", "beta", "slots", "state", "o")


def shared_bytes(BV: int, KS: int) -> int:
    return 4 * (2 * KS * BV + 3 * KS)


@lru_cache(maxsize=None)
def make_decode_block(DK: int, DV: int):
    """Device function ``decode_block(n, b, group, q, k, v, g, beta, slots,
    state, o)``: block ``b`` of sequence ``n``'s ``Hv * dv/BV`` blocks steps
    its column slice of ``state[slots[n]]`` (flat) by one token. The body of
    this kernel and of ``per_sequence``'s."""
    tile = tile_for(DK, DV)
    BV, KS, NSL, R = tile.bv, tile.ksplit, tile.slices, tile.rows
    offset, load, store, partials, finish = make_step(DK, DV, BV, KS)
    head_slice = make_head_slice(NSL, BV)

    @cuda.jit(device=True, inline="always")
    def decode_block(n, b, group, q, k, v, g, beta, slots, state, o):
        hv = v.shape[1]
        h, v0, hk = head_slice(b, group)
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

    return decode_block


@lru_cache(maxsize=None)
def make_decode_batched(DK: int, DV: int):
    """Compile the batched single-token decode at ``DK x DV``."""
    NSL = tile_for(DK, DV).slices
    decode_block = make_decode_block(DK, DV)

    @cuda.jit
    def gdn_decode_batched(q, k, v, g, beta, slots, state, o):
        hv = v.shape[1]
        group = hv // q.shape[1]
        bid = cuda.blockIdx.x
        n = bid // (hv * NSL)
        decode_block(n, bid - n * (hv * NSL), group, q, k, v, g, beta, slots, state, o)

    return gdn_decode_batched


def launch_config(shape) -> tuple[int, int]:
    """``(grid, threads)`` of the batched kernel for ``shape``'s batch and
    heads (the decode step of ``attention.decode_graph`` launches it too)."""
    return slice_launch(shape, lambda t: shared_bytes(t.bv, t.ksplit), sequences=shape["n"])


def build(shape):
    grid, nt = launch_config(shape)
    kern = make_decode_batched(shape["dk"], shape["dv"])
    return bind(kern, grid, nt, DECODE_ARGS, flat=("state",))
