"""``gdn.decode`` variant ``batched`` (lever ``gdn_batched_fla`` on): one
launch steps every sequence of the batch by one token.

Sequence ``n`` carries its state in the pool at ``slots[n]``::

    pool [slots, Hv, dk, dv] fp32 (updated in place; the kernel gets it
                                  flattened, see ``_step.make_step``)    slots [N] int32
    q, k [N, Hk, dk] fp16    v [N, Hv, dv] fp16    g, beta [N, Hv] fp32
    o    [N, Hv, dv] fp32

Launch: ``N * Hv * dv/BV`` blocks, block ``(n, h, s)`` owning columns
``s*BV ..`` of ``pool[slots[n], h]``; each thread holds an ``R x 4`` patch
of that slice in registers (``_layout``, ``_step``)::

    load own patch (16 bytes a row: a warp reads four whole 128-byte lines)
    q, k, v, g, beta -> shared (fp32, each read once)      barrier
    partials -> red (shuffles across a warp's row parts)      barrier
    finish: delta, patch updated, o      store own patch (16 bytes a row)

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


def shared_bytes(tile) -> int:
    """``q``, ``k``, ``v``, ``g``, ``beta`` in fp32, one buffer of ``red``/``nrm``."""
    step = make_step(tile.dk, tile.dv, tile.bv, tile.threads)
    return 4 * (2 * tile.dk + tile.bv + 2) + step.shared_bytes


@lru_cache(maxsize=None)
def make_decode_block(DK: int, DV: int):
    """Device function ``decode_block(n, b, group, q, k, v, g, beta, slots,
    state, o)``: block ``b`` of sequence ``n``'s ``Hv * dv/BV`` blocks steps
    its column slice of ``state[slots[n]]`` (flat) by one token. The body of
    this kernel and of ``per_sequence``'s."""
    tile = tile_for(DK, DV)
    step = make_step(DK, DV, tile.bv, tile.threads)
    BV, NSL, R, CW, NT = tile.bv, tile.slices, tile.rows, tile.cw, tile.threads
    RED, NRM = step.red_shape, step.nrm_shape
    coords, offset, load, store = step.coords, step.offset, step.load, step.store
    partials, finish, put_cols = step.partials, step.finish, step.put_cols
    head_slice = make_head_slice(NSL, BV)
    RCW = R * CW  # state registers a thread

    @cuda.jit(device=True, inline="always")
    def decode_block(n, b, group, q, k, v, g, beta, slots, state, o):
        hv = v.shape[1]
        h, v0, hk = head_slice(b, group)
        tid = cuda.threadIdx.x
        c, p, grp, lead = coords(tid)

        qs = cuda.shared.array(DK, float32)
        ks = cuda.shared.array(DK, float32)
        vs = cuda.shared.array(BV, float32)
        gb = cuda.shared.array(2, float32)
        red = cuda.shared.array(RED, float32)
        nrm = cuda.shared.array(NRM, float32)
        Sr = cuda.local.array(RCW, float32)
        ov = cuda.local.array(CW, float32)
        col = v0 + c * CW
        o0 = offset(slots[n], h, hv, p, col)
        load(Sr, state, o0)
        for e in range(tid, DK, NT):
            qs[e] = float32(q[n, hk, e])
            ks[e] = float32(k[n, hk, e])
        for e in range(tid, BV, NT):
            vs[e] = float32(v[n, h, v0 + e])
        if tid == 0:
            gb[0] = g[n, h]
            gb[1] = beta[n, h]
        cuda.syncthreads()
        partials(Sr, qs, ks, c, p, grp, lead, red, nrm)
        cuda.syncthreads()
        finish(Sr, ks, c, p, red, nrm, vs, c * CW, gb[0], gb[1], ov)
        store(Sr, state, o0)
        if p == 0:
            put_cols(o[n, h], col, ov, 0)

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
    return slice_launch(shape, shared_bytes, sequences=shape["n"])


def build(shape):
    grid, nt = launch_config(shape)
    kern = make_decode_batched(shape["dk"], shape["dv"])
    return bind(kern, grid, nt, DECODE_ARGS, flat=("state",))
