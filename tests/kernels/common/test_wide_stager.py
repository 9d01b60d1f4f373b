"""The decode tile's wide weight stagers (``wgmma_gemm``'s 16-byte forms
along K) against NumPy, in the simulator, on a tile of 256 rows:

* FP8 (``e4m3_blk_f16``: 16 codes a 16-byte load, each load's 128 x 128
  block scale read once a warp, by lane 0, and shuffled): its loads span
  two 128-row scale blocks, and a stage past K's first block reads the next
  one. A stager that gives every row the first block's scale fails.
* int4 (``int4_f16``: 32 values a 16-byte load, one fp16 group scale of
  128): a stage in K's first group and one in its second. A stager whose
  groups are 256 wide (``group_shift`` 8) fails in the second."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda, uint32

from leverctl_kernels.common import bits, swizzle
from leverctl_kernels.common import wgmma as wg
from leverctl_kernels.common import wgmma_gemm as P

ROWS, K, THREADS = 256, 256, 128


def _stage_kernel(stager):
    fetch, put = stager.device(ROWS, along_k=True)

    @cuda.jit
    def stage(out, b32, bsc, kt):
        smem = cuda.shared.array(ROWS * 32 + 256, uint32)  # one stage of ROWS x 128 bytes, and room to align
        base = wg.smem_addr(smem)
        pad = (swizzle.ATOM_BYTES - (base & (swizzle.ATOM_BYTES - 1))) & (swizzle.ATOM_BYTES - 1)
        tid = cuda.threadIdx.x
        raw = fetch(b32, bsc, ROWS, K, 0, kt, tid)
        put(base + pad, raw, ROWS, K, 0, kt, tid)
        cuda.syncthreads()
        for i in range(tid, ROWS * 32, THREADS):
            out[i] = smem[(pad >> 2) + i]

    return stage


def _staged_int4(stager, kt, rng):
    q = rng.integers(0, 16, (ROWS, K)).astype(np.uint32)
    words = np.zeros((ROWS, K // 8), np.uint32)
    for i in range(8):
        words |= q[:, i::8] << np.uint32(4 * i)
    scales = rng.uniform(0.5, 2.0, (ROWS, K // 128)).astype(np.float16)
    got = _run(stager, words, scales, kt)
    k0 = kt * 64
    vals = (q[:, k0 : k0 + 64].astype(np.float32) - 8) * scales[:, k0 // 128 : k0 // 128 + 1].astype(np.float32)
    return got, vals.astype(np.float16)


def _run(stager, b32, bsc, kt):
    out = cuda.to_device(np.zeros(ROWS * 32, np.uint32))
    _stage_kernel(stager)[1, THREADS](out, cuda.to_device(b32), cuda.to_device(bsc), kt)
    flat = out.copy_to_host().view(np.uint8)
    at = swizzle.sw128_np(np.arange(ROWS)[:, None] * 128 + np.arange(128)[None, :])
    return flat[at].view(np.float16).reshape(ROWS, 64)  # the stage's 64 k of fp16, row by row


def _staged(stager, kt, rng):
    codes = rng.choice([c for c in range(256) if c & 0x7F != 0x7F], (ROWS, K)).astype(np.uint8)
    bsc = rng.uniform(0.5, 2.0, (ROWS // 128, K // 128)).astype(np.float32)
    got = _run(stager, codes.view(np.uint32), bsc, kt)
    k0 = kt * 64
    vals = bits.e4m3_to_f32_np(codes[:, k0 : k0 + 64]) * np.repeat(bsc[:, k0 // 128], 128)[:, None]
    return got, vals.astype(np.float16)


@pytest.mark.sim
@pytest.mark.parametrize("kt", [0, 3])  # K's first 128 x 128 block, and its second
def test_the_wide_fp8_stager_scales_each_slot_by_its_rows_block(kt):
    got, want = _staged(P.stager_of("e4m3_blk_f16", THREADS), kt, np.random.default_rng(kt))
    np.testing.assert_array_equal(got, want)


@pytest.mark.sim
def test_a_wide_fp8_stager_that_reads_one_rows_block_for_all_fails():
    @cuda.jit(device=True, inline="always")
    def first_block(src, bsc, gr, gk, ok, vec):
        w0, w1, w2, w3, _s = P._e4m3_blk_fetch16(src, bsc, gr, gk, ok, vec)
        return w0, w1, w2, w3, bsc[0, gk >> 7]  # every row the first 128 rows' scale

    wide = (2, first_block, P._e4m3_blk_convert_j)
    stager = P.chunk_stager(THREADS, 8, P._e4m3_blk_fetch, P._e4m3_blk_convert, wide)
    got, want = _staged(stager, 0, np.random.default_rng(0))
    assert not np.array_equal(got[128:], want[128:])  # the second block's rows took the first's scale
    np.testing.assert_array_equal(got[:128], want[:128])


@pytest.mark.sim
@pytest.mark.parametrize("kt", [1, 2])  # the last stage of K's first group of 128, the first of its second
def test_the_wide_int4_stager_scales_each_load_by_its_group(kt):
    stager = P.stager_of("int4_f16", THREADS)
    assert stager.wide is not None  # the decode tile's form along K: 16 bytes a load
    got, want = _staged_int4(stager, kt, np.random.default_rng(kt))
    np.testing.assert_array_equal(got, want)


@pytest.mark.sim
def test_a_wide_int4_stager_with_groups_of_256_fails_in_the_second_group():
    got, want = _staged_int4(P._make_int4_f16(THREADS, group_shift=8), 2, np.random.default_rng(2))
    assert not np.array_equal(got, want)
