"""The 128-byte swizzle (``common/swizzle.py``): the address function is
CuTe's ``Swizzle<3, 4, 3>`` on byte offsets (written here from CuTe's
definition of ``Swizzle<B, M, S>``: XOR bits ``[M, M + B)`` with bits
``[M + S, M + S + B)``), a permutation of each 1024-byte atom that keeps
16-byte chunks whole, and it removes the bank conflicts of a column of
16-byte accesses, as the memory tracer counts them."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config, cuda

from leverctl_kernels.common import swizzle as sw
from leverctl_kernels.common import wgmma

SIM = bool(config.ENABLE_CUDASIM)


def cute_swizzle(b: int, m: int, s: int):
    """CuTe's ``Swizzle<B, M, S>`` functor, from its definition: the B bits
    at ``M + S`` (the "yyy" mask) shifted down by S onto the B bits at M."""
    yyy = ((1 << b) - 1) << (m + s)

    def apply(offset):
        offset = np.asarray(offset)
        return offset ^ ((offset & yyy) >> s)

    return apply


def test_the_address_function_is_cutes_swizzle_3_4_3_on_byte_offsets():
    offs = np.arange(1 << 16)
    np.testing.assert_array_equal(sw.sw128_np(offs), cute_swizzle(3, 4, 3)(offs))
    assert not np.array_equal(sw.sw128_np(offs), cute_swizzle(2, 4, 3)(offs))  # the comparison can fail


def test_each_atom_is_permuted_with_rows_and_16_byte_chunks_kept_whole():
    offs = np.arange(4 * sw.ATOM_BYTES)
    got = sw.sw128_np(offs)
    for a in range(4):
        atom = got[a * 1024 : (a + 1) * 1024]
        assert sorted(atom) == list(range(a * 1024, (a + 1) * 1024))
    assert np.array_equal(got >> 7, offs >> 7)  # a row stays in its row
    assert np.array_equal(got & 15, offs & 15)  # bytes stay in their chunk, in order
    chunk, row = (offs >> 4) & 7, (offs >> 7) & 7
    assert np.array_equal((got >> 4) & 7, chunk ^ row)


def test_kmajor_offset_stacks_128_byte_k_blocks_of_all_rows():
    rows = 16
    r, kb = np.meshgrid(np.arange(rows), np.arange(256), indexing="ij")
    off = sw.kmajor_offset_np(r, kb, rows)
    assert sorted(off.reshape(-1)) == list(range(rows * 256))
    assert off[3, 130] == sw.sw128_np(rows * 128 + 3 * 128 + 2)


@cuda.jit
def column_store(out, swizzled):
    """Lane ``l`` stores 16 bytes at chunk 0 of row ``l`` of a 32 x 128-byte
    tile: a column, as staging a K-major operand or an ldmatrix makes."""
    s = cuda.shared.array(32 * 32, np.uint32)
    lane = cuda.threadIdx.x
    for i in range(lane, 1024, 32):
        s[i] = 0
    cuda.syncthreads()
    off = lane * 128
    if swizzled:
        off = sw.sw128(off)
    wgmma.st_shared_v4(wgmma.smem_addr(s) + off, lane, lane, lane, lane)
    cuda.syncthreads()
    for i in range(lane, 1024, 32):
        out[i] = s[i]


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="the memory tracer runs in the simulator")
@pytest.mark.parametrize(("swizzled", "ways"), [(False, 8), (True, 1)])
def test_a_column_of_16_byte_accesses_conflicts_8_way_unswizzled_and_not_at_all_swizzled(swizzled, ways):
    from leverctl.profile import memtrace as mt

    out = np.zeros(1024, np.uint32)
    with mt.trace() as t:
        column_store[1, 32](out, swizzled)
    p = mt.summarize(t)
    (r,) = [r for r in p.sites if r.space == "shared" and r.kind == "store" and r.bytes == 512]
    assert (r.ways, r.ideal_wavefronts) == (ways, 4)
    assert r.wavefronts == 4 * ways
    rows = out.reshape(32, 32)
    for lane in range(32):
        chunk = (lane & 7) if swizzled else 0
        assert list(rows[lane, 4 * chunk : 4 * chunk + 4]) == [lane] * 4


# ── wgmma reading 128-byte-swizzled tiles (descriptor mode 1) ────────────────


def _sw_kernel(n: int, swizzled_staging: bool):
    """One warpgroup: A (64 x 64 bf16) and Bt (n x 64) staged K-major into
    128-byte-swizzled tiles (or, the deliberate bug, unswizzled rows), then
    four m64nNk16 along K through mode-1 descriptors (SBO 1024, the start
    address stepping 32 bytes)."""
    from leverctl_kernels.common import swizzle as swz

    mma_op, zero, store = wgmma.op("bf16", n), wgmma.zeros(n), wgmma.make_store(n)
    align = swz.SMEM_ALIGN  # 1024: the hardware swizzles absolute addresses
    b_words = n * 64  # a closure constant: a shared array's size must be one

    @cuda.jit
    def k(A, Bt, D):
        a_s = cuda.shared.array(64 * 64, np.uint16, alignment=align) if align else cuda.shared.array(4096, np.uint16)
        b_s = cuda.shared.array(b_words, np.uint16, alignment=align) if align else cuda.shared.array(b_words, np.uint16)
        t = cuda.threadIdx.x
        for i in range(t, 64 * 64, 128):
            r, c = i // 64, i % 64
            off = swz.kmajor_offset(r, 2 * c, 64) if swizzled_staging else r * 128 + 2 * c
            a_s[off // 2] = A[r, c]
        for i in range(t, n * 64, 128):
            r, c = i // 64, i % 64
            off = swz.kmajor_offset(r, 2 * c, n) if swizzled_staging else r * 128 + 2 * c
            b_s[off // 2] = Bt[r, c]
        wgmma.fence_proxy_async()
        cuda.syncthreads()
        acc = zero()
        wgmma.wgmma_fence()
        for ks in range(4):
            da = wgmma.make_desc(wgmma.smem_addr(a_s) + 32 * ks, 16, swz.SBO, wgmma.SWIZZLE_128B)
            db = wgmma.make_desc(wgmma.smem_addr(b_s) + 32 * ks, 16, swz.SBO, wgmma.SWIZZLE_128B)
            acc = mma_op(da, db, acc, ks, 1, 1, 0, 0)
        wgmma.wgmma_commit_group()
        acc = wgmma.wait_acc(0, acc)
        store(D, 64, n, 0, 0, acc)

    return k


def _bf16_inputs(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from leverctl_kernels.common import bits

    x = np.random.default_rng(seed).standard_normal((rows, 64)).astype(np.float32)
    b = bits.f32_to_bf16_np(x)
    return b, bits.bf16_to_f32_np(b).astype(np.float64)


@pytest.mark.sim
@pytest.mark.parametrize("n", [8, 64, 128])
def test_wgmma_reads_128_byte_swizzled_tiles_through_mode_1_descriptors(n):
    (A, a), (Bt, b) = _bf16_inputs(64, 1), _bf16_inputs(n, 2)
    D = cuda.to_device(np.full((64, n), np.nan, np.float32))
    _sw_kernel(n, True)[1, 128](cuda.to_device(A), cuda.to_device(Bt), D)
    got, ref = D.copy_to_host(), a @ b.T
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.sim
def test_a_tile_staged_without_the_swizzle_fails_the_check():
    (A, a), (Bt, b) = _bf16_inputs(64, 1), _bf16_inputs(64, 2)
    D = cuda.to_device(np.full((64, 64), np.nan, np.float32))
    _sw_kernel(64, False)[1, 128](cuda.to_device(A), cuda.to_device(Bt), D)
    got, ref = D.copy_to_host(), a @ b.T
    assert np.abs(got - ref).max() > 0.1 * np.abs(ref).max()
