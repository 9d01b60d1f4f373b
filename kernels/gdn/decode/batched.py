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
    q, k, v -> shared (fp32, each read once, 16 bytes a lane: ``_rows``),
    g, beta -> shared                                         barrier
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

from ...common.launch import device_inline
from .._layout import SHARED_ALIGN, bind, make_head_slice, slice_launch, tile_for
from .._rows import make_stage_rows
from .._step import make_step

NAME = "batched"
SUMMARY = "all sequences in one launch, block per (sequence, head, column slice), state in registers"
DECODE_ARGS = ("q", "k", "v", "g", "beta", "slots", "state", "o")


def shared_bytes(tile) -> int:
    """``q``, ``k``, ``v``, ``g``, ``beta`` in fp32, one buffer of ``red``/``nrm``."""
    step = make_step(tile.dk, tile.dv, tile.bv, tile.threads)
    return 4 * (2 * tile.dk + tile.bv + 2) + step.shared_bytes


@lru_cache(maxsize=None)
def make_decode_block(DK: int, DV: int, TAIL_FAULT: int = 0):
    """Device function ``decode_block(n, b, group, q, k, v, g, beta, slots,
    state, o)``: block ``b`` of sequence ``n``'s ``Hv * dv/BV`` blocks steps
    its column slice of ``state[slots[n]]`` (flat) by one token. The body of
    this kernel and of ``per_sequence``'s. ``TAIL_FAULT``: the row
    staging's test-only knob (``_rows.make_stage_rows``)."""
    tile = tile_for(DK, DV)
    step = make_step(DK, DV, tile.bv, tile.threads)
    BV, NSL, R, CW, NT = tile.bv, tile.slices, tile.rows, tile.cw, tile.threads
    RED, NRM = step.red_shape, step.nrm_shape
    coords, offset, load, store = step.coords, step.offset, step.load, step.store
    partials, finish, put_cols = step.partials, step.finish, step.put_cols
    head_slice = make_head_slice(NSL, BV)
    wide_qk, stage_qk = make_stage_rows(DK, NT, TAIL_FAULT)
    wide_v, stage_v = make_stage_rows(BV, NT, TAIL_FAULT)
    RCW = R * CW  # state registers a thread

    @device_inline
    def decode_block(n, b, group, q, k, v, g, beta, slots, state, o):
        hv = v.shape[1]
        h, v0, hk = head_slice(b, group)
        tid = cuda.threadIdx.x
        c, p, grp, lead = coords(tid)

        qs = cuda.shared.array((1, DK), float32, alignment=SHARED_ALIGN)
        ks = cuda.shared.array((1, DK), float32, alignment=SHARED_ALIGN)
        vs = cuda.shared.array((1, BV), float32, alignment=SHARED_ALIGN)
        gb = cuda.shared.array(2, float32)
        red = cuda.shared.array(RED, float32)
        nrm = cuda.shared.array(NRM, float32)
        Sr = cuda.local.array(RCW, float32)
        ov = cuda.local.array(CW, float32)
        col = v0 + c * CW
        o0 = offset(slots[n], h, hv, p, col)
        load(Sr, state, o0)
        qkw = wide_qk(q, 0) and wide_qk(k, 0)  # the same for every block of the launch
        stage_qk(qs, q, n, 1, hk, 0, qkw, tid)
        stage_qk(ks, k, n, 1, hk, 0, qkw, tid)
        stage_v(vs, v, n, 1, h, v0, wide_v(v, v0), tid)
        if tid == 0:
            gb[0] = g[n, h]
            gb[1] = beta[n, h]
        cuda.syncthreads()
        partials(Sr, qs[0], ks[0], c, p, grp, lead, red, nrm)
        cuda.syncthreads()
        finish(Sr, ks[0], c, p, red, nrm, vs[0], c * CW, gb[0], gb[1], ov)
        store(Sr, state, o0)
        if p == 0:
            put_cols(o[n, h], col, ov, 0)

    return decode_block


@lru_cache(maxsize=None)
def make_decode_batched(DK: int, DV: int, TAIL_FAULT: int = 0):
    """Compile the batched single-token decode at ``DK x DV``."""
    NSL = tile_for(DK, DV).slices
    decode_block = make_decode_block(DK, DV, TAIL_FAULT)

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


def build(shape, TAIL_FAULT: int = 0):
    grid, nt = launch_config(shape)
    kern = make_decode_batched(shape["dk"], shape["dv"], TAIL_FAULT)
    return bind(kern, grid, nt, DECODE_ARGS, flat=("state",))
