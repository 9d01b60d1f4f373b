"""``common/index32.py``: in the simulator ``row`` is the array itself and
``u32`` keeps an index's low 32 bits, as ``np.uint32`` does; on the GPU
both are moves ptxas erases (the MoE per-row kernels' SASS test holds
their effect: ``tests/kernels/moe/test_moe_ptx.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from leverctl_kernels.common import index32

sim = pytest.mark.sim


@cuda.jit
def _k_rows(w, idx, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        r = index32.row(w[i])
        out[i] = r[index32.u32(idx[i])]


@sim
@pytest.mark.simulator_only  # checks the twins' values and types
def test_row_is_the_array_and_u32_the_low_32_bits():
    w = np.arange(24, dtype=np.uint32).reshape(4, 6)
    assert index32.row(w) is w
    assert index32.u32(np.int64(5)) == 5 and isinstance(index32.u32(np.int64(5)), np.uint32)
    assert index32.u32(np.int64(2**32 + 3)) == 3
    assert index32.u32(np.int64(-1)) == 0xFFFFFFFF


@sim
def test_a_row_read_through_both_is_the_rows_element():
    """In a kernel: row ``i``'s element ``idx[i]`` through ``row`` and
    ``u32`` (on a GPU too, under ``LEVERCTL_TEST_DEVICE=gpu``)."""
    w = np.arange(40, dtype=np.uint32).reshape(5, 8) * 3
    idx = np.array([0, 7, 3, 5, 1], dtype=np.int64)
    out = cuda.to_device(np.zeros(5, np.uint32))
    _k_rows[1, 32](cuda.to_device(w), cuda.to_device(idx), out)
    assert out.copy_to_host().tolist() == [int(w[i, idx[i]]) for i in range(5)]
