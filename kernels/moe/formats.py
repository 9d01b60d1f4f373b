"""Expert weights on the host: drawing them, encoding them in each format
the kernels read (``_decode``), and decoding them back exactly.

A weight ``[E, N, K]`` is stored per format as three arrays, ``<name>_a``,
``<name>_b``, ``<name>_c`` in the inputs (see ``_decode`` for what each
holds). Only the experts some row routes to are drawn; the others stay zero
(valid in every format) since no kernel reads them, which keeps the model
sizes (512 experts of 1024 x 2048 for gate/up) cheap to make.

The model's weights are drawn on the W4A16 grid (symmetric int4, an fp16
scale per 128 inputs: the engines' default MoE format), so the int4 variant
reads them exactly; the NVFP4 variant reads the same weights re-encoded
(``bits.nvfp4_encode_np``: an E4M3 scale per 16 values, one FP32 scale per
expert tensor), so its record's error is what that format costs against
the model's weights.
"""

from __future__ import annotations

import numpy as np

from ..common import bits, int4
from ._decode import FP8_BLOCK

_DUMMY = np.zeros(1, np.float32)  # wc of the formats without a per-tensor scale


def draw_int4(rng: np.random.Generator, experts: int, n: int, k: int, touched) -> dict:
    """W4A16 weights ``[E, n, k]``: int4 codes from a rounded normal (sd
    2.5, clipped to -8..7), fp16 scales about 0.008 per (row, group of 128)."""
    qa = np.zeros((experts, n, int4.n_words(k)), np.uint32)
    sb = np.zeros((experts, n, int4.n_groups(k)), np.float16)
    for e in touched:
        q = np.clip(np.rint(rng.standard_normal((n, k), dtype=np.float32) * np.float32(2.5)), -8, 7)
        qa[e] = int4.pack_int4(q.astype(np.int8))
        sb[e] = (
            np.float32(0.008) * (np.float32(0.75) + np.float32(0.5) * rng.random(sb.shape[1:], np.float32))
        ).astype(np.float16)
    return {"a": qa, "b": sb, "c": _DUMMY}


def int4_expert(w: dict, e: int) -> np.ndarray:
    """float32 ``[n, k]`` of expert ``e``, exact."""
    return int4.dequantize_w4(w["a"][e], w["b"][e])


def nvfp4_from(w4: dict, touched) -> dict:
    """The int4 weights ``w4`` re-encoded in NVFP4, expert by expert."""
    experts, n, kw = w4["a"].shape
    k = kw * int4.PACK
    pa = np.zeros((experts, n, k // 2), np.uint8)
    sb = np.zeros((experts, n, k // bits.NVFP4_BLOCK), np.uint8)
    ts = np.ones(experts, np.float32)
    for e in touched:
        pa[e], sb[e], ts[e] = bits.nvfp4_encode_np(int4_expert(w4, e))
    return {"a": pa, "b": sb, "c": ts}


def nvfp4_expert(w: dict, e: int) -> np.ndarray:
    return bits.nvfp4_decode_np(w["a"][e], w["b"][e], w["c"][e])


def fp8_encode(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One expert's float ``w[n, k]`` as FP8 E4M3 codes with a float32 scale
    per 128 x 128 block (block amax / 448): ``(codes [n, k], scales [nb, kb])``."""
    n, k = w.shape
    nb, kb = -(-n // FP8_BLOCK), -(-k // FP8_BLOCK)
    pad = np.zeros((nb * FP8_BLOCK, kb * FP8_BLOCK), np.float32)
    pad[:n, :k] = np.abs(w)
    amax = pad.reshape(nb, FP8_BLOCK, kb, FP8_BLOCK).max(axis=(1, 3))
    s = np.where(amax > 0, amax / np.float32(bits.E4M3_MAX), np.float32(1.0)).astype(np.float32)
    full = np.repeat(np.repeat(s, FP8_BLOCK, axis=0), FP8_BLOCK, axis=1)[:n, :k]
    return bits.f32_to_e4m3_np(w / full), s


def fp8_of(experts: int, n: int, k: int, expert, touched) -> dict:
    """FP8 weights ``[E, n, k]`` encoded from ``expert(e)`` (float32 ``[n,
    k]``) for the touched experts; the others zero codes, unit scales."""
    codes = np.zeros((experts, n, k), np.uint8)
    scales = np.ones((experts, -(-n // FP8_BLOCK), -(-k // FP8_BLOCK)), np.float32)
    for e in touched:
        codes[e], scales[e] = fp8_encode(expert(e))
    return {"a": codes, "b": scales, "c": _DUMMY}


def fp8_from(w4: dict, touched) -> dict:
    """The int4 weights ``w4`` re-encoded as FP8 E4M3 with a float32 scale per
    128 x 128 block (block amax / 448)."""
    experts, n, kw = w4["a"].shape
    return fp8_of(experts, n, kw * int4.PACK, lambda e: int4_expert(w4, e), touched)


def int4_of(experts: int, n: int, k: int, expert, touched) -> dict:
    """W4A16 weights ``[E, n, k]`` quantised from ``expert(e)`` (float32 ``[n,
    k]``: ``common.int4.quantize_w4``) for the touched experts; the others zero."""
    qa = np.zeros((experts, n, int4.n_words(k)), np.uint32)
    sb = np.zeros((experts, n, int4.n_groups(k)), np.float16)
    for e in touched:
        qa[e], sb[e] = expert(e)
    return {"a": qa, "b": sb, "c": _DUMMY}


def fp8_expert(w: dict, e: int) -> np.ndarray:
    n, k = w["a"].shape[1:]
    s = np.repeat(np.repeat(w["b"][e], FP8_BLOCK, axis=0), FP8_BLOCK, axis=1)[:n, :k]
    return bits.e4m3_to_f32_np(w["a"][e]) * s


DECODE = {"int4": int4_expert, "nvfp4": nvfp4_expert, "fp8": fp8_expert}


def put(inputs: dict, name: str, w: dict) -> None:
    """Store weight ``w`` in ``inputs`` as ``name_a``, ``name_b``, ``name_c``."""
    for part in "abc":
        inputs[f"{name}_{part}"] = w[part]


def get(inputs: dict, name: str) -> dict:
    return {part: inputs[f"{name}_{part}"] for part in "abc"}


def weight_bytes(fmt: str, n: int, k: int) -> int:
    """Bytes of one expert's ``n x k`` weight in ``fmt``."""
    if fmt == "int4":
        return int4.packed_bytes(n, k)
    if fmt == "nvfp4":
        return n * k // 2 + n * k // bits.NVFP4_BLOCK + 4
    if fmt == "fp8":
        return n * k + 4 * (-(-n // FP8_BLOCK)) * (-(-k // FP8_BLOCK))
    raise ValueError(fmt)
