"""The weight formats of the dense-FFN prefill arms against independent
implementations, on heavy-tailed weights with outlier rows
(``ffn_prefill.weights``):

* Q4_K (``common/q4k.py``): the bytes our encoder writes decode, through the
  ``gguf`` package's own Q4_K dequantisation, bit for bit to what our decoder
  gives; a block assembled field by field lands where ``gguf`` reads each
  field; and an encoder that packs the upper sub-blocks' scales wrongly is
  caught by the same comparison.
* NVFP4 (``common/bits.py``'s block codec): an encoder written here on
  ``ml_dtypes``' E2M1 and E4M3 casts gives the same bytes and scales, and
  ``ml_dtypes`` decodes them to our values; a nibble-order slip is caught.
* int8 per row: the round trip is within half a step.
"""

from __future__ import annotations

import gguf
import ml_dtypes
import numpy as np
import pytest

from leverctl_kernels.common import bits, q4k
from leverctl_kernels.ffn.prefill import formats, naive
from leverctl_kernels.ffn.prefill.spec import weights

E4M3, E2M1 = ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn


def gguf_q4k(blocks: np.ndarray) -> np.ndarray:
    return np.asarray(gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType.Q4_K), dtype=np.float32)


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32))


@pytest.fixture(scope="module")
def w():
    return weights(np.random.default_rng(7), 9, 768)  # odd rows, three super-blocks


def test_q4k_bytes_decode_in_gguf_bit_for_bit_as_ours(w):
    blocks = q4k.quantize(w)
    assert blocks.shape == (9, 3 * 144) and blocks.dtype == np.uint8
    ours = q4k.dequantize(blocks)
    assert same_bits(ours, gguf_q4k(blocks))
    rel = np.linalg.norm(ours - w) / np.linalg.norm(w)
    assert 0.02 < rel < 0.12, rel  # 4-bit affine per 32: a few per cent, not exact, not garbage


def test_a_q4k_block_built_field_by_field_is_read_by_gguf_where_we_put_each_field():
    rng = np.random.default_rng(3)
    sc = rng.integers(0, 64, 8).astype(np.uint8)
    m = rng.integers(0, 64, 8).astype(np.uint8)
    sc[5], m[6] = 63, 62  # top bits set in the upper sub-blocks
    q = rng.integers(0, 16, 256).astype(np.uint8)
    d, dmin = np.float16(0.0123), np.float16(0.00456)
    block = np.zeros(144, dtype=np.uint8)
    block[0:2] = np.array([d]).view(np.uint8)
    block[2:4] = np.array([dmin]).view(np.uint8)
    block[4:16] = q4k.pack_scales(sc, m)
    for c in range(4):  # chunk c: values 64c..64c+31 low nibbles, 64c+32..64c+63 high
        block[16 + 32 * c : 48 + 32 * c] = q[64 * c : 64 * c + 32] | (q[64 * c + 32 : 64 * c + 64] << 4)
    j = np.arange(256) // 32
    want = (np.float32(d) * sc[j].astype(np.float32)) * q.astype(np.float32) - np.float32(dmin) * m[j].astype(
        np.float32
    )
    assert same_bits(gguf_q4k(block[None, :])[0], want.astype(np.float32))
    f = q4k.fields(block[None, :])
    assert np.array_equal(f["sc"][0, 0], sc) and np.array_equal(f["m"][0, 0], m)
    assert np.array_equal(f["q"][0, 0], q)


_PACK_SCALES = q4k.pack_scales


def _scales_without_top_bits(sc, m):
    """A broken packing: the upper sub-blocks lose their scales' top bits."""
    out = _PACK_SCALES(sc, m)
    out[..., 0:4] &= 0x3F
    return out


def test_the_gguf_comparison_catches_a_broken_scale_packing(w, monkeypatch):
    good = q4k.quantize(w)
    monkeypatch.setattr(q4k, "pack_scales", _scales_without_top_bits)
    broken = q4k.quantize(w)
    assert not np.array_equal(broken, good)
    monkeypatch.undo()
    assert not same_bits(q4k.dequantize(good), gguf_q4k(broken))


def test_q4k_refuses_k_not_a_multiple_of_256():
    with pytest.raises(ValueError, match="multiple of 256"):
        q4k.quantize(np.zeros((2, 96), np.float32))


def nvfp4_by_ml_dtypes(x: np.ndarray):
    """NVFP4 as the format defines it, on ml_dtypes' casts: a float32 tensor
    scale taking the largest magnitude to 6 * 448, per 16 values an E4M3
    scale of the block's largest magnitude over 6 (in tensor-scale units),
    E2M1 values of x over the decoded scale, two per byte, low nibble first."""
    x = np.asarray(x, np.float32)
    ts = np.float32(np.abs(x).max() / (448.0 * 6.0))
    blocks = x.reshape(*x.shape[:-1], -1, 16)
    scale = ((np.abs(blocks).max(axis=-1) / np.float32(6.0)) / ts).astype(E4M3)
    step = scale.astype(np.float32)[..., None] * ts
    q = np.where(step > 0, blocks / np.where(step > 0, step, 1), 0).astype(np.float32).astype(E2M1)
    nib = q.view(np.uint8).reshape(*x.shape[:-1], -1, 2) & 0xF
    return (nib[..., 0] | (nib[..., 1] << 4)).astype(np.uint8), scale.view(np.uint8), ts


def ml_dtypes_decode(packed, scales, ts):
    nib = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    vals = nib.astype(np.uint8).view(E2M1).astype(np.float32)
    step = np.repeat(scales.view(E4M3).astype(np.float32), 16, axis=-1)
    return (vals * step) * np.float32(ts)


def test_nvfp4_blocks_match_an_encoder_and_decoder_built_on_ml_dtypes(w):
    packed, scales, ts = bits.nvfp4_encode_np(w)
    p2, s2, ts2 = nvfp4_by_ml_dtypes(w)
    assert np.float32(ts) == ts2
    assert np.array_equal(scales, s2) and np.array_equal(packed, p2)
    assert same_bits(bits.nvfp4_decode_np(packed, scales, ts), ml_dtypes_decode(packed, scales, ts))
    rel = np.linalg.norm(bits.nvfp4_decode_np(packed, scales, ts) - w) / np.linalg.norm(w)
    assert 0.03 < rel < 0.2, rel


def test_the_ml_dtypes_comparison_catches_a_nibble_order_slip(w):
    packed, scales, ts = bits.nvfp4_encode_np(w)
    swapped = ((packed >> 4) | (packed << 4)).astype(np.uint8)
    assert not same_bits(bits.nvfp4_decode_np(swapped, scales, ts), ml_dtypes_decode(packed, scales, ts))


def test_int8_rows_round_trip_within_half_a_step(w):
    f = formats.int8(w)
    back = f["w_i8"].astype(np.float32) * f["s_i8"][:, None]
    assert np.all(np.abs(back - w) <= 0.5 * f["s_i8"][:, None] * (1 + 1e-6))
    assert np.abs(f["w_i8"]).max() == naive.INT8_MAX
