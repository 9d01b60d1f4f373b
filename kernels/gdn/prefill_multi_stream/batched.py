"""``gdn.prefill_multi_stream`` variant ``batched`` (Metrale's
``gdn_batched_fla`` on, K and V head dims 128): every stream's prefill in
one launch, each stream's tokens given by offsets as a varlen (``cu_seqlens``)
batch gives them.

Layouts: the streams' tokens concatenated, stream ``s`` at rows
``off[s] .. off[s+1]-1``::

    q, k [T, Hk, dk] fp16    v [T, Hv, dv] fp16    g, beta [T, Hv] fp32
    offsets [S+1] int32 (off[0] = 0, off[S] = T)
    state [S, Hv, dk, dv] fp32, stream s's in state[s] (updated in place)
    o [T, Hv, dv] fp32

Launch: ``S * Hv * dv/BV`` blocks, stream-major: block ``(s, h, slice)`` is
``gdn.prefill``'s block program (``_prefill``: the column slice of
``state[s, h]`` loaded into shared memory once, 16 bytes a step, walked
through the chunks, stored once) over the token range ``off[s] ..
off[s+1]``, its chunks restarting at the stream's first token (a stream
shorter than a chunk is one partial chunk; nothing of a neighbouring stream
enters it)::

    stream 0 |c0 ........|c1 ..|        stream 1 |c0 ...|      stream 2 |c0|
    blocks (0, h, *)                    blocks (1, h, *)               (2, h, *)

The per-block work is ``gdn.prefill``'s, so the variant is compute-bound
where that one is; what one launch buys over one per stream is the launch
overheads and the tails: ``S * 128`` blocks at the model shape fill the
GPU from two streams on, where one stream's 128 blocks leave it partly
idle, and a short stream's blocks run beside a long one's instead of after
them.

``leak=True`` compiles a deliberately wrong kernel for the tests: one block
per head slice walks every stream in turn with the state carried from one
stream into the next (as a kernel that ignored the offsets' state
boundaries would), writing each stream's final state to its slot.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from .._chunk import make_chunk, make_scratch, make_slice_io, shared_bytes, stage_bytes, tensor_core_launch
from .._layout import SHARED_ALIGN, bind, make_head_slice, slice_launch, tile_for, warp_threads
from .._mma_qk import TC_FORM

NAME = "batched"
TENSOR_CORES = TC_FORM  # A and P on mma.sync (``_mma_qk``)
SUMMARY = "all streams in one launch, block per (stream, head, column slice), chunks restart at each stream's offset"
MULTI_STREAM_ARGS = ("q", "k", "v", "g", "beta", "offsets", "state", "o")


@lru_cache(maxsize=None)
def make_prefill_multi_stream(C: int, DK: int, DV: int, leak: bool = False):
    """Compile the multi-stream chunked prefill for chunks of ``C`` tokens
    at head dims ``DK x DV``, the state slice kept in shared memory.
    ``leak``: the broken kernel of the module notes (tests only)."""
    tile = tile_for(DK, DV)
    BV, NT, NSL = tile.bv, warp_threads(tile), tile.slices
    chunk = make_chunk(C, DK, BV, NT, True)
    scratch = make_scratch(C, DK, BV)
    load_slice, store_slice = make_slice_io(DK, DV, BV, NT)
    head_slice = make_head_slice(NSL, BV)
    LEAK = leak

    @cuda.jit
    def gdn_prefill_multi_stream(q, k, v, g, beta, offsets, state, o):
        group = v.shape[1] // q.shape[1]
        per = v.shape[1] * NSL  # blocks per stream
        b = cuda.blockIdx.x
        s = b // per
        h, v0, hk = head_slice(b - s * per, group)
        tid = cuda.threadIdx.x
        scr = scratch()
        Ssh = cuda.shared.array((DK, BV), float32, alignment=SHARED_ALIGN)

        if LEAK:
            if s == 0:  # one block per head slice, the state carried across streams
                load_slice(Ssh, state[0, h], v0, tid)
                for j in range(offsets.shape[0] - 1):
                    t1 = offsets[j + 1]
                    for c0 in range(offsets[j], t1, C):
                        chunk(q, k, v, g, beta, Ssh, Ssh, o, scr, h, hk, v0, c0, min(C, t1 - c0), tid)
                    store_slice(state[j, h], Ssh, v0, tid)
        else:
            S2 = state[s, h]
            t1 = offsets[s + 1]
            load_slice(Ssh, S2, v0, tid)  # one read; the first chunk's barrier orders it
            for c0 in range(offsets[s], t1, C):
                chunk(q, k, v, g, beta, S2, Ssh, o, scr, h, hk, v0, c0, min(C, t1 - c0), tid)
            store_slice(S2, Ssh, v0, tid)  # one write (the chunk's last phase's mapping)

    return gdn_prefill_multi_stream


def launch_config(shape) -> tuple[int, int]:
    """``(grid, threads)``: ``S * Hv * dv/BV`` blocks of whole warps."""
    C = shape["chunk"]
    return slice_launch(shape, lambda t: shared_bytes(C, t.dk, t.bv, True), sequences=shape["s"], whole_warps=True)


def build_batched(shape, leak: bool = False):
    grid, nt = launch_config(shape)
    kern = make_prefill_multi_stream(shape["chunk"], shape["dk"], shape["dv"], leak)
    C, tile = shape["chunk"], tile_for(shape["dk"], shape["dv"])
    dyn, static = stage_bytes(C, tile.dk, tile.bv), shared_bytes(C, tile.dk, tile.bv, True)
    return tensor_core_launch(bind(kern, grid, nt, MULTI_STREAM_ARGS, dynamic=dyn, static=static))


def build(shape):
    return build_batched(shape)
