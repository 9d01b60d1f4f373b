"""The W4A16 host layout helpers (fast: NumPy only)."""

from __future__ import annotations

import numpy as np
import pytest

from leverctl_kernels.common import int4


@pytest.mark.parametrize("n,k", [(1, 8), (3, 136), (37, 264), (2, 512)], ids=lambda v: str(v))
def test_pack_unpack_round_trip(n, k):
    rng = np.random.default_rng(n * 1000 + k)
    q = rng.integers(-8, 8, size=(n, k), dtype=np.int8)
    packed = int4.pack_int4(q)
    assert packed.dtype == np.uint32 and packed.shape == (n, k // 8)
    np.testing.assert_array_equal(int4.unpack_int4(packed), q)


def test_nibble_order_is_low_first_and_offset_by_8():
    q = np.array([[-8, -7, 0, 1, 2, 3, 6, 7]], dtype=np.int8)
    (word,) = int4.pack_int4(q)[0]
    # element j sits in bits 4j..4j+3 as q + 8
    assert [(int(word) >> (4 * j)) & 0xF for j in range(8)] == [0, 1, 8, 9, 10, 11, 14, 15]


def test_pack_rejects_out_of_range_and_ragged_k():
    with pytest.raises(ValueError):
        int4.pack_int4(np.array([[8] + [0] * 7]))
    with pytest.raises(ValueError):
        int4.pack_int4(np.zeros((2, 12), dtype=np.int8))
    with pytest.raises(ValueError):
        int4.quantize_w4(np.zeros((2, 20), dtype=np.float32))


@pytest.mark.parametrize(
    "n,k", [(4, 264), (3, 72), (2, 256)], ids=["k264-partial-group", "k72-one-partial-group", "k256-full-groups"]
)
def test_quantize_dequantize(n, k):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.02
    qweight, scales = int4.quantize_w4(w)
    assert qweight.shape == (n, k // 8) and scales.shape == (n, -(-k // 128))
    assert scales.dtype == np.float16
    deq = int4.dequantize_w4(qweight, scales)
    assert deq.dtype == np.float32 and deq.shape == (n, k)
    # Round-to-nearest: each element within half a step of its group's scale.
    step = np.repeat(scales.astype(np.float32), 128, axis=1)[:, :k]
    assert np.all(np.abs(deq - w) <= 0.5 * step * (1 + 1e-3) + 1e-8)
    # Quantizing the dequantized matrix again is the identity.
    q2, s2 = int4.quantize_w4(deq)
    np.testing.assert_array_equal(q2, qweight)
    np.testing.assert_array_equal(s2, scales)


def test_dequantize_is_exact_products():
    q = np.array([[-8, 7, 3, -1, 0, 5, -6, 2]], dtype=np.int8)
    scales = np.array([[0.0123]], dtype=np.float16)
    deq = int4.dequantize_w4(int4.pack_int4(q), scales)
    exact = q.astype(np.float64) * float(scales[0, 0])
    np.testing.assert_array_equal(deq.astype(np.float64), exact)


def test_zero_group_and_partial_last_group():
    w = np.zeros((1, 136), dtype=np.float32)
    w[0, 130] = 0.5  # only the partial last group (8 inputs) is non-zero
    qweight, scales = int4.quantize_w4(w)
    assert float(scales[0, 0]) == 0.0 and float(scales[0, 1]) > 0.0
    deq = int4.dequantize_w4(qweight, scales)
    assert np.count_nonzero(deq) == 1 and abs(deq[0, 130] - 0.5) < 1e-3


def test_random_w4_is_seeded_and_realistic():
    a = int4.random_w4(np.random.default_rng(3), 16, 256)
    b = int4.random_w4(np.random.default_rng(3), 16, 256)
    np.testing.assert_array_equal(a[0], b[0])
    deq = int4.dequantize_w4(*a)
    assert 0.012 < deq.std() < 0.03
