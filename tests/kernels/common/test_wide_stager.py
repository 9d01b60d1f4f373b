"""The decode tile's wide weight stagers (``wgmma_gemm``'s 16-byte forms
along K) against NumPy, in the simulator, on a tile of 256 rows:

* FP8 (``e4m3_blk_f16``: 16 codes a 16-byte load, a warp's 128 x 128
  block scales loaded eight along K at a time by lanes 0-7 and shuffled
  from lane to lane stage by stage): its loads span two 128-row scale
  blocks, and stages past K's first block, and past its first eight, read
  the next. A stager that gives every row the first block's scale fails.
* int4 (``int4_f16``: 32 values a 16-byte load, one fp16 group scale of
  128): a stage in K's first group and one in its second. A stager whose
  groups are 256 wide (``group_shift`` 8) fails in the second. Where K is
  a multiple of four groups the pair of lanes of a row loads eight groups'
  scales at a window's first stage and carries them: the stages are
  fetched in order, as the mainloop does, and stages at a window's end,
  at the next one's start, in its upper half (the odd lane's) and in a
  last window of four groups are checked; a stager that takes every group
  from the even lane's half fails in the upper one.

NVFP4 (``nvfp4_bf16``, ``nvfp4_f16``, ``nvfp4_e4m3``: 32 values a 16-byte load with
their two blocks' scale bytes) stages exactly what the narrow form does,
at row lengths of whole loads and not; one that scales both blocks by the
first's fails. Where K is a multiple of 128 the lanes of a row load four
stages' scale bytes at the first (8 bytes a lane) and carry them: a
window's last stage, the next one's first, a last short window, scales
in rows apart and off 8 bytes (byte by byte) stage what the narrow form
does, and a stager that takes every stage's bytes from the row's first
lane fails past the first stage.

And the paired float32 A stager (``f32_f16``: the two lanes of a row's
neighbouring chunks load each chunk together, 16 bytes each, and swap
halves by shuffles when the chunks are put): rows of whole 16-byte units
and not, a pair whose second chunk lies past K, rows past the tile's; a
stager that skips the swap fails."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from numba import cuda, int32, uint32

from leverctl_kernels.common import bits, cvt, swizzle
from leverctl_kernels.common import wgmma as wg
from leverctl_kernels.common import wgmma_gemm as P

ROWS, K, THREADS = 256, 256, 128


def _stage_kernel(stager, k):
    fetch, put, start, carried = stager.device(ROWS, along_k=True)

    @cuda.jit
    def stage(out, b32, bsc, kt):
        smem = cuda.shared.array(ROWS * 32 + 256, uint32)  # one stage of ROWS x 128 bytes, and room to align
        base = wg.smem_addr(smem)
        pad = (swizzle.ATOM_BYTES - (base & (swizzle.ATOM_BYTES - 1))) & (swizzle.ATOM_BYTES - 1)
        tid = cuda.threadIdx.x
        raw = fetch(b32, bsc, ROWS, k, 0, 0, tid, start())
        for s in range(1, kt + 1):  # the stages in order, each given what the one before left
            raw = fetch(b32, bsc, ROWS, k, 0, s, tid, carried(raw))
        put(base + pad, raw, ROWS, k, 0, kt, tid)
        cuda.syncthreads()
        for i in range(tid, ROWS * 32, THREADS):
            out[i] = smem[(pad >> 2) + i]

    return stage


WIDE_PARTS = ("g", "fetch16", "convert_j", "window", "settle", "empty")


def _rewired(good, **parts):
    """``good`` with some parts of its 16-byte form replaced (a broken
    stager for the checks that must fail)."""
    wide = dict(zip(WIDE_PARTS, good.wide), **parts)
    return P.chunk_stager(THREADS, good.kpc, good.fetch, good.convert, tuple(wide[n] for n in WIDE_PARTS))


def _staged_int4(stager, kt, rng, k=K):
    q = rng.integers(0, 16, (ROWS, k)).astype(np.uint32)
    words = np.zeros((ROWS, k // 8), np.uint32)
    for i in range(8):
        words |= q[:, i::8] << np.uint32(4 * i)
    scales = rng.uniform(0.5, 2.0, (ROWS, k // 128)).astype(np.float16)
    got = _run(stager, words, scales, kt, k)
    k0 = kt * 64
    vals = (q[:, k0 : k0 + 64].astype(np.float32) - 8) * scales[:, k0 // 128 : k0 // 128 + 1].astype(np.float32)
    return got, vals.astype(np.float16)


def _run(stager, b32, bsc, kt, k=K):
    out = cuda.to_device(np.zeros(ROWS * 32, np.uint32))
    _stage_kernel(stager, k)[1, THREADS](out, cuda.to_device(b32), cuda.to_device(bsc), kt)
    flat = out.copy_to_host().view(np.uint8)
    at = swizzle.sw128_np(np.arange(ROWS)[:, None] * 128 + np.arange(128)[None, :])
    return flat[at].view(np.float16).reshape(ROWS, 64)  # the stage's 64 k of fp16, row by row


def _staged(stager, kt, rng, k=K):
    codes = rng.choice([c for c in range(256) if c & 0x7F != 0x7F], (ROWS, k)).astype(np.uint8)
    bsc = rng.uniform(0.5, 2.0, (ROWS // 128, k // 128)).astype(np.float32)
    got = _run(stager, codes.view(np.uint32), bsc, kt, k)
    k0 = kt * 64
    vals = bits.e4m3_to_f32_np(codes[:, k0 : k0 + 64]) * np.repeat(bsc[:, k0 // 128], 128)[:, None]
    return got, vals.astype(np.float16)


@pytest.mark.sim
# K's first 128 x 128 block and its second; at K = 1152 (nine blocks: a
# window of eight, then one) the first window's last block and the next's
@pytest.mark.parametrize(("k", "kt"), [(K, 0), (K, 3), (1152, 15), (1152, 17)])
def test_the_wide_fp8_stager_scales_each_slot_by_its_rows_block(k, kt):
    got, want = _staged(P.stager_of("e4m3_blk_f16", THREADS), kt, np.random.default_rng(kt), k)
    np.testing.assert_array_equal(got, want)


@pytest.mark.sim
def test_a_wide_fp8_stager_that_reads_one_rows_block_for_all_fails():
    @cuda.jit(device=True, inline="always")
    def first_block(src, bsc, gr, gk, ok, vec, win, k):
        w0, w1, w2, w3, _s = P._e4m3_blk_fetch16(src, bsc, gr, gk, ok, vec, win, k)
        return w0, w1, w2, w3, bsc[0, gk >> 7]  # every row the first 128 rows' scale

    @cuda.jit(device=True, inline="always")
    def as_fetched(raw, gk, k):
        return raw

    wide = (2, first_block, P._e4m3_blk_convert_j, P._e4m3_blk_window, as_fetched, P._e4m3_blk_empty)
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


# (K, stage): K's groups of 128 a multiple of four, so the scales come a
# window of eight groups at a time: the window's last stage, the next
# one's first, one in its upper half (groups 4-7: the odd lane's), and a
# stage in a last window of four groups (K = 1536: the odd lane loads none)
WINDOWED = [(2048, 15), (2048, 16), (2048, 25), (1536, 23)]


@pytest.mark.sim
@pytest.mark.parametrize(("k", "kt"), WINDOWED)
def test_the_wide_int4_stager_carries_a_window_of_group_scales(k, kt):
    got, want = _staged_int4(P.stager_of("int4_f16", THREADS), kt, np.random.default_rng(kt), k)
    np.testing.assert_array_equal(got, want)


@pytest.mark.sim
def test_a_wide_int4_stager_that_takes_every_group_from_the_even_lane_fails_in_the_upper_half():
    good = P.stager_of("int4_f16", THREADS)

    @cuda.jit(device=True, inline="always")
    def even_only(raw, gk, k):
        w0, w1, w2, w3, v0, v1 = raw
        h = (gk >> 7) & 3  # the group's place in the even lane's half only
        lo, hi = cvt.f16x2_to_f32x2(v0 if h < 2 else v1)
        s = cuda.shfl_sync(0xFFFFFFFF, hi if h & 1 else lo, cuda.threadIdx.x & 30)
        return w0, w1, w2, w3, s

    broken = _rewired(good, settle=even_only)
    got, want = _staged_int4(broken, 16, np.random.default_rng(16), 2048)
    np.testing.assert_array_equal(got, want)  # group 8: the even lane's, as the broken one reads
    got, want = _staged_int4(broken, 25, np.random.default_rng(25), 2048)
    assert not np.array_equal(got, want)  # group 12: the odd lane's, read from the even one


# ── NVFP4 weights along K (``nvfp4_bf16``, ``nvfp4_f16``, ``nvfp4_e4m3``: 32 values and
# their two block scales a lane's load) against the narrow form's stage ──


def _stage_narrow(stager, rows, k):
    """A stage of ``rows`` rows by the narrow form (``stager.device(rows)``):
    ``kernel(out, src, bsc, nrows, kt)``, the stage's words in ``out``."""
    fetch, put = stager.device(rows)

    @cuda.jit
    def stage(out, src, bsc, nrows, kt):
        smem = cuda.shared.array(rows * 32 + 256, uint32)  # one stage of rows x 128 bytes, and room to align
        base = wg.smem_addr(smem)
        pad = (swizzle.ATOM_BYTES - (base & (swizzle.ATOM_BYTES - 1))) & (swizzle.ATOM_BYTES - 1)
        tid = cuda.threadIdx.x
        put(base + pad, fetch(src, bsc, nrows, k, 0, kt, tid), nrows, k, 0, kt, tid)
        cuda.syncthreads()
        for i in range(tid, rows * 32, THREADS):
            out[i] = smem[(pad >> 2) + i]

    return stage


def _nvfp4_stage(stager, kt, k, narrow, seed=0, scales_at=0):
    """Stage ``kt`` of NVFP4 rows of ``k`` values, wide or ``narrow``; the
    scales a device view ``scales_at`` bytes into rows that much longer."""
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, (ROWS, k // 2), dtype=np.uint8)
    finite = [c for c in range(1, 127)]  # finite E4M3
    scales = rng.choice(finite, (ROWS, k // 16)).astype(np.uint8)
    # the bytes before the view: other scales, drawn last (the staged values do not depend on scales_at)
    held = np.concatenate([rng.choice(finite, (ROWS, scales_at)).astype(np.uint8), scales], axis=1)
    out = cuda.to_device(np.zeros(ROWS * 32, np.uint32))
    b32, bsc = cuda.to_device(packed.view(np.uint32)), cuda.to_device(held)[:, scales_at:]
    if narrow:
        _stage_narrow(stager, ROWS, k)[1, THREADS](out, b32, bsc, ROWS, kt)
    else:
        _stage_kernel(stager, k)[1, THREADS](out, b32, bsc, kt)
    return out.copy_to_host()


NVFP4_KINDS = ["nvfp4_bf16", "nvfp4_f16", "nvfp4_e4m3"]


@pytest.mark.sim
@pytest.mark.parametrize("kind", NVFP4_KINDS)
# whole 16-byte loads; a row of 48 values (six words: the load word by word,
# the last chunks past K zeros) at its first stage and (E4M3: 128 a stage) past it
@pytest.mark.parametrize(("k", "kt"), [(256, 1), (48, 0), (1040, 3)])
def test_the_wide_nvfp4_stagers_stage_what_the_narrow_ones_do(kind, k, kt):
    stager = P.stager_of(kind, THREADS)
    assert stager.wide is not None
    wide = _nvfp4_stage(stager, kt, k, narrow=False, seed=k + kt)
    narrow = _nvfp4_stage(stager, kt, k, narrow=True, seed=k + kt)
    np.testing.assert_array_equal(wide, narrow)
    assert wide.any()


# K a multiple of 64: the row's lanes load four stages' scale bytes at the
# first (8 bytes a lane: one load where K is a multiple of 128, else two
# words, K 320 and 576 below, rows of 20 and 36 bytes) and carry them. bf16 (64 values a stage, two lanes
# a row): a window's last stage, the next one's first, its second half (the
# odd lane's bytes), a stage of a last window of two stages (K 384: the odd
# lane loads none); E4M3 (128 a stage, four lanes): the same at K 1024 and a
# last window of one stage (K 640). Each also with the scales a view 8
# bytes into longer rows (not C-contiguous: byte by byte) and 4 bytes in
# (not 8-byte aligned).
WINDOWS = {
    "nvfp4_bf16": [(512, 3), (512, 4), (512, 6), (384, 5), (320, 1), (320, 4)],
    "nvfp4_f16": [(512, 3), (384, 5), (320, 4)],  # (fp16 stages as bf16's: a window's end, a last one)
    "nvfp4_e4m3": [(1024, 3), (1024, 4), (1024, 7), (640, 4), (576, 3), (576, 4)],
}


@pytest.mark.sim
@pytest.mark.parametrize(("kind", "k", "kt"), [(kind, k, kt) for kind, w in WINDOWS.items() for k, kt in w])
@pytest.mark.parametrize("scales_at", [0, 8, 4])
def test_the_wide_nvfp4_stagers_carry_a_window_of_scale_bytes(kind, k, kt, scales_at):
    stager = P.stager_of(kind, THREADS)
    wide = _nvfp4_stage(stager, kt, k, narrow=False, seed=k + kt, scales_at=scales_at)
    np.testing.assert_array_equal(wide, _narrow_window(kind, k, kt))
    assert wide.any()


@functools.cache
def _narrow_window(kind, k, kt):
    """The narrow stager's stage, the same values wherever the scales' view
    starts: one simulator run for a window's three views."""
    return _nvfp4_stage(P.stager_of(kind, THREADS), kt, k, narrow=True, seed=k + kt)


@pytest.mark.sim
@pytest.mark.parametrize("kind", NVFP4_KINDS)
def test_a_wide_nvfp4_stager_that_reads_every_stage_from_the_first_lane_fails(kind):
    good = P.stager_of(kind, THREADS)
    g = good.wide[0]  # chunks a load

    span = 4 * P.CHUNKS * (8 if g == 4 else 16)  # a window: four stages' values

    @cuda.jit(device=True, inline="always")
    def first_lane(raw, gk, k):  # bytes 2u, 2u + 1 of the row's first lane, whichever lane holds them
        w0, w1, w2, w3, v0, v1 = raw
        u = (gk & (span - 1)) >> 5
        lane0 = cuda.threadIdx.x & (32 - (8 // g))
        x0 = uint32(cuda.shfl_sync(0xFFFFFFFF, int32(v0), lane0))
        x1 = uint32(cuda.shfl_sync(0xFFFFFFFF, int32(v1), lane0))
        h = (x1 if (u >> 1) & 1 else x0) >> uint32(16 * (u & 1))
        return w0, w1, w2, w3, np.uint8(h & uint32(0xFF)), np.uint8((h >> uint32(8)) & uint32(0xFF))

    broken = _rewired(good, settle=first_lane)
    k = 1024 if kind == "nvfp4_e4m3" else 512
    # a window's first stage: its bytes are the first lane's, as the broken one reads
    np.testing.assert_array_equal(
        _nvfp4_stage(broken, 4, k, narrow=False, seed=1), _nvfp4_stage(good, 4, k, narrow=True, seed=1)
    )
    wide = _nvfp4_stage(broken, 7, k, narrow=False, seed=2)  # its last stage: the last lane's bytes
    assert not np.array_equal(wide, _nvfp4_stage(good, 7, k, narrow=True, seed=2))


@pytest.mark.sim
@pytest.mark.parametrize("kind", NVFP4_KINDS)
def test_a_wide_nvfp4_stager_that_scales_both_blocks_by_the_first_fails(kind):
    good = P.stager_of(kind, THREADS)
    fetch16 = good.wide[WIDE_PARTS.index("fetch16")]

    @cuda.jit(device=True, inline="always")
    def first_scale(src, bsc, gr, gk, ok, vec, win, k):
        w0, w1, w2, w3, s0, _s1 = fetch16(src, bsc, gr, gk, ok, vec, win, k)
        return w0, w1, w2, w3, s0, s0

    broken = _rewired(good, fetch16=first_scale)
    wide = _nvfp4_stage(broken, 1, 256, narrow=False, seed=5)
    narrow = _nvfp4_stage(good, 1, 256, narrow=True, seed=5)
    assert not np.array_equal(wide, narrow)


# ── the float32 rows' paired stager (an A operand: the decode tile's SiLU
# product rows, 16 a tile) ─────────────────────────────────────────────────

A_ROWS = 16


def _staged_f32(stager, kt, k, nrows=13, seed=0):
    x = np.random.default_rng(seed).standard_normal((nrows, k)).astype(np.float32)
    out = cuda.to_device(np.zeros(A_ROWS * 32, np.uint32))
    xd = cuda.to_device(x)
    _stage_narrow(stager, A_ROWS, k)[1, THREADS](out, xd, xd, nrows, kt)
    flat = out.copy_to_host().view(np.uint8)
    at = swizzle.sw128_np(np.arange(A_ROWS)[:, None] * 128 + np.arange(128)[None, :])
    got = flat[at].view(np.float16).reshape(A_ROWS, 64)
    want = np.zeros((A_ROWS, 64), np.float16)
    part = x[:, kt * 64 : kt * 64 + 64]
    want[:nrows, : part.shape[1]] = part.astype(np.float16)
    return got, want


@pytest.mark.sim
# rows of whole 16-byte units (16-byte loads) and not (k = 70: one a load);
# a last stage whose pair's second chunk lies past K (k = 72, 136)
@pytest.mark.parametrize(("k", "kt"), [(256, 1), (72, 1), (136, 2), (70, 1)])
def test_the_paired_f32_stager_gives_each_lane_its_chunk(k, kt):
    got, want = _staged_f32(P.stager_of("f32_f16", THREADS), kt, k)
    np.testing.assert_array_equal(got, want)


@pytest.mark.sim
def test_a_paired_f32_stager_without_the_exchange_fails():
    @cuda.jit(device=True, inline="always")
    def keep(raw, gk, partner):
        return raw  # each lane keeps what it loaded: half of its chunk is the pair's other one

    good = P.stager_of("f32_f16", THREADS)
    broken = P.chunk_stager(THREADS, 8, good.fetch, good.convert, settle=keep)
    got, want = _staged_f32(broken, 1, 256)
    assert not np.array_equal(got, want)


# ── Q4_K weights along K (the Q4_K MMQ's: a load's 16 bytes are two chunks,
# one a nibble side, 32 values apart) against the nibbles and the narrow form ──


def _q4k_stage(stager, kt, k, narrow, seed=0):
    """Stage ``kt`` (128 values of each row, bytes) of random Q4_K rows of
    ``k`` values, and the values NumPy reads at those places: value ``v``
    of a super-block is byte ``16 + 32 (v // 64) + v % 32``'s low nibble
    where ``v % 64 < 32``, else its high one."""
    from leverctl_kernels.common.gemm import mmq

    blocks = np.random.default_rng(seed).integers(0, 256, (ROWS, k // 256 * mmq.Q4K_BLOCK_BYTES), dtype=np.uint8)
    out = cuda.to_device(np.zeros(ROWS * 32, np.uint32))
    b32 = cuda.to_device(blocks.view(np.uint32))
    if narrow:
        _stage_narrow(stager, ROWS, k)[1, THREADS](out, b32, b32, ROWS, kt)
    else:
        _stage_kernel(stager, k)[1, THREADS](out, b32, b32, kt)
    at = swizzle.sw128_np(np.arange(ROWS)[:, None] * 128 + np.arange(128)[None, :])
    got = out.copy_to_host().view(np.uint8)[at]
    v = kt * 128 + np.arange(128)
    sub = v & 255
    byte = blocks[:, (v >> 8) * mmq.Q4K_BLOCK_BYTES + 16 + 32 * (sub >> 6) + (sub & 31)]
    return got, np.where(((sub >> 5) & 1)[None, :] == 1, byte >> 4, byte & 15)


@pytest.mark.sim
# a super-block's two halves, and stages past the first super-block
@pytest.mark.parametrize(("k", "kt"), [(256, 0), (256, 1), (768, 2), (768, 5)])
def test_the_wide_q4k_stager_stages_each_nibble_where_the_narrow_one_does(k, kt):
    from leverctl_kernels.common.gemm import mmq

    stager = mmq.q4k_stager(THREADS)
    assert stager.wide is not None
    got, want = _q4k_stage(stager, kt, k, narrow=False, seed=k + kt)
    np.testing.assert_array_equal(got, want)
    narrow, want_narrow = _q4k_stage(stager, kt, k, narrow=True, seed=k + kt)
    np.testing.assert_array_equal(narrow, want_narrow)


@pytest.mark.sim
def test_the_q4k_loads_keep_a_quarter_warps_stores_in_eight_bank_groups():
    """Each ``j``'s 16-byte stores of a quarter-warp (two rows, four loads
    each) land in eight different 16-byte bank groups after the swizzle
    (the chunk XOR the row's low three bits); side by side, or the high
    chunk never first, two lanes would share one."""
    from leverctl_kernels.common.gemm import mmq

    def groups(place, r):
        return [{(place(u, j, 2) ^ ((r + h) & 7)) for h in (0, 1) for u in range(4)} for j in (0, 1)]

    for r in range(0, 8, 2):
        assert all(len(g) == 8 for g in groups(mmq._q4k_place, r)), r
        assert {place for u in range(4) for place in (mmq._q4k_place(u, 0, 2), mmq._q4k_place(u, 1, 2))} == set(
            range(8)
        )
    assert not all(len(g) == 8 for g in groups(lambda u, j, G: 4 * (u >> 1) + (u & 1) + 2 * j, 0))


@pytest.mark.sim
def test_a_wide_q4k_stager_whose_loads_put_their_chunks_side_by_side_fails():
    from leverctl_kernels.common.gemm import mmq

    good = mmq.q4k_stager(THREADS)
    broken = P.chunk_stager(THREADS, 16, good.fetch, good.convert, good.wide)  # chunks c, c + 1 of a load
    got, want = _q4k_stage(broken, 1, 256, narrow=False)
    assert not np.array_equal(got, want)


@pytest.mark.sim
@pytest.mark.parametrize(("k", "widths"), [(512, {16, 8}), (320, {16, 4}), (48, {4, 1})])
def test_the_wide_nvfp4_stager_loads_a_windows_scales_as_its_rows_allow(k, widths):
    """Traced, a stage's global loads: the 16-byte weights and, for the
    window's scales, one 8-byte load a lane where a row's scales are whole
    8-byte units (K 512), words where they are whole words (K 320: rows of
    20 bytes), and where K is no multiple of 64 (K 48: the weights a word
    a load too) each lane's own bytes."""
    from leverctl.profile import memtrace as mt

    stager = P.stager_of("nvfp4_f16", THREADS)
    with mt.trace() as t:
        _nvfp4_stage(stager, 0, k, narrow=False, seed=k)
    loads = [r for r in mt.summarize(t).sites if r.space == "global" and r.kind == "load"]
    assert {r.bytes // r.accesses for r in loads} == widths


# ── FP8 weights scaled per row in the epilogue (``e4m3_f16``: 16 codes a
# lane's load, two chunks, no scale) against the narrow form's stage ──


def _e4m3_stage(stager, kt, k, narrow, seed=0):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 256, (ROWS, k), dtype=np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x3C  # no NaN codes: the stage is compared bit for bit
    out = cuda.to_device(np.zeros(ROWS * 32, np.uint32))
    b32, bsc = cuda.to_device(codes.view(np.uint32)), cuda.to_device(np.zeros((1, 1), np.float32))
    if narrow:
        _stage_narrow(stager, ROWS, k)[1, THREADS](out, b32, bsc, ROWS, kt)
    else:
        _stage_kernel(stager, k)[1, THREADS](out, b32, bsc, kt)
    return out.copy_to_host()


@pytest.mark.sim
# whole 16-byte loads at the first stage and past it; a row of 40 codes (ten
# words: the loads word by word, the last chunk's second word past K a zero)
@pytest.mark.parametrize(("k", "kt"), [(256, 1), (40, 0), (1040, 3)])
def test_the_wide_e4m3_stager_stages_what_the_narrow_one_does(k, kt):
    stager = P.stager_of("e4m3_f16", THREADS)
    assert stager.wide is not None
    wide = _e4m3_stage(stager, kt, k, narrow=False, seed=k + kt)
    np.testing.assert_array_equal(wide, _e4m3_stage(stager, kt, k, narrow=True, seed=k + kt))
    assert wide.any()


@pytest.mark.sim
def test_a_wide_e4m3_stager_that_swaps_a_loads_two_chunks_fails():
    good = P.stager_of("e4m3_f16", THREADS)
    convert_j = good.wide[WIDE_PARTS.index("convert_j")]

    @cuda.jit(device=True, inline="always")
    def swapped(raw, gk, j):
        return convert_j(raw, gk, 1 - j)

    broken = _rewired(good, convert_j=swapped)
    wide = _e4m3_stage(broken, 1, 256, narrow=False, seed=3)
    assert not np.array_equal(wide, _e4m3_stage(good, 1, 256, narrow=True, seed=3))
