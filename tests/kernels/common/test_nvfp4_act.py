"""The NVFP4 activation encoder (``common/nvfp4_act.py``) in the simulator:
fp16 and float32 rows, C-contiguous and 16-byte aligned (the 16-byte loads),
unaligned (the kernel's own fallback) and strided (the launcher's), at row
lengths whose 16-byte loads end inside a warp's step, all write the host's
bytes, scales and tensor scale (``naive.quantize_nvfp4``). A wide path that
drops each row's last 16 bytes fails that comparison; under the memory
tracer the wide path's loads are whole sectors, 16 bytes a lane."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config
from row_layouts import odd_layouts

from leverctl_kernels.common import bits, nvfp4_act

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the simulator's kernels")


def _host(x):
    x = np.asarray(x, np.float32)
    amax = np.float32(np.abs(x).max())
    ts = amax / np.float32(bits.E4M3_MAX * bits.E2M1_MAX) if amax > 0 else np.float32(1)
    return bits.nvfp4_encode_np(x, tensor_scale=ts)


def _encode(a, fault: str = ""):
    m, k = a.shape
    packed = np.zeros((m, k // 2), np.uint8)
    scales = np.zeros((m, k // bits.NVFP4_BLOCK), np.uint8)
    ts = np.zeros(1, np.float32)
    rowmax = np.zeros(m, np.float32)
    nvfp4_act.launcher(fault)(packed, scales, ts, rowmax, a)
    return packed, scales, ts, rowmax


def _rows(m, k, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * rng.uniform(0.01, 40.0, (m, 1))).astype(dtype)
    a[0, :16] = 0  # an all-zero block: scale code 0, its codes 0
    return a


def _same(a, got):
    packed, scales, ts, rowmax = got
    want = _host(a)
    return (
        np.array_equal(packed, want[0])
        and np.array_equal(scales, want[1])
        and ts.view(np.uint32)[0] == np.float32(want[2]).view(np.uint32)
        and np.array_equal(rowmax, np.abs(a.astype(np.float32)).max(axis=1))
    )


@pytest.mark.parametrize(
    "m,k,dtype",
    [(5, 48, np.float16), (6, 1040, np.float16), (3, 16, np.float16), (5, 48, np.float32), (4, 560, np.float32)],
    ids=["f16-k48", "f16-k1040", "f16-k16", "f32-k48", "f32-k560"],
)
def test_the_wide_encoder_writes_the_hosts_bytes_scales_and_tensor_scale(m, k, dtype):
    a = _rows(m, k, dtype, seed=k)
    assert _same(a, _encode(a))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_rows_not_16_byte_aligned_or_strided_take_the_element_loads_and_agree(dtype):
    unaligned, strided, host = odd_layouts(_rows(5, 48 * 2 + 8, dtype, seed=3), 48, 8)
    assert _same(unaligned.copy_to_host(), _encode(unaligned))
    assert _same(host, _encode(strided))


@pytest.mark.parametrize("k", [48, 1040])
def test_a_wide_encoder_that_drops_each_rows_last_16_bytes_fails(k):
    a = _rows(4, k, np.float16, seed=k)
    got = _encode(a, fault="tail_dropped")
    assert not _same(a, got)
    want = _host(a)
    assert np.array_equal(got[0][:, : k // 2 - 8], want[0][:, : k // 2 - 8])  # all but the last block of 16


def test_other_element_types_are_refused():
    a = np.ones((2, 32), np.float64)
    with pytest.raises(TypeError, match="fp16 or float32"):
        _encode(a)


def test_the_wide_path_reads_whole_sectors_16_bytes_a_lane():
    from leverctl.profile import memtrace as mt

    a = _rows(4, 512, np.float16, seed=1)
    with mt.trace() as t:
        got = _encode(a)
    assert _same(a, got)
    loads = [r for r in mt.summarize(t).sites if r.space == "global" and r.kind == "load"]
    # both kernels' passes over the rows: one load line of the shared 16-byte loader, a row for each
    # kernel line that reached it
    passes = [r for r in loads if r.bytes >= a.nbytes]
    assert len(passes) == 2 and len({r.site for r in passes}) == 1, [r.to_json() for r in passes]
    for rows in passes:
        assert rows.bytes == a.nbytes and rows.wide_bytes == rows.bytes, rows.to_json()
        assert rows.efficiency == 1.0, rows.to_json()
    stores = [r for r in mt.summarize(t).sites if r.space == "global" and r.kind == "store"]
    codes = max(stores, key=lambda r: r.bytes)
    assert codes.bytes == a.size // 2 and codes.efficiency == 1.0, codes.to_json()
