"""The engine's warp products of stored rows (``common/gemm/warp_rows.py``:
``x_i . y_l`` of fp16 rows on ``mma.sync`` m16n8k16, a block's tiles dealt
to the warps, each element handed to the caller's ``put``) against NumPy,
in the simulator: even, padded (``d % 16 != 0``) and odd row lengths
(16-bit halves), a block offset into the arrays, a whole block and a lower
triangle, blocks past one tile and past a warp's share; rows read in
8-byte pieces (``wide``) and, where an array is not 16-byte aligned, in
words. Exact fp16 products, f32 sums: within 1e-5 of the largest
magnitude. A wrong fragment map fails; a partial warp is refused."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from leverctl_kernels.common import mma
from leverctl_kernels.common.gemm import warp_rows as WR


@cuda.jit(device=True)
def _put(ctx, i, l, dot):
    out, seen = ctx
    out[i, l] = dot
    seen[i, l] += 1


@cuda.jit(device=True)
def _put2(ctx, i, l, dot, dot1):
    out, seen = ctx
    out[i, l] = dot
    out[i, l + 1] = dot1
    seen[i, l] += 10  # a pair's elements counted as 10 and 1
    seen[i, l + 1] += 1


def _run(x, y, h, ta, la, tb, lb, lower, threads=64, layout=WR.LAYOUT, put2=None, wide=False):
    product = WR.make_product(x.shape[2], threads, _put, layout, put2, wide)

    @cuda.jit
    def kern(out, seen, x, y, h, ta, la, tb, lb, lower):
        product(x, y, h, ta, la, tb, lb, lower, (out, seen), cuda.threadIdx.x)

    out = np.full((la, lb), np.nan, np.float32)
    seen = np.zeros((la, lb), np.int32)
    d_out, d_seen = cuda.to_device(out), cuda.to_device(seen)
    dx, dy = (cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in (x, y))
    kern[1, threads](d_out, d_seen, dx, dy, h, ta, la, tb, lb, lower)
    return d_out.copy_to_host(), d_seen.copy_to_host()


def _rows(rng, t, d):
    return rng.standard_normal((t, 2, d)).astype(np.float16)


@pytest.mark.sim
@pytest.mark.parametrize("d", [16, 12, 7, 34])
def test_a_block_of_row_products_is_every_dot_once(d):
    rng = np.random.default_rng(d)
    x, y = _rows(rng, 30, d), _rows(rng, 25, d)
    ta, la, tb, lb = 3, 19, 5, 17  # two row tiles, three column tiles: past a warp's share
    got, seen = _run(x, y, 1, ta, la, tb, lb, False)
    want = x[ta : ta + la, 1].astype(np.float64) @ y[tb : tb + lb, 1].astype(np.float64).T
    assert (seen == 1).all()
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.sim
def test_a_lower_triangle_gives_every_element_on_and_below_the_diagonal():
    rng = np.random.default_rng(1)
    x = _rows(rng, 40, 20)
    L, t0 = 21, 6
    got, seen = _run(x, x, 0, t0, L, t0, L, True, threads=32)
    lower = np.tril(np.ones((L, L), bool))
    assert (seen[lower] == 1).all()
    # tiles wholly above the diagonal are not made: row tile 0 (rows 0..15) stops at column 15
    assert (seen[:16, 16:] == 0).all() and seen.max() == 1
    want = x[t0 : t0 + L, 0].astype(np.float64) @ x[t0 : t0 + L, 0].astype(np.float64).T
    assert np.abs(got[lower] - want[lower]).max() <= 1e-5 * np.abs(want).max()
    assert WR.lower_tiles(L) == WR.block_tiles(L, L, True) == 2 + 3


@pytest.mark.sim
def test_with_put2_each_rows_column_pair_comes_together_and_an_odd_last_column_alone():
    """``put2`` takes columns ``2j, 2j + 1`` of a row together (so a caller
    can store them as one 8-byte store); at an odd ``lb`` the last column
    goes to ``put`` alone. The products are the scalar puts' bit for bit."""
    rng = np.random.default_rng(7)
    x, y = _rows(rng, 30, 24), _rows(rng, 25, 24)
    ta, la, tb, lb = 2, 19, 1, 17
    got, seen = _run(x, y, 0, ta, la, tb, lb, False, put2=_put2)
    assert (seen[:, 0:16:2] == 10).all() and (seen[:, 1:16:2] == 1).all() and (seen[:, 16] == 1).all()
    plain, _ = _run(x, y, 0, ta, la, tb, lb, False)
    assert np.array_equal(got, plain)


@pytest.mark.sim
@pytest.mark.parametrize("d", [16, 36, 12, 7])
def test_rows_read_in_8_byte_pieces_give_the_same_products(d):
    """``wide``: each step's ``d`` permuted alike in both operands, a
    lane's pairs of registers one 8-byte load (d 16, 36: one step and a
    padded one; 12: padded; 7, odd: the word loads). Every dot once."""
    rng = np.random.default_rng(d)
    x, y = _rows(rng, 30, d), _rows(rng, 25, d)
    ta, la, tb, lb = 3, 19, 5, 17
    got, seen = _run(x, y, 1, ta, la, tb, lb, False, wide=True)
    want = x[ta : ta + la, 1].astype(np.float64) @ y[tb : tb + lb, 1].astype(np.float64).T
    assert (seen == 1).all()
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.sim
def test_rows_not_16_byte_aligned_take_the_word_loads():
    """An array starting 4 bytes into its allocation: an 8-byte load of a
    row would fault (the twin refuses it), so the product reads words."""
    rng = np.random.default_rng(5)
    x = _rows(rng, 31, 16)
    flat = cuda.to_device(np.concatenate([np.zeros(2, np.float16), x.reshape(-1)]))
    dx = flat[2:].reshape(x.shape)  # a view 4 bytes into the allocation
    got, _ = _run(dx, x, 0, 1, 18, 0, 9, False, wide=True)
    want = x[1:19, 0].astype(np.float64) @ x[0:9, 0].astype(np.float64).T
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_8_byte_pieces_are_taken_only_where_a_lanes_registers_pair_along_d():
    assert WR.paired_steps(WR.LAYOUT)

    def a_swapped(lane, i):  # registers 0 and 2 a row apart: no 8-byte piece of one row
        r, c = mma.a_elem.py_func(lane, i)
        return (r + 8) % mma.M if i in (4, 5) else r, c

    assert not WR.paired_steps((a_swapped, mma.b_elem, mma.c_elem))


def test_pairs_are_taken_only_where_the_fragment_map_holds_them_along_a_row():
    assert WR.pairs_along_rows(mma.c_elem)

    def next_row(lane, i):  # d1 a row down: no pair along a row
        r, c = mma.c_elem.py_func(lane, i)
        return (r + i % 2) % mma.M, c - i % 2

    assert not WR.pairs_along_rows(next_row)


@pytest.mark.sim
def test_a_wrong_fragment_map_gives_wrong_products():
    @cuda.jit(device=True, inline="always")
    def b_next_column(lane, i):
        k, n = mma.b_elem(lane, i)
        return k, (n + 1) % mma.N

    rng = np.random.default_rng(2)
    x, y = _rows(rng, 16, 16), _rows(rng, 8, 16)
    got, _ = _run(x, y, 0, 0, 16, 0, 8, False, threads=32, layout=(mma.a_elem, b_next_column, mma.c_elem))
    want = x[:, 0].astype(np.float64) @ y[:, 0].astype(np.float64).T
    assert np.abs(got - want).max() > 0.1 * np.abs(want).max()


def test_a_block_that_is_not_whole_warps_is_refused():
    with pytest.raises(ValueError, match="whole warps"):
        WR.make_product(16, 48, _put)
