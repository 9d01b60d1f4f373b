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

Compute-bound at model shapes. The chunk's ``k.k`` and ``q.k`` products
(about a third of a block's FLOPs at the model shape) run on ``mma.sync``
with the fp16 ``q``/``k`` as stored (``_mma_qk``); the products with an fp32
operand stay on FP32 FMAs (``_chunk`` says why). The launch says so for the
record (``tensor_cores``, ``tc_dtype``), and the block is whole warps
(``_layout.warp_threads``).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ._chunk import make_chunk, make_scratch, make_slice_io, shared_bytes, stage_bytes, tensor_core_launch
from ._layout import SHARED_ALIGN, TOKEN_ARGS, bind, make_head_slice, slice_launch, tile_for, warp_threads
from ._mma_qk import LAYOUT


@lru_cache(maxsize=None)
def make_prefill(C: int, DK: int, DV: int, RESIDENT: bool, layout=LAYOUT, fault=None):
    """Compile the chunked prefill for chunks of ``C`` tokens at head dims
    ``DK x DV``; ``RESIDENT`` keeps the state slice in shared memory.
    ``layout``: the MMA fragment maps (``_mma_qk``; tests break one);
    ``fault``: a broken staging of the short last chunk (``_chunk.make_stage``;
    tests only)."""
    tile = tile_for(DK, DV)
    BV, NT, NSL = tile.bv, warp_threads(tile), tile.slices
    chunk = make_chunk(C, DK, BV, NT, RESIDENT, layout, fault)
    scratch = make_scratch(C, DK, BV)
    load_slice, store_slice = make_slice_io(DK, DV, BV, NT)
    head_slice = make_head_slice(NSL, BV)
    SSH = (DK, BV) if RESIDENT else (1, 1)

    @cuda.jit
    def gdn_prefill(q, k, v, g, beta, state, o):
        T = v.shape[0]
        group = v.shape[1] // q.shape[1]
        h, v0, hk = head_slice(cuda.blockIdx.x, group)
        tid = cuda.threadIdx.x
        scr = scratch()
        Ssh = cuda.shared.array(SSH, float32, alignment=SHARED_ALIGN)
        S2 = state[h]

        if RESIDENT:  # one read of the slice; the first chunk's barrier orders it
            load_slice(Ssh, S2, v0, tid)
        for c0 in range(0, T, C):
            L = min(C, T - c0)
            chunk(q, k, v, g, beta, S2, Ssh, o, scr, h, hk, v0, c0, L, tid)
        if RESIDENT:  # one write (same element mapping as the chunk's last phase)
            store_slice(S2, Ssh, v0, tid)

    return gdn_prefill


def build_prefill(shape, resident: bool, layout=LAYOUT, fault=None):
    """``launch(bufs)`` for ``q, k, v, g, beta, state`` (in place) -> ``o``,
    marked as running on ``mma.sync`` with fp16 inputs."""
    C = shape["chunk"]
    grid, nt = slice_launch(shape, lambda t: shared_bytes(C, t.dk, t.bv, resident), whole_warps=True)
    kern = make_prefill(C, shape["dk"], shape["dv"], resident, layout, fault)
    tile = tile_for(shape["dk"], shape["dv"])
    dyn, static = stage_bytes(C, tile.dk, tile.bv), shared_bytes(C, tile.dk, tile.bv, resident)
    return tensor_core_launch(bind(kern, grid, nt, TOKEN_ARGS, dynamic=dyn, static=static))
