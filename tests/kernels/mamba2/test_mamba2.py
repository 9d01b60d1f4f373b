"""The Mamba2 kernels in the CUDA simulator, at the paths' tiny odd smoke
shapes (2 groups, head dim 8, state 16, prompts of 37 and 13 tokens in
chunks of 16 and 8 that do not divide them).

Each scan variant passes the bench's own check (``leverctl.bench.check``:
outputs and the final state against the float64 recurrence, outputs and
scratch poisoned first) at both shapes, and carries a state across two
calls: the prompt split in two, the second call starting from the state
the first left, gives the single call's outputs and final state. A wrong
decay (its exponent halved) fails every variant's check, and so does the
SSD scan with a chunk's state not carried into the next. The projection
path runs ffn_prefill's W4A4 GEMM and the W4A16 GEMM on its inputs.
"""

from __future__ import annotations

import linecache
from pathlib import Path

import numpy as np
import pytest

from leverctl_kernels.common.path import Shape

SCAN_VARIANTS = ("ssd", "persistent", "sequential")
TOKEN_INPUTS = ("x", "dt_raw", "B", "C")


def _scan():
    from leverctl_kernels.mamba2.prefill_scan.spec import PATH as PREFILL_SCAN

    return PREFILL_SCAN


def _smoke(label_start: str):
    return next(s for s in _scan().shapes("smoke", None) if s.label.startswith(label_start))


def _check(path, variant, shape, inputs, launch=None):
    from numba import cuda

    from leverctl.bench.check import check

    launch = launch or path.variants[variant].build(shape)
    bufs, fig = check(path, variant, shape, launch, inputs, cuda)
    return fig, bufs


@pytest.mark.sim
@pytest.mark.parametrize("variant", SCAN_VARIANTS)
@pytest.mark.parametrize("label", ["smoke t37", "smoke t13"])
def test_each_scan_variant_passes_the_check_on_outputs_and_final_state(variant, label):
    shape = _smoke(label)
    fig, _ = _check(_scan(), variant, shape, _scan().make_inputs(shape, np.random.default_rng(shape["t"])))
    assert fig.passed, fig
    assert fig.rel < 1e-5, fig  # fp32 arithmetic: far inside the bound


def _run(variant, shape, inputs, **cfg):
    """(y, final state) of one call, on the host."""
    from numba import cuda

    bufs = {k: cuda.to_device(np.ascontiguousarray(v)) for k, v in inputs.items()}
    bufs["y"] = cuda.to_device(np.full((shape["t"], shape["h"], shape["p"]), np.nan, np.float32))
    _scan().variants[variant].build(shape, **cfg)(bufs)
    return bufs["y"].copy_to_host(), bufs["state"].copy_to_host()


def _split(inputs: dict, t0: int, t1: int) -> dict:
    return {k: (v[t0:t1] if k in TOKEN_INPUTS else v) for k, v in inputs.items()}


@pytest.mark.sim
@pytest.mark.parametrize("variant", SCAN_VARIANTS)
def test_a_state_carried_across_two_calls_gives_the_single_calls_outputs_and_state(variant):
    whole = _smoke("smoke t13")
    inputs = _scan().make_inputs(whole, np.random.default_rng(7))
    ref = _scan().reference(whole, inputs)
    cut = 9  # 8 + 1: the first call ends one token into its second chunk, the second is 4 tokens
    first = Shape("first", {**whole.dims, "t": cut})
    second = Shape("second", {**whole.dims, "t": whole["t"] - cut})
    y1, s1 = _run(variant, first, _split(inputs, 0, cut))
    y2, s2 = _run(variant, second, {**_split(inputs, cut, whole["t"]), "state": s1})
    tol = _scan().variant_tolerance(variant)
    for got, want in ((np.concatenate([y1, y2]), ref["y"]), (s2, ref["state"])):
        err = np.abs(got - want).max()
        assert np.isfinite(got).all() and err <= tol.abs_bound(want), (variant, err)


@pytest.mark.sim
@pytest.mark.parametrize("variant", SCAN_VARIANTS)
def test_a_wrong_decay_fails_the_check(variant):
    shape = _smoke("smoke t13")
    launch = _scan().variants[variant].build(shape, DECAY_SCALE=0.5)
    fig, _ = _check(_scan(), variant, shape, _scan().make_inputs(shape, np.random.default_rng(3)), launch)
    assert not fig.passed, fig


@pytest.mark.sim
@pytest.mark.parametrize("label", ["smoke t37", "smoke t13"])
def test_the_ssd_read_out_of_a_short_tile_reads_no_unwritten_c_row(monkeypatch, label):
    """The read-out sums all 32 of a tile's staged ``C`` rows (unrolled);
    a chunk's short last tile stages zeros past its tokens rather than
    leaving them as they were. With every float of shared memory an
    infinity until written, the scan raises no invalid-value warning (an
    unwritten row times a zero state column: inf x 0) and still passes."""
    import warnings

    from leverctl_kernels.common import simwarp

    def infinities(shape, dtype):
        a = np.empty(shape, dtype)
        a.fill(np.inf if a.dtype.kind == "f" else 0)
        return a

    monkeypatch.setattr(simwarp, "poisoned", infinities)
    shape = _smoke(label)
    inputs = _scan().make_inputs(shape, np.random.default_rng(shape["t"]))
    inputs["state"] = np.zeros_like(inputs["state"])  # zero state columns: an unwritten row's inf x 0
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fig, _ = _check(_scan(), "ssd", shape, inputs)
    assert fig.passed, fig
    assert not [w for w in seen if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in seen]


@pytest.mark.sim
def test_an_ssd_scan_that_drops_the_inter_chunk_carry_fails_the_check():
    from leverctl_kernels.mamba2.prefill_scan import ssd

    shape = _smoke("smoke t13")
    fig, _ = _check(
        _scan(), "ssd", shape, _scan().make_inputs(shape, np.random.default_rng(3)), ssd.build(shape, CARRY=False)
    )
    assert not fig.passed, fig
    assert fig.worst in ("y", "state")


@pytest.mark.sim
@pytest.mark.parametrize("variant", ["w4a4", "w4a16"])
def test_each_projection_gemm_passes_the_check_on_the_paths_inputs(variant):
    from leverctl_kernels.ffn.prefill import naive
    from leverctl_kernels.mamba2.prefill_proj.spec import PATH as PREFILL_PROJ

    shape = next(s for s in PREFILL_PROJ.shapes("smoke", None) if s["m"] == 19)
    inputs = PREFILL_PROJ.make_inputs(shape, np.random.default_rng(5))
    fig, bufs = _check(PREFILL_PROJ, variant, shape, inputs)
    assert fig.passed, fig
    if variant == "w4a4":  # its own arithmetic, tightly: the activations quantised to NVFP4
        want = naive.w4a4_exact(inputs["a"], inputs["w_fp4"], inputs["w_fp4_scales"], inputs["w_fp4_ts"])
        got = bufs["c"].copy_to_host().astype(np.float64)
        assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max()


@pytest.mark.sim
@pytest.mark.parametrize("variant", ["persistent", "sequential"])
def test_past_the_ssd_fit_the_variants_chosen_there_pass_at_an_odd_state_size(variant):
    """State 200 (not a power of two, past the fit): the persistent kernel's
    lanes hold 7 elements each over 32 lanes, 24 of the 224 slots empty."""
    from leverctl_kernels.selection.mamba2 import PREFILL_SCAN as MAMBA2_PREFILL_SCAN

    shape = Shape("odd state", dict(t=5, h=2, p=3, n=200, g=1, chunk=4))
    levers = {"ssm_persistent": variant == "persistent"}
    assert MAMBA2_PREFILL_SCAN.select(levers, shape).variant == variant
    fig, _ = _check(_scan(), variant, shape, _scan().make_inputs(shape, np.random.default_rng(11)))
    assert fig.passed, fig


@pytest.mark.sim
def test_the_persistent_scans_16_byte_layout_passes_unaligned_too_and_a_half_store_fails():
    """State 16 (two lanes of 8 a row): the 16-byte layout's kernel passes
    the check on aligned arrays and on arrays a float past 16 bytes (the
    element loads of the same layout), and at state 8 (one lane a row, no
    exchange) and 64 (8 lanes); a kernel that stores only half of each
    row fails it; a state of 200 keeps the strided layout (tested
    above)."""
    from numba import cuda

    from leverctl_kernels.mamba2.prefill_scan import persistent

    assert persistent.wide_fits(16) and persistent.wide_fits(128) and not persistent.wide_fits(200)
    assert persistent.lane_layout(128, True) == (16, 8) and persistent.lane_layout(128) == (32, 4)
    shape = Shape("eights", dict(t=9, h=2, p=5, n=16, g=1, chunk=4))
    inputs = _scan().make_inputs(shape, np.random.default_rng(19))
    fig, _ = _check(_scan(), "persistent", shape, inputs, persistent.build(shape))
    assert fig.passed, fig

    def off16(a):  # a device view one element past 16 bytes
        flat = cuda.to_device(np.concatenate([np.zeros(8 // a.itemsize, a.dtype), a.reshape(-1)]))
        return flat[8 // a.itemsize :].reshape(a.shape)

    threads = persistent.threads_for(5, 16, True)
    kern = persistent.make_scan(5, 16, 2, threads, wide=True)
    ref = _scan().reference(shape, inputs)
    bufs = {k: cuda.to_device(np.ascontiguousarray(v)) for k, v in inputs.items()}
    for name in ("state", "B", "C"):
        bufs[name] = off16(np.ascontiguousarray(inputs[name]))
    bufs["y"] = cuda.to_device(np.zeros(inputs["x"].shape, np.float32))
    kern[2, threads](*[bufs[a] for a in persistent.ARGS])
    for name in ("y", "state"):
        got = bufs[name].copy_to_host().astype(np.float64)
        assert np.abs(got - ref[name]).max() <= 1e-4 * np.abs(ref[name]).max(), name

    for n in (8, 64):
        other = Shape(f"n{n}", dict(t=5, h=2, p=3, n=n, g=1, chunk=4))
        fig, _ = _check(_scan(), "persistent", other, _scan().make_inputs(other, np.random.default_rng(n)))
        assert fig.passed, (n, fig)

    broken = persistent.build(shape, fault="half_store")
    fig, _ = _check(_scan(), "persistent", shape, inputs, broken)
    assert not fig.passed and fig.worst == "state", fig


@pytest.mark.sim
def test_the_persistent_scans_windows_of_tokens_pass_past_sixteen_and_a_stale_window_fails():
    """37 tokens, two whole windows of 16 and 5 more, on 5 rows of a
    16-row block: the 16-byte layout's kernel, which takes dt and x a
    window at a time through shared memory, passes the check; one that
    stages x for the first window only (and reads it again for the later
    tokens) fails it."""
    from leverctl_kernels.mamba2.prefill_scan import persistent

    shape = Shape("windows", dict(t=37, h=2, p=5, n=16, g=1, chunk=4))
    inputs = _scan().make_inputs(shape, np.random.default_rng(37))
    fig, _ = _check(_scan(), "persistent", shape, inputs, persistent.build(shape))
    assert fig.passed, fig
    fig, _ = _check(_scan(), "persistent", shape, inputs, persistent.build(shape, fault="first_window"))
    assert not fig.passed, fig


@pytest.mark.sim
def test_the_persistent_scan_loads_dt_once_a_block_a_window_and_x_in_whole_sectors():
    """Traced at 32 rows of state 16 (one 64-thread block a head), 21
    tokens: ``dt_raw`` and ``dt_bias`` are loaded once a block a window of
    16 tokens (one instruction each, where each warp loaded both every
    token), and every load of x uses whole sectors (a warp's instruction
    one token's 32 rows, where each warp took its rows' 4 bytes of a
    sector)."""
    import inspect

    from leverctl.profile import memtrace as mt
    from leverctl_kernels.mamba2.prefill_scan import persistent

    t, h, p = 21, 2, 32
    shape = Shape("rows", dict(t=t, h=h, p=p, n=16, g=1, chunk=4))
    inputs = _scan().make_inputs(shape, np.random.default_rng(21))
    with mt.trace() as tr:
        fig, _ = _check(_scan(), "persistent", shape, inputs, persistent.build(shape))
    assert fig.passed, fig
    sites = [r for r in mt.summarize(tr).sites if r.space == "global"]
    src = inspect.getsource(persistent).splitlines()
    line = next(i for i, text in enumerate(src, 1) if "dts[tid] = dt_raw" in text)
    dt = [r for r in sites if r.site == f"kernels/mamba2/prefill_scan/persistent.py:{line}"]
    assert sum(r.instructions for r in dt) == h * 2 * 2, dt  # dt_raw and dt_bias, a block a head, two windows
    assert not [r for r in sites if r.site.startswith("kernels/mamba2/prefill_scan/_device.py")]
    mine = [r for r in sites if r.site.startswith("kernels/mamba2/prefill_scan/persistent.py")]
    xs = [r for r in mine if r.kind == "load" and r.bytes == 2 * r.accesses]
    assert sum(r.bytes for r in xs) == t * h * p * 2
    assert all(r.efficiency == 1.0 for r in xs), xs


@pytest.mark.sim
# (h, p, n): 10 rows in pairs (the paired form: a pair's state accesses in
# whole sectors), at state 16 and 24; 5 rows, no pair for the last (a
# thread alone)
@pytest.mark.parametrize(
    ("h", "p", "n"), [(2, 5, 16), (2, 5, 24), (1, 5, 16)], ids=["paired", "paired-n24", "odd-rows"]
)
def test_the_sequential_scan_by_eights_gives_the_element_loops_bits_and_a_half_store_fails(h, p, n):
    """Whole eights of state: a thread's row 8 states a step, 16-byte loads
    and stores of the state (a pair of threads together where the rows
    pair) and of B's and C's values, summed in
    the element loop's order, so the outputs and final state are the
    element kernel's bit for bit. State 12 takes the element loop and
    passes; a kernel that stores only the first four of each eight states
    fails the check."""
    from numba import cuda

    from leverctl_kernels.mamba2.prefill_scan import sequential

    shape = Shape("eights", dict(t=9, h=h, p=p, n=n, g=1, chunk=4))
    inputs = _scan().make_inputs(shape, np.random.default_rng(17))

    def run(wide: bool):
        bufs = {k: cuda.to_device(np.ascontiguousarray(v)) for k, v in inputs.items()}
        bufs["y"] = cuda.to_device(np.zeros(inputs["x"].shape, np.float32))
        kern = sequential.make_scan(h, wide=wide)
        kern[1, 32](*[bufs[a] for a in sequential.ARGS])
        return bufs["y"].copy_to_host(), bufs["state"].copy_to_host()

    (y8, s8), (y1, s1) = run(True), run(False)
    assert np.array_equal(y8.view(np.uint32), y1.view(np.uint32))
    assert np.array_equal(s8.view(np.uint32), s1.view(np.uint32))
    fig, _ = _check(_scan(), "sequential", shape, inputs)
    assert fig.passed, fig
    odd = Shape("twelve", dict(t=9, h=2, p=5, n=12, g=1, chunk=4))
    fig, _ = _check(_scan(), "sequential", odd, _scan().make_inputs(odd, np.random.default_rng(19)))
    assert fig.passed, fig
    broken = sequential.build(shape, fault="half_store")
    fig, _ = _check(_scan(), "sequential", shape, inputs, broken)
    assert not fig.passed, fig


@pytest.mark.sim
def test_the_paired_sequential_scans_state_accesses_are_whole_sectors():
    """Traced at state 32, 8 rows: every load and store of the state uses
    whole sectors (a pair's two lanes one row's 32 bytes an instruction),
    where each thread alone used half of each sector."""
    from leverctl.profile import memtrace as mt
    from leverctl_kernels.mamba2.prefill_scan import sequential

    shape = Shape("pairs", dict(t=3, h=2, p=4, n=32, g=1, chunk=4))
    inputs = _scan().make_inputs(shape, np.random.default_rng(5))
    with mt.trace() as t:
        fig, _ = _check(_scan(), "sequential", shape, inputs, sequential.build(shape))
    assert fig.passed, fig
    wide = [
        r
        for r in mt.summarize(t).sites
        if r.space == "global" and r.site.startswith("kernels/mamba2/prefill_scan/sequential.py")
        and r.bytes == 16 * r.accesses
    ]  # fmt: skip
    # the state's: every 16-byte access but B's and C's loads (one address a warp: a sector an instruction)
    state = [r for r in wide if r.kind == "store" or r.sectors > r.instructions]
    for kind in ("load", "store"):  # 3 tokens x 8 rows x 32 states of 4 bytes, each way
        assert sum(r.bytes for r in state if r.kind == kind) == 3 * 8 * 32 * 4, kind
    assert all(r.efficiency == 1.0 for r in state), state


@pytest.mark.sim
def test_an_ssd_chunk_longer_than_its_32_token_tiles_passes():
    """Chunks of 40 (a full 32-token tile and 8 more) over 45 tokens: the
    chunk kernels' second tile, the below-diagonal source tile and a short
    last chunk, none of which the smoke shapes' chunks of 16 and 8 reach."""
    shape = Shape("long chunk", dict(t=45, h=2, p=3, n=5, g=1, chunk=40))  # n odd: the C.B rows in 16-bit halves
    fig, _ = _check(_scan(), "ssd", shape, _scan().make_inputs(shape, np.random.default_rng(13)))
    assert fig.passed, fig


@pytest.mark.sim
def test_an_ssd_scan_whose_cb_mma_reads_b_on_the_wrong_lanes_fails_the_check():
    """The chunk scan's ``C.B`` blocks on the tensor cores with B's fragment
    map shifted by a column (each lane loads its neighbour's row of B):
    the check rejects the scan (the smoke shapes pass with the right map)."""
    from numba import cuda

    from leverctl_kernels.common import mma
    from leverctl_kernels.mamba2.prefill_scan import ssd

    @cuda.jit(device=True, inline="always")
    def b_next_column(lane, i):
        k, n = mma.b_elem(lane, i)
        return k, (n + 1) % mma.N

    shape = _smoke("smoke t13")
    launch = ssd.build(shape, layout=(mma.a_elem, b_next_column, mma.c_elem))
    fig, _ = _check(_scan(), "ssd", shape, _scan().make_inputs(shape, np.random.default_rng(3)), launch)
    assert not fig.passed, fig
    assert fig.worst == "y"


@pytest.mark.sim
@pytest.mark.parametrize("swizzled", [True, False], ids=["swizzled", "unswizzled-fails"])
def test_the_ssd_cb_block_goes_in_as_pairs_and_is_read_without_bank_conflicts(swizzled, monkeypatch):
    """The chunk scan's ``C.B`` block ``m``: the MMA results stored as
    column pairs, 8 bytes a lane, and ``M x`` reading four rows a warp
    (``P = 8``); with rows 32 floats apart, the columns of row ``i`` XORed
    with ``8 (i % 4)`` (``ssd.m_at``) keep both on distinct banks. Traced at
    the t13 smoke shape (chunks of 8): every access to ``m`` is served in the
    wavefronts its width needs, and the scan passes. Unswizzled (the same
    results), the check sees a half-warp's four rows share their banks."""
    from leverctl.profile import memtrace as mt
    from leverctl_kernels.mamba2.prefill_scan import ssd

    if not swizzled:
        monkeypatch.setattr(ssd, "m_at", lambda i, l: i * ssd.TILE + l)
    shape = _smoke("smoke t13")
    box = []
    trace = mt.run_traced(
        lambda: box.append(_check(_scan(), "ssd", shape, _scan().make_inputs(shape, np.random.default_rng(4)))[0])
    )
    assert box[0].passed, box[0]
    root = Path(__file__).resolve().parents[3]

    def text(site):  # the source line a site names
        f, line = site.rsplit(":", 1)
        return linecache.getline(str(root / f), int(line))

    rows = [r for r in mt.summarize(trace).sites if r.space == mt.SHARED and "ssd.py" in r.site]
    on_m = [r for r in rows if "m[m_at(" in text(r.site) or "st_shared_f32x2" in text(r.site)]
    kinds = {(r.kind, r.bytes // r.accesses) for r in on_m}
    assert {("store", 8), ("load", 4)} <= kinds, [r.to_json() for r in rows]
    conflicted = [r.to_json() for r in on_m if r.extra_wavefronts]
    assert (not conflicted) == swizzled, conflicted
