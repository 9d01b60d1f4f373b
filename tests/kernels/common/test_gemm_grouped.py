"""The grouped GEMM on the shared mainloop (``common/gemm/grouped.py``:
rows sorted by group, each group against its own B) against NumPy, in the
simulator: gathered A rows on the bounded schedule (mma.sync), per-block
groups on the walking schedule with fewer blocks than tiles (wgmma, float32
A and NVFP4 B through the fp16 stagers), and gate/up halves of one tile
with an epilogue hook (SiLU-GLU, E4M3 weights), on one warpgroup and on
two along the columns (each its quarter of gate and of up); odd row
counts, an empty group, a group past one tile, K below and past a stage.
A kernel built without the gather, with the stages read out of order, or
with the gated parts staged whole on two warpgroups, fails; the gated
tile's weight loads on two warpgroups use whole sectors. The
16-row decode tile the launch takes for a few rows a group: groups of 0, 1
and 3 rows, n and k off the tile and the instruction's K step, both
schedules, a walk past its first window of 32 groups; without the row map,
the wait, or the warps' sum, it fails."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda

from leverctl_kernels.common import bits, unroll
from leverctl_kernels.common import wgmma as wg
from leverctl_kernels.common import wgmma_gemm as P
from leverctl_kernels.common.gemm import grouped as GG
from leverctl_kernels.common.gemm import mma_sync, wgmma_async


def _off(counts):
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


def _group_of(off):
    return np.repeat(np.arange(len(off) - 1), np.diff(off))


def _f16(shape, rng):
    h = rng.standard_normal(shape).astype(np.float16)
    return h, h.astype(np.float64)


def _err(got, ref) -> float:
    return float(np.max(np.abs(got - ref)) / np.abs(ref).max()) if np.isfinite(got).all() else np.inf


def _grouped(seed, counts, t, n, k, sched, gather, fault, max_m_tiles, tile_m=0, max_blocks=0):
    """mma.sync: ``y[p] = A[tok[p]] B[e(p)]^T * rs[p] cs[e] ts[e]`` over
    groups of ``counts`` rows, ``t`` token rows: (got, reference, launch)."""
    rng = np.random.default_rng(seed)
    off = _off(list(counts))
    rows, e_n = int(off[-1]), len(counts)
    a, a64 = _f16((t, k), rng)
    b, b64 = _f16((e_n, n, k), rng)
    tok = rng.integers(0, t, rows).astype(np.int32)
    rs = rng.uniform(0.5, 1.5, rows).astype(np.float32)
    cs = rng.uniform(0.5, 1.5, (e_n, n)).astype(np.float32)
    ts = rng.uniform(0.5, 1.5, e_n).astype(np.float32)
    ge = _group_of(off)
    ref = np.einsum("pk,pnk->pn", a64[tok], b64[ge]) * rs[:, None] * cs[ge] * ts[ge][:, None]
    kern = GG.make_kernel(mma_sync, "f16", 1, 32, 3, sched, gather=gather, fault=fault, tile_m=tile_m)
    launch = GG.make_launch(kern, e_n, rows, n, k, max_blocks=max_blocks)
    y = cuda.to_device(np.full((rows, n), np.nan, np.float32))
    dev = [cuda.to_device(x) for x in (a.view(np.uint32), b.view(np.uint32), tok, off, rs, cs, ts)]
    launch(y, dev[0], dev[1], None, None, dev[2], dev[3], max_m_tiles, tuple(dev[4:]))
    return y.copy_to_host(), ref, launch


def _gathered(gather=True, fault=""):
    """mma.sync, bounded, groups of 70, 0 and 13 rows (83); k: one stage of
    64 fp16 and a quarter."""
    got, ref, _ = _grouped(1, (70, 0, 13), 90, 20, 80, GG.BOUNDED, gather, fault, 2)
    return got, ref


@pytest.mark.sim
def test_gathered_rows_on_the_bounded_schedule_are_a_matmul_of_the_tokens_rows():
    got, ref = _gathered()
    assert _err(got, ref) <= 1e-5


@pytest.mark.sim
@pytest.mark.parametrize("fault", ["no_gather", "stage_order"])
def test_rows_not_gathered_or_stages_read_out_of_order_fail_the_check(fault):
    got, ref = _gathered(gather=fault != "no_gather", fault="" if fault == "no_gather" else fault)
    assert _err(got, ref) > 1e-2


@pytest.mark.sim
def test_each_group_reads_its_own_weights_on_the_walking_schedule():
    """wgmma, float32 A (``f32_f16``) and NVFP4 B (``nvfp4_f16``), two
    blocks walking eight tiles: every row of every group computed once."""
    rng = np.random.default_rng(2)
    counts, n, k = [5, 70, 0, 20], 24, 48  # k below one stage of 64 fp16
    off = _off(counts)
    rows, e_n = int(off[-1]), len(counts)
    a = rng.standard_normal((rows, k)).astype(np.float32)
    a64 = a.astype(np.float16).astype(np.float64)  # the stager's rounding
    packed, sc, _ = bits.nvfp4_encode_np(rng.standard_normal((e_n, n, k)), tensor_scale=1.0)
    b64 = bits.nvfp4_decode_np(packed, sc, 1.0).astype(np.float64)
    rs = rng.uniform(0.5, 1.5, rows).astype(np.float32)
    cs = rng.uniform(0.5, 1.5, (e_n, n)).astype(np.float32)
    ts = rng.uniform(0.5, 1.5, e_n).astype(np.float32)
    ge = _group_of(off)
    ref = np.einsum("pk,pnk->pn", a64, b64[ge]) * rs[:, None] * cs[ge] * ts[ge][:, None]
    kern = GG.make_kernel(wgmma_async, "f16", 1, 16, 2, GG.GROUPED, b_kind="nvfp4_f16", a_kind="f32_f16")
    launch = GG.make_launch(kern, e_n, rows, n, k, max_blocks=2)
    y = cuda.to_device(np.full((rows, n), np.nan, np.float32))
    dev = [cuda.to_device(x) for x in (a, packed.view(np.uint32), sc, off, rs, cs, ts)]
    launch(y, dev[0], dev[1], dev[2], None, None, dev[3], 0, tuple(dev[4:]))
    assert _err(y.copy_to_host(), ref) <= 1e-5


HALF = 16  # the gated tile's output columns: BN = 32, gate and up halves


@cuda.jit(device=True, inline="always")
def _glu_one(i, gate, up, at):
    tid, cs, e, n0, ncols = at
    _r, c = wg.acc_elem(tid, i)
    col = min(n0 + c, ncols - 1)
    gv = np.float32(gate) * cs[e, col]
    return gv / (np.float32(1.0) + math.exp(-gv)) * (np.float32(up) * cs[e, ncols + col])


def _glu_of(n_acc, wide=True):
    """The SiLU-GLU hook of a thread's ``n_acc`` accumulators: gate, then up
    (stored 16 bytes a lane where ``wide``, else element by element)."""
    half = n_acc // 2
    store = P.store if wide else P.store_narrow

    @cuda.jit(device=True, inline="always")
    def glu(y, ep, acc, row0, row_end, n0, ncols, e):
        cs, ones = ep
        v = unroll.each_map(_glu_one, acc[:half], acc[half:], (cuda.threadIdx.x & 127, cs, e, n0, ncols))
        store(y, row_end, ncols, row0, n0, v, ones, ones, np.float32(1.0), False)

    return glu


def _gated(form=mma_sync, wn=1, fault="", b_kind="e4m3_f16", counts=(9, 0, 66), k=144):
    """Walking schedule, gathered fp16 A, E4M3 weights (``e4m3_f16``, or
    copied fp16 ones: ``copy``, or NVFP4: ``nvfp4_f16``) with a scale per weight row applied by the
    hook: ``silu(gate) * up``, on ``wn`` warpgroups along BN (each its
    half of the gate and of the up columns). (got, reference)"""
    rng = np.random.default_rng(3)
    t, n = 40, 24  # k: two stages and a quarter by default
    off = _off(counts)
    rows, e_n = int(off[-1]), len(counts)
    a, a64 = _f16((t, k), rng)
    codes = bits.f32_to_e4m3_np(rng.standard_normal((e_n, 2 * n, k)).astype(np.float32))
    w64 = bits.e4m3_to_f32_np(codes).astype(np.float64)
    bsc = None
    if b_kind == "copy":
        codes = w64.astype(np.float16)  # (exact: E4M3 values are fp16 values)
    elif b_kind == "nvfp4_f16":  # NVFP4 weights, an E4M3 scale a block of 16
        codes, bsc, _ = bits.nvfp4_encode_np(rng.standard_normal((e_n, 2 * n, k)), tensor_scale=1.0)
        w64 = bits.nvfp4_decode_np(codes, bsc, 1.0).astype(np.float64)
        bsc = cuda.to_device(bsc)
    ws = rng.uniform(0.5, 1.5, (e_n, 2 * n)).astype(np.float32)
    tok = rng.integers(0, t, rows).astype(np.int32)
    ge = _group_of(off)
    full = np.einsum("pk,pnk->pn", a64[tok], w64[ge]) * ws[ge]
    gate, up = full[:, :n], full[:, n:]
    ref = gate / (1 + np.exp(-gate)) * up
    kern = GG.make_kernel(
        form,
        "f16",
        wn,
        2 * HALF,
        3,
        GG.GROUPED,
        b_kind=b_kind,
        gather=True,
        b_parts=2,
        epilogue_of=_glu_of,
        fault=fault,
        wn=wn,
    )
    launch = GG.make_launch(kern, e_n, rows, n, k, max_blocks=3, tile="kernel")
    y = cuda.to_device(np.full((rows, n), np.nan, np.float32))
    dev = [cuda.to_device(x) for x in (a.view(np.uint32), codes.view(np.uint32), tok, off, ws)]
    ones = cuda.to_device(np.ones(max(rows, n), np.float32))
    launch(y, dev[0], dev[1], bsc, None, dev[2], dev[3], 0, (dev[4], ones))
    return y.copy_to_host(), ref


@pytest.mark.sim
def test_gate_and_up_halves_of_one_tile_meet_in_the_epilogue_hook():
    """mma.sync, one warpgroup: the hook's ``silu(gate) * up``."""
    got, ref = _gated()
    assert _err(got, ref) <= 1e-5


@pytest.mark.sim
@pytest.mark.parametrize("form,b_kind", [(mma_sync, "e4m3_f16"), (wgmma_async, "copy")], ids=["mma_sync", "wgmma"])
def test_two_warpgroups_along_bn_each_hold_their_gate_and_up_quarters(form, b_kind):
    """Two warpgroups side by side on the gated tile: each computes its
    half of the gate columns and the same half of the up columns (the
    stage's B rows interleaved by quarters, staged E4M3 and copied fp16)."""
    got, ref = _gated(form, 2, b_kind=b_kind, counts=(9, 0, 30), k=80)
    assert _err(got, ref) <= 1e-5


@pytest.mark.sim
def test_the_two_warpgroup_gated_tile_loads_its_weight_rows_in_whole_sectors():
    """The gated tile on two warpgroups (an MoE's NVFP4 gate/up) stages its
    gate and up parts spread into quarters; each weight row's eight chunks
    of a stage still go to eight consecutive lanes, so the words of a row's
    stage (32 contiguous bytes) are whole sectors, where chunks dealt
    across the rows, a row a lane, used an eighth of each. The block
    scales, a byte each, ride along."""
    from leverctl.profile import memtrace as mt

    with mt.trace() as t:
        got, ref = _gated(mma_sync, 2, b_kind="nvfp4_f16", counts=(9, 0, 30), k=128)
    assert _err(got, ref) <= 1e-5
    loads = [
        r
        for r in mt.summarize(t).sites
        if r.space == "global" and r.kind == "load" and r.site.startswith("kernels/common/wgmma_gemm.py")
    ]
    # the stager's site (a chunk's word and its scale byte) moves the most; the row map's is the other
    staged = max(loads, key=lambda r: r.bytes)
    assert staged.accesses == 3584 and staged.sectors == staged.ideal_sectors  # dealt by rows: twice the sectors


@pytest.mark.sim
def test_gate_and_up_staged_whole_on_two_warpgroups_fail_the_check():
    """The parts staged side by side as on one warpgroup: the first
    warpgroup's columns all gate, the second's all up."""
    got, ref = _gated(mma_sync, 2, fault="parts_apart", counts=(9, 0, 30), k=80)
    assert _err(got, ref) > 1e-2


def test_configurations_the_grouped_loop_cannot_take_are_refused():
    with pytest.raises(ValueError, match="schedule"):
        GG.make_kernel(mma_sync, "f16", 1, 32, 3, "walk")
    with pytest.raises(ValueError, match="copied A only"):
        GG.make_kernel(mma_sync, "f16", 1, 32, 3, GG.BOUNDED, a_kind="f32_f16", gather=True)
    with pytest.raises(ValueError, match="stages f16, not bf16"):
        GG.make_kernel(wgmma_async, "bf16", 1, 32, 3, GG.BOUNDED, b_kind="nvfp4_f16")
    with pytest.raises(ValueError, match="multiples of 16"):
        GG.make_kernel(mma_sync, "f16", 1, 16, 3, GG.BOUNDED, b_parts=2)


def _decode(fault="", gather=True, counts=(1, 0, 3, 1), n=20, k=40, sched=GG.GROUPED, max_blocks=2):
    """The decode tile (16 rows, the four warps splitting each stage's K),
    mma.sync: ``y[p] = A[tok[p]] B[e(p)]^T * rs[p] cs[e] ts[e]``; groups of
    1, 0, 3 and 1 rows, n below one column tile and not a multiple of 8, k
    below one stage of 64 fp16 and not a multiple of the instruction's 16."""
    tile_m = GG.DECODE_M if fault == "no_reduce" else 0  # a fault only the decode tile can take: built as one
    got, ref, launch = _grouped(5, counts, 7, n, k, sched, gather, fault, 1, tile_m, max_blocks)
    assert launch.kernel.tile_m == GG.DECODE_M  # a few rows a group: the decode tile, chosen by the launch
    return got, ref


@pytest.mark.sim
def test_the_decode_tile_computes_groups_of_zero_one_and_three_rows():
    got, ref = _decode()
    assert _err(got, ref) <= 1e-5


@pytest.mark.sim
@pytest.mark.parametrize("fault", ["no_gather", "no_wait", "no_reduce"])
def test_a_decode_tile_without_its_row_map_wait_or_warp_sum_fails_the_check(fault):
    """Rows read in sorted order instead of through the row map, a stage read
    before its copies landed, the four warps' K slices never summed."""
    got, ref = _decode(fault="" if fault == "no_gather" else fault, gather=fault != "no_gather")
    assert _err(got, ref) > 1e-2


@pytest.mark.sim
def test_the_decode_tile_on_the_bounded_schedule_covers_k_past_a_stage():
    """Two stages and a bit of K (k = 136: not a multiple of 16), n = 40
    over two column tiles, one block a tile."""
    got, ref = _decode(counts=(2, 1), n=40, k=136, sched=GG.BOUNDED, max_blocks=0)
    assert _err(got, ref) <= 1e-5


def test_the_launch_keeps_the_64_row_tile_for_prefill_sized_groups_and_wgmma():
    kern = GG.make_kernel(mma_sync, "f16", 1, 32, 3, GG.GROUPED)
    assert GG.make_launch(kern, 4, 4 * GG.DECODE_MEAN + 1, 24, 64).kernel.tile_m == 64
    assert GG.make_launch(kern, 4, 4 * GG.DECODE_MEAN, 24, 64).kernel.tile_m == GG.DECODE_M
    hop = GG.make_kernel(wgmma_async, "f16", 1, 32, 3, GG.GROUPED)
    assert GG.make_launch(hop, 4, 3, 24, 64).kernel.tile_m == 64  # wgmma's M is 64: no decode tile
    with pytest.raises(ValueError, match="no decode tile"):
        GG.make_launch(hop, 4, 3, 24, 64, tile="decode")
    with pytest.raises(ValueError, match="decode tile's"):
        GG.make_kernel(mma_sync, "f16", 1, 32, 3, GG.GROUPED, fault="no_reduce")
    with pytest.raises(ValueError, match="decode tile: one warpgroup on mma.sync"):
        GG.make_kernel(wgmma_async, "f16", 1, 32, 3, GG.GROUPED, tile_m=GG.DECODE_M)
    with pytest.raises(ValueError, match="decode tile: one warpgroup on mma.sync"):
        GG.make_kernel(mma_sync, "s8", 1, 32, 3, GG.GROUPED, tile_m=GG.DECODE_M)


@pytest.mark.sim
def test_the_walk_finds_groups_past_its_first_window_of_32():
    """37 groups, four of them holding rows (one past the first window of 32,
    one its last lane), three blocks walking: each group's rows against its
    own weights."""
    counts = [0] * 37
    counts[0], counts[31], counts[33], counts[36] = 1, 2, 3, 1
    got, ref = _decode(counts=tuple(counts), n=12, k=24, max_blocks=3)
    assert _err(got, ref) <= 1e-5
