"""The warp MMA primitive (``common/mma.py``): its fragment layout against the
PTX ISA's formulas, and kernels that load fragments with its loaders, run
the MMA and store D, against a float64 matmul of the same 16-bit inputs (in
the simulator, and on a GPU with LEVERCTL_TEST_DEVICE=gpu)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config, cuda

from leverctl_kernels.common import bits, mma

SIM = bool(config.ENABLE_CUDASIM)
RTOL = 1e-6  # of the float32 result's scale: the MMA's summation order is unspecified
# Hopper's FP8 wgmma accumulates with fewer bits than FP32 (about 14 of mantissa:
# the reason DeepGEMM promotes to FP32 every 128 of K). On an H200 (2026-12-04)
# the e4m3 products were off by 1.0e-4 and 2.5e-4 of their scale at K = 32 and
# 64. The twin accumulates in FP32, so the simulator keeps the tight bound.
FP8_RTOL = RTOL if SIM else 2e-3


# ── the layout, as data, against the ISA's formulas ──────────────────────────


def test_the_a_layout_is_the_isa_formula_and_covers_the_tile_once():
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        for i in range(8):
            row = g if (i < 2 or 4 <= i < 6) else g + 8
            col = t * 2 + (i & 1) + (8 if i >= 4 else 0)
            assert tuple(mma.A_TABLE[lane, i]) == (row, col)
    cells = {tuple(x) for x in mma.A_TABLE.reshape(-1, 2)}
    assert len(cells) == 16 * 16


def test_the_b_and_c_layouts_are_the_isa_formulas_and_cover_their_tiles_once():
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        for i in range(4):
            assert tuple(mma.B_TABLE[lane, i]) == (t * 2 + (i & 1) + (8 if i >= 2 else 0), g)
            assert tuple(mma.C_TABLE[lane, i]) == (g if i < 2 else g + 8, t * 2 + (i & 1))
    assert len({tuple(x) for x in mma.B_TABLE.reshape(-1, 2)}) == 16 * 8
    assert len({tuple(x) for x in mma.C_TABLE.reshape(-1, 2)}) == 16 * 8


# ── kernels ──────────────────────────────────────────────────────────────────


def _inputs(m, n, k, seed, fmt="bf16"):
    rng = np.random.default_rng(seed)
    a, b, c = rng.standard_normal((m, k)), rng.standard_normal((n, k)), rng.standard_normal((m, n))
    if fmt == "bf16":
        A, Bt = bits.f32_to_bf16_np(a.astype(np.float32)), bits.f32_to_bf16_np(b.astype(np.float32))
        dec = lambda h: bits.bf16_to_f32_np(h).astype(np.float64)  # noqa: E731
    else:
        A, Bt = a.astype(np.float16).view(np.uint16), b.astype(np.float16).view(np.uint16)
        dec = lambda h: h.view(np.float16).astype(np.float64)  # noqa: E731
    C = c.astype(np.float32)
    ref = dec(A) @ dec(Bt).T + C.astype(np.float64)
    return A, Bt, C, ref


def _close(got, ref, rtol=RTOL):
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(got.astype(np.float64) - ref).max())
    assert err <= rtol * scale, f"max abs error {err:.3g} over {rtol:g} x scale {scale:.3g}"


def _tiled(load_a, load_b, op):
    """One warp per 16x8 tile of D, looping over k in steps of 16."""

    @cuda.jit
    def k(A, Bt, C, D):
        r0 = cuda.blockIdx.x * 16
        n0 = cuda.blockIdx.y * 8
        c = mma.load_c(C, r0, n0)
        d0, d1, d2, d3 = c[0], c[1], c[2], c[3]
        for k0 in range(0, A.shape[1], 16):
            a = load_a(A, r0, k0)
            b = load_b(Bt, n0, k0)
            d0, d1, d2, d3 = op(a[0], a[1], a[2], a[3], b[0], b[1], d0, d1, d2, d3)
        mma.store_c(D, r0, n0, d0, d1, d2, d3)

    return k


def _run(kernel, A, Bt, C):
    m, n = C.shape
    D = np.full_like(C, np.nan)
    dD = cuda.to_device(D)
    kernel[(m // 16, n // 8), 32](cuda.to_device(A), cuda.to_device(Bt), cuda.to_device(C), dD)
    return dD.copy_to_host()


BF16 = _tiled(mma.load_a_bf16, mma.load_b_bf16, mma.mma_bf16_16816)
F16 = _tiled(mma.load_a_f16, mma.load_b_f16, mma.mma_f16_16816)


@pytest.mark.sim
def test_one_bf16_tile_is_a_float64_matmul_of_the_bf16_inputs():
    A, Bt, C, ref = _inputs(16, 8, 16, seed=1)
    _close(_run(BF16, A, Bt, C), ref)


@pytest.mark.sim
def test_a_32x16x32_bf16_product_is_four_tiles_and_two_k_steps():
    A, Bt, C, ref = _inputs(32, 16, 32, seed=2)
    _close(_run(BF16, A, Bt, C), ref)


@pytest.mark.sim
def test_one_fp16_tile_is_a_float64_matmul_of_the_fp16_inputs():
    A, Bt, C, ref = _inputs(16, 8, 16, seed=3, fmt="f16")
    _close(_run(F16, A, Bt, C), ref)


def _rows_swapped(lane, i):
    # The A map with rows g and g+8 exchanged: a plausible slip.
    r, c = mma.a_elem(lane, i)
    return (r + 8) % 16, c


@pytest.mark.sim
def test_an_a_loader_with_rows_g_and_g_plus_8_swapped_fails_the_check():
    wrong = _tiled(
        mma.make_a_loader(cuda.jit(device=True, inline="always")(_rows_swapped)), mma.load_b_bf16, mma.mma_bf16_16816
    )
    A, Bt, C, ref = _inputs(16, 8, 16, seed=4)
    with pytest.raises(AssertionError, match="max abs error"):
        _close(_run(wrong, A, Bt, C), ref)


# ── s8: m16n8k32 with s32 accumulators ───────────────────────────────────────


def test_the_s8_a_and_b_layouts_are_the_isa_formulas_and_cover_their_tiles_once():
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        for i in range(16):
            row = g if (i < 4 or 8 <= i < 12) else g + 8
            col = t * 4 + (i & 3) + (16 if i >= 8 else 0)
            assert tuple(mma.A_TABLE_S8[lane, i]) == (row, col)
        for i in range(8):
            assert tuple(mma.B_TABLE_S8[lane, i]) == (t * 4 + (i & 3) + (16 if i >= 4 else 0), g)
    assert len({tuple(x) for x in mma.A_TABLE_S8.reshape(-1, 2)}) == 16 * 32
    assert len({tuple(x) for x in mma.B_TABLE_S8.reshape(-1, 2)}) == 32 * 8


@cuda.jit
def _s8_tiled(A, Bt, C, D):
    r0 = cuda.blockIdx.x * 16
    n0 = cuda.blockIdx.y * 8
    c = mma.load_c_s32(C, r0, n0)
    d0, d1, d2, d3 = c[0], c[1], c[2], c[3]
    for k0 in range(0, A.shape[1], 32):
        a = mma.load_a_s8(A, r0, k0)
        b = mma.load_b_s8(Bt, n0, k0)
        d0, d1, d2, d3 = mma.mma_s8_16832(a[0], a[1], a[2], a[3], b[0], b[1], d0, d1, d2, d3)
    mma.store_c(D, r0, n0, d0, d1, d2, d3)


@pytest.mark.sim
@pytest.mark.parametrize("m,n,k", [(16, 8, 32), (32, 8, 64)], ids=["one_tile", "two_tiles_two_k_steps"])
def test_s8_tiles_are_the_exact_integer_matmul(m, n, k):
    rng = np.random.default_rng(m + k)
    A = rng.integers(-128, 128, (m, k)).astype(np.int8)
    Bt = rng.integers(-128, 128, (n, k)).astype(np.int8)
    C = rng.integers(-(2**20), 2**20, (m, n)).astype(np.int32)
    D = np.zeros_like(C)
    dD = cuda.to_device(D)
    _s8_tiled[(m // 16, n // 8), 32](
        cuda.to_device(A.view(np.uint8)), cuda.to_device(Bt.view(np.uint8)), cuda.to_device(C), dD
    )
    ref = A.astype(np.int64) @ Bt.astype(np.int64).T + C
    np.testing.assert_array_equal(dD.copy_to_host(), ref.astype(np.int32))


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="simulator behaviour")
def test_an_mma_in_a_block_of_fewer_than_32_threads_is_refused_in_the_simulator():
    A, Bt, C, _ = _inputs(16, 8, 16, seed=5)
    with pytest.raises(Exception, match="needs all 32 lanes"):
        BF16[(1, 1), 16](cuda.to_device(A), cuda.to_device(Bt), cuda.to_device(C), cuda.to_device(np.zeros_like(C)))


# ── ldmatrix: A fragments from shared memory in one instruction ──────────────


def test_ldmatrix_rows_cover_the_a_tile_and_match_the_a_registers():
    # Lanes 8j..8j+7 address rows 0..7 of matrix j; row g of matrix j, columns
    # 2t, 2t+1 must be what the MMA's register a_j holds for lane 4g + t.
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for j in range(4):
            r, c = mma.LDSM_A_TABLE[8 * j + g]
            assert (r, c + 2 * t) == tuple(mma.A_TABLE[lane, 2 * j])
            assert (r, c + 2 * t + 1) == tuple(mma.A_TABLE[lane, 2 * j + 1])


@cuda.jit
def _ldsm_vs_loader(A, regs):
    S = cuda.shared.array((16, 16), np.uint16)
    lane = cuda.threadIdx.x
    for i in range(lane, 256, 32):
        S[i // 16, i % 16] = A[i // 16, i % 16]
    cuda.syncthreads()
    x = mma.load_a_ldsm(S, 0, 0)
    y = mma.load_a_bf16(A, 0, 0)
    for j in range(4):
        regs[0, lane, j] = x[j]
        regs[1, lane, j] = y[j]


@pytest.mark.sim
def test_ldmatrix_from_shared_memory_gives_the_loaders_a_registers():
    A, _, _, _ = _inputs(16, 8, 16, seed=6)
    regs = cuda.to_device(np.zeros((2, 32, 4), np.uint32))
    _ldsm_vs_loader[1, 32](cuda.to_device(A), regs)
    got = regs.copy_to_host()
    np.testing.assert_array_equal(got[0], got[1])
    assert got[1].any()
