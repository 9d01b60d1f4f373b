"""``moe.shared_expert`` (Metrale, Nemotron): one squared-ReLU expert on
every token, up and down each on fp16 / float32 activations or W4A4
(activations to NVFP4 per GEMM) from 512 rows up. A variant is the pair of
choices (``moe._prefill.shared``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...common import bits
from ...common.model_weights import WeightUse
from ...common.path import (
    GEMM_PROFILE_BLOCKS,
    Shape,
    Traffic,
    Variant,
    check_preset,
    declared_path,
    gemm_profile_shape,
)
from ...selection.moe import SHARED_EXPERT as TABLE
from .. import file_weights as fw
from .. import naive
from .._prefill import bounds, inputs, shared
from .._prefill import family as F

SHARED_SMOKE = {"t": 9, "h": 48, "s": 16}


def shared_shapes(preset, model):
    check_preset(preset)
    if preset == "smoke":
        dims, tokens = {"h": SHARED_SMOKE["h"], "s": SHARED_SMOKE["s"]}, (SHARED_SMOKE["t"],)
    else:
        dims, tokens = F.moe_dims(model, F.NEMOTRON_3_NANO)
    return [
        Shape(f"t{t} h{dims['h']} s{dims['s']}", {"t": t, "h": dims["h"], "s": dims["s"], "fp8_shared_up": 0})
        for t in tokens
    ]


def shared_inputs(shape, rng):
    h, s = shape["h"], shape["s"]
    up = inputs.expert_weights(rng, 1, s, h)
    dn = inputs.expert_weights(rng, 1, h, s)
    return _shared_inputs(shape, rng, up, dn)


def _shared_inputs(shape, rng, up: dict, dn: dict) -> dict:
    """Tokens and the expert's NVFP4 ``up``, ``dn`` (``fp4``, ``sc``, ``ts``, one expert)."""
    t, h = shape["t"], shape["h"]
    return {
        "x": inputs.tokens_in(rng, t, h),
        "off": np.array([0, t], np.int32),
        "tile_off": np.array([0, bounds.tiles(t)], np.int32),
        "up_fp4": up["fp4"],
        "up_sc": up["sc"],
        "up_ts": up["ts"],
        "dn_fp4": dn["fp4"],
        "dn_sc": dn["sc"],
        "dn_ts": dn["ts"],
    }


def shared_on_weights(path, tensors):
    """On a layer's shared expert from a model file: up ``[S, H]`` and
    down ``[H, S]`` (the squared-ReLU expert has no gate), in NVFP4 as
    stored where the file holds NVFP4, otherwise encoded from the decoded
    values (``bits.nvfp4_encode_np``); the tokens at the recipe's prefill
    counts (the smoke count for ``smoke``)."""
    up, down = fw.shared(tensors, path.name, bits.NVFP4_BLOCK, "NVFP4 block scales cover 16 inputs")
    tag = fw.describe([up, down], {"nvfp4": fw.Stack.nvfp4_stored})

    def shapes(preset, model):
        out = []
        for sh in path.shapes(preset, model):
            d = {**sh.dims, "h": up.k, "s": up.n}
            out.append(Shape(f"{tag} t{d['t']} h{d['h']} s{d['s']}", d))
        return out

    return dataclasses.replace(
        path, shapes=shapes, make_inputs=lambda shape, rng: _shared_inputs(shape, rng, up.nvfp4([0]), down.nvfp4([0]))
    )


def shared_reference(shape, x):
    return {"y": naive.naive_shared_expert(x["x"], F.decoded(x, "up")[0], F.decoded(x, "dn")[0])}


def shared_traffic(shape) -> Traffic:
    t, h, s = shape["t"], shape["h"], shape["s"]
    w = 2 * (s * h // 2 + s * h // bits.NVFP4_BLOCK)
    return Traffic(bytes_read=w + 2 * t * h + 4 * t * s, bytes_written=4 * t * h + 4 * t * s, flops=4 * t * s * h)


def _variant(name: str, w4a4_up: bool, w4a4_down: bool, summary: str) -> Variant:
    return Variant(
        name,
        summary,
        lambda s: shared.build(s, w4a4_up, w4a4_down),
        tolerance=F.TOLERANCES["w4a4" if (w4a4_up or w4a4_down) else "exact"],
        launches=shared.launches(w4a4_up, w4a4_down),
        **F.TC,
    )


PATH = declared_path(
    TABLE,
    {
        "a16": _variant("a16", False, False, "NVFP4 weights, fp16 / float32 activations (fp16 into mma.sync)"),
        "w4a4_up": _variant("w4a4_up", True, False, "the up projection's activations to NVFP4 first"),
        "w4a4_down": _variant("w4a4_down", False, True, "the down projection's activations to NVFP4 first"),
        "w4a4": _variant("w4a4", True, True, "both projections' activations to NVFP4 first"),
    },
    shapes=shared_shapes,
    make_inputs=shared_inputs,
    outputs=lambda s: {"y": ((s["t"], s["h"]), "float32")},
    reference=shared_reference,
    traffic=shared_traffic,
    tolerance=F.TOLERANCES["exact"],
    notes="GEMMs on mma.sync (fp16 in, f32 accumulators); W4A4 trades activation precision for a quarter of the "
    "activation bytes",
    extra={
        "model_sections": ("mamba2",),
        # the trace: the model's rows (h and s long), 128 tokens, one tile a launch
        "profile_shape": lambda shape: gemm_profile_shape(shape, rows="t", cols=None),
        "profile_blocks": GEMM_PROFILE_BLOCKS,
        "weights": WeightUse((("ffn_up_shexp", "ffn_down_shexp"),), shared_on_weights),
    },
)
