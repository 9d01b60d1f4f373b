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
``BV * KSPLIT`` threads rounded up to whole warps (the chunk's ``k.k`` and
``q.k`` tiles run on ``mma.sync``, ``_mma_qk``); thread ``(j, p)`` of the
last step holds rows ``p*R .. p*R+R-1`` of column ``j`` (``_layout``,
``_step``), and threads past ``BV * KSPLIT`` (only at the smoke shapes)
sit the step out. Building it for
any other ``T`` is refused: ``select`` only picks it at ``T == 17``.

Bandwidth-bound on the state, like every ``gdn.verify`` variant (the
figures are in the package docstring).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from .._chunk import make_chunk, make_scratch, make_slice_io, shared_bytes, tensor_core_launch
from .._layout import TOKEN_ARGS, bind, make_head_slice, slice_launch, tile_for, warp_threads
from .._mma_qk import LAYOUT, TC_FORM
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
    BV, KS, NT, NSL, R = tile.bv, tile.ksplit, warp_threads(tile), tile.slices, tile.rows
    STEP = BV * KS  # threads of the last token's step; the rest (smoke shapes) wait
    chunk = make_chunk(WY, DK, BV, NT, True, layout)
    scratch = make_scratch(WY, BV)
    load_slice, _ = make_slice_io(DK, BV, NT)
    head_slice = make_head_slice(NSL, BV)
    _, _, _, partials, finish = make_step(DK, DV, BV, KS)
    LAST = TOKENS - 1

    @cuda.jit
    def gdn_verify_wy17(q, k, v, g, beta, state, o):
        group = v.shape[1] // q.shape[1]
        h, v0, hk = head_slice(cuda.blockIdx.x, group)
        tid = cuda.threadIdx.x
        j = tid % BV
        p = tid // BV

        scr = scratch()
        Ssh = cuda.shared.array((DK, BV), float32)
        red = cuda.shared.array((2, KS, BV), float32)
        nrm = cuda.shared.array((3, KS), float32)
        Sr = cuda.local.array(R, float32)
        S2 = state[h]
        load_slice(Ssh, S2, v0, tid)
        chunk(q, k, v, g, beta, S2, Ssh, o, scr, h, hk, v0, 0, WY, tid)
        # chunk() ended on a barrier: Ssh holds the state after token 15.
        if tid < STEP:
            for r in range(R):
                Sr[r] = Ssh[p * R + r, j]
            partials(Sr, q[LAST, hk], k[LAST, hk], p, j, red, nrm)
        cuda.syncthreads()
        if tid < STEP:
            oj = finish(Sr, k[LAST, hk], p, j, red, nrm, v[LAST, h, v0 + j], g[LAST, h], beta[LAST, h])
            for r in range(R):
                S2[p * R + r, v0 + j] = Sr[r]
            if p == 0:
                o[LAST, h, v0 + j] = oj

    return gdn_verify_wy17


def shared_bytes_wy17(DK: int, BV: int, KS: int) -> int:
    return shared_bytes(WY, DK, BV, True) + 4 * (2 * KS * BV + 3 * KS)


def build(shape):
    if shape["t"] != TOKENS:
        raise ValueError(f"wy17 is compiled for {TOKENS} tokens, not T={shape['t']}")
    grid, nt = slice_launch(shape, lambda t: shared_bytes_wy17(t.dk, t.bv, t.ksplit), whole_warps=True)
    return tensor_core_launch(bind(make_verify_wy17(shape["dk"], shape["dv"]), grid, nt, TOKEN_ARGS))
