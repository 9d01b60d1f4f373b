"""The conversions of ``common/cvt.py`` in the simulator, where each name is
its ``bits.py`` twin, against the host references (``bits.py``'s NumPy
codecs with the instructions' NaN rules) and ``ml_dtypes``.

The host references are checked exhaustively (every bf16 and E4M3 code, a
large float32 sample); the twins run in small kernels: a few thousand
elements a launch, with every edge, tie and special value in the sample. Under
``LEVERCTL_TEST_DEVICE=gpu`` the same kernels run the intrinsics on the GPU,
which checks the instructions against the same references. The
last tests show the comparison rejects a twin with the pair order swapped
and one that truncates instead of rounding to nearest even.
"""

from __future__ import annotations

import numpy as np
import pytest
from cvt_kernels import conversion_kernels
from numba import config, cuda
from numba.core.extending import _Intrinsic
from test_bits import bit_mismatches
from test_bits_ml_dtypes import (
    BF16,
    E2M1,
    E4M3,
    E4M3_OVERFLOW,
    EDGES,
    ml_codes,
    ml_values,
    near_range,
    random_f32,
    subnormals_and_overflow,
    ties_and_neighbours,
)

from leverctl_kernels.common import bits as B
from leverctl_kernels.common import cvt as C

sim = pytest.mark.sim
BF16_CODES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
BF16_VALUES = B.bf16_to_f32_np(BF16_CODES)
E4M3_CODES = np.arange(256, dtype=np.uint16).astype(np.uint8)
THREADS = 128


# --- host references: what the instructions give ---------------------------------


def ref_bf16(x) -> np.ndarray:
    """``cvt.rn.bf16.f32``: bits.py's RNE, and the canonical NaN."""
    x = np.asarray(x, np.float32)
    return np.where(np.isnan(x), np.uint16(C.BF16_NAN), B.f32_to_bf16_np(x)).astype(np.uint16)


def ref_bf16x2(lo, hi) -> np.ndarray:
    """``cvt.rn.bf16x2.f32 d, hi, lo``: ``lo`` in the low half."""
    return ref_bf16(lo).astype(np.uint32) | (ref_bf16(hi).astype(np.uint32) << 16)


def ref_e4m3x2(lo, hi) -> np.ndarray:
    """``cvt.rn.satfinite.e4m3x2.f32 d, hi, lo``: ``lo`` in the low byte."""
    return (B.f32_to_e4m3_np(lo).astype(np.uint16) | (B.f32_to_e4m3_np(hi).astype(np.uint16) << 8)).astype(np.uint16)


def ref_e4m3x2_decode(c) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(c, np.uint16)
    return B.e4m3_to_f32_np((c & 0xFF).astype(np.uint8)), B.e4m3_to_f32_np((c >> 8).astype(np.uint8))


def code_mismatches(got, want) -> np.ndarray:
    """Indices where two arrays of codes differ."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    return np.flatnonzero(got != want)


# --- samples ------------------------------------------------------------------------


def encode_sample(rng, values: np.ndarray, lo_exp: int, hi_exp: int, n: int) -> np.ndarray:
    """``n`` float32 inputs or a few more: every edge (zeros, inf, NaN of both
    signs, overflow), ties and their neighbours, float32 subnormals and random
    bit patterns, dense over the format's range."""
    ties = ties_and_neighbours(values)
    sub = subnormals_and_overflow(rng, 64)
    parts = [
        EDGES,
        -EDGES,
        ties[rng.choice(ties.size, min(n // 2, ties.size), replace=False)],
        sub[rng.choice(sub.size, n // 8, replace=False)],
        random_f32(rng, n // 8),
        near_range(rng, n // 4, lo_exp, hi_exp),
    ]
    x = np.concatenate(parts).astype(np.float32)
    return x[: x.size - x.size % 2]  # pairs


def bf16_decode_sample(rng, n: int) -> np.ndarray:
    """Every exponent with zero, one and the top mantissa (inf, NaNs, zeros,
    subnormals among them), both signs, and random codes."""
    e = np.arange(256, dtype=np.uint16) << 7
    special = np.concatenate([e, e | 1, e | 0x7F, e | 0x40])
    special = np.concatenate([special, special | 0x8000])
    return np.concatenate([special, rng.integers(0, 1 << 16, n - special.size).astype(np.uint16)])


def e4m3_pair_words() -> np.ndarray:
    """256 words with every E4M3 code once in each byte (different codes in
    the two bytes of a word, so a swap shows)."""
    c = E4M3_CODES.astype(np.uint16)
    return c | (((c * 37 + 11) & 0xFF) << 8)


# --- the host references, exhaustively, against ml_dtypes -----------------------------


def test_bf16_reference_is_ml_dtypes_with_the_canonical_nan():
    rng = np.random.default_rng(21)
    x = np.concatenate([encode_sample(rng, BF16_VALUES, -126, 127, 1 << 16), random_f32(rng, 1 << 20)])
    nan = np.isnan(x)
    assert nan.sum() > 100 and np.sum(np.abs(x) < 2.0**-126) > 1000
    assert np.sum(ml_codes(x, BF16) == 0x7F80) > 10  # rounding up to inf is in it
    assert code_mismatches(ref_bf16(x[~nan]), ml_codes(x[~nan], BF16)).size == 0
    assert np.all(ref_bf16(x[nan]) == 0x7FFF)
    lo, hi = x[0::2], x[1::2]
    np.testing.assert_array_equal(ref_bf16x2(lo, hi) & 0xFFFF, ref_bf16(lo))
    np.testing.assert_array_equal(ref_bf16x2(lo, hi) >> 16, ref_bf16(hi))


def test_e4m3_reference_is_ml_dtypes_inside_the_range_and_saturates_outside():
    rng = np.random.default_rng(22)
    x = np.concatenate([encode_sample(rng, B.E4M3_VALUES, -12, 10, 1 << 12), near_range(rng, 1 << 20, -12, 10)])
    lo, hi = x[0::2], x[1::2]
    word = ref_e4m3x2(lo, hi)
    for half, v in ((word & 0xFF, lo), (word >> 8, hi)):
        inside = ~np.isnan(v) & (np.abs(v) <= E4M3_OVERFLOW)
        assert code_mismatches(half[inside].astype(np.uint8), ml_codes(v[inside], E4M3)).size == 0
        over = ~np.isnan(v) & ~inside
        assert over.sum() > 100
        np.testing.assert_array_equal(half[over], np.where(np.signbit(v[over]), 0xFE, 0x7E))
        assert np.isnan(v).any() and np.all(half[np.isnan(v)] == 0x7F)  # satfinite NaN, any sign


def test_every_bf16_and_e4m3_code_decodes_as_ml_dtypes_does():
    assert bit_mismatches(B.bf16_to_f32_np(BF16_CODES), ml_values(BF16_CODES, BF16)).size == 0
    words = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)  # every pair
    lo, hi = ref_e4m3x2_decode(words)
    assert bit_mismatches(lo, ml_values((words & 0xFF).astype(np.uint8), E4M3)).size == 0
    assert bit_mismatches(hi, ml_values((words >> 8).astype(np.uint8), E4M3)).size == 0


# --- the twins, in small kernels --------------------------------------------------------


_K = conversion_kernels()
_k_bf16, _k_bf16x2, _k_bf16_decode = _K["f32_to_bf16"], _K["f32x2_to_bf16x2"], _K["bf16_to_f32"]
_k_e4m3x2, _k_e4m3x2_decode = _K["f32x2_to_e4m3x2"], _K["e4m3x2_to_f32x2"]


def launch(kernel, x, n_out: int, dtype) -> np.ndarray:
    out = cuda.to_device(np.zeros(n_out, dtype))
    n = max(n_out, np.size(x))
    kernel[(n + THREADS - 1) // THREADS, THREADS](cuda.to_device(np.ascontiguousarray(x)), out)
    return out.copy_to_host()


def test_cvt_binds_the_intrinsics_exactly_when_the_simulator_is_off():
    # With LEVERCTL_TEST_DEVICE=gpu the same kernels below run the intrinsics
    # on the GPU, against the same references.
    assert C.SIMULATED == bool(config.ENABLE_CUDASIM)
    for name in (
        "f32_to_bf16",
        "f32x2_to_bf16x2",
        "f32x2_to_f16x2",
        "bf16_to_f32",
        "f32x2_to_e4m3x2",
        "e4m3x2_to_f32x2",
        "e4m3_to_f32",
        "f16x2_to_f32x2",
        "f32_bits",
        "bits_f32",
    ):
        assert isinstance(getattr(C, name), _Intrinsic) != C.SIMULATED, name


@sim
def test_f32_bits_is_the_float32s_own_bit_pattern():
    """A float32's bits as a word (a 16-byte store's), every class of value:
    signed zeros, subnormals, the extremes, infinities and a NaN's payload."""
    x = np.array([0.0, -0.0, 1.0, -2.5, 1e-45, -1e-40, 3.4028235e38, np.inf, -np.inf, 65504.0, 1 / 3], dtype=np.float32)
    x = np.r_[x, np.array([0x7FC00001, 0xFFA00000], np.uint32).view(np.float32)]
    out = cuda.to_device(np.zeros(x.size, np.uint32))
    _K["f32_bits"][1, 32](cuda.to_device(x), out)
    np.testing.assert_array_equal(out.copy_to_host(), x.view(np.uint32))


@sim
def test_twin_bf16_encoders_match_the_reference_and_ml_dtypes():
    x = encode_sample(np.random.default_rng(23), BF16_VALUES, -126, 127, 1536)
    assert x.size <= 2048
    got = launch(_k_bf16, x, x.size, np.uint16)
    assert code_mismatches(got, ref_bf16(x)).size == 0
    ok = ~np.isnan(x)
    assert code_mismatches(got[ok], ml_codes(x[ok], BF16)).size == 0
    pairs = launch(_k_bf16x2, x, x.size // 2, np.uint32)
    assert code_mismatches(pairs, ref_bf16x2(x[0::2], x[1::2])).size == 0


@sim
def test_twin_f16_pair_encoder_is_numpys_float16_halves_in_isa_order():
    """fp16 has an independent reference in NumPy itself: RNE, overflow to
    inf, subnormals; a NaN is the instruction's canonical 0x7fff (an H200
    gave it where NumPy keeps 0x7e00). ``lo`` lands in the low half."""
    rng = np.random.default_rng(31)
    x = np.concatenate(
        [
            rng.standard_normal(512) * 10.0 ** rng.integers(-9, 6, 512),
            [
                65504.0,
                65520.0,
                -65520.0,
                6e-8,
                -3e-8,
                np.inf,
                np.nan,
                0.0,
                -0.0,
                2.0**-25,
                2.0**-24 * 1.5,
                1.0 + 2.0**-11,
            ],
        ]
    ).astype(np.float32)
    x = x[: x.size // 2 * 2]
    got = launch(_K["f32x2_to_f16x2"], x, x.size // 2, np.uint32)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16).astype(np.uint32)
    want[np.isnan(x)] = C.F16_NAN
    assert code_mismatches(got, want[0::2] | (want[1::2] << 16)).size == 0
    swapped = want[1::2] | (want[0::2] << 16)
    assert code_mismatches(got, swapped).size > 0  # the check sees halves in the wrong order


def test_f16_pair_decoder_is_numpys_float16_on_every_code_in_each_half():
    """Every fp16 code (subnormals, infinities, NaNs included) as the low
    half and as the high half of a word on a GPU (``LEVERCTL_TEST_DEVICE=gpu``):
    the values NumPy's float16 gives, low half first. In the simulator, whose
    threads run one at a time in Python, every sign and exponent with 32
    mantissas each (the lowest, the highest, 30 drawn) instead."""
    codes = np.arange(1 << 16, dtype=np.uint32)
    if C.SIMULATED:
        rng = np.random.default_rng(41)
        mant = np.concatenate([[0, 1, 0x3FF], rng.choice(np.arange(2, 0x3FF), 29, replace=False)])
        codes = ((np.arange(64, dtype=np.uint32)[:, None] << 10) | mant[None, :].astype(np.uint32)).reshape(-1)
    words = np.concatenate([codes | (np.uint32(0x3C00) << 16), np.uint32(0x3C00) | (codes << 16)])
    got = launch(_K["f16x2_to_f32x2"], words, 2 * words.size, np.float32)
    want = words.view(np.uint16).view(np.float16).astype(np.float32)  # little-endian: low half first
    assert bit_mismatches(got[~np.isnan(want)], want[~np.isnan(want)]).size == 0
    assert np.array_equal(np.isnan(got), np.isnan(want))
    swapped = (words >> 16) | (words << 16)
    got_sw = launch(_K["f16x2_to_f32x2"], swapped, 2 * words.size, np.float32)
    assert bit_mismatches(got_sw[~np.isnan(want)], want[~np.isnan(want)]).size > 0  # the check sees the order


@sim
def test_twin_bf16_decoder_matches_ml_dtypes():
    b = bf16_decode_sample(np.random.default_rng(24), 2048)
    got = launch(_k_bf16_decode, b, b.size, np.float32)
    assert bit_mismatches(got, ml_values(b, BF16)).size == 0
    nan = np.isnan(got)
    assert nan.any() and np.all(B.f32_to_bits_np(got[nan]) >> 16 == b[nan])  # payloads kept


@sim
def test_twin_e4m3_pair_encoder_matches_the_reference_and_ml_dtypes():
    x = encode_sample(np.random.default_rng(25), B.E4M3_VALUES, -12, 10, 1536)
    got = launch(_k_e4m3x2, x, x.size // 2, np.uint16)
    assert code_mismatches(got, ref_e4m3x2(x[0::2], x[1::2])).size == 0
    codes = got.view(np.uint8)  # little-endian: lo, hi, lo, hi, ... = x's order
    ok = ~np.isnan(x) & (np.abs(x) <= E4M3_OVERFLOW)
    assert ok.sum() > x.size // 2
    assert code_mismatches(codes[ok], ml_codes(x[ok], E4M3)).size == 0


@sim
def test_twin_e4m3_pair_decoder_matches_ml_dtypes_on_every_code_in_each_half():
    words = e4m3_pair_words()
    got = launch(_k_e4m3x2_decode, words, 2 * words.size, np.float32)
    want = ml_values(words.view(np.uint8), E4M3)  # little-endian: lo byte first
    assert bit_mismatches(got, want).size == 0
    lo, hi = ref_e4m3x2_decode(words)
    assert bit_mismatches(got[0::2], lo).size == 0 and bit_mismatches(got[1::2], hi).size == 0


@sim
def test_twin_single_e4m3_decoder_matches_ml_dtypes_on_every_code():
    """``e4m3_to_f32``: the pair conversion's low half, every code (both
    zeros, subnormals, 448, the NaNs) against ``ml_dtypes``, and the pair
    decoder's low half."""
    got = launch(_K["e4m3_to_f32"], E4M3_CODES, E4M3_CODES.size, np.float32)
    assert bit_mismatches(got, ml_values(E4M3_CODES, E4M3)).size == 0
    lo, _ = ref_e4m3x2_decode(E4M3_CODES.astype(np.uint16))
    assert bit_mismatches(got, lo).size == 0


@sim
def test_twin_single_e4m3_encoder_matches_the_reference_and_ml_dtypes():
    """``f32_to_e4m3``: the pair encoder's low byte (a zero above it), on
    the pair encoder's sample; ``ml_dtypes`` wherever it does not overflow."""
    x = encode_sample(np.random.default_rng(26), B.E4M3_VALUES, -12, 10, 1536)
    got = launch(_K["f32_to_e4m3"], x, x.size, np.uint8)
    want = (ref_e4m3x2(x, np.zeros_like(x)) & 0xFF).astype(np.uint8)
    assert code_mismatches(got, want).size == 0
    ok = ~np.isnan(x) & (np.abs(x) <= E4M3_OVERFLOW)
    assert code_mismatches(got[ok], ml_codes(x[ok], E4M3)).size == 0


def test_no_device_code_converts_through_bits_scalar_codecs():
    """Kernels convert through ``cvt`` (the instructions): ``bits.py``'s
    scalar codecs branch, and its E4M3 decode turns a 64-bit integer into a
    float (``I2F.S64``, a quarter-rate instruction) a code. They stay the
    host's and the twins' (``cvt.py``'s simulator bindings, ``wgmma.py``'s
    simulator decode table); E2M1's encoder has no instruction before
    sm_100, so ``bits.f32_to_e2m1`` is allowed."""
    import ast
    from pathlib import Path

    import leverctl_kernels

    codecs = {"e4m3_to_f32", "e2m1_to_f32", "f32_to_e4m3", "bf16_to_f32", "f32_to_bf16", "bits_to_f32", "f32_to_bits"}
    twins = {"common/bits.py", "common/cvt.py", "common/wgmma.py"}
    root = Path(leverctl_kernels.__file__).parent
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel in twins:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("bits", "B")
                and node.func.attr in codecs
            ):
                found.append(f"{rel}:{node.lineno} {node.func.value.id}.{node.func.attr}")
    assert not found, found


# --- the checks catch the plausible bugs --------------------------------------------------


@cuda.jit
def _k_bf16x2_swapped(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = C.f32x2_to_bf16x2(x[2 * i + 1], x[2 * i])  # the ISA's operand order, read naively


@cuda.jit
def _k_e4m3x2_swapped(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = C.f32x2_to_e4m3x2(x[2 * i + 1], x[2 * i])


@sim
def test_the_checks_catch_a_pair_conversion_with_its_halves_swapped():
    x = encode_sample(np.random.default_rng(26), B.E4M3_VALUES, -12, 10, 256)
    lo, hi = x[0::2], x[1::2]
    assert code_mismatches(launch(_k_bf16x2_swapped, x, lo.size, np.uint32), ref_bf16x2(lo, hi)).size > lo.size // 2
    assert code_mismatches(launch(_k_e4m3x2_swapped, x, lo.size, np.uint16), ref_e4m3x2(lo, hi)).size > lo.size // 2
    swapped = e4m3_pair_words()
    swapped = ((swapped >> 8) | (swapped << 8)).astype(np.uint16)
    got = launch(_k_e4m3x2_decode, swapped, 2 * swapped.size, np.float32)
    assert bit_mismatches(got, ml_values(e4m3_pair_words().view(np.uint8), E4M3)).size > 200


def test_the_checks_catch_truncation_instead_of_round_to_nearest_even():
    x = encode_sample(np.random.default_rng(27), BF16_VALUES, -126, 127, 1536)
    ok = np.isfinite(x)
    truncated = (B.f32_to_bits_np(x[ok]) >> 16).astype(np.uint16)
    assert code_mismatches(truncated, ref_bf16(x[ok])).size > x.size // 8
    assert code_mismatches(truncated, ml_codes(x[ok], BF16)).size > x.size // 8
    # E4M3: round toward zero, the codec's own arithmetic otherwise
    y = encode_sample(np.random.default_rng(28), B.E4M3_VALUES, -12, 10, 1536)
    y = y[~np.isnan(y) & (np.abs(y) < 448)]
    a = np.abs(y).astype(np.float64)
    m, e = np.frexp(a)
    toward_zero = np.where(a < 2.0**-6, np.floor(a * 512.0), ((e + 6) << 3) + np.floor(m * 16.0) - 8)
    toward_zero = toward_zero.astype(np.uint8) | np.where(np.signbit(y), 0x80, 0).astype(np.uint8)
    assert code_mismatches(toward_zero, B.f32_to_e4m3_np(y)).size > y.size // 8
    assert code_mismatches(toward_zero, ml_codes(y, E4M3)).size > y.size // 8


def test_the_checks_catch_a_bf16_nan_that_is_not_canonical():
    x = np.array([np.nan, -np.nan], np.float32)
    assert code_mismatches(B.f32_to_bf16_np(x), ref_bf16(x)).size == 2  # bits.py keeps the sign and payload


@sim
def test_bits_f32_reads_a_word_as_the_float32_it_holds():
    """``f32_bits``'s inverse (a word of a wide load as its float32), every
    class of value, a NaN's payload kept."""
    w = np.array([0, 0x80000000, 0x3F800000, 0xC0200000, 1, 0x807FFFFF, 0x7F7FFFFF, 0x7F800000, 0xFF800000], np.uint32)
    w = np.r_[w, np.array([0x7FC00001, 0xFFA00000, 0x3EAAAAAB], np.uint32)]
    out = cuda.to_device(np.zeros(w.size, np.float32))
    _K["bits_f32"][1, 32](cuda.to_device(w), out)
    np.testing.assert_array_equal(out.copy_to_host().view(np.uint32), w)


@sim
def test_e2m1_decodes_every_code_as_ml_dtypes_and_bits_do():
    """All 16 E2M1 codes (both zeros' signs, the subnormal 0.5, up to 6):
    ``cvt.e2m1_to_f32``'s placed bits times ``2**126`` against
    ``ml_dtypes.float4_e2m1fn`` and ``bits.e2m1_to_f32_np``, bit for bit."""
    codes = np.arange(16, dtype=np.uint8)
    out = cuda.to_device(np.zeros(16, np.float32))
    _K["e2m1_to_f32"][1, 32](cuda.to_device(codes), out)
    got = out.copy_to_host()
    assert bit_mismatches(got, ml_values(codes, E2M1)).size == 0
    assert bit_mismatches(got, B.e2m1_to_f32_np(codes)).size == 0


@sim
def test_the_e2m1_check_catches_a_decode_without_the_subnormal():
    """Placed with float32's bias (``2**126`` folded into the exponent:
    ``(e + 126) << 23``) every normal code is right, but code 1 (0.5) and its
    negative come out 0.75 and the zeros 0.5: the check finds those four."""
    codes = np.arange(16, dtype=np.uint32)
    mag = codes & 7
    wrong = (((mag >> 1) + 126) << 23 | (mag & 1) << 22 | (codes & 8) << 28).astype(np.uint32).view(np.float32)
    assert bit_mismatches(wrong, ml_values(codes.astype(np.uint8), E2M1)).size == 4
