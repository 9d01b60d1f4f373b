"""Bit-pattern formats: device functions (in a kernel) against host twins,
host twins against the format definitions and brute-force rounding."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda

from leverctl_kernels.common import bits as B

sim = pytest.mark.sim
F32_TINY = np.float32(2.0**-149)  # smallest float32 subnormal


def _mapper(fn):
    @cuda.jit
    def k(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = fn(x[i])

    return k


_KERNELS: dict = {}


def on_device(fn, x, out_dtype):
    """``fn`` applied to each element of ``x`` inside a kernel."""
    k = _KERNELS.setdefault(fn, _mapper(fn))
    x = np.ascontiguousarray(x)
    out = cuda.to_device(np.zeros(x.size, dtype=out_dtype))
    k[(x.size + 127) // 128, 128](cuda.to_device(x), out)
    return out.copy_to_host()


def bit_mismatches(got, want) -> np.ndarray:
    """Indices where two float32 arrays differ: bit patterns must match
    (so -0.0 != +0.0), except that any NaN matches any NaN."""
    got = np.asarray(got, np.float32)
    want = np.asarray(want, np.float32)
    same = (B.f32_to_bits_np(got) == B.f32_to_bits_np(want)) | (np.isnan(got) & np.isnan(want))
    return np.flatnonzero(~same)


def nearest_code(a: float, codes: np.ndarray, values: np.ndarray) -> int:
    """Brute force: the code whose value is nearest ``a``; ties to the even
    code (mantissa LSB 0)."""
    d = np.abs(values.astype(np.float64) - a)
    best = np.flatnonzero(d == d.min())
    even = [c for c in codes[best] if c % 2 == 0]
    return int(even[0] if even else codes[best][0])


def brute_encode(x, table: np.ndarray, sign_bit: int, nan_code: int, max_code: int):
    pos = np.arange(max_code + 1)
    out = []
    for v in np.asarray(x, np.float32):
        if np.isnan(v):
            out.append(nan_code)
            continue
        s = sign_bit if np.signbit(v) else 0
        a = abs(float(v))
        # saturate above the largest value (and keep float64 distances exact)
        out.append(s | (max_code if a >= table[max_code] else nearest_code(a, pos, table[pos])))
    return np.array(out, dtype=np.uint8)


def probe_values(table: np.ndarray, max_code: int, rng) -> np.ndarray:
    """Every value, every midpoint (ties), each midpoint +- one float32 ulp,
    beyond the maximum, and random magnitudes across the range, both signs."""
    v = np.sort(table[: max_code + 1].astype(np.float64))
    mid = (v[1:] + v[:-1]) / 2
    mid32 = mid.astype(np.float32)
    near = np.concatenate([np.nextafter(mid32, np.float32(0)), np.nextafter(mid32, np.float32(np.inf))])
    top = v[-1]
    extra = [top * 1.03, top * 1.1, top * 4, 1e30, np.inf, np.nan, 0.0, F32_TINY, v[1] / 3]
    rand = np.exp2(rng.uniform(np.log2(v[1]) - 2, np.log2(top) + 1, 300))
    pos = np.concatenate([v, mid, near, extra, rand]).astype(np.float32)
    return np.concatenate([pos, -pos])


# --- tables against the definitions ------------------------------------------


def test_e4m3_table_anchors():
    t = B.E4M3_VALUES
    assert t[0x7E] == 448.0 and t[0xFE] == -448.0
    assert t[0x01] == 2.0**-9 and t[0x07] == 7 * 2.0**-9 and t[0x08] == 2.0**-6
    assert t[0x38] == 1.0 and t[0x39] == 1.125 and t[0x40] == 2.0
    assert t[0x00] == 0 and not np.signbit(t[0x00]) and np.signbit(t[0x80])
    assert np.flatnonzero(np.isnan(t)).tolist() == [0x7F, 0xFF]
    finite = t[:0x7F]
    assert np.all(np.diff(finite) > 0)  # codes are ordered by value
    np.testing.assert_array_equal(t[0x80:0xFF], -finite)


def test_e2m1_table_is_the_format():
    np.testing.assert_array_equal(B.E2M1_VALUES[:8], [0, 0.5, 1, 1.5, 2, 3, 4, 6])
    np.testing.assert_array_equal(B.E2M1_VALUES[8:], -B.E2M1_VALUES[:8])
    assert np.signbit(B.E2M1_VALUES[8])


def test_check_rejects_a_perturbed_table():
    want = B.E4M3_VALUES
    assert bit_mismatches(want.copy(), want).size == 0
    bad = want.copy()
    bad[0x09] = np.nextafter(bad[0x09], np.float32(1))  # one ulp off
    assert bit_mismatches(bad, want).tolist() == [0x09]
    bad = want.copy()
    bad[0x80] = 0.0  # -0.0 turned into +0.0
    assert bit_mismatches(bad, want).tolist() == [0x80]
    bad = want.copy()
    bad[0x7F] = 480.0  # NaN code decoded as a number
    assert bit_mismatches(bad, want).tolist() == [0x7F]


# --- host encoders against brute force ---------------------------------------


def test_host_e4m3_encoder_matches_brute_force():
    x = probe_values(B.E4M3_VALUES, 0x7E, np.random.default_rng(4))
    np.testing.assert_array_equal(B.f32_to_e4m3_np(x), brute_encode(x, B.E4M3_VALUES, 0x80, B.E4M3_NAN, 0x7E))


def test_host_e2m1_encoder_matches_brute_force():
    x = probe_values(B.E2M1_VALUES, 7, np.random.default_rng(5))
    np.testing.assert_array_equal(B.f32_to_e2m1_np(x), brute_encode(x, B.E2M1_VALUES, 8, 7, 7))


def test_rounding_examples():
    # ties go to the even code; saturation instead of overflow
    assert B.f32_to_e2m1_np([0.25, 0.75, 1.75, 2.5, 5.0, 5.1, 7.0, -0.1]).tolist() == [0, 2, 4, 4, 6, 7, 7, 8]
    assert B.f32_to_e4m3_np([432.0, 460.0, 1e9, -np.inf, 2.0**-10, 3 * 2.0**-10]).tolist() == [
        0x7E,
        0x7E,
        0x7E,
        0xFE,
        0x00,
        0x02,
    ]


def _bf16_edge_bits(rng) -> np.ndarray:
    edges = [
        0x0000,
        0x8000,
        0x0001,
        0x8001,
        0x007F,
        0x0080,
        0x7F7F,
        0xFF7F,
        0x7F80,
        0xFF80,
        0x7FC0,
        0xFFC0,
        0x7F81,
        0x3F80,
        0xBF80,
    ]
    return np.concatenate([edges, rng.integers(0, 1 << 16, 240)]).astype(np.uint16)


def _f32_probe(rng) -> np.ndarray:
    u = rng.integers(0, 1 << 32, 300, dtype=np.uint64).astype(np.uint32)
    # ties: low half exactly 0x8000 with both parities of the kept LSB
    ties = (rng.integers(0, 1 << 16, 40).astype(np.uint32) << 16) | 0x8000
    edges = np.array(
        [
            0,
            0x80000000,
            1,
            0x80000001,
            0x007FFFFF,
            0x00800000,
            0x7F7FFFFF,
            0x7F7F8000,
            0x7F7F7FFF,
            0x7F800000,
            0xFF800000,
            0x7FC00000,
            0xFFC00001,
            0x7F800001,
            0x3F808000,
            0x3F818000,
        ],
        np.uint32,
    )
    return B.bits_to_f32_np(np.concatenate([u, ties, edges]))


def _bf16_magnitude(c: int) -> float:
    e, m = c >> 7, c & 0x7F
    return m * 2.0**-133 if e == 0 else (128 + m) * 2.0 ** (e - 134)


def test_host_bf16_encoder_matches_nearest_of_two_candidates():
    x = _f32_probe(np.random.default_rng(6))
    got = B.f32_to_bf16_np(x)
    for xi, g in zip(x, got):
        if np.isnan(xi):
            assert np.isnan(B.bf16_to_f32_np(g)) and np.signbit(B.bf16_to_f32_np(g)) == np.signbit(xi)
            continue
        lo = int(B.f32_to_bits_np(xi)) >> 16
        cands = [lo, lo + 1]  # truncation, one bf16 ulp further from zero
        # magnitudes by formula with an unbounded exponent: 0x7f80 counts as
        # 2**128, so values past the largest finite bf16 round to inf as IEEE says
        vals = [_bf16_magnitude(c & 0x7FFF) for c in cands]
        d = [abs(v - abs(float(xi))) for v in vals]
        want = cands[0] if d[0] < d[1] or (d[0] == d[1] and lo % 2 == 0) else cands[1]
        if math.isinf(xi):
            want = lo
        assert g == want, (xi, hex(g), hex(want))


# --- device functions (in a simulator kernel) against the host twins ----------


@sim
def test_device_e4m3_e2m1_exhaustive_decode_and_round_trip():
    codes = np.arange(256, dtype=np.uint8)
    dec = on_device(B.e4m3_to_f32, codes, np.float32)
    assert bit_mismatches(dec, B.E4M3_VALUES).size == 0
    enc = on_device(B.f32_to_e4m3, dec, np.uint8)
    want = np.where(np.isnan(dec), B.E4M3_NAN, codes)
    np.testing.assert_array_equal(enc, want)

    nib = np.arange(16, dtype=np.uint8)
    dec4 = on_device(B.e2m1_to_f32, nib, np.float32)
    assert bit_mismatches(dec4, B.E2M1_VALUES).size == 0
    np.testing.assert_array_equal(on_device(B.f32_to_e2m1, dec4, np.uint8), nib)


@cuda.jit(device=True)
def _e4m3_wrong_bias(c):
    # Deliberately broken: bias 8 instead of 7 for normal numbers.
    v = B.e4m3_to_f32(c)
    if (int(c) >> 3) & 0xF:
        v = v * np.float32(0.5)
    return v


@sim
def test_device_check_rejects_a_wrong_decoder():
    codes = np.arange(256, dtype=np.uint8)
    bad = bit_mismatches(on_device(_e4m3_wrong_bias, codes, np.float32), B.E4M3_VALUES)
    assert bad.size == 2 * 0x77  # every normal finite code, both signs, is caught


@sim
def test_device_encoders_match_host_twins():
    rng = np.random.default_rng(7)
    x8 = probe_values(B.E4M3_VALUES, 0x7E, rng)[::3]
    np.testing.assert_array_equal(on_device(B.f32_to_e4m3, x8, np.uint8), B.f32_to_e4m3_np(x8))
    x4 = probe_values(B.E2M1_VALUES, 7, rng)[::2]
    np.testing.assert_array_equal(on_device(B.f32_to_e2m1, x4, np.uint8), B.f32_to_e2m1_np(x4))


@sim
def test_device_bf16_and_f32_bits_match_numpy_bit_level():
    rng = np.random.default_rng(8)
    b = _bf16_edge_bits(rng)
    assert bit_mismatches(on_device(B.bf16_to_f32, b, np.float32), B.bf16_to_f32_np(b)).size == 0
    x = _f32_probe(rng)
    got = on_device(B.f32_to_bf16, x, np.uint16)
    want = B.f32_to_bf16_np(x)
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.all(np.isnan(B.bf16_to_f32_np(got[nan])))
    # float32 <-> bits by arithmetic, including subnormals and signed zeros
    u = on_device(B.f32_to_bits, x, np.uint32)
    np.testing.assert_array_equal(u[~nan], B.f32_to_bits_np(x)[~nan])
    back = on_device(B.bits_to_f32, B.f32_to_bits_np(x), np.float32)
    assert bit_mismatches(back[~nan], x[~nan]).size == 0 and np.all(np.isnan(back[nan]))


# --- NVFP4 --------------------------------------------------------------------


def test_nvfp4_layout_low_nibble_first():
    packed = np.zeros(8, np.uint8)
    packed[0] = 0x21  # element 0: code 1 (0.5), element 1: code 2 (1.0)
    packed[7] = 0xF0  # element 15: code 0xF (-6), element 14: 0
    scales = np.array([0x40], np.uint8)  # e4m3 2.0
    y = B.nvfp4_decode_np(packed, scales, 0.25)
    assert y[:2].tolist() == [0.25, 0.5] and y[14] == 0 and y[15] == -3.0


def test_nvfp4_host_round_trip_error():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 64)).astype(np.float32) * 5
    packed, scales, ts = B.nvfp4_encode_np(x)
    assert packed.shape == (3, 32) and scales.shape == (3, 4) and packed.dtype == np.uint8
    y = B.nvfp4_decode_np(packed, scales, ts)
    step = np.repeat(B.e4m3_to_f32_np(scales) * ts, 16, axis=-1)
    # within half an e2m1 step (at most 1.0 * block step) unless saturated
    assert np.all(np.abs(y - x) <= step * 1.0 + 1e-6)
    assert np.linalg.norm(y - x) / np.linalg.norm(x) < 0.15
    with pytest.raises(ValueError, match="multiple of 16"):
        B.nvfp4_encode_np(np.zeros((2, 24), np.float32))


@cuda.jit
def _nvfp4_rows(packed, scales, ts, out):
    r = cuda.blockIdx.x
    i = cuda.threadIdx.x
    if i < out.shape[1]:
        out[r, i] = B.nvfp4_at(packed[r], scales[r], ts, i)


@sim
def test_device_nvfp4_matches_host_decode_bitwise():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 48)).astype(np.float32)
    packed, scales, ts = B.nvfp4_encode_np(x)
    out = cuda.to_device(np.zeros((2, 48), np.float32))
    _nvfp4_rows[2, 64](cuda.to_device(packed), cuda.to_device(scales), ts, out)
    assert bit_mismatches(out.copy_to_host().ravel(), B.nvfp4_decode_np(packed, scales, ts).ravel()).size == 0
