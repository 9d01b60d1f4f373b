"""The int4 GEMVs' device side (``common/int4_device.py``) in the simulator:
the pre-scaled staging of a chunk of activations and the subnormal decode
against it give, word by word, the same float32 sums as the plain decode
``(q - 8) x`` summed nibble by nibble, times ``2**-SHIFT`` exactly (every
value of every nibble position, random words and fp16 activations from the
largest to a subnormal, SiLU-sized float32 ones); the staging's layout is
the documented one; and the check fails on activations staged without
their scale."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config, cuda, float32

from leverctl_kernels.common import int4_device as D

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the simulator twin")

KCHUNK = 256
KWC, GPC, XS = D.group_layout(KCHUNK)


def _dots_kernel(prescaled: bool):
    @cuda.jit
    def dots(out, words, x, staged):
        """Thread ``t`` stages its share of ``x`` (16-byte loads), then the
        dot of packed word ``t`` against its activations; ``staged`` gets the
        staged chunk."""
        xs = cuda.shared.array(XS, dtype=float32)
        tid = cuda.threadIdx.x
        if prescaled:
            D.stage_x_grouped_v4(xs, x, 0, x.shape[0], tid, cuda.blockDim.x, KCHUNK)
        else:  # the planted fault: every activation as it is, no pre-scale
            for e in range(tid, x.shape[0], cuda.blockDim.x):
                xs[D.slot(e)] = float32(x[e])
        cuda.syncthreads()
        xb = D.smem_addr(xs)
        out[tid] = D.dot_word_at(words[tid], D.word_at(xb, tid))
        for i in range(tid, XS, cuda.blockDim.x):
            staged[i] = xs[i]

    return dots


def _plain(words: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``sum_j (q_j - 8) x_j`` of each word, in float32, nibble by nibble."""
    out = np.zeros(len(words), np.float32)
    xf = x.astype(np.float32)
    for w, word in enumerate(words):
        acc = np.float32(0.0)
        for j in range(8):
            q = np.float32(((int(word) >> (4 * j)) & 0xF) - 8)
            acc = np.float32(acc + np.float32(q * xf[8 * w + j]))
        out[w] = acc
    return out


def _run(words, x, prescaled=True):
    """Each word's dot scaled back by ``UNSCALE`` (exact), and the stage."""
    out = np.zeros(KWC, np.float32)
    staged = np.zeros(XS, np.float32)
    _dots_kernel(prescaled)[1, KWC](out, words, x, staged)
    return out * np.float32(D.UNSCALE), staged


def test_every_nibble_value_at_every_position_decodes_to_q_minus_8():
    """Word ``t`` holds the value ``t % 16`` at every position; activation
    one-hot at position ``j``: each dot is exactly ``q - 8``."""
    words = np.array([sum((t % 16) << (4 * j) for j in range(8)) for t in range(KWC)], np.uint32)
    for j in range(8):
        x = np.zeros(KCHUNK, np.float16)
        x[j::8] = 1.0
        out, _ = _run(words, x)
        np.testing.assert_array_equal(out, (np.arange(KWC) % 16 - 8).astype(np.float32))


def test_the_pre_scaled_decode_sums_what_the_plain_decode_sums_bit_for_bit():
    rng = np.random.default_rng(5)
    words = rng.integers(0, 2**32, KWC, dtype=np.uint64).astype(np.uint32)
    x = (rng.standard_normal(KCHUNK) * 3).astype(np.float16)
    x[:4] = [65504.0, -6.1e-5, 6e-8, 0.0]  # fp16's largest, a small normal, a subnormal
    out, staged = _run(words, x)
    np.testing.assert_array_equal(out.view(np.uint32), _plain(words, x).view(np.uint32))
    # the layout: input e at float 36 (e // 32) + e % 32, times 2**(149 - SHIFT - 4 (e % 4))
    e = np.arange(KCHUNK)
    want = x.astype(np.float32) * (np.float32(2.0) ** (149 - D.SHIFT - 4 * (e % 4))).astype(np.float32)
    np.testing.assert_array_equal(staged[D.PITCH * (e // 32) + e % 32], want)


def test_the_check_fails_on_activations_staged_without_their_scale():
    rng = np.random.default_rng(6)
    words = rng.integers(0, 2**32, KWC, dtype=np.uint64).astype(np.uint32)
    x = rng.standard_normal(KCHUNK).astype(np.float16)
    out, _ = _run(words, x, prescaled=False)
    assert not np.array_equal(out, _plain(words, x))


@cuda.jit
def _dots_f32(out, words, x):
    """The float32 staging (``put8_f32``, the fused SiLU·down kernel's and
    the MoE down rows'), then word ``t``'s dot."""
    xs = cuda.shared.array(XS, dtype=float32)
    tid = cuda.threadIdx.x
    xb = D.smem_addr(xs)
    b = 8 * tid
    D.put8_f32(D.word_at(xb, tid), x[b], x[b + 1], x[b + 2], x[b + 3], x[b + 4], x[b + 5], x[b + 6], x[b + 7])
    cuda.syncthreads()
    out[tid] = D.dot_word_at(words[tid], D.word_at(xb, tid))


@pytest.mark.parametrize("lo, hi", [(-66, -40), (-20, 20), (20, 38)], ids=["smallest-exact", "unit", "largest"])
def test_float32_activations_sum_bit_for_bit_across_the_exact_range(lo, hi):
    """float32 activations with full 24-bit mantissas, magnitudes
    ``2**lo .. 2**(hi + 1)`` (the decode's exact range is ``2**-66 ..
    2**39``: SiLU products of fp16 inputs lie inside it), against the plain
    decode."""
    rng = np.random.default_rng(7)
    words = rng.integers(0, 2**32, KWC, dtype=np.uint64).astype(np.uint32)
    mag = np.float32(2.0) ** rng.uniform(lo, hi, KCHUNK).astype(np.float32)
    x = (mag * (1 + rng.random(KCHUNK).astype(np.float32)) * rng.choice([-1, 1], KCHUNK)).astype(np.float32)
    out = np.zeros(KWC, np.float32)
    _dots_f32[1, KWC](out, words, x)
    got = out * np.float32(D.UNSCALE)
    np.testing.assert_array_equal(got.view(np.uint32), _plain(words, x).view(np.uint32))


def test_past_the_exact_range_the_sums_part_from_the_plain_decode():
    """The check above can fail: at ``2**-100`` the products fall below
    float32's normal range (``2**-126``) and lose bits."""
    rng = np.random.default_rng(8)
    words = rng.integers(0, 2**32, KWC, dtype=np.uint64).astype(np.uint32)
    x = (np.float32(2.0**-100) * (1 + rng.random(KCHUNK).astype(np.float32))).astype(np.float32)
    out = np.zeros(KWC, np.float32)
    _dots_f32[1, KWC](out, words, x)
    assert not np.array_equal((out * np.float32(D.UNSCALE)).view(np.uint32), _plain(words, x).view(np.uint32))
