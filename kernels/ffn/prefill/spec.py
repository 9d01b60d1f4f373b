"""``ffn.prefill``, the dense-FFN prefill arms (Metrale): the GEMMs of a SiLU dense FFN over a
batch of prompt tokens, gate+up (``K = hidden``) and down
(``K = intermediate``), through the default W4A16 GEMM or one of the arms
ten levers choose between.

===============  ==========================================================  =========
variant          arithmetic                                                  kernel
===============  ==========================================================  =========
w4a16            int4 weights (fp16 scales per 128), fp16 activations, f32   here
int8_faith2      activations requantised to int8 per token, int8 weights     here
                 (f32 scale per output row), s32 on mma.sync m16n8k32
int8_faith5      the same arithmetic in another tiling, bitwise equal        here
bf16_v1/v2       int4 -> bf16 while staged, bf16 activations, wgmma bf16,    here
                 f32 (v1 64 x 128 tiles, v2 the 128-row tile)
fp8_m64          activations to FP8 E4M3 per token, int4 q - 8 exact in      here
                 E4M3, 64-row tiles on wgmma e4m3, group scales per stage
q4k_mmq          GGUF Q4_K weights (byte for byte), int8 activations per     here
                 32, s8 mma.sync per sub-block (k a multiple of 256)
w4a4             NVFP4 weights, activations NVFP4 per GEMM (E4M3 scale per   here
                 16, one tensor scale), decoded exactly to bf16, wgmma bf16
nvfp4_mmq        NVFP4 weights, activations NVFP4 per GEMM; E2M1 x 2 as      here
                 exact int8, s8 mma.sync per 16-value block, the E4M3 block
                 scales folded in f32 per block (gate+up, and down)
===============  ==========================================================  =========

The wgmma arms (BF16 v1/v2, W4A4) also build an ``mma.sync`` form for GPUs
without wgmma (``_mma_forms``: ``build(shape, form=...)``, the form
``common.tc`` picks); FP8 M64 is wgmma only and its build refuses elsewhere.

Which arm the levers pick: the decision table ``selection.ffn.PREFILL``,
whose docstring gives the precedence, when an arm counts as loaded at a
shape (NVFP4 at k % 16 = 0 and no LoRA adapter, Q4_K at k % 256 = 0) and
why.

One shape is one GEMM (``down`` says which): ``c[m, n] = a[m, k] W[n, k]^T``
with ``a`` fp16 (values that bf16 holds exactly too) and ``c`` fp16. The
model's weights ``w`` are heavy-tailed (Student-t, outlier output rows) and
stored as the default W4A16 GEMM reads them; the inputs carry them as
float32 (exact) and re-encoded in every format an arm reads (``formats``),
and the activations have outlier input channels. The reference is the
float64 product of ``a`` and ``w``, so each record's error is what its
arm's formats and arithmetic cost against the engine's default weights. The
tolerances are per arm, set from what correct arithmetic in that format
gives on these inputs; the tests hold each kernel to its own arithmetic
(``naive.*_exact``) much more tightly.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...common import bits, int4
from ...common.model_weights import ModelTensor, WeightMismatch, WeightUse
from ...common.path import (
    GEMM_PROFILE_BLOCKS,
    KernelPath,
    Shape,
    Tolerance,
    Traffic,
    Variant,
    check_preset,
    declared_path,
    gemm_profile_shape,
)
from ...selection.ffn import PREFILL as TABLE
from . import (
    bf16_v1,
    bf16_v2,
    formats,
    fp8_m64,
    int8_faith2,
    int8_faith5,
    naive,
    nvfp4_mmq,
    q4k_mmq,
    w4a4,
    w4a16_default,
)

# Qwen3-8B's dense FFN: the `model` preset when the recipe has no sizes.
DEFAULT_MODEL: Mapping[str, Any] = {"name": "Qwen3-8B", "hidden": 4096, "ffn": {"intermediate": 12288}}
DEFAULT_PREFILL_TOKENS = (512, 4096)

# Per arm, against the float64 product with the model's weights (relative
# norm, largest element error over the output's largest magnitude). The
# default GEMM reads those weights as stored: only its fp32 sums and fp16
# output round (<= 5e-4 measured), the W4A16 family's bound. The int8 arm
# re-encodes the weights per row (~1 %) and the activations per token, whose
# scale the x20 outlier channels set: 2-7 % in norm, up to 14 % in one
# element at the tiny smoke shapes, 6-7 % and 9 % at k = 4096 and 12288.
# BF16 rounds each weight once (<= 0.4 %, 0.6 % in one element); FP8 the
# activations to 3 mantissa bits (up to 4 %, 8 % in one element, 13 % at
# one rare seed). Q4_K re-encodes the int4 weights on its own 4-bit grid
# with 6-bit sub-block scales (``common.q4k.quantize``: the plain min/max
# affine grid, no search): 10 % in norm at the median, up to 33 % at the
# tiny k = 256 shape, 10-14 % at k = 4096 and 12288; one element of a
# 5 x 19 output can be off by most of the output's largest magnitude, so its
# element bound only catches the grossly wrong, and its kernel is held to
# its own arithmetic by the tests. (Figures: 200 seeds at the smoke shapes,
# a few at the model's K.) A kernel that drops half of K is far over each.
TOLERANCES = {
    "w4a16": Tolerance(rel=2e-3, abs_of_max=2e-3),
    "int8_faith2": Tolerance(rel=0.12, abs_of_max=0.25),
    "int8_faith5": Tolerance(rel=0.12, abs_of_max=0.25),
    "bf16_v1": Tolerance(rel=6e-3, abs_of_max=8e-3),
    "fp8_m64": Tolerance(rel=0.06, abs_of_max=0.2),
    "q4k_mmq": Tolerance(rel=0.45, abs_of_max=1.0),
    "w4a4": Tolerance(rel=0.45, abs_of_max=0.8),
    "bf16_v2": Tolerance(rel=6e-3, abs_of_max=8e-3),
    # The same formats as W4A4, reached in integers: the same bound.
    "nvfp4_mmq": Tolerance(rel=0.45, abs_of_max=0.8),
}

_SMOKE = (
    dict(m=19, n=26, k=160, down=0),  # partial tiles; k ends mid-stage (64, 128) and mid-group
    dict(m=5, n=19, k=256, down=1),  # one Q4_K super-block
)


def _label(d: Mapping[str, int]) -> str:
    return f"{'down' if d['down'] else 'gate+up'} m{d['m']} n{d['n']} k{d['k']}"


def shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    if preset == "smoke":
        return [Shape(_label(d), d) for d in _SMOKE]
    check_preset(preset)
    model = model or {}
    hidden = model.get("hidden")
    inter = (model.get("ffn") or {}).get("intermediate")
    if not hidden or not inter:
        model, hidden, inter = DEFAULT_MODEL, DEFAULT_MODEL["hidden"], DEFAULT_MODEL["ffn"]["intermediate"]
    tokens = (model.get("bench") or {}).get("prefill_tokens") or DEFAULT_PREFILL_TOKENS
    out = []
    for t in tokens:
        for d in (
            dict(m=int(t), n=2 * int(inter), k=int(hidden), down=0),
            dict(m=int(t), n=int(hidden), k=int(inter), down=1),
        ):
            out.append(Shape(_label(d), d))
    return out


def activations(rng: np.random.Generator, m: int, k: int) -> np.ndarray:
    """fp16 ``[m, k]``, normal with about 1 % outlier input channels (x20),
    rounded to values bf16 holds exactly as well (8 significant bits)."""
    a = rng.standard_normal((m, k), dtype=np.float32)
    cols = rng.choice(k, size=max(1, k // 100), replace=False)
    a[:, cols] *= np.float32(20.0)
    return bits.bf16_to_f32_np(bits.f32_to_bf16_np(a)).astype(np.float16)


def weights(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """float32 ``[n, k]``: Student-t (5 degrees of freedom) x 0.02, about 2 %
    of output rows x 8."""
    w = rng.standard_t(5, size=(n, k)).astype(np.float32) * np.float32(0.02)
    rows = rng.choice(n, size=max(1, n // 50), replace=False)
    w[rows] *= np.float32(8.0)
    return w


def make_inputs(shape: Shape, rng: np.random.Generator) -> dict:
    """``a``, the model's weights ``w`` (float32: heavy-tailed weights as the
    default W4A16 GEMM stores them, dequantised exactly) and ``w`` in every
    format an arm reads."""
    return _inputs(shape, rng, weights(rng, shape["n"], shape["k"]))


def _inputs(shape: Shape, rng: np.random.Generator, source: np.ndarray, q4k=None) -> dict:
    m, k = shape["m"], shape["k"]
    w4 = formats.w4a16(source)
    w = int4.dequantize_w4(w4["qweight"], w4["scales"])
    a = activations(rng, m, k)
    q4 = {"w_q4k": q4k} if q4k is not None else formats.q4k_blocks(w)
    return {
        "a": a,
        "a_bf16": bits.f32_to_bf16_np(a.astype(np.float32)),
        "w": w,
        **w4,
        **formats.int8(w),
        **q4,
        **formats.nvfp4(w),
    }


def _inputs_with(shape: Shape, rng: np.random.Generator, source: np.ndarray, q4k=None, nvfp4=None) -> dict:
    inputs = _inputs(shape, rng, source, q4k)
    if nvfp4 is not None:
        inputs.update(nvfp4)
    return inputs


def with_weights(path: KernelPath, tensor: ModelTensor, down: bool) -> KernelPath:
    """The path on one weight matrix of a model file (``tensor.values``,
    float32 ``[n, k]``) instead of drawn weights: its shapes are that matrix
    at the recipe's prefill token counts (model) or at the smoke shape's
    token count for its projection (smoke), labelled with the tensor's
    name. As with drawn weights, the reference is the engine's default
    weights, the int4 quantisation of the matrix, and every arm's format is
    made from them, except what the file stores in an arm's own format,
    which that arm reads as stored: Q4_K blocks (the Q4_K arm, where
    k % 256 = 0) and NVFP4 with both scales (the W4A4 and NVFP4 MMQ arms).
    Their error then also holds the gap between the file's encoding and the
    int4 weights."""
    import dataclasses

    n, k = tensor.n, tensor.k
    w = np.ascontiguousarray(tensor.values, dtype=np.float32)
    q4k = tensor.q4k if tensor.q4k is not None and k % 256 == 0 else None
    fp4 = None
    if tensor.nvfp4 is not None:
        fp4 = {
            "w_fp4": np.ascontiguousarray(tensor.nvfp4),
            "w_fp4_scales": np.ascontiguousarray(tensor.nvfp4_scale),
            "w_fp4_ts": np.array([tensor.nvfp4_global], dtype=np.float32),
        }

    def shapes_on_file(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
        check_preset(preset)
        if preset == "smoke":
            tokens = [d["m"] for d in _SMOKE if d["down"] == int(down)][:1]
        else:
            tokens = ((model or {}).get("bench") or {}).get("prefill_tokens") or DEFAULT_PREFILL_TOKENS
        dims = [dict(m=int(t), n=n, k=k, down=int(down)) for t in tokens]
        return [Shape(f"{tensor.name} {_label(d)}", d) for d in dims]

    def inputs_on_file(shape: Shape, rng: np.random.Generator) -> dict:
        return _inputs_with(shape, rng, w, q4k, fp4)

    return dataclasses.replace(path, shapes=shapes_on_file, make_inputs=inputs_on_file)


def on_weights(path: KernelPath, tensors: Mapping[str, ModelTensor]) -> KernelPath:
    """``WeightUse.apply``: the arms on one FFN matrix (gate, up or down)."""
    ((role, tensor),) = tensors.items()
    if tensor.values.ndim != 2:
        raise WeightMismatch(f"{tensor.name} has shape {list(tensor.values.shape)}, not a matrix")
    if tensor.k % bits.NVFP4_BLOCK:
        raise WeightMismatch(
            f"{tensor.name} has rows of k={tensor.k} inputs, not a multiple of {bits.NVFP4_BLOCK} (an NVFP4 block)"
        )
    return with_weights(path, tensor, down=role == "ffn_down")


# The arms run on a dense FFN's gate, up or down matrix, one at a time.
WEIGHTS = WeightUse(groups=(("ffn_gate",), ("ffn_up",), ("ffn_down",)), apply=on_weights)


def reference(shape: Shape, inputs: dict) -> dict:
    return {"c": naive.naive_gemm(inputs["a"], inputs["w"])}


def _traffic(weight_bytes, scratch_per_row=lambda k: 0):
    """Bytes: the weights in the arm's format, ``a`` (fp16) read once, ``c``
    (fp16) written once, plus any activation scratch the arm writes and
    reads back; FLOPs ``2 m n k``."""

    def traffic(shape: Shape) -> Traffic:
        m, n, k = shape["m"], shape["n"], shape["k"]
        extra = m * scratch_per_row(k)
        return Traffic(
            bytes_read=weight_bytes(n, k) + 2 * m * k + extra, bytes_written=2 * m * n + extra, flops=2 * m * n * k
        )

    return traffic


_INT8_SCRATCH = lambda k: k + 4  # noqa: E731 - int8 row and its float32 scale

VARIANTS = {
    "w4a16": Variant(
        "w4a16",
        "the default W4A16 GEMM (w4a16.gemm's default tiles, FP32 cores)",
        w4a16_default.build,
        tolerance=TOLERANCES["w4a16"],
        traffic=_traffic(formats.w4a16_bytes),
    ),
    "bf16_v1": Variant(
        "bf16_v1",
        "int4 -> bf16 in registers, bf16 activations, 64x128 tiles: two warpgroups on its column halves, "
        "wgmma m64n64k16",
        bf16_v1.build,
        tolerance=TOLERANCES["bf16_v1"],
        traffic=_traffic(formats.w4a16_bytes),
        tensor_cores="wgmma",
        tc_dtype="bf16",
    ),
    "bf16_v2": Variant(
        "bf16_v2",
        "as v1 on 128x64 tiles (t_m128): two warpgroups share each weight tile",
        bf16_v2.build,
        tolerance=TOLERANCES["bf16_v2"],
        traffic=_traffic(formats.w4a16_bytes),
        tensor_cores="wgmma",
        tc_dtype="bf16",
    ),
    "fp8_m64": Variant(
        "fp8_m64",
        "E4M3 quant per token, then 64x128 tiles on two warpgroups (wgmma m64n64k32 e4m3) on q - 8, "
        "group scales per stage",
        fp8_m64.build,
        tolerance=TOLERANCES["fp8_m64"],
        traffic=_traffic(formats.w4a16_bytes, lambda k: k + 4),
        launches=2,
        tensor_cores="wgmma",
        tc_dtype="e4m3",
    ),
    "q4k_mmq": Variant(
        "q4k_mmq",
        "GGUF Q4_K weights, int8 activations per 32, s8 mma.sync per sub-block, scales and mins folded in f32",
        q4k_mmq.build,
        tolerance=TOLERANCES["q4k_mmq"],
        traffic=_traffic(formats.q4k_bytes, lambda k: k + 8 * (k // 32)),
        launches=2,
        tensor_cores="mma.sync",
        tc_dtype="s8",
    ),
    "w4a4": Variant(
        "w4a4",
        "NVFP4 weights, activations to NVFP4 per GEMM, both decoded exactly to bf16 while staged, 64x128 tiles on two "
        "warpgroups (wgmma m64n64k16)",
        w4a4.build,
        tolerance=TOLERANCES["w4a4"],
        traffic=_traffic(formats.nvfp4_bytes, lambda k: k // 2 + k // 16 + 4),
        launches=w4a4.launches,
        tensor_cores="wgmma",
        tc_dtype="bf16",
    ),
    "nvfp4_mmq": Variant(
        "nvfp4_mmq",
        "NVFP4 weights, activations to NVFP4 per GEMM, E2M1 x 2 as int8, s8 mma.sync "
        "m16n8k32 per 16-value block (one K half zeroed), E4M3 block scales in f32",
        nvfp4_mmq.build,
        tolerance=TOLERANCES["nvfp4_mmq"],
        traffic=_traffic(formats.nvfp4_bytes, lambda k: k // 2 + k // 16 + 4),
        launches=3,
        tensor_cores="mma.sync",
        tc_dtype="s8",
    ),
    "int8_faith2": Variant(
        "int8_faith2",
        "int8 requant per token, then s8 mma.sync GEMM on the shared mainloop, 64x64 tiles, 3 K stages of 128",
        int8_faith2.build,
        tolerance=TOLERANCES["int8_faith2"],
        traffic=_traffic(formats.int8_bytes, _INT8_SCRATCH),
        launches=2,
        tensor_cores="mma.sync",
        tc_dtype="s8",
    ),
    "int8_faith5": Variant(
        "int8_faith5",
        "int8 requant per token, then s8 mma.sync GEMM on the shared mainloop, 64x128 tiles, 3 K stages of 128",
        int8_faith5.build,
        tolerance=TOLERANCES["int8_faith5"],
        traffic=_traffic(formats.int8_bytes, _INT8_SCRATCH),
        launches=2,
        tensor_cores="mma.sync",
        tc_dtype="s8",
    ),
}

PATH = declared_path(
    TABLE,
    VARIANTS,
    shapes=shapes,
    make_inputs=make_inputs,
    outputs=lambda shape: {"c": ((shape["m"], shape["n"]), "float16")},
    reference=reference,
    traffic=_traffic(formats.w4a16_bytes),
    tolerance=TOLERANCES["w4a16"],
    notes="compute-bound at prefill sizes (m = 512, 4096 tokens); the arms trade weight format and "
    "activation precision for tensor-core throughput",
    extra={
        "gemm_mnk": lambda s: (s["m"], s["n"], s["k"]),
        "model_sections": ("ffn",),
        "weights": WEIGHTS,
        "profile_shape": gemm_profile_shape,
        "profile_blocks": GEMM_PROFILE_BLOCKS,
    },
)
