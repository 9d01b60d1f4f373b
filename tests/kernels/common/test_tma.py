"""TMA copies and mbarriers (``common/tma.py``) in the simulator, and on a
GPU with LEVERCTL_TEST_DEVICE=gpu: a box lands 128-byte swizzled exactly
where ``swizzle.sw128`` (CuTe's ``Swizzle<3,4,3>``, the layout wgmma's
mode-1 descriptors read) puts it, zeros past the tensor's edges, one
barrier reused phase after phase; a reader that skips the wait reads
stale data and one whose map has the wrong swizzle reads a permutation,
so the check fails on both. The twin refuses a phase whose copies do not
bring the bytes it expects, and reports a wait no lane can complete; the
driver encoding is asked for the map the kernels read."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from numba import config, cuda, uint32

from leverctl_kernels.common import simwarp, tma
from leverctl_kernels.common import swizzle as sw
from leverctl_kernels.common.smem import smem_addr

SIM = bool(config.ENABLE_CUDASIM)
K_ELEMS = 64  # a box row: 64 bf16, one swizzle atom's 128 bytes
WORDS = K_ELEMS // 2


@lru_cache(maxsize=None)
def box_reader(box_rows: int, wait: bool = True, tx_extra: int = 0):
    """Block of 128 threads: ``n`` boxes of ``box_rows`` rows, box ``i`` at
    element ``c0`` of row ``c1 + i * box_rows``, each by TMA into the same
    1024-byte aligned slot on one barrier (phase ``i``), read back through
    the 128-byte swizzle into ``out[i]`` (words, unswizzled). ``wait`` False
    skips the wait (the deliberate bug); ``tx_extra`` arms the barrier for
    that many bytes more than the box brings."""
    box_bytes = box_rows * 128
    box_words = box_bytes // 4

    @cuda.jit
    def k(out, x, tm, c0, c1, n):
        s = cuda.shared.array(0, uint32)
        base = smem_addr(s)
        pad = (1024 - (base & 1023)) & 1023
        bar = base + pad + box_bytes
        t = cuda.threadIdx.x
        if t == 0:
            tma.tensormap_acquire(tm, 0)
            tma.mbar_init(bar, 1)
            tma.mbar_fence_init()
        cuda.syncthreads()
        for i in range(n):
            if t == 0:
                tma.mbar_expect_tx(bar, box_bytes + tx_extra)
                tma.load_2d(base + pad, tm, 0, x, c0, c1 + i * box_rows, bar)
            if wait:
                tma.mbar_wait(bar, i & 1)
            cuda.syncthreads()
            for w in range(t, box_words, 128):
                r = w >> 5
                q = w & 31
                at = sw.sw128(r * 128 + q * 4)  # the byte the swizzle put word q of row r at
                out[i, r, q] = s[(pad + at) >> 2]
            cuda.syncthreads()  # every read of the slot done before the next box lands

    return k


def _bf16_rows(rows: int, k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 1 << 16, (rows, k), dtype=np.uint64).astype(np.uint16)


def _want(x16: np.ndarray, c0: int, c1: int, box_rows: int, n: int) -> np.ndarray:
    """Boxes of ``x16`` with zeros outside it, as words: what TMA must bring."""
    out = np.zeros((n, box_rows, K_ELEMS), np.uint16)
    for i in range(n):
        for r in range(box_rows):
            g = c1 + i * box_rows + r
            if 0 <= g < x16.shape[0]:
                lo, hi = max(c0, 0), min(c0 + K_ELEMS, x16.shape[1])
                if lo < hi:
                    out[i, r, lo - c0 : hi - c0] = x16[g, lo:hi]
    return out.view(np.uint32)


def _run(x16, box_rows, c0, c1, n, swizzle=tma.SWIZZLE_128B, **kw):
    x32 = cuda.to_device(np.ascontiguousarray(x16).view(np.uint32))
    tm = tma.device_maps([tma.encode_2d(x32, "bf16", box_rows, K_ELEMS, swizzle)])
    out = cuda.to_device(np.zeros((n, box_rows, WORDS), np.uint32))
    box_reader(box_rows, **kw)[1, 128, 0, box_rows * 128 + 1024 + 16](out, x32, tm, c0, c1, n)
    return out.copy_to_host()


@pytest.mark.sim
@pytest.mark.parametrize(
    "rows, k, box_rows, c0, c1, n",
    [
        (64, 128, 64, 64, 0, 1),  # inside: the second 64 of K
        (37, 72, 16, 64, 0, 3),  # K ends 8 elements into the box; rows end inside the third box
        (20, 64, 8, 0, 5, 4),  # rows past the end from the second box on: whole boxes of zeros
        (24, 200, 32, 192, -8, 2),  # a box starting above the tensor and ending past K
    ],
)
def test_boxes_land_swizzled_with_zeros_past_the_edges_phase_after_phase(rows, k, box_rows, c0, c1, n):
    x16 = _bf16_rows(rows, k)
    assert np.array_equal(_run(x16, box_rows, c0, c1, n), _want(x16, c0, c1, box_rows, n))


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="on a GPU a missing wait races and may read right by luck")
def test_a_reader_that_skips_the_wait_reads_stale_data():
    x16 = _bf16_rows(32, 64)
    assert not np.array_equal(_run(x16, 16, 0, 0, 2, wait=False), _want(x16, 0, 0, 16, 2))


@pytest.mark.sim
def test_a_map_with_the_wrong_swizzle_fails_the_check():
    x16 = _bf16_rows(32, 64, seed=3)
    got = _run(x16, 16, 0, 0, 2, swizzle=tma.SWIZZLE_NONE)
    want = _want(x16, 0, 0, 16, 2)
    assert not np.array_equal(got, want)
    assert np.array_equal(np.sort(got.reshape(-1)), np.sort(want.reshape(-1)))  # the same words, misplaced


@pytest.mark.skipif(not SIM, reason="the twin's own placement")
def test_the_twin_places_a_box_where_sw128_says():
    """Each 16-byte chunk of a 64-row box at the byte ``sw.sw128`` gives its
    unswizzled offset (``test_swizzle`` holds sw128 to CuTe's Swizzle<3,4,3>)."""
    rows = 64
    x = np.arange(rows * 32, dtype=np.uint32).reshape(rows, 32)  # word value = its unswizzled index
    got = _run(x.view(np.uint16), rows, 0, 0, 1)[0]  # read back through sw128: the identity if placed so
    assert np.array_equal(got, x)


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="the twin checks what the hardware would hang or corrupt on")
def test_a_phase_armed_for_more_bytes_than_its_copies_bring_is_refused():
    with pytest.raises(ValueError, match="expected 2064 bytes, its copies brought 2048"):
        _run(_bf16_rows(16, 64), 16, 0, 0, 1, tx_extra=16)


@cuda.jit
def _never_armed(out):
    s = cuda.shared.array(0, uint32)
    bar = smem_addr(s)
    if cuda.threadIdx.x == 0:
        tma.mbar_init(bar, 1)
    cuda.syncthreads()
    tma.mbar_wait(bar, 0)  # nobody arrives: the phase never completes
    out[0] = 1


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="on a GPU this hangs")
def test_a_wait_no_lane_can_complete_is_reported_as_a_deadlock():
    with pytest.raises(simwarp.WarpSyncError, match="polls the phase of parity 0 of the mbarrier"):
        _never_armed[1, 64, 0, 64](cuda.to_device(np.zeros(1, np.int32)))


def test_maps_outside_the_limits_are_refused_before_encoding():
    x = np.zeros((8, 32), np.uint32)
    with pytest.raises(ValueError, match="each side 1..256"):
        tma.encode_2d(x, "bf16", 257, K_ELEMS)
    with pytest.raises(ValueError, match="rows are 128 bytes"):
        tma.encode_2d(x, "bf16", 8, 32)
    with pytest.raises(ValueError, match="a multiple of 16"):
        tma.encode_2d(np.zeros((8, 3), np.uint32), "bf16", 8, 6, tma.SWIZZLE_NONE)
    with pytest.raises(ValueError, match="one of"):
        tma.encode_2d(x, "f32", 8, 32)
    with pytest.raises(ValueError, match="C-contiguous rows only"):  # every other row: the map would read them all
        tma.encode_2d(np.zeros((16, 32), np.uint32)[::2], "bf16", 8, K_ELEMS)


class _Binding:
    """A stand-in for numba-cuda's driver binding: records the encode call."""

    class CUtensorMapDataType:
        CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = "BF16"
        CU_TENSOR_MAP_DATA_TYPE_UINT8 = "U8"
        CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = "F16"

    class CUtensorMapInterleave:
        CU_TENSOR_MAP_INTERLEAVE_NONE = "no-interleave"

    class CUtensorMapL2promotion:
        CU_TENSOR_MAP_L2_PROMOTION_L2_128B = "l2-128"

    class CUtensorMapFloatOOBfill:
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = "zeros"

    CUtensorMapSwizzle = staticmethod(lambda v: f"swizzle-{v}")
    cuuint64_t = staticmethod(lambda v: ("u64", v))
    cuuint32_t = staticmethod(lambda v: ("u32", v))

    def __init__(self, err=0):
        self.err, self.calls = err, []

    def cuTensorMapEncodeTiled(self, *args):
        self.calls.append(args)

        class Map:
            opaque = list(range(16))

        return self.err, Map()


def test_the_driver_is_asked_for_the_map_the_kernels_read():
    b = _Binding()
    got = tma._driver_encode(0x7F0000001000, "bf16", 300, 4096, 8192, 64, 64, tma.SWIZZLE_128B, binding=b)
    assert np.array_equal(got, np.arange(16, dtype=np.uint64))
    (args,) = b.calls
    # rank 2, innermost first: 4096 elements a row, 300 rows, rows 8192 bytes apart; a box of 64 x 64
    assert args == (
        "BF16",
        2,
        0x7F0000001000,
        [("u64", 4096), ("u64", 300)],
        [("u64", 8192)],
        [("u32", 64), ("u32", 64)],
        [("u32", 1), ("u32", 1)],
        "no-interleave",
        "swizzle-3",
        "l2-128",
        "zeros",
    )
    with pytest.raises(RuntimeError, match=r"cuTensorMapEncodeTiled failed \(1\): e4m3 16 x 128"):
        tma._driver_encode(0x1000, "e4m3", 16, 128, 128, 16, 128, tma.SWIZZLE_128B, binding=_Binding(err=1))


@cuda.jit
def _lagging_reader(out, x, tm):
    """Thread 0 copies box 0 (phase 0), waits for it, then copies box 1 into
    the same slot (phase 1); only then does thread 1 wait for phase 0 and
    read the slot's first word."""
    s = cuda.shared.array(0, uint32)
    base = smem_addr(s)
    pad = (1024 - (base & 1023)) & 1023
    bar = base + pad + 1024
    t = cuda.threadIdx.x
    if t == 0:
        tma.mbar_init(bar, 1)
        tma.mbar_expect_tx(bar, 1024)
        tma.load_2d(base + pad, tm, 0, x, 0, 0, bar)
        tma.mbar_wait(bar, 0)
        out[0] = s[pad >> 2]
        tma.mbar_expect_tx(bar, 1024)
        tma.load_2d(base + pad, tm, 0, x, 0, 8, bar)
    cuda.syncthreads()
    if t == 1:
        tma.mbar_wait(bar, 0)  # phase 0 is long complete: this lands nothing
        out[1] = s[pad >> 2]


@pytest.mark.sim
@pytest.mark.skipif(not SIM, reason="on a GPU the second box may land at any time after its copy")
def test_a_wait_on_a_completed_phase_lands_nothing_of_the_next():
    x = np.arange(16 * 32, dtype=np.uint32).reshape(16, 32)
    x32 = cuda.to_device(x)
    tm = tma.device_maps([tma.encode_2d(x32, "bf16", 8, K_ELEMS)])
    out = cuda.to_device(np.zeros(2, np.uint32))
    _lagging_reader[1, 32, 0, 2048 + 16](out, x32, tm)
    assert list(out.copy_to_host()) == [0, 0]  # box 1 (word 256 first) has not landed for thread 1


def test_the_drivers_own_binding_takes_the_arguments_as_given():
    """numba-cuda's binding (cuda.bindings) refuses a plain int where its
    lists want ``cuuint64_t``/``cuuint32_t``: the call must get as far as
    the driver (here, without one, the driver's absence; on a GPU, a map)."""
    driver = pytest.importorskip("cuda.bindings.driver")
    try:
        got = tma._driver_encode(0x7F0000001000, "bf16", 300, 4096, 8192, 64, 64, tma.SWIZZLE_128B, binding=driver)
    except TypeError as e:  # the arguments' types: what this test is for
        pytest.fail(f"the binding refused the arguments: {e}")
    except Exception as e:  # noqa: BLE001 (no driver here: any error from loading or calling it)
        assert "driver" in str(e).lower() or "cuTensorMapEncodeTiled failed" in str(e), e
    else:
        assert got.dtype == np.uint64 and got.shape == (16,)
