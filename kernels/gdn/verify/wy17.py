"""``gdn.verify`` variant ``wy17``: the WY kernel specialised at compile time
for 17-token verify steps (16 MTP drafts + 1).

17 is one past a power of two, so instead of a 17-wide chunk the kernel runs
the WY form on the first 16 tokens -- a 16 x 16 ``A``/``T``/``P`` tile, all
loop bounds constant -- and applies token 16 as one delta-rule step on the
state slice, still on chip::

    block (h, s):  state slice -> Ssh                         (read once)
                   chunk(c0 = 0, L = 16)  on Ssh               (_chunk)
                   token 16's q, k, v slice, g, beta -> shared (_rows)  barrier
                   Sr <- own rows of Ssh; token 16: partials | barrier | finish
                   Sr -> state slice                           (written once)

Launch: one block per (value head, column slice), ``Hv * dv/BV`` blocks of
``_layout.Tile.threads`` rounded up to whole warps (the chunk's ``k.k`` and
``q.k`` tiles run on ``mma.sync``, ``_mma_qk``); each thread of the last
step holds an ``R x 4`` patch of the slice (``_layout``, ``_step``), which
it writes back with 16-byte stores, and threads past ``Tile.threads``
(only at the smoke shapes) sit the step out. Building it for
any other ``T`` is refused: ``select`` only picks it at ``T == 17``.

Bandwidth-bound on the state, like every ``gdn.verify`` variant (the
figures are in the package docstring).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from .._chunk import make_chunk, make_scratch, make_slice_io, shared_bytes, stage_bytes, tensor_core_launch
from .._layout import SHARED_ALIGN, TOKEN_ARGS, bind, make_head_slice, slice_launch, tile_for, warp_threads
from .._mma_qk import LAYOUT, TC_FORM
from .._rows import make_stage_rows
from .._step import make_step

NAME = "wy17"
SUMMARY = "17-token verify: 16-token WY chunk (constant bounds) + one delta step, state on chip"
TENSOR_CORES = TC_FORM  # A and P on mma.sync (``_mma_qk``)
TOKENS = 17
WY = 16  # tokens handled in the WY chunk; the last one is a single step


@lru_cache(maxsize=None)
def make_verify_wy17(DK: int, DV: int, layout=LAYOUT):
    """Compile the 17-token verify at ``DK x DV`` (``layout``: the MMA
    fragment maps, ``_mma_qk``)."""
    tile = tile_for(DK, DV)
    BV, NT, NSL, R, CW = tile.bv, warp_threads(tile), tile.slices, tile.rows, tile.cw
    STEP = tile.threads  # threads of the last token's step; the rest (smoke shapes) wait
    chunk = make_chunk(WY, DK, BV, NT, True, layout)
    scratch = make_scratch(WY, DK, BV)
    load_slice, _ = make_slice_io(DK, DV, BV, NT)
    head_slice = make_head_slice(NSL, BV)
    step = make_step(DK, DV, BV, STEP)
    RED, NRM = step.red_shape, step.nrm_shape
    coords, partials, finish, put_cols = step.coords, step.partials, step.finish, step.put_cols
    load_shared = step.load_shared
    wide_qk, stage_qk = make_stage_rows(DK, NT, SPREAD=True)
    wide_v, stage_v = make_stage_rows(BV, NT, SPREAD=True)
    LAST = TOKENS - 1
    RCW = R * CW  # state registers a thread

    @cuda.jit
    def gdn_verify_wy17(q, k, v, g, beta, state, o):
        group = v.shape[1] // q.shape[1]
        h, v0, hk = head_slice(cuda.blockIdx.x, group)
        tid = cuda.threadIdx.x
        c, p, grp, lead = coords(tid)

        scr = scratch()
        Ssh = cuda.shared.array((DK, BV), float32, alignment=SHARED_ALIGN)
        red = cuda.shared.array(RED, float32)
        nrm = cuda.shared.array(NRM, float32)
        ql = cuda.shared.array((1, DK), float32, alignment=SHARED_ALIGN)
        kl = cuda.shared.array((1, DK), float32, alignment=SHARED_ALIGN)
        vl = cuda.shared.array((1, BV), float32, alignment=SHARED_ALIGN)
        gl = cuda.shared.array(2, float32)
        Sr = cuda.local.array(RCW, float32)
        ov = cuda.local.array(CW, float32)
        S2 = state[h]
        load_slice(Ssh, S2, v0, tid)
        chunk(q, k, v, g, beta, S2, Ssh, o, scr, h, hk, v0, 0, WY, tid)
        # chunk() ended on a barrier: Ssh holds the state after token 15.
        # The last token's rows, once a block, 16 bytes a lane (``_rows``).
        qkw = wide_qk(q, 0) and wide_qk(k, 0)
        stage_qk(ql, q, LAST, 1, hk, 0, qkw, tid)
        stage_qk(kl, k, LAST, 1, hk, 0, qkw, tid)
        stage_v(vl, v, LAST, 1, h, v0, wide_v(v, v0), tid)
        if tid == 0:
            gl[0] = g[LAST, h]
            gl[1] = beta[LAST, h]
        cuda.syncthreads()
        if tid < STEP:
            load_shared(Sr, Ssh, p, c)
            partials(Sr, ql[0], kl[0], c, p, grp, lead, red, nrm)
        cuda.syncthreads()
        if tid < STEP:
            finish(Sr, kl[0], c, p, red, nrm, vl[0], c * CW, gl[0], gl[1], ov)
            for r in range(R):
                put_cols(S2[p * R + r], v0 + c * CW, Sr, r)
            if p == 0:
                put_cols(o[LAST, h], v0 + c * CW, ov, 0)

    return gdn_verify_wy17


def shared_bytes_wy17(tile) -> int:
    step = make_step(tile.dk, tile.dv, tile.bv, tile.threads)
    return shared_bytes(WY, tile.dk, tile.bv, True) + step.shared_bytes + 4 * (2 * tile.dk + tile.bv + 2)


def build(shape):
    if shape["t"] != TOKENS:
        raise ValueError(f"wy17 is compiled for {TOKENS} tokens, not T={shape['t']}")
    grid, nt = slice_launch(shape, shared_bytes_wy17, whole_warps=True)
    tile = tile_for(shape["dk"], shape["dv"])
    dyn, static = stage_bytes(WY, tile.dk, tile.bv), shared_bytes_wy17(tile)
    kern = make_verify_wy17(shape["dk"], shape["dv"])
    return tensor_core_launch(bind(kern, grid, nt, TOKEN_ARGS, dynamic=dyn, static=static))
