"""The 16-byte global load (``common/vload.py``) in the simulator: its twin
returns the four words the instruction would, refuses an address the
hardware would fault on (not 16-byte aligned from the allocation's start,
or past the end), ``aligned16`` tells aligned views from unaligned ones,
and under the memory tracer each call is one 16-byte global load: a warp's
32 consecutive loads use every byte of the 16 sectors they touch. The
16-byte store of packed words (``stg_v4``) and the coherent load
(``ld_v4``) likewise, and the 8-byte read-only load (``ldg_v2``). Also
``smem.shared_view``: C-ordered windows of the dynamic shared memory."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config, cuda

from leverctl_kernels.common import vload

pytestmark = pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the simulator twin")


@cuda.jit
def _copy_v4(out, src, first, step=4):
    """Lane ``t`` copies the 16 bytes at element ``first + step t`` of
    ``src`` (``step`` 4: words; 8: fp16 elements) as four words."""
    t = cuda.threadIdx.x
    a, b, c, d = vload.ldg_v4(src, first + step * t)
    out[4 * t] = a
    out[4 * t + 1] = b
    out[4 * t + 2] = c
    out[4 * t + 3] = d


@cuda.jit
def _aligned(out, a):
    out[0] = 1 if vload.aligned16(a) else 0


def test_the_twin_returns_the_four_words_at_the_index():
    src = np.arange(1000, 1000 + 4 * 40, dtype=np.uint32)
    out = np.zeros(4 * 32, np.uint32)
    _copy_v4[1, 32](out, src, 8)
    np.testing.assert_array_equal(out, src[8 : 8 + 128])


def test_an_fp16_array_is_read_eight_elements_a_load_two_a_word_low_half_first():
    src = (np.arange(8 * 40) * 0.25).astype(np.float16)
    out = np.zeros(4 * 32, np.uint32)
    _copy_v4[1, 32](out, src, 16, 8)
    np.testing.assert_array_equal(out, src[16 : 16 + 256].view(np.uint32))
    with pytest.raises(ValueError, match="16-byte aligned"):
        _copy_v4[1, 1](np.zeros(4, np.uint32), src, 4, 8)  # byte 8
    with pytest.raises(IndexError, match="outside"):
        _copy_v4[1, 1](np.zeros(4, np.uint32), src, 8 * 40, 8)


@cuda.jit
def _roll_v4(a, first):
    """Lane ``t`` reads the 16 bytes at fp16 element ``first + 8 t`` by the
    coherent load and writes them back one piece later (an in-place shift)."""
    t = cuda.threadIdx.x
    w0, w1, w2, w3 = vload.ld_v4(a, first + 8 * t)
    cuda.syncthreads()
    vload.stg_v4(a, first + 8 * t + 8, w0, w1, w2, w3)


def test_the_coherent_load_returns_the_words_and_faults_as_the_read_only_one():
    a = (np.arange(8 * 6) * 0.5).astype(np.float16)
    want = a.copy()
    want[16:40] = a[8:32]
    _roll_v4[1, 3](a, 8)
    np.testing.assert_array_equal(a, want)
    with pytest.raises(ValueError, match="ld_v4 twin: .*16-byte aligned"):
        _roll_v4[1, 1](a, 4)
    with pytest.raises(IndexError, match="ld_v4 twin: .*outside"):
        _roll_v4[1, 1](a, 48)


def test_a_2d_array_is_read_by_flat_index():
    src = np.arange(8 * 16, dtype=np.uint32).reshape(8, 16)
    out = np.zeros(4 * 2, np.uint32)
    _copy_v4[1, 2](out, src, 20)  # row 1, words 4..11
    np.testing.assert_array_equal(out, src.reshape(-1)[20:28])


def test_an_address_not_16_byte_aligned_is_refused():
    src = np.arange(64, dtype=np.uint32)
    with pytest.raises(ValueError, match="16-byte aligned"):
        _copy_v4[1, 1](np.zeros(4, np.uint32), src, 2)


def test_a_view_starting_inside_its_allocation_counts_from_the_allocation():
    dev = cuda.to_device(np.arange(68, dtype=np.uint32))
    with pytest.raises(ValueError, match="16-byte aligned"):
        _copy_v4[1, 1](np.zeros(4, np.uint32), dev[1:], 0)  # byte 4 of the allocation
    out = np.zeros(4, np.uint32)
    _copy_v4[1, 1](out, dev[4:], 0)  # byte 16: aligned
    np.testing.assert_array_equal(out, [4, 5, 6, 7])


def test_words_past_the_end_are_refused():
    with pytest.raises(IndexError):
        _copy_v4[1, 1](np.zeros(4, np.uint32), np.arange(6, dtype=np.uint32), 4)


def test_aligned16_tells_views_apart():
    dev = cuda.to_device(np.arange(64, dtype=np.uint32))
    out = np.zeros(1, np.int32)
    for start, want in ((0, 1), (1, 0), (2, 0), (4, 1), (6, 0), (8, 1)):
        _aligned[1, 1](out, dev[start:])
        assert out[0] == want, start
    _aligned[1, 1](out, cuda.to_device(np.arange(64, dtype=np.uint32).reshape(4, 16))[1:])
    assert out[0] == 1  # row 1 of 16 words: byte 64


def test_under_the_tracer_a_call_is_one_16_byte_load():
    from leverctl.profile import memtrace as mt

    src = np.arange(4 * 64, dtype=np.uint32)
    out = np.zeros(4 * 32, np.uint32)
    with mt.trace() as t:
        _copy_v4[1, 32](out, src, 0)
    np.testing.assert_array_equal(out, src[:128])
    p = mt.summarize(t)
    loads = [r for r in p.sites if r.space == "global" and r.kind == "load"]
    assert len(loads) == 1, [r.to_json() for r in loads]
    (ld,) = loads
    assert ld.site.startswith("tests/kernels/common/test_vload.py")  # counted at the caller's line
    assert (ld.instructions, ld.accesses, ld.bytes) == (1, 32, 512)
    assert ld.efficiency == 1.0  # 512 contiguous bytes: 16 whole sectors


@cuda.jit
def _scale_in_place(a, first):
    """Lane ``t`` doubles a[first + 4t .. +3] through the coherent pair."""
    i = first + 4 * cuda.threadIdx.x
    w, x, y, z = vload.ld_f32x4(a, i)
    vload.st_f32x4(a, i, 2 * w, 2 * x, 2 * y, 2 * z)


def test_the_coherent_pair_reads_and_writes_four_floats_in_place():
    a = np.arange(4 * 40, dtype=np.float32).reshape(8, 20)
    want = a.copy()
    want.reshape(-1)[8 : 8 + 4 * 32] *= 2
    _scale_in_place[1, 32](a, 8)
    np.testing.assert_array_equal(a, want)  # a 2-D array by flat index; nothing else touched


def test_the_coherent_pair_refuses_what_the_hardware_would_fault_on():
    with pytest.raises(ValueError, match="16-byte aligned"):
        _scale_in_place[1, 1](np.zeros(16, np.float32), 2)
    with pytest.raises(IndexError, match="outside"):
        _scale_in_place[1, 1](np.zeros(16, np.float32), 16)
    with pytest.raises(TypeError, match="float32"):
        _scale_in_place[1, 1](np.zeros(16, np.int32), 0)


def test_under_the_tracer_the_pair_is_one_16_byte_load_and_one_store_a_lane():
    from leverctl.profile import memtrace as mt

    a = np.ones(4 * 32, np.float32)
    with mt.trace() as t:
        _scale_in_place[1, 32](a, 0)
    assert np.all(a == 2)
    rows = {r.kind: r for r in mt.summarize(t).sites if r.space == "global"}
    for kind in ("load", "store"):
        r = rows[kind]
        assert (r.instructions, r.accesses, r.bytes, r.efficiency) == (1, 32, 512, 1.0), r.to_json()


@cuda.jit
def _copy_fp16_wide(dst, src, first):
    """Lane ``t`` copies eight fp16 at element ``first + 8 t`` of ``src``
    to ``dst``: one 16-byte load, one 16-byte store (``stg_v4``)."""
    i = first + 8 * cuda.threadIdx.x
    a, b, c, d = vload.ldg_v4(src, i)
    vload.stg_v4(dst, i, a, b, c, d)


def test_the_wide_store_writes_eight_fp16_as_loaded_and_refuses_what_would_fault():
    src = (np.arange(8 * 40) * 0.25).astype(np.float16).reshape(10, 32)
    dst = np.zeros_like(src)
    _copy_fp16_wide[1, 32](dst, src, 8)
    want = np.zeros_like(src)
    want.reshape(-1)[8 : 8 + 8 * 32] = src.reshape(-1)[8 : 8 + 8 * 32]
    assert np.array_equal(dst.view(np.uint16), want.view(np.uint16))  # element order kept, nothing else touched
    with pytest.raises(ValueError, match="16-byte aligned"):
        vload.stg_v4(np.zeros(16, np.float16), 4, 1, 2, 3, 4)
    with pytest.raises(IndexError, match="outside"):
        vload.stg_v4(np.zeros(16, np.float16), 16, 1, 2, 3, 4)
    with pytest.raises(TypeError, match="16- or 32-bit"):
        vload.stg_v4(np.zeros(16, np.float64), 0, 1, 2, 3, 4)


def test_under_the_tracer_the_wide_store_is_one_16_byte_store_a_lane():
    from leverctl.profile import memtrace as mt

    src = np.ones(8 * 32, np.float16)
    dst = np.zeros_like(src)
    with mt.trace() as t:
        _copy_fp16_wide[1, 32](dst, src, 0)
    assert np.all(dst == 1)
    (st,) = [r for r in mt.summarize(t).sites if r.space == "global" and r.kind == "store"]
    assert (st.instructions, st.accesses, st.bytes, st.efficiency) == (1, 32, 512, 1.0), st.to_json()


@cuda.jit
def _shared_round_trip(out, src):
    """Lane t: src[4t..] -> shared by st_shared_f32x4, back by ld_shared_f32x4
    from the next lane's slot (so the data crossed lanes through the barrier)."""
    from leverctl_kernels.common import smem

    buf = cuda.shared.array(128, np.float32)
    t = cuda.threadIdx.x
    base = smem.smem_addr(buf)
    w, x, y, z = vload.ld_f32x4(src, 4 * t)
    smem.st_shared_f32x4(base + 16 * t, w, x, y, z)
    cuda.syncthreads()
    n = (t + 1) % 32
    w, x, y, z = smem.ld_shared_f32x4(base + 16 * n)
    vload.st_f32x4(out, 4 * t, w, x, y, z)


def test_shared_float_quads_go_in_and_out_as_stored():
    src = (np.arange(128) * 0.5).astype(np.float32)
    out = np.zeros(128, np.float32)
    _shared_round_trip[1, 32](out, src)
    np.testing.assert_array_equal(out, np.roll(src, -4))


_ALIGN8 = None if config.ENABLE_CUDASIM else 8  # the simulator refuses an alignment (its own are 1024)


@cuda.jit
def _shared_pair_round_trip(out, src):
    """Lane t: src[2t], src[2t + 1] -> shared by st_shared_f32x2 at byte
    8t, then the next lane's pair back as plain float32 loads."""
    from leverctl_kernels.common import smem

    buf = cuda.shared.array(64, np.float32, alignment=_ALIGN8)
    t = cuda.threadIdx.x
    smem.st_shared_f32x2(smem.smem_addr(buf) + 8 * t, src[2 * t], src[2 * t + 1])
    cuda.syncthreads()
    n = (t + 1) % 32
    out[2 * t], out[2 * t + 1] = buf[2 * n], buf[2 * n + 1]


def test_shared_float_pairs_go_in_as_stored():
    src = (np.arange(64) * 0.25 - 3).astype(np.float32)
    out = np.zeros(64, np.float32)
    _shared_pair_round_trip[1, 32](out, src)
    np.testing.assert_array_equal(out, np.roll(src, -2))


@cuda.jit
def _shared_word_round_trip(out, src):
    """:func:`_shared_round_trip` of 32-bit words: st.shared.v4 in, the
    next lane's slot back by ld_shared_v4."""
    from leverctl_kernels.common import smem

    buf = cuda.shared.array(128, np.uint32)
    t = cuda.threadIdx.x
    base = smem.smem_addr(buf)
    smem.st_shared_v4(base + 16 * t, src[4 * t], src[4 * t + 1], src[4 * t + 2], src[4 * t + 3])
    cuda.syncthreads()
    w, x, y, z = smem.ld_shared_v4(base + 16 * ((t + 1) % 32))
    out[4 * t], out[4 * t + 1], out[4 * t + 2], out[4 * t + 3] = w, x, y, z


def test_shared_word_quads_go_in_and_out_as_stored():
    src = (np.arange(128, dtype=np.uint32) * 0x01010101) ^ np.uint32(0x80000001)
    out = np.zeros(128, np.uint32)
    _shared_word_round_trip[1, 32](out, src)
    np.testing.assert_array_equal(out, np.roll(src, -4))


@cuda.jit
def _views_of_dynamic_shared(out):
    """Two ``smem.shared_view``s of the dynamic shared memory: ``[2, 1, 4]``
    from element 0 and ``[3, 4]`` from element 8; lane t writes element t of
    each through its view, then reads the whole memory back flat."""
    from numba import types

    from leverctl_kernels.common import smem

    dyn = cuda.shared.array(0, types.float16)
    a = smem.shared_view(dyn, 0, (2, 1, 4))
    b = smem.shared_view(dyn, 8, (3, 4))
    t = cuda.threadIdx.x
    if t < 8:
        a[t // 4, 0, t % 4] = t + 1
    if t < 12:
        b[t // 4, t % 4] = 100 + t
    cuda.syncthreads()
    out[t] = dyn[t]


def test_shared_views_are_c_ordered_windows_of_the_dynamic_memory():
    out = np.zeros(20, np.float16)
    _views_of_dynamic_shared[1, 20, 0, 40](out)
    want = np.r_[np.arange(1, 9), 100 + np.arange(12)].astype(np.float16)
    np.testing.assert_array_equal(out, want)


@cuda.jit
def _copy_v2(out, src, first, step):
    """Lane ``t`` copies the 8 bytes at element ``first + step t`` as two
    words (``step``: the elements of 8 bytes, 4 fp16 or 8 bytes)."""
    t = cuda.threadIdx.x
    a, b = vload.ldg_v2(src, first + step * t)
    out[2 * t] = a
    out[2 * t + 1] = b


def test_the_8_byte_load_returns_two_words_and_refuses_what_would_fault():
    src = (np.arange(4 * 40) * 0.5).astype(np.float16)
    out = np.zeros(2 * 32, np.uint32)
    _copy_v2[1, 32](out, src, 4, 4)
    np.testing.assert_array_equal(out, src[4 : 4 + 128].view(np.uint32))
    with pytest.raises(ValueError, match="8-byte aligned"):
        _copy_v2[1, 1](np.zeros(2, np.uint32), src, 2, 4)  # byte 4
    with pytest.raises(IndexError, match="outside"):
        _copy_v2[1, 1](np.zeros(2, np.uint32), src, 4 * 40, 4)


def test_under_the_tracer_the_8_byte_load_is_one_access_a_lane():
    from leverctl.profile import memtrace as mt

    src = np.arange(4 * 64, dtype=np.float16)
    out = np.zeros(2 * 32, np.uint32)
    with mt.trace() as t:
        _copy_v2[1, 32](out, src, 0, 4)
    (ld,) = [r for r in mt.summarize(t).sites if r.space == "global" and r.kind == "load"]
    assert (ld.instructions, ld.accesses, ld.bytes, ld.sectors) == (1, 32, 256, 8)


def test_the_8_byte_load_of_bytes_puts_the_first_in_the_low_bits_and_refuses_what_would_fault():
    src = (np.arange(8 * 33) * 7 % 251).astype(np.uint8)
    out = np.zeros(2 * 32, np.uint32)
    _copy_v2[1, 32](out, src, 8, 8)
    np.testing.assert_array_equal(out, src[8 : 8 + 256].view(np.uint32))
    assert out[0] & 0xFF == src[8]
    with pytest.raises(ValueError, match="8-byte aligned"):
        _copy_v2[1, 1](np.zeros(2, np.uint32), src, 4, 8)
    with pytest.raises(IndexError, match="outside"):
        _copy_v2[1, 1](np.zeros(2, np.uint32), src, 8 * 33, 8)


@cuda.jit
def _sizes(out, a16, a32, a8):
    out[0] = vload.elem_bytes(a16)
    out[1] = vload.elem_bytes(a32)
    out[2] = vload.elem_bytes(a8)


def test_elem_bytes_is_each_arrays_element_size():
    out = np.zeros(3, np.int64)
    _sizes[1, 1](out, np.zeros(2, np.float16), np.zeros((2, 2), np.float32), np.zeros(3, np.uint8))
    assert out.tolist() == [2, 4, 1]


@cuda.jit
def _copy_u32(out, src, first, step):
    """Lane ``t`` copies the 4 bytes at element ``first + step t`` as a word."""
    t = cuda.threadIdx.x
    out[t] = vload.ldg_u32(src, first + step * t)


def test_the_4_byte_load_of_bytes_puts_the_first_in_the_low_bits_and_refuses_what_would_fault():
    src = (np.arange(4 * 33) * 7 % 251).astype(np.uint8)
    out = np.zeros(32, np.uint32)
    _copy_u32[1, 32](out, src, 4, 4)
    np.testing.assert_array_equal(out, src[4 : 4 + 128].view(np.uint32))
    assert out[0] & 0xFF == src[4]
    with pytest.raises(ValueError, match="4-byte aligned"):
        _copy_u32[1, 1](np.zeros(1, np.uint32), src, 2, 4)
    with pytest.raises(IndexError, match="outside"):
        _copy_u32[1, 1](np.zeros(1, np.uint32), src, 4 * 33, 4)


def test_under_the_tracer_the_4_byte_load_is_one_access_a_lane():
    from leverctl.profile import memtrace as mt

    src = np.arange(4 * 32, dtype=np.uint8)
    out = np.zeros(32, np.uint32)
    with mt.trace() as t:
        _copy_u32[1, 32](out, src, 0, 4)
    (ld,) = [r for r in mt.summarize(t).sites if r.space == "global" and r.kind == "load"]
    assert (ld.instructions, ld.accesses, ld.bytes, ld.sectors) == (1, 32, 128, 4)
