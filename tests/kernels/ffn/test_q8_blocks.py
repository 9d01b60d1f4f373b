"""The Q4_K MMQ arm's activation quantiser (``ffn/prefill/q8_blocks.py``:
int8 per block of 32, each block's scale and scaled sum) in the simulator:
fp16 and float32 rows, C-contiguous (the 16-byte loads, a block the 4 or 8
neighbouring lanes'), not 16-byte aligned (the kernel's own element loads)
and strided (the element kernel), write the host's codes, scales and sums
bit for bit (``naive.quantize_blocks_q8``), an all-zero block included. A
wide path whose block sums miss their last shuffle fails that comparison;
under the memory tracer the wide path's loads and code stores are whole
sectors, its loads 16 bytes a lane."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config
from row_layouts import odd_layouts

from leverctl_kernels.ffn.prefill import naive, q8_blocks

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the simulator's kernels")


def _rows(m, k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * rng.uniform(0.01, 40.0, (m, 1))).astype(dtype)
    a[0, :32] = 0  # an all-zero block: d 0, codes 0
    return a


def _quantise(a, fault=""):
    m, k = a.shape
    aq = np.zeros((m, k), np.int8)
    ds = np.zeros((m, k // q8_blocks.BLOCK), np.uint64)
    q8_blocks.launcher(fault)(aq, ds, a)
    return (aq, *q8_blocks.split(ds))


def _same(a, got):
    want = naive.quantize_blocks_q8(np.asarray(a))
    return np.array_equal(got[0], want[0]) and all(
        np.array_equal(g.view(np.uint32), w.view(np.uint32)) for g, w in zip(got[1:], want[1:])
    )


@pytest.mark.parametrize(
    "m,k,dtype",
    [(5, 256, np.float16), (3, 32, np.float16), (4, 2080, np.float16), (5, 96, np.float32), (3, 544, np.float32)],
    ids=["f16-k256", "f16-k32", "f16-k2080", "f32-k96", "f32-k544"],
)
def test_the_wide_quantiser_writes_the_hosts_blocks(m, k, dtype):
    a = _rows(m, k, dtype, seed=k)
    assert _same(a, _quantise(a))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_unaligned_and_strided_rows_take_the_element_loads_and_agree(dtype):
    unaligned, strided, host = odd_layouts(_rows(5, 64 * 2 + 32, dtype, seed=3), 64, 32)
    assert _same(unaligned.copy_to_host(), _quantise(unaligned))
    assert _same(host, _quantise(strided))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_a_wide_quantiser_whose_block_sums_miss_a_shuffle_fails(dtype):
    a = _rows(4, 256, dtype, seed=1)
    got = _quantise(a, fault="sum_short")
    assert not _same(a, got)
    want = naive.quantize_blocks_q8(a)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])  # codes and scales right, sums not
    assert not np.array_equal(got[2], want[2])


def test_the_wide_path_reads_and_writes_whole_sectors_16_bytes_a_lane():
    from leverctl.profile import memtrace as mt

    a = _rows(4, 512, np.float16, seed=1)
    with mt.trace() as t:
        got = _quantise(a)
    assert _same(a, got)
    sites = mt.summarize(t).sites
    (rows,) = [r for r in sites if r.space == "global" and r.kind == "load" and r.bytes >= a.nbytes]
    assert rows.bytes == a.nbytes and rows.wide_bytes == rows.bytes and rows.efficiency == 1.0, rows.to_json()
    stores = [r for r in sites if r.space == "global" and r.kind == "store"]
    codes = max(stores, key=lambda r: r.bytes)
    assert codes.bytes == a.size and codes.efficiency == 1.0, codes.to_json()
