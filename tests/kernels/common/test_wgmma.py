"""The warpgroup MMA (``kernels/common/wgmma.py``): the descriptor's bit
layout, and, in the simulator, the compile-proof kernel of
``test_wgmma_ptx.py`` (one warpgroup fills shared tiles, builds the
descriptors and issues the MMA) against a float64 matmul of its inputs.

What the simulator proves is that the kernel, the descriptor builder and
the twin agree on the no-swizzle K-major layout written in the module
docstring; that this is the layout the tensor cores read needs an sm_90a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda
from test_mma import FP8_RTOL, RTOL, SIM, _close, _inputs
from test_wgmma_ptx import GENERAL, THREADS, _kernel, _kernel_n

from leverctl_kernels.common import bits
from leverctl_kernels.common import wgmma as wg


def test_the_descriptor_packs_start_lbo_sbo_and_swizzle_in_their_fields():
    d = wg.make_desc_np(0x1230, 128, 256, wg.SWIZZLE_NONE)
    assert d & 0x3FFF == 0x123
    assert (d >> 16) & 0x3FFF == 128 >> 4
    assert (d >> 32) & 0x3FFF == 256 >> 4
    assert d >> 62 == 0
    assert wg.make_desc_np(0, 16, 16, wg.SWIZZLE_128B) >> 62 == 1
    # no bits outside the four fields
    full = wg.make_desc_np(0x3FFF0, 0x3FFF0, 0x3FFF0, 3)
    assert full == 0x3FFF | (0x3FFF << 16) | (0x3FFF << 32) | (3 << 62)


@cuda.jit
def _desc_kernel(addrs, out, offs):
    i = cuda.grid(1)
    if i < addrs.size:
        out[i] = wg.make_desc(addrs[i], wg.LBO, wg.SBO, wg.SWIZZLE_NONE)
        offs[i] = wg.core_offset(i % 64, (i * 7) % 32, wg.LBO, wg.SBO)


@pytest.mark.sim
def test_the_device_descriptor_is_the_host_one_and_core_offsets_tile_once():
    addrs = (np.arange(64, dtype=np.uint32) * 144) & ~np.uint32(15)
    out = np.zeros(64, np.uint64)
    offs = np.zeros(64, np.int64)
    _desc_kernel[1, 64](addrs, out, offs)
    assert [int(x) for x in out] == [wg.make_desc_np(int(a), wg.LBO, wg.SBO) for a in addrs]
    # a 64 x 32-byte tile: every (row, byte) has its own offset, all within 2 KiB
    every = {(r >> 3) * wg.SBO + (kb >> 4) * wg.LBO + (r & 7) * 16 + (kb & 15) for r in range(64) for kb in range(32)}
    assert every == set(range(64 * 32))
    assert [int(o) for o in offs] == [
        (i % 64 >> 3) * 256 + ((i * 7) % 32 >> 4) * 128 + (i % 64 & 7) * 16 + ((i * 7) % 32 & 15) for i in range(64)
    ]


def _run(kernel, A, Bt, C):
    D = np.full_like(C, np.nan)
    dD = cuda.to_device(D)
    kernel[1, THREADS](cuda.to_device(A), cuda.to_device(Bt), cuda.to_device(C), dD)
    return dD.copy_to_host()


@pytest.mark.sim
def test_one_bf16_warpgroup_mma_is_a_float64_matmul_of_the_bf16_inputs():
    A, Bt, C, ref = _inputs(wg.M, wg.N, wg.K_BF16, seed=11)
    _close(_run(_kernel("bf16"), A, Bt, C), ref)


@pytest.mark.sim
def test_one_e4m3_warpgroup_mma_is_a_float64_matmul_of_the_e4m3_inputs():
    rng = np.random.default_rng(12)
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)  # no NaN
    A = rng.choice(codes, (wg.M, wg.K_E4M3)).astype(np.uint8)
    Bt = rng.choice(codes, (wg.N, wg.K_E4M3)).astype(np.uint8)
    C = rng.standard_normal((wg.M, wg.N)).astype(np.float32)

    def dec(x):
        return bits.e4m3_to_f32_np(x).astype(np.float64)

    ref = dec(A) @ dec(Bt).T + C.astype(np.float64)
    _close(_run(_kernel("e4m3"), A, Bt, C), ref, FP8_RTOL)


def _e4m3_inputs(rows, k, rng):
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)  # every finite code
    return rng.choice(codes, (rows, k)).astype(np.uint8)


def _decode(fmt, X):
    if fmt == "e4m3":
        return bits.e4m3_to_f32_np(X).astype(np.float64)
    if fmt == "f16":
        return X.view(np.float16).astype(np.float64)
    return bits.bf16_to_f32_np(X).astype(np.float64)


def _general_inputs(fmt, n, ks, seed):
    rng = np.random.default_rng(seed)
    kt = wg.k_of(fmt) * ks
    if fmt == "e4m3":
        return _e4m3_inputs(wg.M, kt, rng), _e4m3_inputs(n, kt, rng)
    A, Bt, _C, _ref = _inputs(wg.M, n, kt, seed, fmt="bf16" if fmt == "bf16" else "f16")
    return A, Bt


def _run_general(kernel, A, Bt, n):
    dD = cuda.to_device(np.full((wg.M, n), np.nan, np.float32))
    kernel[1, THREADS](cuda.to_device(A), cuda.to_device(Bt), dD)
    return dD.copy_to_host()


@pytest.mark.sim
@pytest.mark.parametrize("fmt, n, ks", GENERAL)
def test_the_wide_forms_over_a_k_loop_are_a_float64_matmul(fmt, n, ks):
    """m64nNk16/k32 for N up to 256, several instructions along K through
    descriptors whose start address steps by two core matrices, the first
    with scale-d 0 (whatever the accumulators held is dropped)."""
    A, Bt = _general_inputs(fmt, n, ks, seed=20 + n)
    rtol = FP8_RTOL if fmt == "e4m3" else RTOL
    _close(_run_general(_kernel_n(fmt, n, ks), A, Bt, n), _decode(fmt, A) @ _decode(fmt, Bt).T, rtol)


@pytest.mark.sim
def test_a_dropped_k_step_fails_the_check():
    """The check sees a K loop one instruction short (and, next, a descriptor
    whose SBO is off by a core matrix: rows read from the wrong place)."""
    A, Bt = _general_inputs("bf16", 16, 2, seed=5)
    ref = _decode("bf16", A) @ _decode("bf16", Bt).T
    short = _run_general(_kernel_n("bf16", 16, 1), A, Bt, 16)  # K loop of 1 over a K of 2 steps
    with pytest.raises(AssertionError, match="max abs error"):
        _close(short, ref)


@pytest.mark.sim
@pytest.mark.skipif(
    not SIM, reason="on a GPU the wrong stride reads past the tile: an illegal address ends the context"
)
def test_a_wrong_stride_fails_the_check():
    A, Bt = _general_inputs("bf16", 16, 2, seed=5)
    ref = _decode("bf16", A) @ _decode("bf16", Bt).T
    wrong_sbo = _kernel_n("bf16", 16, 2, sbo_delta=wg.LBO)
    with pytest.raises((AssertionError, IndexError)):
        _close(_run_general(wrong_sbo, A, Bt, 16), ref)


def test_the_accumulator_layout_table_is_the_isa_layout_and_covers_the_tile():
    n = 24
    table = wg.acc_table(n)
    for tid in range(128):
        w, g, t = tid >> 5, (tid & 31) >> 2, tid & 3
        for i in range(n // 2):
            j, e = i >> 2, i & 3
            assert tuple(table[tid, i]) == (16 * w + g + 8 * (e >> 1), 8 * j + 2 * t + (e & 1))
    cells = {tuple(x) for x in table.reshape(-1, 2)}
    assert cells == {(r, c) for r in range(64) for c in range(n)}


@pytest.mark.sim
def test_acc_elem_in_a_kernel_reads_the_table():
    n = 16

    @cuda.jit
    def where(out):
        tid = cuda.threadIdx.x
        for i in range(n // 2):
            r, c = wg.acc_elem(tid, i)
            out[tid, i, 0] = r
            out[tid, i, 1] = c

    out = np.zeros((128, n // 2, 2), np.int64)
    where[1, 128](out)
    np.testing.assert_array_equal(out, wg.acc_table(n))


def test_shapes_outside_the_instruction_are_refused():
    for bad in (0, 4, 12, 264):
        with pytest.raises(ValueError, match="multiple of 8 from 8 to 256"):
            wg.op("bf16", bad)
    with pytest.raises(ValueError, match="one of bf16, f16, e4m3"):
        wg.op("e5m2", 8)
