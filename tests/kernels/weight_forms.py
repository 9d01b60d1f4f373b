"""Model tensors for the ``WeightUse`` tests, made from a NumPy array in
each form a model file stores (``kernels/common/model_weights.py``), and
the checks every path's weights test makes.

The stored forms are encoded here independently of the kernels' codecs:
BF16, FP8 E4M3 and NVFP4's E2M1 and E4M3 scales through ``ml_dtypes``;
Q4_K blocks by ``common.q4k.quantize`` but decoded by the ``gguf``
package's own dequantiser. ``values`` is what a reader gives: the stored
form decoded to float32.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from leverctl.bench.check import check, compare
from leverctl_kernels.common.model_weights import ModelTensor

FP8_MAX = 448.0
E2M1_MAX = 6.0


def weights(rng: np.random.Generator, *shape: int, scale: float = 0.05, outliers: bool = True) -> np.ndarray:
    """float32 weights: normal x ``scale``, with ``outliers`` one in 64 x 6."""
    w = rng.standard_normal(shape).astype(np.float32) * np.float32(scale)
    if outliers:
        flat = w.reshape(-1)
        flat[rng.choice(flat.size, size=max(1, flat.size // 64), replace=False)] *= np.float32(6.0)
    return w


def bf16(name: str, role: str, w: np.ndarray, layer: int = 0) -> ModelTensor:
    v = np.asarray(w, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    return ModelTensor("test.safetensors", name, role, layer, "BF16", v)


def f16(name: str, role: str, w: np.ndarray, layer: int = 0) -> ModelTensor:
    v = np.asarray(w, np.float32).astype(np.float16).astype(np.float32)
    return ModelTensor("test.gguf", name, role, layer, "F16", v)


def q4k(name: str, role: str, w: np.ndarray, layer: int = 0) -> ModelTensor:
    """Q4_K blocks per row (``k`` a multiple of 256), 2-D or per expert."""
    import gguf

    from leverctl_kernels.common import q4k as codec

    w = np.asarray(w, np.float32)
    blocks = np.stack([codec.quantize(m) for m in w.reshape(-1, *w.shape[-2:])]).reshape(*w.shape[:-1], -1)
    v = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K).astype(np.float32).reshape(w.shape)
    return ModelTensor("test.gguf", name, role, layer, "Q4_K", v, q4k=blocks)


def _blocks128(a: np.ndarray) -> np.ndarray:
    """``[..., n, k]`` -> ``|a|``'s maximum per 128 x 128 block."""
    *lead, n, k = a.shape
    nb, kb = -(-n // 128), -(-k // 128)
    pad = np.zeros((*lead, nb * 128, kb * 128), np.float32)
    pad[..., :n, :k] = np.abs(a)
    return pad.reshape(*lead, nb, 128, kb, 128).max(axis=(-3, -1))


def fp8(name: str, role: str, w: np.ndarray, kind: str = "block128", layer: int = 0) -> ModelTensor:
    """E4M3 bytes with float32 scales: per 128 x 128 block, per output row
    (``channel``) or one (``tensor``); ``values = e4m3 * scale``."""
    w = np.asarray(w, np.float32)
    n, k = w.shape[-2:]
    if kind == "block128":
        s = (_blocks128(w) / FP8_MAX).astype(np.float32)
        full = np.repeat(np.repeat(s, 128, axis=-2), 128, axis=-1)[..., :n, :k]
    elif kind == "channel":
        s = (np.abs(w).max(axis=-1) / FP8_MAX).astype(np.float32)
        full = s[..., None]
    else:
        s = np.float32(np.abs(w).max() / FP8_MAX)
        full = s
    codes = (w / full).astype(ml_dtypes.float8_e4m3fn)
    v = codes.astype(np.float32) * full
    return ModelTensor(
        "test.safetensors", name, role, layer, "F8_E4M3", v, fp8=codes.view(np.uint8), fp8_scale=s, fp8_scale_kind=kind
    )


def nvfp4(name: str, role: str, w: np.ndarray, global_scale: float | None = None, layer: int = 0) -> ModelTensor:
    """NVFP4: E2M1 codes two a byte (low nibble first), an E4M3 scale per
    16 inputs, one float32 global scale (``amax / (448 * 6)``)."""
    w = np.asarray(w, np.float32)
    g = np.float32(global_scale if global_scale is not None else np.abs(w).max() / (FP8_MAX * E2M1_MAX))
    blocks = w.reshape(*w.shape[:-1], -1, 16)
    sc = (np.abs(blocks).max(axis=-1) / np.float32(E2M1_MAX) / g).astype(ml_dtypes.float8_e4m3fn)
    step = sc.astype(np.float32)[..., None] * g
    q = np.where(step > 0, blocks / np.where(step > 0, step, 1), 0).clip(-E2M1_MAX, E2M1_MAX)
    codes = q.astype(ml_dtypes.float4_e2m1fn)
    v = ((codes.astype(np.float32) * sc.astype(np.float32)[..., None]) * g).reshape(w.shape).astype(np.float32)
    nib = codes.view(np.uint8).reshape(*w.shape[:-1], -1, 2) & 0xF
    packed = (nib[..., 0] | (nib[..., 1] << 4)).astype(np.uint8)
    return ModelTensor(
        "test.safetensors",
        name,
        role,
        layer,
        "NVFP4",
        v,
        nvfp4=packed,
        nvfp4_scale=sc.view(np.uint8),
        nvfp4_global=float(g),
    )


FORMS = {"BF16": bf16, "F16": f16, "Q4_K": q4k, "F8_E4M3": fp8, "NVFP4": nvfp4}


def run_check(path, variant: str, shape, inputs: dict, levers: dict | None = None):
    """The bench's check of ``variant`` at ``shape`` (bound by ``levers``
    where the path binds): ``(figures, outputs read back)``."""
    from numba import cuda

    if path.bind is not None:
        shape = path.bind(levers or {}, shape, "metrale")
    launch = path.variants[variant].build(shape)
    bufs, fig = check(path, variant, shape, launch, inputs, cuda)
    return fig, {name: bufs[name].copy_to_host() for name in path.outputs(shape)}, shape


def check_against(path, variant: str, shape, got: dict, inputs: dict):
    """The bench's comparison of outputs ``got`` with the reference on ``inputs``."""
    ref = path.reference(shape, {k: np.array(v, copy=True) for k, v in inputs.items()})
    return compare(got, ref, path.variant_tolerance(variant), dict(path.extra.get("decode", {})))
