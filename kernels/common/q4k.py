"""Host codec for GGUF's Q4_K weight blocks (NumPy only, no numba).

A Q4_K tensor row of ``k`` values (``k`` a multiple of 256) is ``k / 256``
super-blocks of 144 bytes each, laid out exactly as a GGUF file stores them,
so a tensor read from a ``.gguf`` file can be handed to the kernels as is::

    byte   0..1     d      fp16 (little-endian): scale of the sub-block scales
    byte   2..3     dmin   fp16: scale of the sub-block mins
    byte   4..15    12 bytes: eight 6-bit scales sc[0..7] and eight 6-bit
                    mins m[0..7], packed (below)
    byte  16..143   128 bytes of 4-bit values q (0..15), two per byte

Value ``i`` (0..255) of a super-block lies in sub-block ``j = i // 32`` and
decodes to ``d * sc[j] * q - dmin * m[j]``, evaluated in float32 as
``(d * sc[j]) * q - (dmin * m[j])``.

The 4-bit values come in four 32-byte chunks, one per pair of sub-blocks:
byte ``l`` of chunk ``c`` (byte ``16 + 32c + l``) holds value ``64c + l`` in
its low nibble and value ``64c + 32 + l`` in its high nibble.

The 12 scale bytes ``s[0..11]``: sub-blocks 0..3 keep their 6-bit scale in
the low six bits of ``s[j]`` and their min in the low six bits of
``s[j + 4]``. Sub-blocks 4..7 keep the low four bits of their scale in the
low nibble of ``s[j + 4]`` and of their min in its high nibble; the top two
bits of their scale sit in the top two bits of ``s[j - 4]``, and of their min
in the top two bits of ``s[j]``.
"""

from __future__ import annotations

import numpy as np

QK_K = 256  # values per super-block
SUB = 32  # values per sub-block
BLOCK_BYTES = 144
SCALE_BYTES = 12


def _check_k(k: int) -> int:
    if k <= 0 or k % QK_K:
        raise ValueError(f"k={k}: Q4_K needs k a positive multiple of {QK_K}")
    return k // QK_K


def row_bytes(k: int) -> int:
    """Bytes of one row of ``k`` values."""
    return _check_k(k) * BLOCK_BYTES


def packed_bytes(n: int, k: int) -> int:
    return n * row_bytes(k)


def pack_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Six-bit ``sc[..., 8]`` and ``m[..., 8]`` -> ``uint8[..., 12]``."""
    sc = np.asarray(sc, dtype=np.uint8)
    m = np.asarray(m, dtype=np.uint8)
    if sc.max(initial=0) > 63 or m.max(initial=0) > 63:
        raise ValueError("Q4_K scales and mins are 6-bit (0..63)")
    out = np.zeros(sc.shape[:-1] + (SCALE_BYTES,), dtype=np.uint8)
    lo_sc, hi_sc = sc[..., :4], sc[..., 4:]
    lo_m, hi_m = m[..., :4], m[..., 4:]
    out[..., 0:4] = lo_sc | ((hi_sc >> 4) << 6)
    out[..., 4:8] = lo_m | ((hi_m >> 4) << 6)
    out[..., 8:12] = (hi_sc & 0xF) | ((hi_m & 0xF) << 4)
    return out


def unpack_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``uint8[..., 12]`` -> ``(sc[..., 8], m[..., 8])`` as uint8."""
    s = np.asarray(s, dtype=np.uint8)
    sc = np.empty(s.shape[:-1] + (8,), dtype=np.uint8)
    m = np.empty_like(sc)
    for j in range(4):
        sc[..., j] = s[..., j] & 63
        m[..., j] = s[..., j + 4] & 63
        sc[..., j + 4] = (s[..., j + 8] & 0xF) | ((s[..., j] >> 6) << 4)
        m[..., j + 4] = (s[..., j + 8] >> 4) | ((s[..., j + 4] >> 6) << 4)
    return sc, m


def _nibble_order() -> np.ndarray:
    """``order[i]``: where value ``i`` of a super-block sits among the 256
    nibbles listed byte by byte, low nibble first."""
    i = np.arange(QK_K)
    chunk, within = i // 64, i % 64
    byte = 32 * chunk + within % 32
    return 2 * byte + within // 32


_ORDER = _nibble_order()


def quantize(w: np.ndarray) -> np.ndarray:
    """Quantise float ``w[n, k]`` to Q4_K bytes ``uint8[n, k / 256 * 144]``.

    Each sub-block of 32 gets the affine grid from its minimum (clipped at 0
    from above) to its maximum in 15 steps; the super-block's ``d`` and
    ``dmin`` are the largest step and the largest negated minimum over 63,
    rounded to fp16, and each sub-block's 6-bit scale and min are then
    rounded against those stored values. Round to nearest throughout."""
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError("quantize expects a 2-D array")
    n, k = w.shape
    nb = _check_k(k)
    x = w.reshape(n, nb, 8, SUB).astype(np.float64)
    lo = np.minimum(x.min(axis=-1), 0.0)
    hi = np.maximum(x.max(axis=-1), lo)
    step = (hi - lo) / 15.0
    d = (step.max(axis=-1) / 63.0).astype(np.float16)
    dmin = ((-lo).max(axis=-1) / 63.0).astype(np.float16)
    d32, dmin32 = d.astype(np.float32), dmin.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32[..., None] > 0, np.rint(step / d32[..., None]), 0)
        mm = np.where(dmin32[..., None] > 0, np.rint(-lo / dmin32[..., None]), 0)
    sc = np.clip(sc, 0, 63).astype(np.uint8)
    mm = np.clip(mm, 0, 63).astype(np.uint8)
    scale = (d32[..., None] * sc.astype(np.float32))[..., None]
    offset = (dmin32[..., None] * mm.astype(np.float32))[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale > 0, np.rint((x + offset) / scale), 0)
    q = np.clip(q, 0, 15).astype(np.uint8).reshape(n, nb, QK_K)
    nibbles = np.empty_like(q)
    nibbles[..., _ORDER] = q
    qs = nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)
    out = np.empty((n, nb, BLOCK_BYTES), dtype=np.uint8)
    out[..., 0:2] = d.view(np.uint8).reshape(n, nb, 2)
    out[..., 2:4] = dmin.view(np.uint8).reshape(n, nb, 2)
    out[..., 4:16] = pack_scales(sc, mm)
    out[..., 16:] = qs
    return out.reshape(n, nb * BLOCK_BYTES)


def fields(blocks: np.ndarray) -> dict[str, np.ndarray]:
    """Split Q4_K bytes ``uint8[n, nb * 144]`` into ``d``, ``dmin``
    (float16 ``[n, nb]``), ``sc``, ``m`` (uint8 ``[n, nb, 8]``) and ``q``
    (uint8 ``[n, nb, 256]`` in value order)."""
    b = np.ascontiguousarray(blocks, dtype=np.uint8)
    n, nbytes = b.shape
    if nbytes % BLOCK_BYTES:
        raise ValueError(f"a Q4_K row is a whole number of {BLOCK_BYTES}-byte blocks, got {nbytes} bytes")
    b = b.reshape(n, nbytes // BLOCK_BYTES, BLOCK_BYTES)
    d = b[..., 0:2].copy().view(np.float16)[..., 0]
    dmin = b[..., 2:4].copy().view(np.float16)[..., 0]
    sc, m = unpack_scales(b[..., 4:16])
    qs = b[..., 16:]
    nibbles = np.stack([qs & 0xF, qs >> 4], axis=-1).reshape(*qs.shape[:-1], QK_K)
    return {"d": d, "dmin": dmin, "sc": sc, "m": m, "q": nibbles[..., _ORDER]}


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """Q4_K bytes ``uint8[n, nb * 144]`` -> ``float32[n, nb * 256]``."""
    f = fields(blocks)
    n, nb = f["d"].shape
    scale = f["d"].astype(np.float32)[..., None] * f["sc"].astype(np.float32)
    offset = f["dmin"].astype(np.float32)[..., None] * f["m"].astype(np.float32)
    q = f["q"].reshape(n, nb, 8, SUB).astype(np.float32)
    return (scale[..., None] * q - offset[..., None]).reshape(n, nb * QK_K)
