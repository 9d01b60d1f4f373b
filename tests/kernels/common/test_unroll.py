"""``unroll.each_group``: a tuple's whole groups of ``g`` handed to a body as
tuples of their own, with the index of each group's first element, then
each element past the last whole group to the tail, in order (the GEMM
store's shape: four slices of accumulators a 16-byte exchange)."""

from __future__ import annotations

import numpy as np
from numba import cuda, float32

from leverctl_kernels.common import unroll


@cuda.jit(device=True, inline="always")
def _group(i, part, out):
    for j in range(4):
        out[i + j] = part[j] * float32(10.0) + float32(i)


@cuda.jit(device=True, inline="always")
def _tail(i, v, out):
    out[i] = -v


def _kernel(n):
    @cuda.jit
    def k(out):
        acc = (float32(1.0),) * n
        acc = unroll.each_map(_index, acc, acc, 0)
        unroll.each_group(_group, _tail, acc, 4, out)

    return k


@cuda.jit(device=True, inline="always")
def _index(i, _x, _y, _c):
    return float32(i)


def test_each_group_hands_whole_groups_then_the_tail():
    for n, groups in ((8, 2), (10, 2), (3, 0)):
        out = np.zeros(n, np.float32)
        _kernel(n)[1, 1](out)
        want = np.arange(n, dtype=np.float32)
        whole = 4 * groups
        want[:whole] = want[:whole] * 10 + (np.arange(whole) // 4 * 4)
        want[whole:] = -want[whole:]
        np.testing.assert_array_equal(out, want)
