"""``gdn.prefill_multi_stream`` (Metrale): several prompts of different
lengths prefilled together, each carrying its own GDN state in and out.

Shape dims: ``s`` streams of ``l0, l1, ...`` tokens (``t`` in all), chunk
``chunk``, heads ``hk``/``hv``, head dims ``dk``/``dv``; smoke shapes add
``fla_head_dim`` (the head dim the batched kernel is taken at, 128 at model
shapes) equal to their own. ``--axis l1=...`` changes one stream's length
and ``--axis s=...`` the stream count (lengths repeat in order), ``t``
following (``derive``).

Smoke shapes are odd on purpose: a one-token stream, a stream shorter than
a chunk, streams with a chunk boundary inside, and stream starts that are
not multiples of the chunk. Model shapes come from the recipe's
``[model.bench] prefill_streams`` (lists of stream lengths; Qwen3-Next's
fallback is ``family.QWEN3_NEXT_BENCH``'s, an assumption, not the model's
published configuration).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...common.path import Shape, Traffic, check_preset
from ...selection.gdn import BATCHED_FLA_HEAD_DIM
from ...selection.gdn import PREFILL_MULTI_STREAM as TABLE
from .. import family
from ..family import F16, F32, I32
from . import batched, per_stream
from .per_stream import stream_lengths

SMOKE = (
    # one token; 5 (< a chunk); 19 (two chunk boundaries inside); starts at 0, 1, 6
    dict(lens=(1, 5, 19), chunk=8, hk=2, hv=4, dk=8, dv=8, fla_head_dim=8),
    # 9 (a boundary after 8); 3; 1:1 heads at d = 12
    dict(lens=(9, 3), chunk=8, hk=3, hv=3, dk=12, dv=12, fla_head_dim=12),
)


def stream_dims(lens, **rest) -> dict:
    """A shape's dims for streams of ``lens`` tokens."""
    lens = [int(n) for n in lens]
    if not lens or min(lens) < 1:
        raise ValueError(f"stream lengths must be positive, got {lens}")
    return {"s": len(lens), **{f"l{i}": n for i, n in enumerate(lens)}, "t": sum(lens), **rest}


def derive(dims: Mapping[str, Any], given: set) -> dict:
    """A shape refined by ``--axis``: ``s`` streams (the lengths repeated in
    order where there are more, cut where fewer), ``t`` their sum."""
    out = {k: v for k, v in dims.items() if not (k[:1] == "l" and k[1:].isdigit())}
    have = [int(dims[f"l{i}"]) for i in range(sum(1 for k in dims if k[:1] == "l" and k[1:].isdigit()))]
    lens = [have[i % len(have)] for i in range(int(dims["s"]))]
    return {**out, **stream_dims(lens)}


def _label(preset: str, d: Mapping[str, Any]) -> str:
    lens = "+".join(str(n) for n in stream_lengths(d))
    fhd = d.get("fla_head_dim", BATCHED_FLA_HEAD_DIM)
    tag = f" fla_hd{fhd}" if fhd != BATCHED_FLA_HEAD_DIM else ""
    return f"{preset} s{d['s']} t{d['t']} ({lens}) {family.heads_label(d)} c{d['chunk']}{tag}"


def multi_stream_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [stream_dims(d["lens"], **{k: v for k, v in d.items() if k != "lens"}) for d in SMOKE]
    else:
        gdn, bench = family.model_dims(model)
        dims = [stream_dims(lens, chunk=int(gdn["chunk"]), **family.heads(gdn)) for lens in bench["prefill_streams"]]
    return [Shape(_label(preset, d), d) for d in dims]


def offsets(shape) -> np.ndarray:
    """``[0, l0, l0 + l1, ..., t]`` (int32)."""
    return np.concatenate([[0], np.cumsum(stream_lengths(shape))]).astype(np.int32)


def multi_stream_inputs(shape: Shape, rng) -> dict:
    """``q, k [T, Hk, dk]``, ``v [T, Hv, dv]``, ``g, beta [T, Hv]`` over the
    streams' tokens concatenated, ``offsets [S+1]`` and ``state [S, Hv, dk,
    dv]`` (a different state per stream)."""
    x = family.token_inputs(shape, rng)
    x["offsets"] = offsets(shape)
    x["state"] = family.random_state(rng, (shape["s"], shape["hv"], shape["dk"], shape["dv"]))
    return x


def multi_stream_outputs(shape: Shape):
    return {
        "o": ((shape["t"], shape["hv"], shape["dv"]), "float32"),
        "state": ((shape["s"], shape["hv"], shape["dk"], shape["dv"]), "float32"),
    }


def multi_stream_reference(shape: Shape, x: dict) -> dict:
    """``family.token_reference`` (the float64 recurrence) on each stream's
    rows from its own state."""
    off = x["offsets"]
    o = np.zeros((shape["t"], shape["hv"], shape["dv"]))
    st = np.zeros(x["state"].shape)
    for s in range(shape["s"]):
        rows = slice(int(off[s]), int(off[s + 1]))
        one = {n: x[n][rows] for n in ("q", "k", "v", "g", "beta")}
        ref = family.token_reference(
            Shape("stream", {**shape.dims, "t": rows.stop - rows.start}), {**one, "state": x["state"][s]}
        )
        o[rows], st[s] = ref["o"], ref["state"]
    return {"o": o, "state": st}


def multi_stream_traffic(shape: Shape) -> Traffic:
    """``gdn.prefill``'s floor summed over the streams (each stream's chunks
    counted from its own start: a stream shorter than a chunk is one partial
    chunk), plus the offsets."""
    hk, hv, dk, dv, C = shape["hk"], shape["hv"], shape["dk"], shape["dv"], shape["chunk"]
    t, s = shape["t"], shape["s"]
    state = family.state_bytes(shape)
    read = t * (2 * hk * dk * F16 + hv * dv * F16 + 2 * hv * F32) + s * state + (s + 1) * I32
    write = t * hv * dv * F32 + s * state
    flops = sum(family.chunked_flops(n, C, hv, dk, dv) for n in stream_lengths(shape))
    tc = sum(family.chunked_tc_flops(n, C, hv, dk) for n in stream_lengths(shape))
    return Traffic(read, write, flops, tc_flops=tc)


PROFILE_BLOCKS = 2  # blocks a launch the memory trace runs: the first and the last


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's rows (``dk``, ``dv``) and
    chunk, one key head and its value heads, two streams: a whole chunk and
    a partial one (16 tokens), so the second stream starts on a chunk of its
    own. Blocks (a stream's value head's column slice each) are alike and
    independent: :data:`PROFILE_BLOCKS` of each launch are traced, their
    counts scaled to the grid (the first and the last block: both streams
    in the batched launch)."""
    d = {k: v for k, v in shape.dims.items() if not (k[:1] == "l" and k[1:].isdigit())}
    d = {**d, **stream_dims((shape["chunk"], 16)), "hk": 1, "hv": shape["hv"] // shape["hk"]}
    return Shape(_label("profile", d), d)


def _per_stream_launches(shape) -> int:
    return shape["s"]  # one launch per stream


PATH = family.declare(
    TABLE,
    [family.variant(batched), family.variant(per_stream, launches=_per_stream_launches)],
    shapes=multi_stream_shapes,
    make_inputs=multi_stream_inputs,
    outputs=multi_stream_outputs,
    reference=multi_stream_reference,
    traffic=multi_stream_traffic,
    tolerance=family.PREFILL_TOL,
    notes="Compute-bound at model shapes, as gdn.prefill: the same block program per (stream, head, "
    "column slice). batched is one launch over the streams (token offsets, chunks restarting at each "
    "stream's start); per_stream launches gdn.prefill's register-resident kernel once per stream. "
    "The batched kernel is taken at dk = dv = fla_head_dim (128 at model shapes; smoke shapes lower "
    "it to their own head dim).",
    extra={
        "fla_head_dim": BATCHED_FLA_HEAD_DIM,
        "derive": derive,
        "profile_shape": profile_shape,
        "profile_blocks": PROFILE_BLOCKS,
    },
)
