"""``moe.down_fp4``: the routed experts' down projection and the weighted sum over
each row's experts, int4 (W4A16) or NVFP4 (holo) weights."""

from __future__ import annotations

import numpy as np

from ...common.path import Shape, Traffic, declared_path
from ...selection.moe import DOWN_FP4 as TABLE
from .. import _builds, formats, naive
from .. import family as F


def down_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    rows, hidden, inter, experts, k = shape["rows"], shape["hidden"], shape["inter"], shape["experts"], shape["top_k"]
    ids, rw = F.random_routing(rng, rows, experts, k)
    w4 = formats.draw_int4(rng, experts, hidden, inter, F.touched(ids))
    g = rng.standard_normal((rows * k, inter)) * 3
    h = (naive.silu(g) * rng.standard_normal((rows * k, inter)) * 3).astype(np.float32)
    out = {"h": h, "ids": ids, "rw": rw}
    formats.put(out, "wd_int4", w4)
    formats.put(out, "wd_nvfp4", formats.nvfp4_from(w4, F.touched(ids)))
    return out


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
    extra={"model_sections": ("moe",)},
)
