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
