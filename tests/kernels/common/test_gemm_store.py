"""The GEMM epilogue's store (``wgmma_gemm.store``, ``store_to``): a
warpgroup's accumulators, in wgmma's layout, times their row and column
scales and ``t``, to ``y``, against NumPy, in the simulator.

Unswapped, to fp16 and float32 outputs, the four lanes of a row exchange
their values so that each stores 16 bytes of one row (``st.global.v4``)
where the output's rows allow it, and element by element where they do not:
a tile inside the output and one cut by ``m`` and ``ncols``; accumulators
past the last whole group of slices; rows that are not whole 16-byte units;
an output a view one element past an aligned start; rows scattered by
``dest``; and the swapped store. A store whose quad keeps its own order
(no exchange) fails, as does a float32 one whose lanes swap nothing."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from leverctl_kernels.common import unroll
from leverctl_kernels.common import wgmma as wg
from leverctl_kernels.common import wgmma_gemm as P


@cuda.jit(device=True, inline="always")
def _value(i, _z, _y, tid):
    r, c = wg.acc_elem(tid, i)
    return np.float32(r * 64 + c) * np.float32(0.125) + np.float32(0.5)


def _kernel(n: int, scattered: bool, swap: bool):
    zeros = wg.zeros(n)

    @cuda.jit
    def store(y, dest, m, ncols, r0, n0, rs, cs, t):
        tid = cuda.threadIdx.x
        z = zeros()
        acc = unroll.each_map(_value, z, z, tid)
        if scattered:
            P.store_to(y, dest, m, ncols, r0, n0, acc, rs, cs, t)
        else:
            P.store(y, m, ncols, r0, n0, acc, rs, cs, t, swap)

    return store


def _want(n, shape, dtype, m, ncols, r0, n0, rs, cs, t, dest=None, swap=False):
    """``y`` after the store: the tile's values where inside ``m`` x ``ncols``, -1 elsewhere."""
    y = np.full(shape, -1, dtype)
    for tid in range(128):
        for i in range(n // 2):
            r, c = (int(x) for x in wg.acc_elem(tid, i))
            row, col = r0 + r, n0 + c
            if row < m and col < ncols:
                v = np.float32(np.float32(r * 64 + c) * np.float32(0.125) + np.float32(0.5))
                v = np.float32(np.float32(np.float32(v * rs[row]) * cs[col]) * np.float32(t))
                if swap:
                    y[col, row] = v
                else:
                    y[row if dest is None else dest[row], col] = v
    return y


def _run(n, dtype, m, ncols, r0, n0, rows, cols, *, at=0, scattered=False, swap=False, t=0.75):
    rng = np.random.default_rng(n + m + ncols)
    rs = rng.uniform(0.5, 2, rows).astype(np.float32)
    cs = rng.uniform(0.5, 2, cols).astype(np.float32)
    dest = rng.permutation(rows).astype(np.int32)
    shape = (cols, rows) if swap else (rows, cols)
    whole = np.full(shape[0] * shape[1] + at, -1, dtype)
    d = cuda.to_device(whole)
    y = d[at:].reshape(shape) if at else d.reshape(shape)
    _kernel(n, scattered, swap)[1, 128](
        y, cuda.to_device(dest), m, ncols, r0, n0, cuda.to_device(rs), cuda.to_device(cs), np.float32(t)
    )
    got = y.copy_to_host()
    return got, _want(n, shape, dtype, m, ncols, r0, n0, rs, cs, t, dest if scattered else None, swap)


CASES = [
    # n (the warpgroup's columns), m, ncols, r0, n0, rows, cols of y
    (64, 64, 64, 0, 0, 64, 64),  # fp16: two groups of four slices; float32: four of two
    (64, 100, 200, 32, 64, 100, 200),  # inside a larger output, at an offset
    (48, 64, 48, 0, 0, 64, 48),  # fp16: a group and two slices past it, element by element
    (64, 45, 37, 8, 8, 50, 40),  # cut by m and ncols: partial chunks go element by element
    (64, 70, 60, 0, 0, 70, 60),  # rows of 60 (120 / 240 bytes: fp16 not whole 16-byte units)
    (24, 64, 24, 0, 0, 64, 24),  # float32: a group of two slices and one past it
]


@pytest.mark.sim
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize(("n", "m", "ncols", "r0", "n0", "rows", "cols"), CASES)
def test_the_store_puts_each_scaled_accumulator_in_its_place(dtype, n, m, ncols, r0, n0, rows, cols):
    got, want = _run(n, dtype, m, ncols, r0, n0, rows, cols)
    np.testing.assert_array_equal(got, want)


@pytest.mark.sim
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_an_output_one_element_past_an_aligned_start_is_stored_element_by_element(dtype):
    got, want = _run(64, dtype, 64, 64, 0, 0, 64, 64, at=1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.sim
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_scattered_rows_and_the_swapped_store(dtype):
    got, want = _run(64, dtype, 60, 64, 0, 0, 64, 64, scattered=True)
    np.testing.assert_array_equal(got, want)
    got, want = _run(64, dtype, 60, 50, 0, 0, 64, 64, swap=True)
    np.testing.assert_array_equal(got, want)


@pytest.mark.sim
def test_the_wide_store_is_16_bytes_a_lane_in_whole_sectors():
    from leverctl.profile import memtrace as mt

    with mt.trace() as tr:
        _run(64, np.float16, 64, 64, 0, 0, 64, 64)
    (st,) = [r for r in mt.summarize(tr).sites if r.space == "global" and r.kind == "store"]
    assert st.wide_bytes == st.bytes == 64 * 64 * 2
    assert st.efficiency == 1.0


@cuda.jit(device=True, inline="always")
def _no_exchange(w0, w1, w2, w3, q):
    return w0, w1, w2, w3


@cuda.jit(device=True, inline="always")
def _no_swap(a0, a1, b0, b1, odd):
    return a0, a1, b0, b1


@pytest.mark.sim
@pytest.mark.parametrize(
    ("dtype", "name", "broken"),
    [(np.float16, "_quad_transpose", _no_exchange), (np.float32, "_pair_halves", _no_swap)],
    ids=["fp16-quad-keeps-its-order", "float32-lanes-swap-nothing"],
)
def test_a_store_whose_lanes_exchange_nothing_fails(monkeypatch, dtype, name, broken):
    monkeypatch.setattr(P, name, broken)
    got, want = _run(64, dtype, 64, 64, 0, 0, 64, 64)
    assert not np.array_equal(got, want)
