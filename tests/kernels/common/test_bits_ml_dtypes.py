"""The formats of ``common/bits.py`` against an independent implementation,
``ml_dtypes`` (the NumPy dtypes JAX and TensorFlow use): every code decoded,
and a large sample of float32 inputs encoded (random bit patterns, every tie,
subnormals, overflow, NaN). Host twins on everything; the device functions in
the simulator on a small sample.

Where our codec deliberately differs, the difference is asserted exactly:

* FP8 E4M3 overflow: ``ml_dtypes`` rounds ``|x| > 464`` (and inf) to NaN;
  ours saturates to +-448 (``0x7e``/``0xfe``) as the engines' kernels do
  (``cvt.rn.satfinite.e4m3x2.f32``). A NaN input gives ``0x7f`` whatever its
  sign; ``ml_dtypes`` keeps the sign (``0xff``).
* FP4 E2M1 NaN (the format has none): ``ml_dtypes`` gives a zero (of the
  opposite sign); ours gives ``0x7`` (+6), a value no scale hides.
* bf16 NaN: both give a quiet NaN with the input's sign; ``ml_dtypes`` drops
  the payload, ours keeps its top bits.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_bits import bit_mismatches, on_device

from leverctl_kernels.common import bits as B

BF16, E4M3, E2M1 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float4_e2m1fn
E4M3_OVERFLOW = 464.0  # halfway between 448 and the NaN code's 480: ties to 448 (even)
SAMPLE = 1 << 20


def ml_codes(x: np.ndarray, dtype) -> np.ndarray:
    """``x`` (float32) encoded by ml_dtypes, as raw codes."""
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.asarray(x, np.float32).astype(dtype)
    return y.view(np.uint16 if dtype is BF16 else np.uint8)


def ml_values(codes: np.ndarray, dtype) -> np.ndarray:
    return np.asarray(codes).view(dtype).astype(np.float32)


def random_f32(rng, n: int) -> np.ndarray:
    """Uniformly random bit patterns: every exponent, subnormals, inf, NaN."""
    return rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def near_range(rng, n: int, lo_exp: int, hi_exp: int) -> np.ndarray:
    """Random float32 bit patterns with exponents in ``[lo_exp, hi_exp]``
    (unbiased), both signs: dense over a small format's range, so most of
    them fall between two codes."""
    assert -126 <= lo_exp <= hi_exp <= 127
    e = rng.integers(lo_exp + 127, hi_exp + 128, n).astype(np.uint32)
    m = rng.integers(0, 1 << 23, n).astype(np.uint32)
    s = rng.integers(0, 2, n).astype(np.uint32)
    return ((s << 31) | (e << 23) | m).view(np.float32)


def subnormals_and_overflow(rng, n: int) -> np.ndarray:
    """float32 subnormals (random mantissas) and the patterns around the
    largest finite bf16, where rounding overflows to inf; both signs."""
    sub = rng.integers(1, 1 << 23, n).astype(np.uint32)
    top = np.arange(0x7F7E0000, 0x7F800000, 13, dtype=np.uint32)
    u = np.concatenate([sub, top])
    return np.concatenate([u, u | np.uint32(0x80000000)]).view(np.float32)


def ties_and_neighbours(values: np.ndarray) -> np.ndarray:
    """Every midpoint between adjacent finite values, one float32 ulp either
    side of it, and the values themselves, both signs."""
    v = np.unique(np.abs(values[np.isfinite(values)]).astype(np.float64))
    mid = ((v[1:] + v[:-1]) / 2).astype(np.float32)  # exact: one more bit than the format
    near = np.concatenate([np.nextafter(mid, np.float32(0)), np.nextafter(mid, np.float32(np.inf))])
    pos = np.concatenate([v.astype(np.float32), mid, near])
    return np.concatenate([pos, -pos])


EDGES = np.array(
    [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        -np.nan,
        2.0**-149,
        -(2.0**-149),
        2.0**-126,
        3.4e38,
        -3.4e38,
        448.0,
        463.99,
        464.0,
        464.01,
        480.0,
        6.0,
        5.0,
        7.0,
        1e-30,
    ],
    np.float32,
)


def sample(rng, lo_exp: int, hi_exp: int, values: np.ndarray) -> np.ndarray:
    return np.concatenate(
        [
            EDGES,
            ties_and_neighbours(values),
            subnormals_and_overflow(rng, 4096),
            random_f32(rng, SAMPLE // 2),
            near_range(rng, SAMPLE // 2, lo_exp, hi_exp),
        ]
    )


def same_sign(a: np.ndarray) -> np.ndarray:
    return np.signbit(a)


# --- decoding: every code -------------------------------------------------------


def test_every_bf16_code_decodes_as_ml_dtypes_does():
    codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    assert bit_mismatches(B.bf16_to_f32_np(codes), ml_values(codes, BF16)).size == 0


def test_every_e4m3_code_decodes_as_ml_dtypes_does():
    codes = np.arange(256, dtype=np.uint16).astype(np.uint8)
    assert bit_mismatches(B.e4m3_to_f32_np(codes), ml_values(codes, E4M3)).size == 0


def test_every_e2m1_code_decodes_as_ml_dtypes_does():
    codes = np.arange(16, dtype=np.uint8)
    assert bit_mismatches(B.e2m1_to_f32_np(codes), ml_values(codes, E2M1)).size == 0


# --- encoding: a large sample -----------------------------------------------------


def test_bf16_encoding_matches_ml_dtypes_except_nan_payloads():
    rng = np.random.default_rng(11)
    bf16_values = B.bf16_to_f32_np(np.arange(1 << 16, dtype=np.uint32).astype(np.uint16))
    x = sample(rng, -126, 127, bf16_values)
    ours, theirs = B.f32_to_bf16_np(x), ml_codes(x, BF16)
    nan = np.isnan(x)
    # NaNs, overflow to inf and subnormals are in the sample
    assert nan.sum() > 100 and np.sum(theirs == 0x7F80) > 100 and np.sum(np.abs(x) < 2.0**-126) > 1000
    np.testing.assert_array_equal(ours[~nan], theirs[~nan])
    # NaN: quiet NaN, the input's sign, on both sides
    on, tn = B.bf16_to_f32_np(ours[nan]), ml_values(theirs[nan], BF16)
    assert np.all(np.isnan(on)) and np.all(np.isnan(tn))
    assert np.all((ours[nan] & 0x40) != 0)
    np.testing.assert_array_equal(same_sign(on), np.signbit(x[nan]))
    np.testing.assert_array_equal(same_sign(tn), np.signbit(x[nan]))


def _e4m3_sample():
    return sample(np.random.default_rng(12), -12, 10, B.E4M3_VALUES)


def test_e4m3_encoding_matches_ml_dtypes_inside_the_range():
    x = _e4m3_sample()
    inside = ~np.isnan(x) & (np.abs(x) <= E4M3_OVERFLOW)
    assert inside.sum() > SAMPLE // 3
    np.testing.assert_array_equal(B.f32_to_e4m3_np(x[inside]), ml_codes(x[inside], E4M3))


def test_e4m3_overflow_saturates_where_ml_dtypes_gives_nan():
    x = _e4m3_sample()
    over = ~np.isnan(x) & (np.abs(x) > E4M3_OVERFLOW)
    assert over.sum() > 1000 and np.isinf(x[over]).any()
    sign = np.where(np.signbit(x[over]), 0x80, 0)
    np.testing.assert_array_equal(B.f32_to_e4m3_np(x[over]), sign | 0x7E)  # +-448
    np.testing.assert_array_equal(ml_codes(x[over], E4M3), sign | 0x7F)  # NaN


def test_e4m3_nan_is_0x7f_whatever_its_sign_where_ml_dtypes_keeps_the_sign():
    x = _e4m3_sample()
    nan = np.isnan(x)
    assert np.signbit(x[nan]).any() and (~np.signbit(x[nan])).any()
    assert np.all(B.f32_to_e4m3_np(x[nan]) == B.E4M3_NAN)
    np.testing.assert_array_equal(ml_codes(x[nan], E4M3), np.where(np.signbit(x[nan]), 0xFF, 0x7F))


def test_e2m1_encoding_matches_ml_dtypes_except_nan():
    x = sample(np.random.default_rng(13), -4, 4, B.E2M1_VALUES)
    nan = np.isnan(x)
    assert (np.abs(x[~nan]) > 6).sum() > 1000  # saturation is in the sample: both give +-6
    np.testing.assert_array_equal(B.f32_to_e2m1_np(x[~nan]), ml_codes(x[~nan], E2M1))
    assert np.all(B.f32_to_e2m1_np(x[nan]) == 0x7)
    np.testing.assert_array_equal(ml_codes(x[nan], E2M1), np.where(np.signbit(x[nan]), 0x0, 0x8))


def test_the_comparison_catches_a_codec_that_rounds_ties_away_from_zero():
    # A plausible bug: round half away from zero instead of half to even.
    x = ties_and_neighbours(B.E2M1_VALUES)
    a = np.abs(x).astype(np.float64)
    m, e = np.frexp(a)
    away = np.where(a < 1.0, np.floor(a * 2.0 + 0.5), (e << 1) + np.floor(m * 4.0 + 0.5) - 2)
    away = np.minimum(away, 7).astype(np.uint8) | np.where(np.signbit(x), 8, 0).astype(np.uint8)
    assert np.count_nonzero(away != ml_codes(x, E2M1)) > 0
    np.testing.assert_array_equal(B.f32_to_e2m1_np(x), ml_codes(x, E2M1))


# --- the device functions, in the simulator ---------------------------------------


def _device_sample(rng, lo_exp: int, hi_exp: int, values: np.ndarray, n: int) -> np.ndarray:
    ties = ties_and_neighbours(values)
    pick = ties[rng.choice(ties.size, min(n, ties.size), replace=False)]
    return np.concatenate([EDGES, pick, near_range(rng, n, lo_exp, hi_exp)])


@pytest.mark.sim
def test_device_e4m3_and_e2m1_match_ml_dtypes_on_a_sample():
    rng = np.random.default_rng(14)
    x = _device_sample(rng, -12, 10, B.E4M3_VALUES, 96)
    ok = ~np.isnan(x) & (np.abs(x) <= E4M3_OVERFLOW)  # the documented differences aside
    np.testing.assert_array_equal(on_device(B.f32_to_e4m3, x, np.uint8)[ok], ml_codes(x[ok], E4M3))
    codes = np.arange(256, dtype=np.uint16).astype(np.uint8)
    assert bit_mismatches(on_device(B.e4m3_to_f32, codes, np.float32), ml_values(codes, E4M3)).size == 0

    x4 = _device_sample(rng, -4, 4, B.E2M1_VALUES, 48)
    ok4 = ~np.isnan(x4)
    np.testing.assert_array_equal(on_device(B.f32_to_e2m1, x4, np.uint8)[ok4], ml_codes(x4[ok4], E2M1))
    nib = np.arange(16, dtype=np.uint8)
    assert bit_mismatches(on_device(B.e2m1_to_f32, nib, np.float32), ml_values(nib, E2M1)).size == 0


@pytest.mark.sim
def test_device_bf16_matches_ml_dtypes_on_a_sample():
    rng = np.random.default_rng(15)
    x = np.concatenate(
        [EDGES, random_f32(rng, 96), near_range(rng, 96, -126, 127), subnormals_and_overflow(rng, 16)[::97]]
    )
    # ties: the low half exactly 0x8000, both parities of the kept bit
    ties = ((rng.integers(0, 1 << 16, 32).astype(np.uint32) << 16) | 0x8000).view(np.float32)
    x = np.concatenate([x, ties])
    got, want = on_device(B.f32_to_bf16, x, np.uint16), ml_codes(x, BF16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.all(np.isnan(B.bf16_to_f32_np(got[nan])))
    codes = rng.integers(0, 1 << 16, 160).astype(np.uint16)
    assert bit_mismatches(on_device(B.bf16_to_f32, codes, np.float32), ml_values(codes, BF16)).size == 0
