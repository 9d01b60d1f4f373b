"""Shapes, seeded inputs, outputs, references and traffic of the attention
projection paths (declared in ``__init__``):

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
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..common import int4
from ..common.bits import f32_to_bf16_np, f32_to_e4m3_np, nvfp4_encode_np
from ..common.path import Shape, Traffic, check_preset
from . import proj_naive
from .spec import QWEN3_NEXT_ATTENTION

PREFILL_TOKENS = (512, 4096)
FP8_ROWS = (16, 32, 128)
HIDDEN = 2048
W_STD = 0.02



def _model_nk(model: Mapping[str, Any] | None) -> tuple[int, int]:
    model = model or {}
    att = {**QWEN3_NEXT_ATTENTION, **dict(model.get("attention") or {})}
    n = (int(att["q_heads"]) + 2 * int(att["kv_heads"])) * int(att["head_dim"])
    return n, int(model.get("hidden", HIDDEN))


def _shape(preset: str, m: int, n: int, k: int) -> Shape:
    return Shape(f"{preset} m{m} n{n} k{k}", {"m": m, "n": n, "k": k})


def prefill_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        return [_shape("smoke", 21, 19, 48)]
    n, k = _model_nk(model)
    return [_shape("model", m, n, k) for m in PREFILL_TOKENS]


def fp8_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        return [_shape("smoke", 13, 19, 48), _shape("smoke", 21, 19, 48)]
    n, k = _model_nk(model)
    return [_shape("model", m, n, k) for m in FP8_ROWS]


# ----------------------------------------------------------------- inputs

def _x_bf16(rng, m, k) -> np.ndarray:
    return f32_to_bf16_np(rng.standard_normal((m, k), dtype=np.float32))


def nvfp4_inputs(shape: Shape, rng) -> dict:
    m, n, k = shape["m"], shape["n"], shape["k"]
    w = rng.standard_normal((n, k), dtype=np.float32) * np.float32(W_STD)
    packed, scales, ts = nvfp4_encode_np(w)
    return {"x": _x_bf16(rng, m, k), "w_packed": packed, "w_scales": scales,
            "w_ts": np.array([ts], np.float32)}


def w4_inputs(shape: Shape, rng) -> dict:
    m, n, k = shape["m"], shape["n"], shape["k"]
    qweight, scales = int4.random_w4(rng, n, k, W_STD)
    return {"x": _x_bf16(rng, m, k), "qweight": qweight, "scales": scales}


def _e4m3_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    amax = np.abs(a).max(axis=1)
    scale = np.where(amax > 0, amax / 448.0, 1.0).astype(np.float32)
    return f32_to_e4m3_np(a / scale[:, None]), scale


def fp8_inputs(shape: Shape, rng) -> dict:
    m, n, k = shape["m"], shape["n"], shape["k"]
    x8, xs = _e4m3_rows(rng.standard_normal((m, k), dtype=np.float32))
    w8, ws = _e4m3_rows(rng.standard_normal((n, k), dtype=np.float32) * np.float32(W_STD))
    return {"x8": x8, "x_scale": xs, "w8": w8, "w_scale": ws}


# ------------------------------------------------------ outputs, references

def outputs_f32(shape: Shape):
    return {"y": ((shape["m"], shape["n"]), "float32")}


def outputs_f16(shape: Shape):
    return {"y": ((shape["m"], shape["n"]), "float16")}


def nvfp4_reference(shape: Shape, x: dict) -> dict:
    return {"y": proj_naive.naive_proj_nvfp4(x["x"], x["w_packed"], x["w_scales"], x["w_ts"])}


def w4_reference(shape: Shape, x: dict) -> dict:
    return {"y": proj_naive.naive_proj_w4(x["x"], x["qweight"], x["scales"])}


def fp8_reference(shape: Shape, x: dict) -> dict:
    return {"y": proj_naive.naive_proj_fp8(x["x8"], x["x_scale"], x["w8"], x["w_scale"])}


# ----------------------------------------------------------------- traffic

def _flops(shape) -> int:
    return 2 * shape["m"] * shape["n"] * shape["k"]


def nvfp4_traffic(shape) -> Traffic:
    m, n, k = shape["m"], shape["n"], shape["k"]
    return Traffic(m * k * 2 + n * k // 2 + n * k // 16 + 4, m * n * 4, _flops(shape))


def fp8_crush_traffic(shape) -> Traffic:
    """The crush reads x twice (amax, then the values) and writes its
    codes and scales, which the GEMM reads back."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    base = nvfp4_traffic(shape)
    return Traffic(base.bytes_read + m * k * 2 + m * k + m * 4, base.bytes_written + m * k + m * 4, base.flops)


def w4_traffic(shape) -> Traffic:
    m, n, k = shape["m"], shape["n"], shape["k"]
    return Traffic(m * k * 2 + int4.packed_bytes(n, k), m * n * 2, _flops(shape))


def w4_f16_traffic(shape) -> Traffic:
    """The fp16 copy of x is written once and read back."""
    m, k = shape["m"], shape["k"]
    base = w4_traffic(shape)
    return Traffic(base.bytes_read + m * k * 2, base.bytes_written + m * k * 2, base.flops)


def fp8_traffic(shape) -> Traffic:
    m, n, k = shape["m"], shape["n"], shape["k"]
    return Traffic(m * k + n * k + 4 * (m + n), m * n * 4, _flops(shape))
