"""``gdn.prefill_multi_stream`` variant ``per_stream`` (Metrale's
``gdn_batched_fla`` off, or on at head dims its batched kernel is not built
for): ``gdn.prefill``'s register-resident kernel (the engine's default
single-stream prefill, ``_prefill``) launched once per stream, on views of
that stream's rows and its state::

    for s in 0..S-1:   launch Hv * dv/BV blocks on q, k, v, g, beta, o rows
                       off[s] .. off[s+1]-1 and state[s]

The host takes the streams' lengths from the shape (as an engine's host
loop knows each prompt's length); the launches read the same bytes and do
the same arithmetic as ``batched``'s blocks. What it adds is ``S`` launch
overheads and ``S`` tails: each launch's ``Hv * dv/BV`` blocks (128 at the
model shape) do not fill the GPU, and a short stream waits for the long one
before it.
"""

from __future__ import annotations

from .._chunk import shared_bytes, stage_bytes, tensor_core_launch
from .._layout import dynamic_launch, slice_launch, tile_for
from .._mma_qk import TC_FORM
from .._prefill import make_prefill

NAME = "per_stream"
TENSOR_CORES = TC_FORM  # A and P on mma.sync (``_mma_qk``)
SUMMARY = "one gdn.prefill (register-resident) launch per stream, on views of its rows and its state"
TOKENS = ("q", "k", "v", "g", "beta")


def stream_lengths(shape) -> list[int]:
    """The streams' token counts, in order (``l0``, ``l1``, ... of the shape)."""
    return [int(shape[f"l{i}"]) for i in range(shape["s"])]


def build(shape):
    C = shape["chunk"]
    grid, nt = slice_launch(shape, lambda t: shared_bytes(C, t.dk, t.bv, True), whole_warps=True)
    kern = make_prefill(C, shape["dk"], shape["dv"], True)
    tile = tile_for(shape["dk"], shape["dv"])
    run = dynamic_launch(kern, grid, nt, stage_bytes(C, tile.dk, tile.bv), shared_bytes(C, tile.dk, tile.bv, True))
    offs = [0]
    for n in stream_lengths(shape):
        offs.append(offs[-1] + n)
    spans = list(zip(offs[:-1], offs[1:]))
    made: dict = {}  # the views, made once per set of buffers (host work the engine does not do)

    def views(b):
        key = tuple(id(b[n]) for n in (*TOKENS, "state", "o"))
        if made.get("key") != key:
            made.clear()
            made["key"], made["held"] = key, [b[n] for n in (*TOKENS, "state", "o")]
            made["args"] = [
                (*(b[n][t0:t1] for n in TOKENS), b["state"][s], b["o"][t0:t1]) for s, (t0, t1) in enumerate(spans)
            ]
        return made["args"]

    def launch(b):
        for args in views(b):
            run(*args)

    return tensor_core_launch(launch)
