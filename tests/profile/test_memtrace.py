"""The memory tracer (``leverctl.profile.memtrace``) on planted kernels whose
figures are known by hand (``trace_kernels.py``): sector efficiency, bank
conflicts as the hardware serves each access width, bytes requested; and
that tracing changes no result and leaves nothing patched behind.

The tracer needs the CUDA simulator, so these tests skip on a GPU run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from numba import config

pytestmark = [
    pytest.mark.sim,
    pytest.mark.skipif(not config.ENABLE_CUDASIM, reason="the memory tracer runs kernels in the CUDA simulator"),
]

if config.ENABLE_CUDASIM:
    import trace_kernels as tk

    from leverctl.profile import memtrace as mt


def _row(profile, marker: str, space: str, kind: str):
    """The one row of ``profile`` at the planted line ``marker`` (as site or via)."""
    rows = profile.rows_at(tk.line_of(marker), space, kind)
    assert len(rows) == 1, [r.to_json() for r in profile.sites]
    return rows[0]


def _traced(launch):
    with mt.trace() as t:
        launch()
    return mt.summarize(t)


# ── global sectors ───────────────────────────────────────────────────────────


@pytest.mark.parametrize(("stride", "efficiency", "sectors"), [(1, 1.0, 4), (2, 0.5, 8), (8, 0.125, 32)])
def test_strided_float32_load_uses_a_share_of_its_sectors(stride, efficiency, sectors):
    x = np.arange(32 * stride, dtype=np.float32)
    out = np.zeros(32, np.float32)
    p = _traced(lambda: tk.strided_load[1, 32](out, x, stride))
    load = _row(p, "strided-load", "global", "load")
    assert load.instructions == 1 and load.accesses == 32 and load.bytes == 128
    assert load.sectors == sectors
    assert load.efficiency == pytest.approx(efficiency)
    assert load.ideal_sectors == 4
    store = _row(p, "strided-store", "global", "store")
    assert store.efficiency == pytest.approx(1.0) and store.sectors == 4
    if stride > 1:  # the wasteful load is named first, the store not at all
        assert p.worst() == (load,) and load.waste_bytes == (sectors - 4) * 32
    else:
        assert p.worst() == ()


def test_a_sub_array_is_addressed_within_its_allocation():
    # x[lane] is a view (no access); its element 0 is 32 bytes after the
    # previous lane's, as the allocation's layout says.
    x = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    out = np.zeros(32, np.float32)
    p = _traced(lambda: tk.row_view_load[1, 32](out, x))
    load = _row(p, "row-view", "global", "load")
    assert load.instructions == 1 and load.sectors == 32
    assert load.efficiency == pytest.approx(0.125)
    np.testing.assert_array_equal(out, x[:, 0])


def test_a_broadcast_global_load_is_one_sector_with_no_excess():
    out = np.zeros(1, np.int32)
    p = _traced(lambda: tk.atomic_count[1, 32](out))
    assert out[0] == 32
    row = _row(p, "atomic", "global", "atomic")
    # The atomic is counted once per lane (its store), not as read + read + write.
    assert row.instructions == 1 and row.accesses == 32 and row.bytes == 128
    assert row.sectors == 1 and row.ideal_sectors == 1 and row.waste_bytes == 0
    assert p.atomic_bytes == 128 and p.load_bytes == 0 and p.store_bytes == 0


def test_requested_bytes_are_the_sum_of_the_access_sizes():
    n = 100  # two blocks of 64: the last warp has four lanes in range
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    with mt.trace() as t:
        tk.copy[2, 64](out, x)
    p = mt.summarize(t, declared_bytes=8 * n)
    assert (p.load_bytes, p.store_bytes, p.atomic_bytes) == (4 * n, 4 * n, 0)
    assert p.requested_bytes == 8 * n
    assert p.requested_vs_declared == pytest.approx(1.0)
    assert mt.summarize(t, declared_bytes=4 * n).requested_vs_declared == pytest.approx(2.0)
    assert mt.summarize(t).requested_vs_declared is None
    # 4 full warps (4 sectors each) and one of 4 lanes (1 sector), per direction.
    assert p.sectors == 2 * 13 and p.used_bytes == 8 * n
    assert p.launches == 1 and p.blocks == 2 and p.accesses == 2 * n
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("wide", [True, False], ids=["one-16-byte-load", "four-4-byte-loads"])
def test_the_128_bit_loads_share_counts_the_bytes_16_byte_loads_carry(wide):
    """The same 512 bytes copied by one warp: loaded 16 bytes a lane, the
    whole load is carried by 128-bit loads; loaded 4 bytes at a time, none
    is (same sectors and bytes either way). Stores never count."""
    x = np.arange(128, dtype=np.uint32)
    out = np.zeros(128, np.uint32)
    p = _traced(lambda: tk.copy_words[1, 32](out, x, wide))
    np.testing.assert_array_equal(out, x)
    assert p.load_bytes == p.store_bytes == 512
    assert p.wide_load_bytes == (512 if wide else 0)
    assert p.wide_load_share == (1.0 if wide else 0.0)
    assert p.to_json()["global"]["wide_load_share"] == p.wide_load_share
    if wide:
        row = _row(p, "copy-wide", "global", "load")
        assert row.instructions == 1 and row.accesses == 32 and row.wide_bytes == 512 and row.sectors == 16
    assert mt.summarize(mt.Trace()).wide_load_share is None  # no loads: no figure


# ── shared banks ─────────────────────────────────────────────────────────────


def _tile(width: int):
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    p = _traced(lambda: tk.tile_kernel(width)[1, 32](out, x))
    t = np.zeros((32, width), np.float32)
    t[:, 1] = x
    t[0, :32] = 2 * x
    np.testing.assert_array_equal(out, t[:, 1] + t[0, 0])
    return p


def test_column_store_into_a_32x32_float32_tile_conflicts_32_way():
    p = _tile(32)
    col = _row(p, "column-store", "shared", "store")
    assert col.instructions == 1
    assert (col.wavefronts, col.ideal_wavefronts, col.ways, col.conflicted) == (32, 1, 32, 1)
    assert col.extra_wavefronts == 31
    assert _row(p, "column-load", "shared", "load").ways == 32
    assert p.worst_ways == 32 and p.extra_wavefronts == 62
    assert p.sites[0].space == "shared" and p.sites[0].ways == 32  # the conflicts are named first


def test_column_store_into_a_padded_32x33_tile_does_not_conflict():
    p = _tile(33)
    col = _row(p, "column-store", "shared", "store")
    assert (col.wavefronts, col.ideal_wavefronts, col.ways, col.conflicted) == (1, 1, 1, 0)
    assert p.worst_ways == 1 and p.extra_wavefronts == 0


def test_row_store_and_broadcast_read_are_conflict_free():
    p = _tile(32)
    row = _row(p, "row-store", "shared", "store")
    assert (row.wavefronts, row.ideal_wavefronts, row.ways) == (1, 1, 1)
    bcast = _row(p, "broadcast", "shared", "load")
    assert bcast.accesses == 32 and bcast.bytes == 128
    assert (bcast.wavefronts, bcast.ideal_wavefronts, bcast.ways) == (1, 1, 1)


def test_64_bit_shared_accesses_are_served_a_half_warp_at_a_time():
    x = np.arange(32, dtype=np.float64)
    out = np.zeros(32, np.float64)
    p = _traced(lambda: tk.wide_shared[1, 32](out, x))
    np.testing.assert_array_equal(out, x[::-1])
    for marker, kind in (("f64-store", "store"), ("f64-load", "load")):
        r = _row(p, marker, "shared", kind)
        assert (r.wavefronts, r.ideal_wavefronts, r.ways) == (2, 2, 1), marker


def test_dynamic_shared_memory_is_traced_too():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    p = _traced(lambda: tk.dynamic_shared[1, 32, 0, 256](out, x))
    np.testing.assert_array_equal(out, x)
    r = _row(p, "dynamic-store", "shared", "store")
    assert (r.wavefronts, r.ideal_wavefronts, r.ways) == (2, 1, 2)


@pytest.mark.parametrize(("step", "wavefronts", "ways"), [(16, 4, 1), (32, 8, 2)])
def test_128_bit_shared_store_is_served_a_quarter_warp_at_a_time(step, wavefronts, ways):
    # st.shared.v4 through the wgmma twin's hook: one 16-byte access per lane.
    # Packed (16 bytes apart) each quarter-warp fills the 32 banks once: four
    # wavefronts and no conflict; 32 bytes apart, two lanes of a quarter share banks.
    out = np.zeros(32 * step // 4, np.uint32)
    p = _traced(lambda: tk.v4_store_kernel(step)[1, 32](out))
    r = _row(p, "v4-store", "shared", "store")
    assert (r.instructions, r.accesses, r.bytes) == (1, 32, 512)
    assert (r.wavefronts, r.ideal_wavefronts, r.ways) == (wavefronts, 4, ways)
    want = np.zeros_like(out)
    for lane in range(32):
        want[lane * step // 4 : lane * step // 4 + 4] = lane + np.arange(4)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(("row_halves", "wavefronts", "ways"), [(24, 4, 1), (16, 8, 2)])
def test_ldmatrix_x4_reads_one_16_byte_row_per_lane(row_halves, wavefronts, ways):
    # Rows of 48 bytes put eight rows in eight different bank quads; rows of
    # 32 bytes put rows r and r + 4 on the same banks: 2-way.
    a = np.arange(256, dtype=np.uint16).reshape(16, 16)
    out = np.zeros((32, 4), np.uint32)
    kernel = tk.ldmatrix_kernel(row_halves)
    kernel[1, 32](out, a)
    plain = out.copy()
    out[:] = 0
    p = _traced(lambda: kernel[1, 32](out, a))
    np.testing.assert_array_equal(out, plain)
    r = _row(p, "ldmatrix", "shared", "load")
    assert r.site.startswith("kernels/common/mma.py:") and r.via.endswith(tk.line_of("ldmatrix"))
    # One instruction of 32 row reads, not 128 element reads by every lane.
    assert (r.instructions, r.accesses, r.bytes) == (1, 32, 512)
    assert (r.wavefronts, r.ideal_wavefronts, r.ways) == (wavefronts, 4, ways)


# ── results, patches, output ─────────────────────────────────────────────────


def test_tracing_leaves_results_identical():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(32 * 8).astype(np.float32)
    runs = {}
    for traced in (False, True):
        outs = [np.zeros(32, np.float32) for _ in range(3)]

        def launch():
            tk.strided_load[1, 32](outs[0], x, 8)
            tk.tile_kernel(33)[1, 32](outs[1], x[:32])
            tk.row_view_load[1, 32](outs[2], x.reshape(32, 8))

        if traced:
            with mt.trace() as t:
                launch()
            assert t.launches == 3
        else:
            launch()
        runs[traced] = outs
    for a, b in zip(runs[False], runs[True]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(runs[True][0], x[::8])


def test_nothing_stays_patched_after_the_trace():
    before = mt.patched_names()
    with mt.trace() as t:
        during = mt.patched_names()
        tk.copy[1, 32](np.zeros(32, np.float32), np.ones(32, np.float32))
    assert all(during[k] is not before[k] for k in before), "a trace patches each of these"
    assert all(mt.patched_names()[k] is before[k] for k in before)
    seen = t.accesses
    tk.copy[1, 32](np.zeros(32, np.float32), np.ones(32, np.float32))
    assert t.accesses == seen == 64 and t.launches == 1  # the launch after the trace was not seen

    with pytest.raises(ZeroDivisionError):
        with mt.trace():
            1 / 0
    assert all(mt.patched_names()[k] is before[k] for k in before)


def test_traces_do_not_nest():
    with mt.trace():
        with pytest.raises(RuntimeError, match="already running"):
            with mt.trace():
                pass
    with mt.trace():  # and the refusal left the first one able to end cleanly
        pass


def test_a_device_functions_accesses_pair_by_call_site():
    out = np.zeros(32, np.float32)
    p = _traced(lambda: tk.two_calls[1, 32](out))
    read = _row(p, "read-if", "shared", "load")
    assert (read.instructions, read.accesses) == (2, 48)
    assert read.wavefronts == read.ideal_wavefronts == 2 and read.ways == 1
    np.testing.assert_array_equal(out, [t + (t + 16) % 32 if t < 16 else (t + 16) % 32 for t in range(32)])


def test_a_lanes_accesses_are_numbered_afresh_after_each_barrier():
    """Lanes that make different numbers of accesses at a line (a
    lane-dependent loop) agree again at a barrier: each round's j-th reads
    are one warp instruction, conflict-free. Numbered across the barrier,
    lane 31's second-round reads paired with others' first-round ones:
    conflicts the hardware does not have."""
    out = np.zeros(32, np.float32)
    p = _traced(lambda: tk.uneven_then_barrier[1, 32](out))
    read = _row(p, "uneven-read", "shared", "load")
    assert read.accesses == 2 * sum(range(32)) and read.instructions == 2 * 31
    assert read.wavefronts == read.ideal_wavefronts and read.ways == 1, read.to_json()
    want = [sum(float((t + j + r) % 32) for r in range(2) for j in range(t)) for t in range(32)]
    np.testing.assert_array_equal(out, want)


def test_a_helpers_accesses_pair_per_call_where_a_lane_skipped_one():
    """A helper called once a tile, its store predicated off in half the
    lanes in the first tile: each call's stores are one instruction,
    conflict-free (paired by the k-th store of the line, lanes 16-31's
    second-tile stores joined lanes 0-15's first-tile ones)."""
    out = np.zeros(32, np.float32)
    p = _traced(lambda: tk.predicated_calls[1, 32](out))
    put = _row(p, "put-if", "shared", "store")
    assert (put.instructions, put.accesses) == (4, 16 + 3 * 32)
    assert put.wavefronts == put.ideal_wavefronts == 4 and put.ways == 1, put.to_json()
    np.testing.assert_array_equal(out, np.ones(32, np.float32))


def test_a_sampled_trace_runs_n_blocks_of_each_launch_spread_over_its_grid():
    x = np.arange(1, 321, dtype=np.float32)
    out = np.zeros(320, np.float32)
    with mt.trace(sample=4) as t:
        tk.copy[10, 32](out, x)
    ran = [b for b in range(10) if out[32 * b] == x[32 * b]]
    assert ran == [0, 3, 6, 9]  # the first, the last, and evenly between
    assert all((out[32 * b : 32 * b + 32] == 0).all() for b in range(10) if b not in ran)
    p = mt.summarize(t, declared_bytes=8 * 320)
    assert (p.blocks, p.grid_blocks, p.sampled) == (4, 10, True)
    # every block of this grid does the same: the scaled counts are the whole grid's
    assert (p.load_bytes, p.store_bytes, p.sectors) == (4 * 320, 4 * 320, 2 * 40)
    assert p.requested_vs_declared == pytest.approx(1.0)
    assert json.loads(json.dumps(p.to_json()))["grid_blocks"] == 10
    with mt.trace(sample=16) as t:  # a grid of at most n blocks runs whole
        tk.copy[10, 32](out, x)
    assert mt.summarize(t).sampled is False


def test_a_sampled_trace_weighs_each_launch_by_its_grid():
    """Two launches of different grids: sampled, each launch's counts are
    scaled by its own grid over its blocks run, so the figures equal the
    whole run's; weighing the sampled blocks alike would give the small
    launch as much say as the big one (0.77 where the whole is 0.70)."""
    x = np.arange(2 * 32 * 12, dtype=np.float32)
    a, b = np.zeros(64, np.float32), np.zeros(32 * 12, np.float32)

    def run():
        tk.copy[2, 32](a, x[:64])  # 2 blocks, whole sectors
        tk.strided_copy[12, 32](b, x, 2)  # 12 blocks, half of each load sector

    w = mt.summarize(mt.run_traced(run))
    with mt.trace(sample=3) as t:
        run()
    s = mt.summarize(t)
    assert (s.blocks, s.grid_blocks, w.blocks) == (2 + 3, 14, 14)
    assert (s.sectors, s.used_bytes, s.requested_bytes) == (w.sectors, w.used_bytes, w.requested_bytes)
    assert s.sector_efficiency == pytest.approx(w.sector_efficiency) == pytest.approx(3584 / 5120)
    load = _row(s, "strided-copy", "global", "load")
    assert load.instructions == 12 and load.efficiency == pytest.approx(0.5)


def test_run_traced_and_to_json():
    x = np.arange(32 * 8, dtype=np.float32)
    out = np.zeros(32, np.float32)
    t = mt.run_traced(lambda: tk.strided_load[1, 32](out, x, 8))
    doc = json.loads(json.dumps(mt.summarize(t, declared_bytes=256).to_json()))
    assert doc["global"]["requested_bytes"] == 256 and doc["global"]["requested_vs_declared"] == 1.0
    assert doc["global"]["sector_efficiency"] == pytest.approx(256 / (36 * 32))
    assert doc["shared"]["wavefronts"] == 0
    assert [s["site"].rsplit("/", 1)[-1] for s in doc["sites"]] == [
        tk.line_of("strided-load"),
        tk.line_of("strided-store"),
    ]
    assert doc["sites"][0]["efficiency"] == 0.125


def test_a_real_variant_runs_unchanged_under_the_tracer():
    # w4a16.gemv's 64-thread kernel at its smoke shape: shared staging, a
    # block reduction, warp shuffles, arrays passed in tuples to device functions.
    from numba import cuda

    from leverctl.bench.check import run_once
    from leverctl_kernels.registry import get_path

    path = get_path("w4a16.gemv")
    shape = path.shapes("smoke", None)[0]
    launch = path.variants["gemv_64t"].build(shape)
    inputs = path.make_inputs(shape, np.random.default_rng(0))
    _, plain = run_once(path, shape, launch, inputs, cuda)
    with mt.trace() as t:
        _, traced = run_once(path, shape, launch, inputs, cuda)
    for name in plain:
        np.testing.assert_array_equal(plain[name], traced[name])
    declared = path.variant_traffic("gemv_64t", shape)
    p = mt.summarize(t, declared_bytes=declared.bytes)
    # Every weight and scale byte is read once and x once per block (so at
    # least the declared reads); y is written once.
    assert p.load_bytes >= declared.bytes_read and p.store_bytes == declared.bytes_written
    assert p.shared_load_bytes > 0 and p.sector_efficiency is not None
    assert p.requested_vs_declared == pytest.approx(p.requested_bytes / declared.bytes)
    # profile_variant does the same run (build, inputs, one traced launch) by name.
    q = mt.profile_variant(path, "gemv_64t", shape)
    assert q.to_json() | {"seconds": 0} == p.to_json() | {"seconds": 0}


def test_a_variants_load_time_work_is_done_before_the_trace():
    """``pre_rotated`` rotates its weights once per weight buffer, at load
    (``launch.load``), which no timed call repeats: the trace is a warm
    call's, one projection and one cache write, the launches and bytes of
    ``runtime_rotation``'s call less the write's rotation. Traced with the
    load (a first call, as the profile traced it before), the rotation's
    launch and its bytes are back in."""
    from numba import cuda

    from leverctl.bench.check import run_once
    from leverctl_kernels.registry import get_path

    path = get_path("attention.rotation")
    shape = min(path.shapes("smoke", None), key=lambda s: path.traffic(s).bytes)
    pre = mt.profile_variant(path, "pre_rotated", shape)
    rt = mt.profile_variant(path, "runtime_rotation", shape)
    assert pre.launches == rt.launches == 2
    assert pre.load_bytes == rt.load_bytes and pre.store_bytes == rt.store_bytes

    launch = path.variants["pre_rotated"].build(shape)
    with mt.trace() as t:
        run_once(path, shape, launch, path.make_inputs(shape, np.random.default_rng(0)), cuda)
    cold = mt.summarize(t, declared_bytes=path.variant_traffic("pre_rotated", shape).bytes)
    assert cold.launches == 3 and cold.requested_bytes > 5 * pre.requested_bytes


def test_a_warm_trace_of_a_small_gemm_requests_about_its_declared_bytes():
    """``pre_rotated``'s warm call at the smallest smoke shape (3 tokens in
    a 64-row tile) asks for about the bytes it declares."""
    from leverctl_kernels.registry import get_path

    path = get_path("attention.rotation")
    shape = min(path.shapes("smoke", None), key=lambda s: path.traffic(s).bytes)
    pre = mt.profile_variant(path, "pre_rotated", shape)
    assert pre.requested_vs_declared < 1.5, pre.requested_vs_declared


def test_a_shared_helpers_rows_name_the_kernel_line_that_reached_it():
    """An access in a shared helper is also placed by the kernel line that
    reached it: a family kernel's line, or for the GEMM engine's own kernel
    (every frame of it in ``kernels/common``) its kernel's line, never the
    simulator's thread that ran it (the rows used to say ``threading.py``)."""
    from leverctl_kernels.registry import get_path

    path = get_path("attention.rotation")
    shape = min(path.shapes("smoke", None), key=lambda s: path.traffic(s).bytes)
    prof = mt.profile_variant(path, "runtime_rotation", shape)
    vias = {r.via for r in prof.sites if r.via}
    assert vias and all(v.startswith("kernels/") for v in vias), sorted(vias)
    assert any(v.startswith("kernels/common/gemm/") for v in vias), sorted(vias)  # the engine's kernel line
