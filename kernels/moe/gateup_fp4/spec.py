"""``moe.gateup_fp4``: the routed experts' gate and up projections and their SiLU
product, int4 (W4A16) or NVFP4 (holo) weights."""

from __future__ import annotations

import numpy as np

from ...common.path import Shape, Traffic, declared_path
from ...selection.moe import GATEUP_FP4 as TABLE
from .. import _builds, formats, naive
from .. import family as F


def gateup_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    rows, hidden, inter, experts, k = shape["rows"], shape["hidden"], shape["inter"], shape["experts"], shape["top_k"]
    ids, _ = F.random_routing(rng, rows, experts, k)
    w4 = formats.draw_int4(rng, experts, 2 * inter, hidden, F.touched(ids))
    out = {"x": F.random_x(rng, rows, hidden), "ids": ids}
    formats.put(out, "wgu_int4", w4)
    formats.put(out, "wgu_nvfp4", formats.nvfp4_from(w4, F.touched(ids)))
    return out


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
    extra={"model_sections": ("moe",)},
)
