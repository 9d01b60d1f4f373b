"""``mamba2.prefill_proj``: the Mamba2 SSM layer's in- and out-projection
GEMMs at prefill, on the dense-FFN prefill arms' kernels (``ffn.prefill``'s
W4A4 GEMM, and for the engine's default projection GEMM, which its lever
file does not name, the W4A16 GEMM: leverctl's choice)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...common import int4
from ...common.bits import NVFP4_BLOCK
from ...common.model_weights import ModelTensor, WeightMismatch, WeightUse
from ...common.path import (
    GEMM_PROFILE_BLOCKS,
    Shape,
    Traffic,
    Variant,
    check_preset,
    declared_path,
    gemm_profile_shape,
)
from ...ffn.prefill import formats, w4a4, w4a16_default
from ...ffn.prefill.spec import TOLERANCES as FFN_TOLERANCES
from ...ffn.prefill.spec import activations, weights
from ...selection.mamba2 import PREFILL_PROJ as TABLE
from ..family import MODEL_SECTIONS, model_sizes
from . import naive


def proj_label(preset: str, d: Mapping[str, int]) -> str:
    return f"{preset} {d['proj']} m{d['m']} n{d['n']} k{d['k']}"


PROJ_NAMES = {0: "in_proj", 1: "out_proj"}


def proj_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    """In-projection (``hidden -> 2 H P + 2 G N + H``: z, x, B, C and dt)
    and out-projection (``H P -> hidden``) at each prompt length. The FP8
    activation buffer (``fp8_act``, bytes) is sized for the longest prompt
    at the widest K; the W4A4 kernels are loaded (``w4a4_loaded``). Smoke
    shapes lower the W4A4 row threshold to 16 (``w4a4_min_rows``, in the
    label) so that the simulator runs that arm."""
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(m=19, n=26, k=160, out=0, w4a4_min_rows=16), dict(m=5, n=19, k=256, out=1, w4a4_min_rows=16)]
    else:
        m2, tokens, hidden = model_sizes(model)
        h, p, g, n = (int(m2[k]) for k in ("heads", "head_dim", "groups", "state"))
        inner = h * p
        dims = [
            dict(m=t, n=n_, k=k_, out=o)
            for t in tokens
            for o, (n_, k_) in enumerate(((2 * inner + 2 * g * n + h, hidden), (hidden, inner)))
        ]
    fp8 = max(d["m"] for d in dims) * max(d["k"] for d in dims)
    out = []
    for d in dims:
        d = {**d, "w4a4_loaded": 1, "fp8_act": fp8}
        label = proj_label(preset, {**d, "proj": PROJ_NAMES[d["out"]]})
        if "w4a4_min_rows" in d:
            label += f" w4a4_from{d['w4a4_min_rows']}"
        out.append(Shape(label, d))
    return out


def proj_inputs(shape, rng: np.random.Generator) -> dict:
    """``a`` fp16 activations (outlier channels), the model's weights ``w``
    as the W4A16 GEMM stores them (float32, exact), and ``w`` in NVFP4."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    w4 = formats.w4a16(weights(rng, n, k))
    w = int4.dequantize_w4(w4["qweight"], w4["scales"])
    return {"a": activations(rng, m, k), "w": w, **w4, **formats.nvfp4(w)}


def with_weights(path, tensor: ModelTensor, out: bool):
    """The path on one projection matrix of a model file (``ssm_in`` or
    ``ssm_out``): the preset's shapes of that projection with the matrix's
    ``n`` and ``k``, labelled with its name. As with drawn weights, the
    reference is the matrix quantised to int4 (the default GEMM's weights),
    from which the W4A4 arm's NVFP4 is made, unless the file stores NVFP4:
    that arm then reads it as stored (its error also holding the gap
    between the file's NVFP4 and the int4 weights)."""
    import dataclasses

    n, k = tensor.n, tensor.k
    w4 = formats.w4a16(np.asarray(tensor.values, np.float32))
    w = int4.dequantize_w4(w4["qweight"], w4["scales"])
    if tensor.nvfp4 is not None:
        fp4 = {
            "w_fp4": np.ascontiguousarray(tensor.nvfp4, dtype=np.uint8),
            "w_fp4_scales": np.ascontiguousarray(tensor.nvfp4_scale, dtype=np.uint8),
            "w_fp4_ts": np.array([tensor.nvfp4_global], dtype=np.float32),
        }
    else:
        fp4 = formats.nvfp4(w)
    drawn_shapes = path.shapes

    def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
        dims = [{**s.dims, "n": n, "k": k} for s in drawn_shapes(preset, model) if s["out"] == int(out)]
        fp8 = max(d["m"] for d in dims) * k
        result = []
        for d in dims:
            d = {**d, "fp8_act": fp8}
            label = f"{tensor.name} {proj_label(preset, {**d, 'proj': PROJ_NAMES[d['out']]})}"
            if "w4a4_min_rows" in d:
                label += f" w4a4_from{d['w4a4_min_rows']}"
            result.append(Shape(label, d))
        return result

    def make_inputs(shape, rng: np.random.Generator) -> dict:
        return {"a": activations(rng, shape["m"], k), "w": w, **w4, **fp4}

    return dataclasses.replace(path, shapes=shapes, make_inputs=make_inputs)


def on_weights(path, tensors: Mapping[str, ModelTensor]):
    """``WeightUse.apply``: the projections on a layer's in- or out-projection."""
    ((role, t),) = tensors.items()
    if t.values.ndim != 2:
        raise WeightMismatch(f"{t.name} has shape {list(t.values.shape)}, not a matrix")
    if t.k % NVFP4_BLOCK:
        raise WeightMismatch(f"{t.name} has rows of k={t.k} inputs, not a multiple of {NVFP4_BLOCK} (an NVFP4 block)")
    return with_weights(path, t, out=role == "ssm_out")


WEIGHTS = WeightUse(groups=(("ssm_in",), ("ssm_out",)), apply=on_weights)


def _proj_traffic(weight_bytes, scratch_per_row=lambda k: 0):
    def traffic(shape) -> Traffic:
        m, n, k = shape["m"], shape["n"], shape["k"]
        extra = m * scratch_per_row(k)
        return Traffic(
            bytes_read=weight_bytes(n, k) + 2 * m * k + extra, bytes_written=2 * m * n + extra, flops=2 * m * n * k
        )

    return traffic


PATH = declared_path(
    TABLE,
    {
        "w4a4": Variant(
            "w4a4",
            "ffn_prefill's W4A4 GEMM: activations to NVFP4 per GEMM, NVFP4 weights, both "
            "decoded exactly to bf16 while staged, 64x128 tiles on two warpgroups (wgmma m64n64k16)",
            w4a4.build,
            tolerance=FFN_TOLERANCES["w4a4"],
            traffic=_proj_traffic(formats.nvfp4_bytes, lambda k: k // 2 + k // 16 + 4),
            launches=3,
            tensor_cores="wgmma",
            tc_dtype="bf16",
        ),
        "w4a16": Variant(
            "w4a16",
            "the default projection GEMM, here the W4A16 GEMM (w4a16.gemm's default tiles)",
            w4a16_default.build,
            tolerance=FFN_TOLERANCES["w4a16"],
            traffic=_proj_traffic(formats.w4a16_bytes),
        ),
    },
    shapes=proj_shapes,
    make_inputs=proj_inputs,
    outputs=lambda shape: {"c": ((shape["m"], shape["n"]), "float16")},
    reference=naive.reference,
    traffic=_proj_traffic(formats.w4a16_bytes),
    tolerance=FFN_TOLERANCES["w4a16"],
    notes="compute-bound at prefill sizes (512 and 4096 tokens); W4A4 trades activation precision "
    "(NVFP4, ~10 % error against the unquantised product) for FP4 weights' bytes",
    extra={
        "gemm_mnk": lambda s: (s["m"], s["n"], s["k"]),
        "model_sections": MODEL_SECTIONS,
        "weights": WEIGHTS,
        "profile_shape": gemm_profile_shape,
        "profile_blocks": GEMM_PROFILE_BLOCKS,
    },
)
