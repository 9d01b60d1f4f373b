"""``gdn.verify`` variant ``wyn``: the general WY-N kernel, ``T`` tokens as
one chunk of the WY form, ``T`` a compile-time constant of the factory (every
loop bound and shared array is sized for it).

Launch: one block per (value head, column slice), ``Hv * dv/BV`` blocks of
``BV * KSPLIT`` threads rounded up to whole warps (``_layout``; the chunk's
``k.k`` and ``q.k`` tiles run on ``mma.sync``, ``_mma_qk``)::

    block (h, s):  state slice -> Ssh (read once)
                   chunk(c0 = 0, L = T)      A, T = (I+A)^-1, delta, o, S'
                   Ssh -> state slice (written once)

The chunk's algebra and shared-memory layout are ``_chunk``'s. Against
``recurrent`` it trades the ``T`` dependent steps for parallel dot products
and a ``T x T`` triangular solve; both move the state once per call, which is
the saving over ``T`` single-token steps (``2 T`` vs ``2`` state transfers).

Bandwidth-bound on the state, like every ``gdn.verify`` variant (the
figures are in the package docstring).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from .._chunk import make_chunk, make_scratch, make_slice_io, shared_bytes, stage_bytes, tensor_core_launch
from .._layout import SHARED_ALIGN, TOKEN_ARGS, bind, make_head_slice, slice_launch, tile_for, warp_threads
from .._mma_qk import LAYOUT, TC_FORM

NAME = "wyn"
TENSOR_CORES = TC_FORM  # A and P on mma.sync (``_mma_qk``)
SUMMARY = "WY form over all T tokens as one chunk, T compile-time, state slice in shared memory"


@lru_cache(maxsize=None)
def make_verify_wyn(T: int, DK: int, DV: int, layout=LAYOUT):
    """Compile the WY-N verify for ``T`` tokens at ``DK x DV`` (``layout``:
    the MMA fragment maps, ``_mma_qk``)."""
    tile = tile_for(DK, DV)
    BV, NT, NSL = tile.bv, warp_threads(tile), tile.slices
    chunk = make_chunk(T, DK, BV, NT, True, layout)
    scratch = make_scratch(T, DK, BV)
    load_slice, store_slice = make_slice_io(DK, DV, BV, NT)
    head_slice = make_head_slice(NSL, BV)

    @cuda.jit
    def gdn_verify_wyn(q, k, v, g, beta, state, o):
        group = v.shape[1] // q.shape[1]
        h, v0, hk = head_slice(cuda.blockIdx.x, group)
        tid = cuda.threadIdx.x
        scr = scratch()
        Ssh = cuda.shared.array((DK, BV), float32, alignment=SHARED_ALIGN)
        S2 = state[h]
        load_slice(Ssh, S2, v0, tid)
        chunk(q, k, v, g, beta, S2, Ssh, o, scr, h, hk, v0, 0, T, tid)
        store_slice(S2, Ssh, v0, tid)

    return gdn_verify_wyn


def build(shape):
    T = shape["t"]
    grid, nt = slice_launch(shape, lambda t: shared_bytes(T, t.dk, t.bv, True), whole_warps=True)
    tile = tile_for(shape["dk"], shape["dv"])
    dyn, static = stage_bytes(T, tile.dk, tile.bv), shared_bytes(T, tile.dk, tile.bv, True)
    kern = make_verify_wyn(T, shape["dk"], shape["dv"])
    return tensor_core_launch(bind(kern, grid, nt, TOKEN_ARGS, dynamic=dyn, static=static))
