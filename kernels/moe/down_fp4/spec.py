"""``moe.down_fp4``: the routed experts' down projection and the weighted sum over
each row's experts, int4 (W4A16) or NVFP4 (holo) weights."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...common import weight_fit as fit
from ...common.model_weights import WeightUse
from ...common.path import KernelPath, Shape, Traffic, declared_path
from ...selection.moe import DOWN_FP4 as TABLE
from .. import _builds, formats, naive
from .. import family as F
from .. import file_weights as fw


def down_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    hidden, inter, experts = shape["hidden"], shape["inter"], shape["experts"]

    def draw(hit):
        w4 = formats.draw_int4(rng, experts, hidden, inter, hit)
        return w4, formats.nvfp4_from(w4, hit)

    return _down_inputs(shape, rng, draw)


def _down_inputs(shape: Shape, rng: np.random.Generator, weights) -> dict:
    """Routing, ``weights(touched experts) -> (int4, nvfp4)``, the SiLU products ``h``."""
    rows, inter, experts, k = shape["rows"], shape["inter"], shape["experts"], shape["top_k"]
    ids, rw = F.random_routing(rng, rows, experts, k)
    w4, nv = weights(F.touched(ids))
    g = rng.standard_normal((rows * k, inter)) * 3
    h = (naive.silu(g) * rng.standard_normal((rows * k, inter)) * 3).astype(np.float32)
    out = {"h": h, "ids": ids, "rw": rw}
    formats.put(out, "wd_int4", w4)
    formats.put(out, "wd_nvfp4", nv)
    return out


def down_on_weights(path: KernelPath, tensors) -> KernelPath:
    """On a layer's routed down experts from a model file (``[E, H, I]``):
    int4 (the reference's) made from the decoded values; the NVFP4 arm's
    the file's as stored where it holds NVFP4, otherwise the int4 weights
    re-encoded, as for drawn weights. Where the file holds NVFP4, the
    reference is its decoded values and int4 the re-encoded arm."""
    stack = fw.Stack([fit.role(tensors, "ffn_down_exps", path.name)], path.name)
    stack.multiple("intermediate", F.K_MULTIPLE["nvfp4"], "the NVFP4 arm's block scale covers 16 inputs")
    tag = fw.describe([stack], {"int4": fw.never, "nvfp4": fw.Stack.nvfp4_stored})

    def weights(hit):
        w4 = stack.int4(hit)
        return w4, stack.nvfp4_or_from(w4, hit)

    on = dataclasses.replace(
        path,
        shapes=F.file_shapes(path.shapes, tag, stack.n, stack.k, stack.experts),
        make_inputs=lambda shape, rng: _down_inputs(shape, rng, weights),
    )
    return fw.on_nvfp4_file(
        on, stack, F.STAGE_TOLERANCES["nvfp4_down"], F.STAGE_TOLERANCES["int4_tc"], down_reference_nvfp4
    )


def down_reference_nvfp4(shape: Shape, inputs: dict) -> dict:
    """The reference on a file's NVFP4 experts: their decoded values."""
    nv = formats.get(inputs, "wd_nvfp4")
    return {"y": naive.naive_down(inputs["h"], inputs["ids"], inputs["rw"], lambda e: formats.nvfp4_expert(nv, e))}


def down_reference(shape: Shape, inputs: dict) -> dict:
    w4 = formats.get(inputs, "wd_int4")
    return {"y": naive.naive_down(inputs["h"], inputs["ids"], inputs["rw"], lambda e: formats.int4_expert(w4, e))}


def _down_traffic(fmt: str):
    def traffic(shape: Shape) -> Traffic:
        r, h, i, k = shape["rows"], shape["hidden"], shape["inter"], shape["top_k"]
        w = int(F.expected_experts(shape) * formats.weight_bytes(fmt, h, i))
        mm = 2 * r * k * h * i  # on the tensor cores at prefill shapes; the combine on FP32
        return Traffic(
            bytes_read=w + 4 * r * k * i + 8 * r * k,
            bytes_written=4 * r * h,
            flops=mm + 2 * r * k * h,
            tc_flops=mm if shape["prefill"] else None,
        )

    return traffic


PATH = declared_path(
    TABLE,
    F.variants(
        {
            "int4": dict(
                summary="W4A16 int4 experts: per-row kernel (FP32) at decode; sort, expert-grouped on "
                "mma.sync fp16, combine at prefill",
                build=_builds.down("int4"),
                tolerance=F.STAGE_TOLERANCES["int4_tc"],
                traffic=_down_traffic("int4"),
                launches=F.down_launches,
                tensor_cores="mma.sync",
                tc_dtype="f16",
            ),
            "nvfp4": dict(
                summary="NVFP4 (holo) experts: per-row kernel (FP32) at decode; sort, expert-grouped on "
                "mma.sync fp16, combine at prefill",
                build=_builds.down("nvfp4"),
                tolerance=F.STAGE_TOLERANCES["nvfp4_down"],
                traffic=_down_traffic("nvfp4"),
                launches=F.down_launches,
                tensor_cores="mma.sync",
                tc_dtype="f16",
            ),
        }
    ),
    shapes=F.stage_shapes,
    make_inputs=down_inputs,
    outputs=lambda s: {"y": ((s["rows"], s["hidden"]), "float32")},
    reference=down_reference,
    traffic=_down_traffic("int4"),
    tolerance=F.STAGE_TOLERANCES["int4"],
    notes="memory-bound at decode (each routed expert's weights), compute-bound at prefill",
    extra={
        "model_sections": ("moe",),
        "profile_shape": F.profile_shape,
        "profile_blocks": F.PROFILE_BLOCKS,
        "weights": WeightUse((("ffn_down_exps",),), down_on_weights),
    },
)
