"""``moe.gateup_fp4``: the routed experts' gate and up projections and their SiLU
product, int4 (W4A16) or NVFP4 (holo) weights."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...common import weight_fit as fit
from ...common.model_weights import WeightUse
from ...common.path import KernelPath, Shape, Traffic, declared_path
from ...selection.moe import GATEUP_FP4 as TABLE
from .. import _builds, formats, naive
from .. import family as F
from .. import file_weights as fw


def gateup_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    hidden, inter, experts = shape["hidden"], shape["inter"], shape["experts"]

    def draw(hit):
        w4 = formats.draw_int4(rng, experts, 2 * inter, hidden, hit)
        return w4, formats.nvfp4_from(w4, hit)

    return _gateup_inputs(shape, rng, draw)


def _gateup_inputs(shape: Shape, rng: np.random.Generator, weights) -> dict:
    """Routing, ``weights(touched experts) -> (int4, nvfp4)``, x."""
    rows, hidden, experts, k = shape["rows"], shape["hidden"], shape["experts"], shape["top_k"]
    ids, _ = F.random_routing(rng, rows, experts, k)
    w4, nv = weights(F.touched(ids))
    out = {"x": F.random_x(rng, rows, hidden), "ids": ids}
    formats.put(out, "wgu_int4", w4)
    formats.put(out, "wgu_nvfp4", nv)
    return out


def gateup_on_weights(path: KernelPath, tensors) -> KernelPath:
    """On a layer's routed gate and up experts from a model file
    (``[E, I, H]`` each, stacked gate first): the int4 weights (the
    reference's) made from the decoded values; the NVFP4 arm's the file's
    as stored where it holds NVFP4, otherwise the int4 weights re-encoded,
    as for drawn weights. Where the file holds NVFP4, the
    reference is its decoded values and int4 the re-encoded arm."""
    gate, up = (fit.role(tensors, r, path.name) for r in ("ffn_gate_exps", "ffn_up_exps"))
    stack = fw.Stack([gate, up], path.name)
    stack.multiple("hidden", F.K_MULTIPLE["nvfp4"], "the NVFP4 arm's block scale covers 16 inputs")
    tag = fw.describe([stack], {"int4": fw.never, "nvfp4": fw.Stack.nvfp4_stored})

    def weights(hit):
        w4 = stack.int4(hit)
        return w4, stack.nvfp4_or_from(w4, hit)

    on = dataclasses.replace(
        path,
        shapes=F.file_shapes(path.shapes, tag, stack.k, stack.n // 2, stack.experts),
        make_inputs=lambda shape, rng: _gateup_inputs(shape, rng, weights),
    )
    return fw.on_nvfp4_file(
        on, stack, F.STAGE_TOLERANCES["nvfp4_gateup"], F.STAGE_TOLERANCES["int4_tc"], gateup_reference_nvfp4
    )


def gateup_reference_nvfp4(shape: Shape, inputs: dict) -> dict:
    """The reference on a file's NVFP4 experts: their decoded values."""
    nv = formats.get(inputs, "wgu_nvfp4")
    return {"h": naive.naive_gateup(inputs["x"], inputs["ids"], lambda e: formats.nvfp4_expert(nv, e))}


def gateup_reference(shape: Shape, inputs: dict) -> dict:
    w4 = formats.get(inputs, "wgu_int4")
    return {"h": naive.naive_gateup(inputs["x"], inputs["ids"], lambda e: formats.int4_expert(w4, e))}


def _gateup_traffic(fmt: str):
    def traffic(shape: Shape) -> Traffic:
        r, h, i, k = shape["rows"], shape["hidden"], shape["inter"], shape["top_k"]
        w = int(F.expected_experts(shape) * formats.weight_bytes(fmt, 2 * i, h))
        mm = 2 * r * k * 2 * i * h  # on the tensor cores at prefill shapes; the SiLU products on FP32
        return Traffic(
            bytes_read=w + 2 * r * h + 4 * r * k,
            bytes_written=4 * r * k * i,
            flops=mm + 4 * r * k * i,
            tc_flops=mm if shape["prefill"] else None,
        )

    return traffic


PATH = declared_path(
    TABLE,
    F.variants(
        {
            "int4": dict(
                summary="W4A16 int4 experts: per-row kernel (FP32) at decode, expert-grouped on mma.sync "
                "fp16 at prefill",
                build=_builds.gateup("int4"),
                tolerance=F.STAGE_TOLERANCES["int4_tc"],
                traffic=_gateup_traffic("int4"),
                launches=F.stage_launches,
                tensor_cores="mma.sync",
                tc_dtype="f16",
            ),
            "nvfp4": dict(
                summary="NVFP4 (holo) experts: per-row kernel (FP32) at decode, expert-grouped on mma.sync "
                "fp16 at prefill",
                build=_builds.gateup("nvfp4"),
                tolerance=F.STAGE_TOLERANCES["nvfp4_gateup"],
                traffic=_gateup_traffic("nvfp4"),
                launches=F.stage_launches,
                tensor_cores="mma.sync",
                tc_dtype="f16",
            ),
        }
    ),
    shapes=F.stage_shapes,
    make_inputs=gateup_inputs,
    outputs=lambda s: {"h": ((s["rows"] * s["top_k"], s["inter"]), "float32")},
    reference=gateup_reference,
    traffic=_gateup_traffic("int4"),
    tolerance=F.STAGE_TOLERANCES["int4"],
    notes="memory-bound at decode (each routed expert's weights), compute-bound at prefill",
    extra={
        "model_sections": ("moe",),
        "profile_shape": F.profile_shape,
        "profile_blocks": F.PROFILE_BLOCKS,
        "weights": WeightUse((("ffn_gate_exps", "ffn_up_exps"),), gateup_on_weights),
    },
)
