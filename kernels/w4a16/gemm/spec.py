"""``w4a16.gemm``: the W4A16 GEMM ``c = a W^T`` (the FFN projections of a
batch) on tensor cores, and the FP32-FMA tiles for the K the tensor cores
cannot step."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ...common import weight_fit as fit
from ...common.int4 import packed_bytes
from ...common.model_weights import WeightUse
from ...common.path import GEMM_PROFILE_BLOCKS, KernelPath, Shape, Traffic, Variant, check_preset, gemm_profile_shape
from ...selection.w4a16 import GEMM as TABLE
from .. import naive
from ..family import DEFAULT_GEMM_ROWS, args, declare, ffn_sizes, fp16_normal, mk, w4
from . import gemm_tc, gemm_tiled


def gemm_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        # k = 160: a full scale group and a partial one of 32; a multiple of
        # 16 (the tensor cores' step) ending mid-way through a K stage of 64.
        # m = 67 is past the small-M limit of 64 and not a tile multiple.
        return [mk("m5-n37-k160", m=5, n=37, k=160), mk("m67-n37-k160", m=67, n=37, k=160)]
    hidden, ffns, rows = ffn_sizes(model)
    out = []
    for m in rows:
        for tag, inter in ffns:
            out.append(mk(f"{tag}-gate m{m} n{inter} k{hidden}", m=m, n=inter, k=hidden))
            out.append(mk(f"{tag}-down m{m} n{hidden} k{inter}", m=m, n=hidden, k=inter))
    return out


def gemm_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    w = w4(rng, shape["n"], shape["k"], "qweight", "scales")
    return {"a": fp16_normal(rng, (shape["m"], shape["k"])), **w}


# Smoke rows on a model file: the smoke shapes' (one small-M GEMM, one past it).
SMOKE_ROWS = (5, 67)


def gemm_on_weights(path: KernelPath, tensors) -> KernelPath:
    """The GEMM on one dense-FFN matrix from a model file: ``n x k`` its
    own at the recipe's ``gemm_rows`` (``model``) or the smoke rows, its
    int4 weights made from the decoded values as drawn weights are."""
    t = fit.only(tensors, path.name)
    n, k, encode = fit.int4_matrix(t, path.name)
    tag = fit.read_as([t], "int4", stored=False)

    def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
        check_preset(preset)
        rows = SMOKE_ROWS if preset == "smoke" else fit.tokens(model, "gemm_rows", DEFAULT_GEMM_ROWS)
        return [mk(f"{tag} m{m} n{n} k{k}", m=m, n=n, k=k) for m in rows]

    def inputs(shape: Shape, rng: np.random.Generator) -> dict:
        qweight, scales = encode()
        return {"a": fp16_normal(rng, (shape["m"], k)), "qweight": qweight, "scales": scales}

    return dataclasses.replace(path, shapes=shapes, make_inputs=inputs)


def gemm_traffic(shape: Shape) -> Traffic:
    m, n, k = shape["m"], shape["n"], shape["k"]
    return Traffic(bytes_read=packed_bytes(n, k) + 2 * m * k, bytes_written=2 * m * n, flops=2 * m * n * k)


# The tensor-core form this process builds (None only where there is
# neither a GPU nor the simulator): what `leverctl kernels` says; each
# launch carries the form it actually runs on, which the record takes.
_TC_FORM = gemm_tc.declared_form()
_TC_DTYPE = gemm_tc.TC_DTYPE if _TC_FORM else None

PATH = declare(
    TABLE,
    [
        Variant(
            "small_m",
            "tensor cores, m <= 64: 64 x 64 tiles, two warpgroups on its column halves; int4 dequantised to "
            "fp16 as it is staged, f32 accumulators; K in stages of 64; wgmma (Hopper, 4 stages, activations by "
            "TMA) or mma.sync from ldmatrix (3 stages, activations by cp.async)",
            gemm_tc.build_small_m,
            tensor_cores=_TC_FORM,
            tc_dtype=_TC_DTYPE,
        ),
        Variant(
            "default_tiles",
            "tensor cores, any m: 64 x 128 tiles, two warpgroups on its column halves; int4 dequantised to "
            "fp16 as it is staged, f32 accumulators; K in stages of 64; wgmma (Hopper, 4 stages, activations by "
            "TMA) or mma.sync from ldmatrix (3 stages, activations by cp.async)",
            gemm_tc.build_default,
            tensor_cores=_TC_FORM,
            tc_dtype=_TC_DTYPE,
        ),
        Variant(
            "fma_tiles",
            "FP32 FMA on CUDA cores: 64x64x64 tiles, 256 threads, 4x4 register micro-tiles, "
            "any k % 8 == 0 (where the tensor-core GEMMs cannot step K by 16)",
            gemm_tiled.build_default,
        ),
    ],
    shapes=gemm_shapes,
    make_inputs=gemm_inputs,
    outputs=lambda shape: {"c": ((shape["m"], shape["n"]), "float16")},
    reference=lambda shape, inputs: {"c": naive.naive_gemm(*args(inputs, "a", "qweight", "scales"))},
    traffic=gemm_traffic,
    notes="memory-bound at small m (weight stream), tensor-core-bound at large m (FP32-bound on fma_tiles)",
    extra={
        "gemm_mnk": lambda s: (s["m"], s["n"], s["k"]),
        "weights": WeightUse((("ffn_gate",), ("ffn_up",), ("ffn_down",)), gemm_on_weights),
        "profile_shape": gemm_profile_shape,
        "profile_blocks": GEMM_PROFILE_BLOCKS,
    },
)
