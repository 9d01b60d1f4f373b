"""``moe.router``: gate GEMM, softmax over the experts, top-k with renormalised weights, in
BF16, FP32 logits or FP32 throughout (Metrale's two router levers)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...common import bits
from ...common import weight_fit as wf
from ...common.model_weights import WeightUse
from ...common.path import Shape, Tolerance, Traffic, check_preset, declared_path
from ...selection.moe import ROUTER as TABLE
from .. import _builds, naive, routing
from .. import family as F


def router_shapes(preset: str, model) -> list[Shape]:
    if preset == "smoke":
        return [F.shape_of(dict(rows=3, hidden=37, experts=8, top_k=2))]
    check_preset(preset)
    dims, decode, prefill = F.sizes(model)
    d = {k: dims[k] for k in ("hidden", "experts", "top_k")}
    return [F.shape_of(dict(rows=r, **d)) for r in (*decode, *prefill)]


def router_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    """``x_f32``: the MoE-input norm's output (FP32); ``x_bf16``: it in bf16
    (bits); ``wg``: the gate's bf16 weights (bits), about 0.05 so logits
    spread about 2 at the model's hidden size."""
    rows, hidden, experts = shape["rows"], shape["hidden"], shape["experts"]
    x = rng.standard_normal((rows, hidden), dtype=np.float32)
    wg = rng.standard_normal((experts, hidden), dtype=np.float32) * np.float32(2.0 / np.sqrt(hidden))
    return {"x_f32": x, "x_bf16": bits.f32_to_bf16_np(x), "wg": bits.f32_to_bf16_np(wg)}


def router_on_weights(path, tensors):
    """On a layer's router gate from a model file (``ffn_gate_inp``,
    ``[experts, hidden]``): its weights in BF16, as the kernels read them
    (a BF16 file's bits as stored, anything else rounded once), the
    experts and hidden size the file's, ``top_k`` the recipe's capped at
    the file's experts; the activations drawn."""
    t = wf.role(tensors, "ffn_gate_inp", path.name)
    experts, hidden = wf.dims(t, 2, path.name)
    wg = wf.finite_in(t, bits.bf16_to_f32_np(bits.f32_to_bf16_np(t.values)), "BF16")
    tag = wf.read_as([t], "BF16", t.stored == "BF16")

    def shapes(preset, model):
        out = []
        for sh in path.shapes(preset, model):
            d = {**sh.dims, "hidden": hidden, "experts": experts, "top_k": min(sh["top_k"], experts)}
            out.append(F.shape_of(d, tag + " "))
        return out

    def inputs(shape, rng):
        x = rng.standard_normal((shape["rows"], hidden), dtype=np.float32)
        return {"x_f32": x, "x_bf16": bits.f32_to_bf16_np(x), "wg": bits.f32_to_bf16_np(wg)}

    return dataclasses.replace(path, shapes=shapes, make_inputs=inputs)


def _router_logits(inputs: dict) -> np.ndarray:
    return np.asarray(inputs["x_f32"], np.float64) @ bits.bf16_to_f32_np(inputs["wg"]).astype(np.float64).T


def router_reference(shape: Shape, inputs: dict) -> dict:
    _, ids, w = naive.naive_router(inputs["x_f32"], bits.bf16_to_f32_np(inputs["wg"]), shape["top_k"])
    return {"ids": ids, "weights": w}


def router_align(shape: Shape, inputs: dict, got: dict, ref: dict):
    return routing.align(_router_logits(inputs), shape["top_k"], got, ref)


def router_findings(variant, shape, launch, bufs, cuda) -> dict:
    host = {n: bufs[n].copy_to_host() for n in ("x_f32", "wg", "ids", "weights")}
    return {"routing": routing.findings(_router_logits(host), shape["top_k"], host["ids"], host["weights"])}


def router_profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: one token on the model's gate (its hidden
    size and experts: the weights' row length and stride), a few of the
    gate's blocks traced (``ROUTER_PROFILE_BLOCKS``)."""
    return F.shape_of({**shape.dims, "rows": 1}, "profile ")


# The gate's blocks are independent (16 experts each): the trace runs this
# many of each launch, spread over its grid, and scales to the whole grid.
ROUTER_PROFILE_BLOCKS = 4


def router_traffic(shape: Shape) -> Traffic:
    r, h, e, k = shape["rows"], shape["hidden"], shape["experts"], shape["top_k"]
    return Traffic(
        bytes_read=2 * e * h + 2 * r * h + 4 * r * e,
        bytes_written=4 * r * e + 8 * r * k,
        flops=2 * r * e * h + 4 * r * e,
    )


def _router_traffic_fp32(shape: Shape) -> Traffic:
    t = router_traffic(shape)
    return Traffic(t.bytes_read + 2 * shape["rows"] * shape["hidden"], t.bytes_written, t.flops)


# Weights against the float64 softmax of the selected experts' logits. BF16
# logits round by up to 2^-9 of their size; with the BF16 input's rounding
# that moved weights by up to 1.0e-2 in norm and 1.3e-2 in one weight (of the
# row's largest); a BF16 input alone by up to 3.6e-3 and 5.2e-3 (200 seeds
# at the smoke shape, 10 at the model's 64 x 2048 x 512). FP32 throughout
# leaves float32 sums.
ROUTER_TOLERANCES = {
    "bf16": Tolerance(rel=3e-2, abs_of_max=3e-2),
    "fp32_gate": Tolerance(rel=1.5e-2, abs_of_max=1.5e-2),
    "fp32_routing": Tolerance(rel=1e-4, abs_of_max=1e-4),
}


PATH = declared_path(
    TABLE,
    F.variants(
        {
            "bf16": dict(
                summary="BF16 router input, gate GEMM logits rounded to BF16, softmax and top-k",
                build=_builds.router("bf16"),
                tolerance=ROUTER_TOLERANCES["bf16"],
                launches=2,
            ),
            "fp32_gate": dict(
                summary="BF16 router input, FP32 gate logits, softmax and top-k",
                build=_builds.router("fp32_gate"),
                tolerance=ROUTER_TOLERANCES["fp32_gate"],
                launches=2,
            ),
            "fp32_routing": dict(
                summary="FP32 router input and FP32 gate logits, softmax and top-k",
                build=_builds.router("fp32_routing"),
                tolerance=ROUTER_TOLERANCES["fp32_routing"],
                launches=2,
                traffic=_router_traffic_fp32,
            ),
        }
    ),
    shapes=router_shapes,
    make_inputs=router_inputs,
    outputs=F.topk_outputs,
    reference=router_reference,
    traffic=router_traffic,
    tolerance=ROUTER_TOLERANCES["fp32_routing"],
    notes="memory-bound at decode (the gate's weights), compute-bound at prefill; the top-k is one block a row",
    extra={
        "align": router_align,
        "findings": router_findings,
        "model_sections": ("moe",),
        "profile_shape": router_profile_shape,
        "profile_blocks": ROUTER_PROFILE_BLOCKS,
        "weights": WeightUse((("ffn_gate_inp",),), router_on_weights),
    },
)
