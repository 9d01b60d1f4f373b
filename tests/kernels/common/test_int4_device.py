"""The int4 GEMVs' device side (``common/int4_device.py``) in the simulator:
the pre-scaled staging of a chunk of activations and the decode against it
give, word by word, the same float32 sums as the plain decode ``(q - 8) x``
summed nibble by nibble (every value of every nibble position, random words
and fp16 activations); the staging's layout is the documented one; and the
check fails on activations staged without their scale."""

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
    out = np.zeros(KWC, np.float32)
    staged = np.zeros(XS, np.float32)
    _dots_kernel(prescaled)[1, KWC](out, words, x, staged)
    return out, staged


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
    # the layout: input e at float 36 (e // 32) + e % 32, times 2**-(4 (e % 4))
    e = np.arange(KCHUNK)
    want = x.astype(np.float32) * np.float32(2.0) ** (-4 * (e % 4))
    np.testing.assert_array_equal(staged[D.PITCH * (e // 32) + e % 32], want)


def test_the_check_fails_on_activations_staged_without_their_scale():
    rng = np.random.default_rng(6)
    words = rng.integers(0, 2**32, KWC, dtype=np.uint64).astype(np.uint32)
    x = rng.standard_normal(KCHUNK).astype(np.float16)
    out, _ = _run(words, x, prescaled=False)
    assert not np.array_equal(out, _plain(words, x))
