"""Float64 references for the dense-FFN prefill arms (NumPy only).

:func:`naive_gemm` is the path's reference: ``a @ W.T`` in float64 from the
activations and the model's weights as the default W4A16 GEMM stores them,
so a record's error is what the arm's formats and arithmetic cost against
the engine's default weights. The ``*_exact`` functions are each arm's own arithmetic in float64
(the formats decoded exactly, the activation quantisation done in the
kernels' float32 operations), against which the tests hold the kernels
tightly.
"""

from __future__ import annotations

import numpy as np

from ...common import int4

INT8_MAX = 127


def naive_gemm(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``a[m, k] @ w[n, k].T`` in float64."""
    return np.asarray(a, dtype=np.float64) @ np.asarray(w, dtype=np.float64).T


def quantize_rows_int8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row, in float32 as the requant kernel does it:
    ``amax = max|x|``, ``inv = 127 / amax``, ``q = floor(x * inv + 0.5)``
    clipped to [-127, 127], ``scale = amax / 127``; an all-zero row gets
    scale 0 and zeros."""
    x = np.asarray(x, dtype=np.float32)
    amax = np.abs(x).max(axis=1)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(INT8_MAX) / amax, np.float32(0)).astype(np.float32)
    q = np.floor(x * inv[:, None] + np.float32(0.5))
    q = np.clip(q, -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, (amax / np.float32(INT8_MAX)).astype(np.float32)


def int8_exact(a: np.ndarray, w_i8: np.ndarray, s_i8: np.ndarray) -> np.ndarray:
    """The int8 arm: activations requantised per row, int8 weights with a
    float32 scale per output row, the integer dot products exact."""
    aq, sa = quantize_rows_int8(a)
    acc = aq.astype(np.int64) @ w_i8.astype(np.int64).T
    return acc.astype(np.float64) * sa.astype(np.float64)[:, None] * s_i8.astype(np.float64)[None, :]


def w4a16_exact(a: np.ndarray, qweight: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The default arm: fp16 activations, int4 weights dequantised exactly."""
    return naive_gemm(a, int4.dequantize_w4(qweight, scales))


def bf16_exact(a: np.ndarray, qweight: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The BF16 arms: the activations as bf16 (exact: the path's activations
    are bf16 values), the int4 weights dequantised and rounded once to bf16."""
    from ...common import bits

    w = bits.bf16_to_f32_np(bits.f32_to_bf16_np(int4.dequantize_w4(qweight, scales)))
    return naive_gemm(a, w)


E4M3_MAX = 448


def quantize_rows_e4m3(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FP8 E4M3 per row, in float32 as the row quantiser does it:
    ``inv = 448 / amax``, codes of ``x * inv`` (round to nearest even,
    saturating), ``scale = amax / 448``."""
    from ...common import bits

    x = np.asarray(x, dtype=np.float32)
    amax = np.abs(x).max(axis=1)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(E4M3_MAX) / amax, np.float32(0)).astype(np.float32)
    return bits.f32_to_e4m3_np(x * inv[:, None]), (amax / np.float32(E4M3_MAX)).astype(np.float32)


def fp8_exact(a: np.ndarray, qweight: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The FP8 M64 arm: activations to E4M3 per token, the int4 weights'
    values ``q - 8`` exactly in E4M3 with their fp16 group scales applied to
    each group's partial sums."""
    from ...common import bits

    aq, sa = quantize_rows_e4m3(a)
    return naive_gemm(bits.e4m3_to_f32_np(aq), int4.dequantize_w4(qweight, scales)) * sa.astype(np.float64)[:, None]


Q8_BLOCK = 32


def quantize_blocks_q8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int8 per block of 32 along each row, as llama.cpp's MMQ quantises
    activations, in the float32 operations of the kernel: per block
    ``amax``, ``inv = 127 / amax``, ``q = floor(x inv + 0.5)`` (clipped to
    +-127), ``d = amax / 127``, and ``s = d * sum(q)`` (the sum exact, one
    float32 product). Returns ``(q int8[m, k], d float32[m, k/32],
    s float32[m, k/32])``; ``k`` a multiple of 32."""
    x = np.asarray(x, dtype=np.float32)
    m, k = x.shape
    if k % Q8_BLOCK:
        raise ValueError(f"k={k}: int8 blocks of {Q8_BLOCK} need k a multiple of {Q8_BLOCK}")
    q, d = quantize_rows_int8(x.reshape(m * (k // Q8_BLOCK), Q8_BLOCK))
    sums = q.astype(np.int32).sum(axis=1).astype(np.float32)
    s = (d * sums).astype(np.float32)
    return q.reshape(m, k), d.reshape(m, -1), s.reshape(m, -1)


def q4k_exact(a: np.ndarray, w_q4k: np.ndarray) -> np.ndarray:
    """The Q4_K MMQ arm: activations in int8 blocks of 32, the Q4_K weights
    decoded exactly (``common.q4k``), the products in float64."""
    from ...common import q4k

    q, d, _ = quantize_blocks_q8(a)
    aq = q.astype(np.float64) * np.repeat(d.astype(np.float64), Q8_BLOCK, axis=1)
    return naive_gemm(aq, q4k.dequantize(w_q4k))


def quantize_nvfp4(x: np.ndarray):
    """NVFP4 of a whole tensor (``common.bits.nvfp4_encode_np``) with the
    tensor scale ``amax / 2688`` in float32, as the W4A4 arm's encoder
    computes it: ``(packed, scales, ts)``."""
    from ...common import bits

    x = np.asarray(x, dtype=np.float32)
    amax = np.float32(np.abs(x).max()) if x.size else np.float32(0)
    ts = amax / np.float32(bits.E4M3_MAX * bits.E2M1_MAX) if amax > 0 else np.float32(1)
    return bits.nvfp4_encode_np(x, tensor_scale=ts)


def w4a4_exact(a: np.ndarray, w_fp4: np.ndarray, w_fp4_scales: np.ndarray, w_fp4_ts) -> np.ndarray:
    """The W4A4 arm: activations and weights in NVFP4, decoded exactly."""
    from ...common import bits

    pa, sa, ta = quantize_nvfp4(a)
    return naive_gemm(
        bits.nvfp4_decode_np(pa, sa, ta),
        bits.nvfp4_decode_np(w_fp4, w_fp4_scales, np.float32(np.asarray(w_fp4_ts).reshape(-1)[0])),
    )


def nvfp4_mmq_exact(a: np.ndarray, w_fp4: np.ndarray, w_fp4_scales: np.ndarray, w_fp4_ts) -> np.ndarray:
    """The NVFP4 MMQ arm in its own arithmetic: both operands' E2M1 codes
    as the integers ``2 x value``, each 16-value block's dot product exact
    in int64, times the two blocks' E4M3 scales, summed over the blocks in
    float64 and times ``ts_a ts_w / 4``. The same number as
    :func:`w4a4_exact` (it is the same format), reached the way the MMQ
    kernel reaches it."""
    from ...common import bits

    pa, sa, ta = quantize_nvfp4(a)

    def doubled(packed):
        codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
        return np.rint(2 * bits.e2m1_to_f32_np(codes)).astype(np.int64)

    qa, qw = doubled(pa), doubled(np.asarray(w_fp4))
    blk = bits.NVFP4_BLOCK
    m, k = qa.shape
    dots = np.einsum("mbi,nbi->mnb", qa.reshape(m, k // blk, blk), qw.reshape(qw.shape[0], k // blk, blk))
    scale = (
        bits.e4m3_to_f32_np(sa).astype(np.float64)[:, None, :]
        * bits.e4m3_to_f32_np(w_fp4_scales).astype(np.float64)[None, :, :]
    )
    ts = float(ta) * float(np.asarray(w_fp4_ts, dtype=np.float32).reshape(-1)[0]) / 4
    return (dots.astype(np.float64) * scale).sum(axis=2) * ts
