"""The per-token row quantiser (``common/rowquant.py``) in the simulator,
int8 and E4M3: fp16 and float32 rows, C-contiguous with whole 16-byte
units (the 16-byte loads, a lane's codes one store), not 16-byte aligned
(the kernel's own element loads), strided or of other lengths (the element
kernel), write the host's codes and scales bit for bit
(``naive.quantize_rows_int8`` / ``quantize_rows_e4m3``); an all-zero row
gets scale 0 and zeros. A wide path that drops each row's last 16 bytes
fails that comparison; under the memory tracer the wide path's loads are
whole sectors, 16 bytes a lane, and its stores whole sectors too."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config
from row_layouts import odd_layouts

from leverctl_kernels.common import rowquant
from leverctl_kernels.ffn.prefill import naive

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the simulator's kernels")

OUT = {"int8": np.int8, "e4m3": np.uint8}


def _rows(m, k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * rng.uniform(0.01, 40.0, (m, 1))).astype(dtype)
    a[-1] = 0  # an all-zero row: scale 0, codes 0
    return a


def _quantise(fmt, a, fault=""):
    m, k = a.shape
    aq = np.zeros((m, k), OUT[fmt])
    sa = np.zeros(m, np.float32)
    rowquant.launcher(fmt, fault)(aq, sa, a)
    return aq, sa


def _same(fmt, a, got):
    q, s = getattr(naive, f"quantize_rows_{fmt}")(np.asarray(a))
    aq, sa = got
    return np.array_equal(aq, q) and np.array_equal(sa.view(np.uint32), s.view(np.uint32))


@pytest.mark.parametrize("fmt", ["int8", "e4m3"])
@pytest.mark.parametrize(
    "m,k,dtype",
    [(5, 160, np.float16), (6, 1032, np.float16), (3, 8, np.float16), (5, 164, np.float32), (4, 520, np.float32)],
    ids=["f16-k160", "f16-k1032", "f16-k8", "f32-k164", "f32-k520"],
)
def test_the_wide_quantiser_writes_the_hosts_codes_and_scales(fmt, m, k, dtype):
    a = _rows(m, k, dtype, seed=k)
    assert _same(fmt, a, _quantise(fmt, a))


@pytest.mark.parametrize("fmt", ["int8", "e4m3"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_unaligned_strided_and_odd_length_rows_take_the_element_loads_and_agree(fmt, dtype):
    unaligned, strided, host = odd_layouts(_rows(5, 48 * 2 + 8, dtype, seed=3), 48, 8)
    assert _same(fmt, unaligned.copy_to_host(), _quantise(fmt, unaligned))
    assert _same(fmt, host, _quantise(fmt, strided))
    odd = _rows(3, 50, dtype, seed=5)  # not whole 16-byte units: the element kernel
    assert _same(fmt, odd, _quantise(fmt, odd))


@pytest.mark.parametrize("fmt", ["int8", "e4m3"])
def test_a_wide_quantiser_that_drops_each_rows_last_16_bytes_fails(fmt):
    a = _rows(4, 160, np.float16, seed=1)
    aq, sa = _quantise(fmt, a, fault="tail_dropped")
    assert not _same(fmt, a, (aq, sa))
    q, _s = getattr(naive, f"quantize_rows_{fmt}")(a[:, :152])  # the rows' first 152: what the broken one saw
    assert np.array_equal(aq[:, :152], q)


def test_the_wide_path_reads_and_writes_whole_sectors_16_bytes_a_lane():
    from leverctl.profile import memtrace as mt

    a = _rows(4, 512, np.float16, seed=1)
    with mt.trace() as t:
        got = _quantise("e4m3", a)
    assert _same("e4m3", a, got)
    sites = mt.summarize(t).sites
    loads = [r for r in sites if r.space == "global" and r.kind == "load"]
    # both passes over the rows (the maximum, then the codes): one load line of the shared 16-byte
    # loader, reached from two lines of the kernel, a row each
    passes = [r for r in loads if r.bytes >= a.nbytes]
    assert len(passes) == 2 and len({r.site for r in passes}) == 1, [r.to_json() for r in passes]
    for rows in passes:
        assert rows.bytes == a.nbytes and rows.wide_bytes == rows.bytes, rows.to_json()
        assert rows.efficiency == 1.0, rows.to_json()
    stores = [r for r in sites if r.space == "global" and r.kind == "store"]
    codes = max(stores, key=lambda r: r.bytes)
    assert codes.bytes == a.size and codes.efficiency == 1.0, codes.to_json()
