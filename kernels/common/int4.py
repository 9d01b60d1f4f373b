"""Host helpers for the W4A16 weight layout (NumPy only, no numba).

Layout, for a weight matrix ``W`` of ``n`` output rows by ``k`` inputs:

* ``qweight``: ``uint32[n, k // 8]``, row-major. Word ``w`` of row ``r``
  holds ``W[r, 8w .. 8w+7]``, element ``8w + j`` in bits ``4j .. 4j+3``
  (lowest nibble first). A nibble ``q`` (0..15) stands for the signed value
  ``q - 8`` (-8..7): symmetric int4, no zero point.
* ``scales``: ``float16[n, ceil(k / 128)]``, row-major: one scale per row per
  group of 128 consecutive inputs. When ``k`` is not a multiple of 128 the
  last group is partial (it covers ``k % 128`` inputs).

::

    W row r:   k=0 .. 7 | 8 .. 15 | ... | 120..127 | 128 ..            (k)
    qweight:   word 0   | word 1  | ... | word 15  | word 16 ..        (k/8)
               nibble j of word w  <->  W[r, 8w + j]
    scales:    group 0 (words 0..15)   | group 1 (words 16..31) | ...

    dequantized W[r, c] = (nibble(r, c) - 8) * scales[r, c // 128]

``k`` must be a multiple of 8 (every packed word is full); real projection
sizes always are. The product ``(q - 8) * scale`` of an int4 value and an
fp16 scale is exact in float32, so :func:`dequantize_w4` loses nothing and a
float64 reference built from it differs from a kernel only by the kernel's
accumulation order and output rounding.
"""

from __future__ import annotations

import numpy as np

PACK = 8  # int4 values per uint32 word
GROUP = 128  # inputs per fp16 scale
QMIN, QMAX = -8, 7


def n_words(k: int) -> int:
    """Packed words per row; ``k`` must be a multiple of 8."""
    if k <= 0 or k % PACK:
        raise ValueError(f"k={k}: the W4A16 layout needs k a positive multiple of {PACK}")
    return k // PACK


def n_groups(k: int, group: int = GROUP) -> int:
    """Scale groups per row (the last one may be partial)."""
    return -(-k // group)


def packed_bytes(n: int, k: int, group: int = GROUP) -> int:
    """Bytes of an ``n x k`` matrix in this layout: packed words + fp16 scales."""
    return n * n_words(k) * 4 + n * n_groups(k, group) * 2


def pack_int4(q: np.ndarray) -> np.ndarray:
    """Signed int4 values ``q`` (``[n, k]``, each in -8..7) -> ``uint32[n, k/8]``."""
    q = np.asarray(q)
    if q.ndim != 2:
        raise ValueError("pack_int4 expects a 2-D array")
    n, k = q.shape
    n_words(k)
    if q.size and (q.min() < QMIN or q.max() > QMAX):
        raise ValueError("int4 values must lie in [-8, 7]")
    nib = (q.astype(np.int16) + 8).astype(np.uint8)
    # Nibble i of a word sits at bits 4i: byte j of the little-endian word
    # holds nibbles 2j (low) and 2j + 1 (high).
    pairs = nib[:, 0::2] | (nib[:, 1::2] << np.uint8(4))
    return np.ascontiguousarray(pairs).view("<u4").astype(np.uint32, copy=False)


def unpack_int4(qweight: np.ndarray) -> np.ndarray:
    """``uint32[n, k/8]`` -> signed int4 values ``int8[n, k]``."""
    qweight = np.asarray(qweight)
    if qweight.dtype != np.uint32 or qweight.ndim != 2:
        raise ValueError("unpack_int4 expects a 2-D uint32 array")
    n, kw = qweight.shape
    shifts = (4 * np.arange(PACK, dtype=np.uint32))[None, None, :]
    nib = (qweight[:, :, None] >> shifts) & np.uint32(0xF)
    return (nib.astype(np.int8) - 8).reshape(n, kw * PACK)


def quantize_w4(w: np.ndarray, group: int = GROUP) -> tuple[np.ndarray, np.ndarray]:
    """Quantize a float matrix ``w[n, k]`` to ``(qweight, scales)``.

    Symmetric round-to-nearest per (row, group): ``scale = max|w| / 7``,
    rounded to fp16 first so that the stored scale is the one quantized
    against; values are clipped to [-8, 7]. An all-zero group gets scale 0
    and nibbles 8 (value 0).
    """
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError("quantize_w4 expects a 2-D array")
    n, k = w.shape
    n_words(k)
    g = n_groups(k, group)
    pad = g * group - k
    wp = (np.pad(w, ((0, 0), (0, pad))) if pad else w).reshape(n, g, group)
    amax = np.maximum(wp.max(axis=2), -wp.min(axis=2))
    scales = (amax / QMAX).astype(np.float16)
    s32 = scales.astype(np.float32)
    # 1 / scale would round; the division is the reference's. A zero scale
    # divides by 1 and its group, all zeros, rounds to 0.
    q = wp / np.where(s32 > 0, s32, np.float32(1.0))[:, :, None]
    np.rint(q, out=q)
    np.clip(q, QMIN, QMAX, out=q)
    q = q.astype(np.int8).reshape(n, g * group)[:, :k]
    return pack_int4(q), scales


def dequantize_w4(qweight: np.ndarray, scales: np.ndarray, group: int = GROUP) -> np.ndarray:
    """``(qweight, scales)`` -> ``float32[n, k]``, exact (see module notes)."""
    q = unpack_int4(qweight)
    n, k = q.shape
    scales = np.asarray(scales)
    if scales.shape != (n, n_groups(k, group)):
        raise ValueError(f"scales shape {scales.shape} does not match qweight for n={n}, k={k}")
    s = np.repeat(scales.astype(np.float32), group, axis=1)[:, :k]
    return q.astype(np.float32) * s


def random_w4(rng: np.random.Generator, n: int, k: int, std: float = 0.02):
    """A realistic weight matrix ~N(0, std) in the W4A16 layout:
    ``(qweight, scales)``. Drawn in float32 to keep model shapes cheap."""
    w = rng.standard_normal((n, k), dtype=np.float32) * np.float32(std)
    return quantize_w4(w)
