"""What the three attention projection paths share (each declared in its
folder's ``spec.py``):

* ``attention.proj_bf16_tc`` (Atlas): NVFP4 weights, bf16 activations;
* ``attention.proj_bf16_tc_w4a16`` (Metrale): int4 W4A16 weights, bf16
  activations;
* ``attention.proj_fp8`` (Metrale): E4M3 weights with per-channel scales,
  E4M3 activations with per-token scales.

The projection is Qwen3-Next-80B-A3B's attention q/k/v at prefill: hidden
2048 in, ``q_heads * head_dim + 2 * kv_heads * head_dim`` = 16 x 256 + 2 x
2 x 256 = 5120 out (the recipe's ``[model]`` hidden and ``[model.attention]``
override them), at 512 and 4096 prefill tokens. Smoke shapes are tiny and
odd (one block per kernel, the simulator being slow): m and n fill no
tile, and k = 48 is not a multiple of any stage (bf16 stages are 32 or 64
k, E4M3 stages 128), so the K tail is zero-filled; the 128 x 128 tiling
takes two stages. The FP8 path's rows are decode/verify batch sizes on both sides
of its 16-row threshold.

Inputs: activations ~ N(0, 1) (bf16; the FP8 path's rows scaled to amax =
448 per token), weights ~ N(0, 0.02) quantised to the path's format.

========================  ==================  ============  ===================================
path                      lever (default)     variants      chosen when
========================  ==================  ============  ===================================
proj_bf16_tc (Atlas)      bf16_tc_proj (off)  bf16_tc       on
                                              fp8_e4m3      off: activations crushed to E4M3
proj_bf16_tc_w4a16        bf16_tc_proj (off)  bf16_n128     on
(Metrale)                                     w4a16_f16     off: the default projection GEMM
proj_fp8 (Metrale)        fp8_attn_m32 (off)  m32           on and more than 16 rows
                                              m16           otherwise
========================  ==================  ============  ===================================

The "chosen when" column is ``leverctl_kernels.selection``'s tables. The
engines' ``bf16_tc_proj`` levers share a name and steer different
projections (Atlas's NVFP4 weights, Metrale's int4 W4A16), hence two
paths. Every variant is checked against the float64 product of the
unquantised activations and the weights as stored, with its own tolerance,
so its record's error is the perturbation its arithmetic adds: the FP8
crush for ``fp8_e4m3``, the weights' rounding to BF16 for ``bf16_n128``
and to fp16 for ``w4a16_f16``, fp32 accumulation for all.

On a model file's weights (``leverctl bench --weights``, :func:`weight_use`)
each path runs on one of a layer's q, k, v, fused qkv or output projection
matrices: ``proj_bf16_tc`` reads NVFP4 as the file stores it (else the
matrix encoded to NVFP4), ``proj_fp8`` reads FP8 with per-channel or
per-tensor scales as stored (else, block-scaled FP8 among them, the matrix
re-encoded to E4M3 per channel), ``proj_bf16_tc_w4a16`` the matrix
quantised to int4; the references read the weights each path is given.

Tensor cores: on Hopper (and in the simulator) every kernel runs on wgmma
(sm_90a: bf16 m64nNk16, e4m3 m64nNk32). Elsewhere the BF16 variants run
mma.sync m16n8k16 bf16 on the same staged tiles, ``w4a16_f16`` the W4A16
GEMM's mma.sync f16 kernel, and the FP8 variants' builds refuse, saying
that FP8 tensor cores are wgmma's (there is no kernel of them for FP16).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..common.bits import f32_to_bf16_np
from ..common.model_weights import ModelTensor, WeightMismatch, WeightUse
from ..common.path import GEMM_PROFILE_BLOCKS, Shape, Tolerance, check_preset, gemm_profile_shape
from ..w4a16.gemm import gemm_tc
from .paged_decode.spec import QWEN3_NEXT_ATTENTION

PREFILL_TOKENS = (512, 4096)
HIDDEN = 2048
W_STD = 0.02

# The form the BF16 variants build on in this process (wgmma on Hopper and in
# the simulator, mma.sync elsewhere; None where neither a GPU nor the
# simulator is present); each launch says what it ran on.
FORM = gemm_tc.declared_form()

# Measured at the smoke and model shapes (tests/kernels/attention/test_projections.py
# prints them): bf16_tc ~1e-7 (fp32 accumulation only); fp8_e4m3 ~3e-2 rel
# (the activations' E4M3 crush, ~2^-4 per value, and the weights' E4M3
# rounding); bf16_n128 ~2e-3 (weights rounded to BF16); w4a16_f16 ~3e-4
# (fp16 weights and output), each also at 512 x 5120 x 2048 (a float64
# emulation of the roundings); the FP8 GEMMs ~1e-7 on exact inputs in the
# simulator. Their bound leaves room for Hopper's FP8 wgmma, whose
# accumulation keeps fewer bits than fp32 (errors near 1e-3 of a K = 4096
# sum have been reported); one wrong channel scale still moves the error
# past it by far.
TOL_BF16_TC = Tolerance(rel=1e-5, abs_of_max=1e-5)
TOL_FP8_CRUSH = Tolerance(rel=8e-2, abs_of_max=8e-2)
TOL_BF16_W4 = Tolerance(rel=8e-3, abs_of_max=8e-3)
TOL_F16_W4 = Tolerance(rel=2e-3, abs_of_max=2e-3)
TOL_FP8_GEMM = Tolerance(rel=5e-3, abs_of_max=1e-2)

# Every projection path needs a model with attention layers; cuBLAS's
# matching GEMM is its reference library.
EXTRA = {
    "model_sections": ("attention",),
    "gemm_mnk": lambda s: (s["m"], s["n"], s["k"]),
    "profile_shape": gemm_profile_shape,
    "profile_blocks": GEMM_PROFILE_BLOCKS,
}


def model_nk(model: Mapping[str, Any] | None) -> tuple[int, int]:
    model = model or {}
    att = {**QWEN3_NEXT_ATTENTION, **dict(model.get("attention") or {})}
    n = (int(att["q_heads"]) + 2 * int(att["kv_heads"])) * int(att["head_dim"])
    return n, int(model.get("hidden", HIDDEN))


def shape_of(preset: str, m: int, n: int, k: int) -> Shape:
    return Shape(f"{preset} m{m} n{n} k{k}", {"m": m, "n": n, "k": k})


def prefill_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        return [shape_of("smoke", 21, 19, 48)]
    n, k = model_nk(model)
    return [shape_of("model", m, n, k) for m in PREFILL_TOKENS]


def x_bf16(rng, m, k) -> np.ndarray:
    return f32_to_bf16_np(rng.standard_normal((m, k), dtype=np.float32))


def outputs_f32(shape: Shape):
    return {"y": ((shape["m"], shape["n"]), "float32")}


def flops(shape) -> int:
    return 2 * shape["m"] * shape["n"] * shape["k"]


# ── on a model file's weights (``leverctl bench --weights``) ─────────────────

# Each projection path runs on any one of a layer's attention projections.
ATTN_GROUPS = (("attn_q",), ("attn_k",), ("attn_v",), ("attn_qkv",), ("attn_output",))
K_MULTIPLE = 16  # NVFP4's block; the int4 words' 8 and the E4M3 rows' 16-byte copies divide it


def weight_use(x_inputs, weight_inputs) -> WeightUse:
    """A projection path's :class:`WeightUse`: ``weight_inputs(tensor)``
    gives the path's weight inputs from one tensor (as stored where the
    file's format is the path's own), ``x_inputs(shape, rng)`` its
    activations. The path's shapes become the tensor's ``n`` and ``k`` at
    the preset's row counts, labelled with the tensor's name."""

    def apply(path, tensors: Mapping[str, ModelTensor]):
        import dataclasses

        ((_role, t),) = tensors.items()
        if t.values.ndim != 2:
            raise WeightMismatch(f"{t.name} has shape {list(t.values.shape)}, not a matrix")
        if t.k % K_MULTIPLE:
            raise WeightMismatch(f"{t.name} has rows of k={t.k} inputs, not a multiple of {K_MULTIPLE}")
        weights = weight_inputs(t)
        drawn_shapes = path.shapes

        def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
            rows = list(dict.fromkeys(s["m"] for s in drawn_shapes(preset, model)))
            return [Shape(f"{t.name} {preset} m{m} n{t.n} k{t.k}", {"m": m, "n": t.n, "k": t.k}) for m in rows]

        def make_inputs(shape: Shape, rng) -> dict:
            return {**x_inputs(shape, rng), **weights}

        return dataclasses.replace(path, shapes=shapes, make_inputs=make_inputs)

    return WeightUse(groups=ATTN_GROUPS, apply=apply)
