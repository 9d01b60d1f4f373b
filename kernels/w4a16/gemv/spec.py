"""``w4a16.gemv``: the decode GEMV ``y = W x`` (int4 weights, fp16
activations, m = 1)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ...common import weight_fit as fit
from ...common.int4 import packed_bytes
from ...common.model_weights import WeightUse
from ...common.path import KernelPath, Shape, Traffic, Variant, check_preset
from ...selection.w4a16 import GEMV as TABLE
from .. import naive
from ..family import args, declare, ffn_sizes, fp16_normal, mk, w4
from . import gemv_64t, gemv_sw

# 37 rows: not a multiple of the row blocks; k = 264: two full scale groups
# and a partial third of 8 inputs.
SMOKE = dict(m=1, n=37, k=264)


def gemv_traffic(mats: int):
    """Traffic of ``mats`` GEMVs of one ``n x k`` shape against one ``x``."""

    def traffic(shape: Shape) -> Traffic:
        n, k = shape["n"], shape["k"]
        return Traffic(bytes_read=mats * packed_bytes(n, k) + 2 * k, bytes_written=2 * mats * n, flops=2 * mats * n * k)

    return traffic


def gemv_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        return [mk("m1-n37-k264", **SMOKE)]
    hidden, ffns, _ = ffn_sizes(model)
    out = []
    for tag, inter in ffns:
        out.append(mk(f"{tag}-gate n{inter} k{hidden}", m=1, n=inter, k=hidden))
        out.append(mk(f"{tag}-down n{hidden} k{inter}", m=1, n=hidden, k=inter))
    return out


def gemv_profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's row length ``k`` (so its
    strides and alignment), eight rows (two 4-row blocks, eight warps)."""
    return mk(f"profile n8 k{shape['k']}", m=1, n=8, k=shape["k"])


def gemv_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    w = w4(rng, shape["n"], shape["k"], "qweight", "scales")
    return {"x": fp16_normal(rng, shape["k"]), **w}


def gemv_reference(shape: Shape, inputs: dict) -> dict:
    return {"y": naive.naive_gemv(*args(inputs, "qweight", "scales", "x"))}


def gemv_on_weights(path: KernelPath, tensors) -> KernelPath:
    """The GEMV on one dense-FFN matrix from a model file: ``n x k`` its
    own, at ``m = 1`` for either preset, its int4 weights made from the
    decoded values as drawn weights are (a Q4_K or FP8 tensor re-encoded,
    which the label says)."""
    t = fit.only(tensors, path.name)
    n, k, encode = fit.int4_matrix(t, path.name)
    tag = fit.read_as([t], "int4", stored=False)

    def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
        check_preset(preset)
        return [mk(f"{tag} m1 n{n} k{k}", m=1, n=n, k=k)]

    def inputs(shape: Shape, rng: np.random.Generator) -> dict:
        qweight, scales = encode()
        return {"x": fp16_normal(rng, k), "qweight": qweight, "scales": scales}

    return dataclasses.replace(path, shapes=shapes, make_inputs=inputs)


# A dense FFN's projections, each on its own.
FFN_ROLES = (("ffn_gate",), ("ffn_up",), ("ffn_down",))

PATH = declare(
    TABLE,
    [
        Variant("gemv_sw", "one warp per output row, lanes stride over packed words, shuffle reduction", gemv_sw.build),
        Variant(
            "gemv_64t",
            "64 threads per 4-row block, shared-memory tree reduction (pre-single-warp kernel)",
            gemv_64t.build,
        ),
    ],
    shapes=gemv_shapes,
    make_inputs=gemv_inputs,
    outputs=lambda shape: {"y": ((shape["n"],), "float16")},
    reference=gemv_reference,
    traffic=gemv_traffic(1),
    notes="memory-bound: streams k/2 bytes of packed weights per row",
    extra={
        "gemm_mnk": lambda s: (1, s["n"], s["k"]),
        "profile_shape": gemv_profile_shape,
        "weights": WeightUse(FFN_ROLES, gemv_on_weights),
    },
)
