"""``gdn.verify`` variant ``recurrent``: the token-by-token kernel, taken when
the WY levers are off (or do not cover ``T``).

Launch: one block per (value head, column slice), ``Hv * dv/BV`` blocks of
``BV * KSPLIT`` threads (``_layout``). The block stages the ``T`` tokens'
``q``/``k`` (raw, fp32), its ``v`` columns, ``g`` and ``beta`` in shared
memory with one round of loads (the rows 16 bytes a lane, ``_rows``), then
walks the tokens with the state slice in registers, an ``R x 4`` patch a
thread (``_step``)::

    thread (c, p): Sr = state[h, p*R : p*R+R, v0+4c : v0+4c+4]   (read once,
                                                                16 B a row)
    for t in 0..T-1:                                           (T compile-time)
        partials(t) -> red[t % 2]     barrier     finish(t): Sr updated, o[t]
    state[h, p*R : p*R+R, v0+4c : v0+4c+4] = Sr               (written once)

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

from .._layout import SHARED_ALIGN, TOKEN_ARGS, bind, jit_bounded, make_head_slice, slice_launch, tile_for
from .._rows import make_stage_rows
from .._step import make_step

NAME = "recurrent"
SUMMARY = "token-by-token recurrence, state slice in registers, one barrier per token"


def shared_bytes(T: int, tile) -> int:
    step = make_step(tile.dk, tile.dv, tile.bv, tile.threads)
    return 4 * (2 * T * tile.dk + T * tile.bv + 2 * T) + 2 * step.shared_bytes


@lru_cache(maxsize=None)
def make_verify_recurrent(T: int, DK: int, DV: int, TAIL_FAULT: int = 0):
    """Compile the token-by-token verify for ``T`` tokens at ``DK x DV``
    (``TAIL_FAULT``: ``_rows.make_stage_rows``'s test-only knob)."""
    tile = tile_for(DK, DV)
    step = make_step(DK, DV, tile.bv, tile.threads)
    BV, NT, NSL, R, CW = tile.bv, tile.threads, tile.slices, tile.rows, tile.cw
    RED, NRM = (2,) + step.red_shape, (2,) + step.nrm_shape
    coords, offset, load, store = step.coords, step.offset, step.load, step.store
    partials, finish, put_cols = step.partials, step.finish, step.put_cols
    head_slice = make_head_slice(NSL, BV)
    wide_qk, stage_qk = make_stage_rows(DK, NT, TAIL_FAULT, SPREAD=True)
    wide_v, stage_v = make_stage_rows(BV, NT, TAIL_FAULT, SPREAD=True)
    RCW = R * CW  # state registers a thread

    # Six blocks an SM: at most 80 registers (d = 128: 80, no spill; unbounded,
    # ptxas keeps every staged piece's words in flight at once and takes 96).
    @jit_bounded(NT, 6)
    def gdn_verify_recurrent(q, k, v, g, beta, state, o):
        hv = v.shape[1]
        h, v0, hk = head_slice(cuda.blockIdx.x, hv // q.shape[1])
        tid = cuda.threadIdx.x
        c, p, grp, lead = coords(tid)

        qs = cuda.shared.array((T, DK), float32, alignment=SHARED_ALIGN)
        ks = cuda.shared.array((T, DK), float32, alignment=SHARED_ALIGN)
        vs = cuda.shared.array((T, BV), float32, alignment=SHARED_ALIGN)
        gb = cuda.shared.array((2, T), float32)
        red = cuda.shared.array(RED, float32)
        nrm = cuda.shared.array(NRM, float32)
        Sr = cuda.local.array(RCW, float32)
        ov = cuda.local.array(CW, float32)

        o0 = offset(0, h, hv, p, v0 + c * CW)  # state viewed flat: [Hv * dk * dv]
        load(Sr, state, o0)
        qkw = wide_qk(q, 0) and wide_qk(k, 0)  # the same for every block of the launch
        stage_qk(qs, q, 0, T, hk, 0, qkw, tid)
        stage_qk(ks, k, 0, T, hk, 0, qkw, tid)
        stage_v(vs, v, 0, T, h, v0, wide_v(v, v0), tid)
        for t in range(tid, T, NT):
            gb[0, t] = g[t, h]
            gb[1, t] = beta[t, h]
        cuda.syncthreads()

        for t in range(T):
            par = t % 2
            partials(Sr, qs[t], ks[t], c, p, grp, lead, red[par], nrm[par])
            cuda.syncthreads()
            finish(Sr, ks[t], c, p, red[par], nrm[par], vs[t], c * CW, gb[0, t], gb[1, t], ov)
            if p == 0:
                put_cols(o[t, h], v0 + c * CW, ov, 0)
        store(Sr, state, o0)

    return gdn_verify_recurrent


def build(shape, TAIL_FAULT: int = 0):
    T = shape["t"]
    grid, nt = slice_launch(shape, lambda t: shared_bytes(T, t))
    kern = make_verify_recurrent(T, shape["dk"], shape["dv"], TAIL_FAULT)
    return bind(kern, grid, nt, TOKEN_ARGS, flat=("state",))
