"""``w4a16.gemv_dual``: the decode dual GEMV, gate = W_gate x and
up = W_up x in one pass."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ...common import weight_fit as fit
from ...common.model_weights import WeightUse
from ...common.path import KernelPath, Shape, Variant, check_preset
from ...selection.w4a16 import GEMV_DUAL as TABLE
from .. import naive
from ..family import args, declare, ffn_sizes, fp16_normal, mk, w4
from ..gemv.spec import SMOKE, gemv_profile_shape, gemv_traffic
from . import gemv_dual_64t, gemv_dual_sw


def dual_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        return [mk("m1-n37-k264", **SMOKE)]
    hidden, ffns, _ = ffn_sizes(model)
    return [mk(f"{tag}-gate+up n{inter} k{hidden}", m=1, n=inter, k=hidden) for tag, inter in ffns]


def dual_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    n, k = shape["n"], shape["k"]
    w = {**w4(rng, n, k, "qw_gate", "s_gate"), **w4(rng, n, k, "qw_up", "s_up")}
    return {"x": fp16_normal(rng, k), **w}


def dual_reference(shape: Shape, inputs: dict) -> dict:
    gate, up = naive.naive_gemv_dual(*args(inputs, "qw_gate", "s_gate", "qw_up", "s_up", "x"))
    return {"gate": gate, "up": up}


def dual_on_weights(path: KernelPath, tensors) -> KernelPath:
    """The dual GEMV on a dense FFN's gate and up matrices from a model
    file (the same ``n x k``), each made int4 from its decoded values."""
    gate, up = (fit.role(tensors, r, path.name) for r in ("ffn_gate", "ffn_up"))
    n, k, enc_gate = fit.int4_matrix(gate, path.name)
    nu, ku, enc_up = fit.int4_matrix(up, path.name)
    fit.agree(gate, "n", n, up, "n", nu, "gate and up are computed side by side")
    fit.agree(gate, "k", k, up, "k", ku, "gate and up read the same x")
    tag = fit.read_as([gate, up], "int4", stored=False)

    def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
        check_preset(preset)
        return [mk(f"{tag} m1 n{n} k{k}", m=1, n=n, k=k)]

    def inputs(shape: Shape, rng: np.random.Generator) -> dict:
        (qg, sg), (qu, su) = enc_gate(), enc_up()
        return {"x": fp16_normal(rng, k), "qw_gate": qg, "s_gate": sg, "qw_up": qu, "s_up": su}

    return dataclasses.replace(path, shapes=shapes, make_inputs=inputs)


PATH = declare(
    TABLE,
    [
        Variant(
            "gemv_dual_sw", "one warp per output row computing gate and up, two shuffle reductions", gemv_dual_sw.build
        ),
        Variant(
            "gemv_dual_64t",
            "64 threads per 4-row block computing gate and up, shared-memory reduction",
            gemv_dual_64t.build,
        ),
    ],
    shapes=dual_shapes,
    make_inputs=dual_inputs,
    outputs=lambda shape: {"gate": ((shape["n"],), "float16"), "up": ((shape["n"],), "float16")},
    reference=dual_reference,
    traffic=gemv_traffic(2),
    notes="memory-bound: streams both packed weight matrices once",
    extra={
        "gemm_mnk": lambda s: (1, 2 * s["n"], s["k"]),
        "profile_shape": gemv_profile_shape,
        "weights": WeightUse((("ffn_gate", "ffn_up"),), dual_on_weights),
    },
)
