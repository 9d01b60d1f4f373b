"""Asynchronous copies (``common/cp_async.py``) in the simulator, and on a
GPU with LEVERCTL_TEST_DEVICE=gpu: a multi-stage staging loop reads what it
should at odd sizes (zero-filled past the end), a wait lands exactly the
groups it waits for, and a loop that forgets its wait reads stale data, so
a check over it fails. Under the memory tracer each copy is one 16-byte
global load and one 16-byte shared store."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from numba import config, cuda

from leverctl_kernels.common import cp_async as ca
from leverctl_kernels.common import swizzle as sw

SIM = bool(config.ENABLE_CUDASIM)
STAGES = 3


@lru_cache(maxsize=None)
def staged_sum(wait: bool):
    """Block ``b`` sums column ``t`` (of 64 uint32) over ``nrows`` rows,
    eight rows a stage, STAGES stages in flight through a swizzled tile;
    ``wait=False`` leaves out the wait (the deliberate bug)."""
    words = STAGES * 8 * 64
    in_flight = STAGES - 1

    @cuda.jit
    def k(out, x, nrows):
        s = cuda.shared.array(words, np.uint32)
        t = cuda.threadIdx.x  # 128 threads: 8 rows x 16 chunks of 16 bytes
        r, c = t >> 4, t & 15
        for i in range(t, words, 128):
            s[i] = 0xDEAD
        cuda.syncthreads()
        stages = (nrows + 7) // 8
        for st in range(STAGES - 1):
            row = st * 8 + r
            ok = row < nrows
            dst = st * 2048 + (c >> 3) * 1024 + sw.sw128(r * 128 + (c & 7) * 16)
            ca.cp_async_16(s, dst, x, (row if ok else 0) * 64 + c * 4, 16 if ok else 0)
            ca.cp_async_commit()
        acc0 = np.uint32(0)
        acc1 = np.uint32(0)
        for st in range(stages):
            nxt = st + STAGES - 1
            row = nxt * 8 + r
            ok = row < nrows
            dst = (nxt % STAGES) * 2048 + (c >> 3) * 1024 + sw.sw128(r * 128 + (c & 7) * 16)
            ca.cp_async_16(s, dst, x, (row if ok else 0) * 64 + c * 4, 16 if ok else 0)
            ca.cp_async_commit()
            if wait:
                ca.cp_async_wait(in_flight)
            cuda.syncthreads()
            if t < 64:  # column t of the stage's eight rows, through the swizzle
                base = (st % STAGES) * 2048 + ((t * 4) >> 7) * 1024
                for rr in range(8):
                    off = base + sw.sw128(rr * 128 + ((t * 4) & 127))
                    v = s[off // 4]
                    if rr % 2 == 0:
                        acc0 += v
                    else:
                        acc1 += v
            cuda.syncthreads()
        ca.cp_async_wait_all()
        if t < 64:
            out[t] = acc0 + acc1

    return k


@pytest.mark.parametrize("nrows", [1, 8, 13, 37])
def test_a_staged_loop_reads_every_row_once_and_zeros_past_the_end(nrows):
    x = np.random.default_rng(nrows).integers(0, 1000, size=(nrows, 64), dtype=np.uint32)
    out = np.zeros(64, np.uint32)
    staged_sum(True)[1, 128](out, x.reshape(-1), np.int32(nrows))
    np.testing.assert_array_equal(out, x.sum(axis=0, dtype=np.uint32))


@pytest.mark.skipif(not SIM, reason="on a GPU a missing wait races: it may read the right data by luck")
def test_a_loop_without_its_wait_reads_stale_data_and_fails_the_check():
    x = np.arange(37 * 64, dtype=np.uint32).reshape(37, 64)
    out = np.zeros(64, np.uint32)
    staged_sum(False)[1, 128](out, x.reshape(-1), np.int32(37))
    assert not np.array_equal(out, x.sum(axis=0, dtype=np.uint32))


@cuda.jit
def two_groups(out, x):
    """Group 1 fills a, group 2 fills b; wait_group 1 lands group 1 only."""
    a = cuda.shared.array(4, np.uint32)
    b = cuda.shared.array(4, np.uint32)
    if cuda.threadIdx.x == 0:
        for i in range(4):
            a[i] = 7
            b[i] = 7
        ca.cp_async_16(a, 0, x, 0, 16)
        ca.cp_async_commit()
        ca.cp_async_16(b, 0, x, 4, 12)  # 12 bytes read, the last word zero-filled
        ca.cp_async_commit()
        ca.cp_async_wait(1)
        for i in range(4):
            out[0, i] = a[i]
            out[1, i] = b[i]
        ca.cp_async_wait(0)
        for i in range(4):
            out[2, i] = b[i]


@pytest.mark.skipif(not SIM, reason="on a GPU the newer group may have landed already")
def test_a_wait_lands_the_groups_it_waits_for_and_no_other():
    x = np.arange(10, 18, dtype=np.uint32)
    out = np.zeros((3, 4), np.uint32)
    two_groups[1, 1](out, x)
    np.testing.assert_array_equal(out, [[10, 11, 12, 13], [7, 7, 7, 7], [14, 15, 16, 0]])


@cuda.jit
def misaligned(x):
    s = cuda.shared.array(8, np.uint32)
    ca.cp_async_16(s, 8, x, 0, 16)


@pytest.mark.skipif(not SIM, reason="the twin checks what the hardware assumes")
def test_a_copy_to_an_unaligned_address_is_refused():
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        misaligned[1, 1](np.zeros(8, np.uint32))


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="the memory tracer runs in the simulator")
def test_the_tracer_sees_one_16_byte_load_and_store_per_copy():
    from leverctl.profile import memtrace as mt

    x = np.arange(16 * 64, dtype=np.uint32).reshape(16, 64)
    out = np.zeros(64, np.uint32)
    with mt.trace() as t:
        staged_sum(True)[1, 128](out, x.reshape(-1), np.int32(16))
    p = mt.summarize(t)
    loads = [r for r in p.sites if r.space == "global" and r.kind == "load"]
    stores = [r for r in p.sites if r.space == "shared" and r.kind == "store" and r.bytes % 16 == 0 and r.accesses]
    assert loads and all(r.bytes == 16 * r.accesses for r in loads)
    full = [r for r in loads if r.efficiency == 1.0]
    assert full, [r.to_json() for r in loads]  # a warp's 32 x 16 bytes: four whole 128-byte lines
    copied = [r for r in stores if r.site.startswith("kernels/common/cp_async.py")]
    assert copied and all(r.ways == 1 for r in copied), [r.to_json() for r in copied]
