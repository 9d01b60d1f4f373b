"""``attention.rotation`` (Metrale's ``weight_pre_rotated``): its shapes,
seeded inputs, outputs, reference, traffic, quantisation finding and
declaration.

Shape dims: ``t`` tokens, ``hidden``, ``hq`` and ``hkv`` heads of dim ``d``
(the engine rotates at load only at d = 128; ``selection`` refuses the
others), ``outliers``: K and V channels per head whose weight rows are
scaled up ``OUTLIER_GAIN`` times, as trained models' K has a few large
channels.

Inputs: ``x`` ~ N(0, 1) and ``w_qkv`` ~ N(0, 1 / hidden), bf16 bits; the
reference reads the same bf16 values.

======================  =========================  ================  ================================
path                    lever (default)            variants          chosen when
======================  =========================  ================  ================================
attention.rotation      weight_pre_rotated (off)   pre_rotated       on and head dim 128
                                                   runtime_rotation  otherwise (a note says why when
                                                                     the lever is on)
======================  =========================  ================  ================================

Both variants give the attention its rotated q, k and v and write the same
FP8 E4M3 K and V cache, up to rounding: ``pre_rotated`` projects on
weights rotated at load and stored as bf16, whose rounding moves q by about
1e-3 of its scale and flips an occasional E4M3 code by one step;
``runtime_rotation`` rotates the fp32 projection. The engine's lever does
not name its rotation; these kernels use the orthonormal Walsh-Hadamard
transform (``_rotation``). Every record's ``findings`` give the FP8
quantisation error of the cached K and V with the rotation and without it
(``quant_error``): the inputs carry outlier channels, which
the rotation spreads over the head.

What the finding shows at these inputs: the rotated cache's relative error
is the larger (about 2.8 % against 1-2 % at the smoke shape). E4M3 is a
floating-point format, so a quiet channel beside a loud one keeps the same
relative step, and with one scale per vector the loudest channel maps to
448 exactly; after the rotation every element sits mid-range with a full
rounding error. The rotation pays off for formats with uniform steps
(integer caches), which these kernels do not write.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ...common import weight_fit as wf
from ...common.bits import bf16_to_f32_np, e4m3_to_f32_np, f32_to_bf16_np
from ...common.model_weights import WeightUse
from ...common.path import (
    GEMM_PROFILE_BLOCKS,
    GEMM_PROFILE_TILE,
    Shape,
    Tolerance,
    Traffic,
    Variant,
    check_preset,
    declared_path,
)
from ...selection.attention import ROTATION as TABLE
from ...selection.attention import ROTATION_HEAD_DIM
from ..projections import FORM  # the projection's tensor-core form (both variants')
from . import naive, pre_rotated, runtime_rotation

BF16, F32 = 2, 4
OUTLIER_GAIN = 16.0
# A Llama-3-8B-like attention: head dim 128, the lever's only head dim.
MODEL_ATTENTION = {"q_heads": 32, "kv_heads": 8, "head_dim": 128, "hidden": 4096}
MODEL_TOKENS = [1, 16, 512]


def _label(preset: str, d: Mapping[str, int]) -> str:
    return f"{preset} t{d['t']} hidden{d['hidden']} hq{d['hq']} hkv{d['hkv']} d{d['d']}"


def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        dims = [dict(t=3, hidden=24, hq=1, hkv=1, d=128, outliers=2)]
    else:
        model = model or {}
        att = dict(model.get("attention") or {})
        if int(att.get("head_dim", 0)) == 128:  # the recipe's model, where the lever applies
            heads = dict(
                hq=int(att["q_heads"]),
                hkv=int(att["kv_heads"]),
                d=128,
                hidden=int(model.get("hidden", MODEL_ATTENTION["hidden"])),
            )
        else:
            heads = dict(
                hq=MODEL_ATTENTION["q_heads"], hkv=MODEL_ATTENTION["kv_heads"], d=128, hidden=MODEL_ATTENTION["hidden"]
            )
        dims = [dict(t=t, outliers=4, **heads) for t in MODEL_TOKENS]
    return [Shape(_label(preset, d), d) for d in dims]


def profile_shape(shape: Shape) -> Shape:
    """The memory trace's shape: the model's ``hidden`` (the projection's
    row length and stride) and head dim, one query and one KV head (a
    head's 128 rows are the projection's column tile), tokens cut to 128
    (one whole row tile); one block a launch traced."""
    d = {**shape.dims, "t": min(shape["t"], GEMM_PROFILE_TILE), "hq": 1, "hkv": 1}
    return Shape(_label("profile", d), d)


def make_inputs(shape: Shape, rng) -> dict:
    t, hidden, hq, hkv, d = shape["t"], shape["hidden"], shape["hq"], shape["hkv"], shape["d"]
    x = rng.standard_normal((t, hidden), dtype=np.float32)
    w = rng.standard_normal(((hq + 2 * hkv) * d, hidden), dtype=np.float32) / np.float32(np.sqrt(hidden))
    w = w.reshape(hq + 2 * hkv, d, hidden)
    for head in range(hq, hq + 2 * hkv):  # K and V heads: a few loud channels
        w[head, rng.choice(d, shape["outliers"], replace=False)] *= np.float32(OUTLIER_GAIN)
    return {"x": f32_to_bf16_np(x), "w_qkv": f32_to_bf16_np(w.reshape(-1, hidden))}


def on_weights(path, tensors):
    """On a layer's q, k and v projections from a model file (``[hq d,
    hidden]``, ``[hkv d, hidden]`` twice): ``w_qkv`` their rows stacked, in
    bf16 as the kernels read them (a BF16 file's bits as stored, anything
    else rounded once), the heads counted at the shape's head dim (128, the
    one the engine rotates at); the file's outliers are the model's own, so
    none are added (``outliers`` 0). The findings' FP8 error with and
    without the rotation is then the model's."""
    q, k, v = (wf.role(tensors, r, path.name) for r in ("attn_q", "attn_k", "attn_v"))
    (nq, hidden), (nk, hk_), (nv, hv_) = (wf.dims(t, 2, path.name) for t in (q, k, v))
    wf.agree(q, "k", hidden, k, "k", hk_, "q, k and v project the same hidden state")
    wf.agree(q, "k", hidden, v, "k", hv_, "q, k and v project the same hidden state")
    wf.agree(k, "n", nk, v, "n", nv, "as many value heads as key heads")
    stacked = np.concatenate([q.values, k.values, v.values]).astype(np.float32)
    wqkv = f32_to_bf16_np(stacked)
    wf.finite_in(q, bf16_to_f32_np(wqkv), "BF16")
    d = ROTATION_HEAD_DIM  # every shape's: the loader rotates at no other
    wf.multiple(q, "n", nq, d, f"{path.name} counts heads of dim {d}")
    wf.multiple(k, "n", nk, d, f"{path.name} counts heads of dim {d}")
    tag = wf.read_as([q, k, v], "BF16", [t.stored == "BF16" for t in (q, k, v)])

    def shapes_on_file(preset, model):
        out = []
        for sh in path.shapes(preset, model):
            dims = {**sh.dims, "hidden": hidden, "hq": nq // d, "hkv": nk // d, "d": d, "outliers": 0}
            out.append(Shape(f"{tag} t{dims['t']} hq{dims['hq']} hkv{dims['hkv']} d{d}", dims))
        return out

    def inputs_on_file(shape, rng):
        x = rng.standard_normal((shape["t"], hidden), dtype=np.float32)
        return {"x": f32_to_bf16_np(x), "w_qkv": wqkv}

    return dataclasses.replace(path, shapes=shapes_on_file, make_inputs=inputs_on_file)


def outputs(shape: Shape):
    t, hq, hkv, d = shape["t"], shape["hq"], shape["hkv"], shape["d"]
    return {
        "q": ((t, hq, d), "float32"),
        "k_cache": ((t, hkv, d), "uint8"),
        "v_cache": ((t, hkv, d), "uint8"),
        "k_scale": ((t, hkv), "float32"),
        "v_scale": ((t, hkv), "float32"),
    }


def reference(shape: Shape, x: dict) -> dict:
    return naive.naive_rotated_qkv_write(x["x"], x["w_qkv"], shape["hq"], shape["hkv"], shape["d"])


def _e4m3_values(a) -> np.ndarray:
    return e4m3_to_f32_np(a).astype(np.float64)


# The check compares the caches' E4M3 values (unscaled codes) with the
# reference's; the scales are outputs of their own.
DECODE = {"k_cache": _e4m3_values, "v_cache": _e4m3_values}


def traffic(shape: Shape) -> Traffic:
    """x and W read, q and the caches and scales written, the fp32
    projection written and read once; 2 flops per multiply-add of the
    projection plus the transform's D log2 D adds per head."""
    t, hidden, hq, hkv, d = shape["t"], shape["hidden"], shape["hq"], shape["hkv"], shape["d"]
    n = (hq + 2 * hkv) * d
    read = t * hidden * BF16 + n * hidden * BF16 + t * n * F32
    written = t * n * F32 + t * hq * d * F32 + 2 * t * hkv * (d + F32)
    return Traffic(read, written, 2 * t * n * hidden)


def runtime_traffic(shape: Shape) -> Traffic:
    base = traffic(shape)
    d = shape["d"]
    return Traffic(
        base.bytes_read,
        base.bytes_written,
        base.flops + shape["t"] * (shape["hq"] + 2 * shape["hkv"]) * d * int(np.log2(d)),
    )


def quant_error(variant: str, shape: Shape, launch, bufs: Mapping[str, Any], cuda) -> dict:
    """The record's ``findings``: the FP8 E4M3 error of the cached K and V
    (relative L2, against the float64 rotated projection) as the kernel
    wrote them, rotated, and what the same per-vector quantisation gives
    the unrotated K and V. The rotation is orthonormal, so both errors are
    measured in the same norm."""
    x, w = bufs["x"].copy_to_host(), bufs["w_qkv"].copy_to_host()
    _, k, v = naive.project(x, w, shape["hq"], shape["hkv"], shape["d"])
    out = {}
    for name, exact in (("k", k), ("v", v)):
        cached = naive.dequantise(bufs[f"{name}_cache"].copy_to_host(), bufs[f"{name}_scale"].copy_to_host())
        rotated = naive.rotate(exact)
        unrot = naive.dequantise(*naive.quantise(exact))
        out[name] = {"rotated": _rel(cached, rotated), "unrotated": _rel(unrot, exact)}
    return {"fp8_e4m3_error": out, "outlier_channels": shape["outliers"]}


def _rel(got, want) -> float:
    return float(f"{np.linalg.norm(got - want) / np.linalg.norm(want):.4g}")


# runtime_rotation: fp32 against float64 on the same bf16 inputs; an E4M3
# code flips only where a value sits within ~1e-6 of a rounding boundary.
# The bound per element is one E4M3 step at the top of the range (32 of
# 448); a missing butterfly or a wrong scale moves the caches by tens of
# percent.
RUNTIME_TOL = Tolerance(rel=1e-3, abs_of_max=0.075)
# pre_rotated: the bf16 rounding of W' (relative 2^-9 per weight) moves each
# projection by ~1e-3 of its scale, so a few per cent of the E4M3 codes land
# one step away (~6 % of their value): ~1e-2 in norm.
PRE_ROTATED_TOL = Tolerance(rel=3e-2, abs_of_max=0.075)

PATH = declared_path(
    TABLE,
    {
        v.name: v
        for v in (
            Variant(
                pre_rotated.NAME,
                pre_rotated.SUMMARY,
                pre_rotated.build,
                tolerance=PRE_ROTATED_TOL,
                launches=2,
                tensor_cores=FORM,
                tc_dtype="bf16" if FORM else None,
            ),
            Variant(
                runtime_rotation.NAME,
                runtime_rotation.SUMMARY,
                runtime_rotation.build,
                tolerance=RUNTIME_TOL,
                traffic=runtime_traffic,
                launches=2,
                tensor_cores=FORM,
                tc_dtype="bf16" if FORM else None,
            ),
        )
    },
    shapes=shapes,
    make_inputs=make_inputs,
    outputs=outputs,
    reference=reference,
    traffic=traffic,
    tolerance=RUNTIME_TOL,
    notes="Projection-bound; the lever removes the Hadamard from the KV-cache write.",
    extra={
        "model_sections": ("attention",),
        "decode": DECODE,
        "findings": quant_error,
        "weights": WeightUse((("attn_q", "attn_k", "attn_v"),), on_weights),
        "profile_shape": profile_shape,
        "profile_blocks": GEMM_PROFILE_BLOCKS,
    },
)
