"""Gated DeltaNet kernel paths: every variant against the float64 reference
(outputs and carried states), carried state across calls, chunk splits, the
chunked WY form against the recurrence, variant choice for every lever
combination, and broken variants that the comparison must reject.

Simulator tests (``sim``) use tiny odd shapes; the comparator here is this
file's own, independent of the bench's checker.
"""

from __future__ import annotations

import itertools
import math
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from leverctl_kernels.common import mma
from leverctl_kernels.common.path import Shape, Tolerance
from leverctl_kernels.gdn import family as spec
from leverctl_kernels.gdn import naive
from leverctl_kernels.gdn.fused_conv.fused import eligible
from leverctl_kernels.registry import family_paths

ROOT = Path(__file__).resolve().parents[3]
PATHS = family_paths("gdn")
BY_NAME = {p.name: p for p in PATHS}
PREFILL, VERIFY, DECODE, FUSED = (BY_NAME[n] for n in ("gdn.prefill", "gdn.verify", "gdn.decode", "gdn.fused_conv"))
# The recurrence paths: the state, gates and head sizes the tests below read
# (the projection GEMV tiers are tested in test_gdn_proj.py).
RECURRENCE = (PREFILL, VERIFY, DECODE, FUSED)


# ------------------------------------------------------------------ helpers


def compare(got: np.ndarray, ref: np.ndarray, tol: Tolerance) -> tuple[bool, float, float]:
    """Test-local check: relative L2 error and max abs error within ``tol``,
    every element finite."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape
    if not np.all(np.isfinite(got)):
        return False, math.inf, math.inf
    diff = got - ref
    norm = np.linalg.norm(ref)
    rel = float(np.linalg.norm(diff) / norm) if norm else float(np.linalg.norm(diff))
    mx = float(np.max(np.abs(diff))) if diff.size else 0.0
    return rel <= tol.rel and mx <= tol.abs_bound(ref), rel, mx


def launch_variant(path, shape: Shape, inputs: dict, variant: str | None = None, launch=None) -> dict:
    """Upload, poison outputs with NaN (in-place ones start from their input),
    launch once, read every output back."""
    from numba import cuda

    if launch is None:
        launch = path.variants[variant].build(shape)
    bufs = {n: cuda.to_device(np.ascontiguousarray(a)) for n, a in inputs.items()}
    outs = path.outputs(shape)
    for name, (oshape, dtype) in outs.items():
        if name not in bufs:
            bufs[name] = cuda.to_device(np.full(oshape, np.nan, dtype))
    launch(bufs)
    cuda.synchronize()
    return {name: bufs[name].copy_to_host() for name in outs}


# The variants whose chunk makes k.k and q.k on mma.sync (fp16 inputs).
TENSOR_CORE_VARIANTS = {
    ("gdn.prefill", "regresident"),
    ("gdn.prefill", "global_state"),
    ("gdn.prefill_multi_stream", "batched"),
    ("gdn.prefill_multi_stream", "per_stream"),
    ("gdn.verify", "wy17"),
    ("gdn.verify", "wyn"),
}
# Their error at the smoke shapes, in the simulator (whose MMA sums exactly
# and rounds once): ~2e-7 of each output's scale. The declared tolerance has
# room for model shapes and a GPU's MMA; here they are held 50x tighter,
# 50x over what they make.
TC_SMOKE_TOL = Tolerance(rel=1e-5, abs_of_max=1e-5)


def check_all(path, variant, shape, got, ref):
    tol = path.variant_tolerance(variant)
    for name in path.outputs(shape):
        ok, rel, mx = compare(got[name], ref[name], tol)
        assert ok, f"{path.name}/{variant} {shape.label}: {name} rel={rel:.3g} max_abs={mx:.3g} (tol {tol})"
        if (path.name, variant) in TENSOR_CORE_VARIANTS:
            ok, rel, mx = compare(got[name], ref[name], TC_SMOKE_TOL)
            assert ok, (
                f"{path.name}/{variant} {shape.label}: {name} rel={rel:.3g} max_abs={mx:.3g} "
                f"(tensor-core smoke tol {TC_SMOKE_TOL})"
            )


def inputs_for(path, shape, seed=0):
    return path.make_inputs(shape, np.random.default_rng(seed))


def _shape(label, **dims):
    return Shape(label, dims)


# Extra odd shapes beyond the presets: a single partial chunk, chunk + 1,
# one q/k head over three value heads, mixed head dims.
EXTRA_PREFILL = [
    _shape("t9 c16 (one partial chunk)", t=9, chunk=16, hk=1, hv=2, dk=8, dv=8),
    _shape("t17 c16 hk1 hv3 dk12 dv8", t=17, chunk=16, hk=1, hv=3, dk=12, dv=8),
]
EXTRA_VERIFY = [_shape("t5 hk1 hv3 dk8 dv12", t=5, hk=1, hv=3, dk=8, dv=12)]


def _cases(path, extra=()):
    out = []
    for shape in [*path.shapes("smoke", None), *extra]:
        for v in path.variants:
            out.append(pytest.param(v, shape, id=f"{v}-{shape.label}"))
    return out


def _buildable(path, variant, shape) -> bool:
    if path is VERIFY and variant == "wy17":
        return shape["t"] == 17
    if path is FUSED and variant == "fused":
        return eligible(shape)[0]
    return True


# --------------------------------------------------------- every variant


@pytest.mark.sim
@pytest.mark.parametrize("variant,shape", _cases(PREFILL, EXTRA_PREFILL))
def test_prefill_matches_reference(variant, shape):
    x = inputs_for(PREFILL, shape)
    got = launch_variant(PREFILL, shape, x, variant)
    check_all(PREFILL, variant, shape, got, PREFILL.reference(shape, x))


@pytest.mark.sim
@pytest.mark.parametrize("variant,shape", _cases(VERIFY, EXTRA_VERIFY))
def test_verify_matches_reference(variant, shape):
    if not _buildable(VERIFY, variant, shape):
        with pytest.raises(ValueError, match="17 tokens"):
            VERIFY.variants[variant].build(shape)
        return
    x = inputs_for(VERIFY, shape)
    got = launch_variant(VERIFY, shape, x, variant)
    check_all(VERIFY, variant, shape, got, VERIFY.reference(shape, x))


@pytest.mark.sim
@pytest.mark.parametrize("variant,shape", _cases(DECODE))
def test_decode_matches_reference(variant, shape):
    x = inputs_for(DECODE, shape)
    got = launch_variant(DECODE, shape, x, variant)
    ref = DECODE.reference(shape, x)
    check_all(DECODE, variant, shape, got, ref)
    untouched = np.setdiff1d(np.arange(shape["slots"]), x["slots"])
    assert untouched.size and np.array_equal(got["state"][untouched], x["state"][untouched])


@pytest.mark.sim
@pytest.mark.parametrize("variant,shape", _cases(FUSED))
def test_fused_conv_matches_reference(variant, shape):
    if not _buildable(FUSED, variant, shape):
        with pytest.raises(ValueError, match="Hv == 2\\*Hk|dk == dv"):
            FUSED.variants[variant].build(shape)
        return
    x = inputs_for(FUSED, shape)
    got = launch_variant(FUSED, shape, x, variant)
    ref = FUSED.reference(shape, x)
    check_all(FUSED, variant, shape, got, ref)
    # the rolling conv state holds copies of fp16 inputs: exact
    assert np.array_equal(got["conv_state"], ref["conv_state"].astype(np.float16))


# Whole-warp blocks, where a warp sums its row parts by shuffles before the
# shared sums (the smoke shapes' blocks are smaller than a warp): d = 32
# gives 4 column groups by 8 row parts a warp; the fused kernel at d = 64
# spans two warps across (8 column groups each) and 4 row parts a warp.
WHOLE_WARP = [
    (DECODE, "batched", _shape("n2 hk1 hv2 d32", n=2, slots=3, hk=1, hv=2, dk=32, dv=32)),
    (DECODE, "per_sequence", _shape("n2 hk1 hv2 d32", n=2, slots=3, hk=1, hv=2, dk=32, dv=32)),
    (VERIFY, "recurrent", _shape("t5 hk1 hv2 d32", t=5, hk=1, hv=2, dk=32, dv=32)),
    (VERIFY, "wy17", _shape("t17 hk1 hv1 d32", t=17, hk=1, hv=1, dk=32, dv=32)),
    (
        FUSED,
        "fused",
        _shape("n1 hk1 hv2 d64", n=1, slots=2, hk=1, hv=2, dk=64, dv=64, conv_width=4, fused_head_dim=64),
    ),
]


def _whole_warp_cases():
    return [pytest.param(p, v, s, id=f"{p.name}-{v}-{s.label}") for p, v, s in WHOLE_WARP]


@pytest.mark.sim
@pytest.mark.parametrize("path,variant,shape", _whole_warp_cases())
def test_whole_warp_blocks_sum_row_parts_by_shuffles_and_match(path, variant, shape):
    from leverctl_kernels.gdn import _layout, _step

    tile = _layout.tile_for(shape["dk"], shape["dv"])
    bv, nt = (tile.bv, tile.threads) if path is not FUSED else (shape["dv"], 4 * shape["dv"])
    st = _step.make_step(shape["dk"], shape["dv"], bv, nt)
    assert st.whole and st.wp > 1 and st.tile.cw == 4, st
    x = inputs_for(path, shape)
    got = launch_variant(path, shape, x, variant)
    check_all(path, variant, shape, got, path.reference(shape, x))


@pytest.mark.sim
def test_comparator_rejects_a_step_that_skips_a_shuffle_level(monkeypatch):
    """One butterfly level fewer (lanes 16 apart never summed): each column's
    dot products miss half a warp's rows, and the decode check fails."""
    from leverctl_kernels.gdn import _step
    from leverctl_kernels.gdn.decode import batched

    path, variant, shape = WHOLE_WARP[0]
    caches = (_step.make_step, batched.make_decode_block, batched.make_decode_batched)
    for f in caches:
        f.cache_clear()
    monkeypatch.setattr(_step, "butterfly_levels", lambda wp: wp.bit_length() - 2)
    try:
        x = inputs_for(path, shape)
        got = launch_variant(path, shape, x, variant)
    finally:
        for f in caches:
            f.cache_clear()
    ref = path.reference(shape, x)
    assert not compare(got["o"], ref["o"], path.tolerance)[0]
    assert not compare(got["state"], ref["state"], path.tolerance)[0]


@pytest.mark.sim
@pytest.mark.parametrize("variant", ["batched", "per_sequence"])
def test_traced_decode_streams_the_state_in_16_byte_accesses_on_whole_sectors(variant):
    """Under the memory tracer, at d = 32 (whole-warp blocks): the state's
    loads and stores are 16 bytes a lane, they carry >= 90 % of the bytes
    the kernel's warps move (a broadcast counted once), and its global
    sectors are >= 90 % used."""
    from leverctl.profile import memtrace as mt

    _, _, shape = WHOLE_WARP[0]
    x = inputs_for(DECODE, shape)
    box = []
    trace = mt.run_traced(lambda: box.append(launch_variant(DECODE, shape, x, variant)))
    check_all(DECODE, variant, shape, box[0], DECODE.reference(shape, x))
    prof = mt.summarize(trace)
    rows = [r for r in prof.sites if r.space == mt.GLOBAL]
    wide = sum(r.used_bytes for r in rows if r.bytes == 16 * r.accesses)
    total = sum(r.used_bytes for r in rows)
    state = 2 * shape["n"] * shape["hv"] * shape["dk"] * shape["dv"] * 4  # read and written once
    assert wide >= state and wide >= 0.9 * total, (wide, total, [r.to_json() for r in rows])
    assert prof.sector_efficiency >= 0.9, [r.to_json() for r in rows]


@pytest.mark.sim
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "seen-as-misaligned"])
def test_traced_wy17_stages_its_rows_in_16_byte_loads_on_whole_sectors(aligned, monkeypatch):
    """wy17 traced at its profile shape's rows (the model's dk = dv = 128,
    17 tokens), one q/k head and one value head: 4 blocks of 128 threads.
    The chunk's q and k rows are requested once a block, all by 16-byte
    loads (each block's 16 rows of both); 16-byte loads carry >= 90 % of the
    bytes loaded (the state slice, q, k, v's slice: all but the last token's
    rows and the gates) and the global sectors are >= 90 % used. Before the
    staging the chunk read q/k element by element inside its dot products:
    20 % of the sectors, 12.5x the declared bytes. With the rows taken as
    misaligned (the staging's half-a-step path, which a view not starting
    on 16 bytes takes) the same check fails."""
    from leverctl.profile import memtrace as mt
    from leverctl_kernels.gdn import _chunk

    if not aligned:
        monkeypatch.setattr(_chunk, "aligned16", lambda a: False)

    model = next(s for s in VERIFY.shapes("model", None) if s["t"] == 17)
    shape = VERIFY.extra["profile_shape"](model)
    assert (shape["dk"], shape["dv"], shape["hk"], shape["hv"]) == (128, 128, 1, 2)
    # one value head (4 blocks) keeps the model's rows at half the simulator's time;
    # the misaligned case needs only to fail: at d = 64 (2 blocks)
    d = 128 if aligned else 64
    shape = Shape(shape.label, {**shape.dims, "hv": 1, "dk": d, "dv": d})
    x = inputs_for(VERIFY, shape)
    box = []
    trace = mt.run_traced(lambda: box.append(launch_variant(VERIFY, shape, x, "wy17")))
    check_all(VERIFY, "wy17", shape, box[0], VERIFY.reference(shape, x))
    prof = mt.summarize(trace)
    loads = [r for r in prof.sites if r.space == mt.GLOBAL and r.kind == "load"]
    wide = sum(r.used_bytes for r in loads if r.bytes == 16 * r.accesses)
    total = sum(r.used_bytes for r in loads)
    rows = shape["hv"] * shape["dv"] // 32 * 16 * 256  # 16 rows of 256 bytes in each block
    qk = [r for r in loads if r.bytes == 16 * r.accesses and "_chunk.py" in r.site and r.used_bytes == rows]
    if not aligned:
        assert not qk and wide < 0.9 * total, (wide, total)
        return
    assert len(qk) >= 2, [r.to_json() for r in loads]  # q and k, each row once a block
    assert wide >= 0.9 * total, (wide, total, [r.to_json() for r in loads])
    assert prof.sector_efficiency >= 0.9, [r.to_json() for r in prof.sites if r.space == mt.GLOBAL]


@pytest.mark.sim
@pytest.mark.parametrize("pitch", [None, 32], ids=["m-pitch", "rows-32-floats-apart-fails"])
def test_the_chunks_mma_results_go_into_m_as_pairs_without_bank_conflicts(pitch, monkeypatch):
    """wy17 at 17 tokens, dk = dv = 64, one value head (2 blocks): the
    chunk's ``A`` and ``P`` go from the MMA's D fragments into ``M`` as
    column pairs, one 8-byte store a lane (``warp_rows``' ``put2``), and
    with ``M``'s rows ``_chunk.m_pitch`` floats apart (24 at 17 rows) no
    access to ``M`` needs more wavefronts than its width: each half-warp's
    four rows on their own eight banks. With rows 32 floats apart (the same
    results) the check sees the stores' conflicts."""
    from leverctl.profile import memtrace as mt
    from leverctl_kernels.gdn import _chunk
    from leverctl_kernels.gdn.verify import wy17

    caches = (_chunk.make_scratch, wy17.make_verify_wy17)
    for f in caches:
        f.cache_clear()
    if pitch:
        monkeypatch.setattr(_chunk, "m_pitch", lambda C: pitch)
    try:
        model = next(s for s in VERIFY.shapes("model", None) if s["t"] == 17)
        shape = VERIFY.extra["profile_shape"](model)
        shape = Shape(shape.label, {**shape.dims, "hv": 1, "dk": 64, "dv": 64})
        x = inputs_for(VERIFY, shape)
        box = []
        trace = mt.run_traced(lambda: box.append(launch_variant(VERIFY, shape, x, "wy17")))
    finally:
        for f in caches:
            f.cache_clear()
    check_all(VERIFY, "wy17", shape, box[0], VERIFY.reference(shape, x))
    puts = [r for r in mt.summarize(trace).sites if r.space == mt.SHARED and "_mma_qk.py" in r.site]
    assert any(r.kind == "store" and r.bytes == 8 * r.accesses for r in puts), [r.to_json() for r in puts]
    conflicted = [r.to_json() for r in puts if r.extra_wavefronts]
    assert (not conflicted) == (pitch is None), conflicted


@pytest.mark.sim
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "seen-as-misaligned"])
def test_traced_recurrent_verify_stages_its_token_rows_in_16_byte_loads(aligned, monkeypatch):
    """The token-by-token verify traced at the model's rows (dk = dv = 128),
    5 tokens, one value head (4 blocks; d = 64 for the misaligned case): each block stages its tokens' q and
    k rows and v's slice once, by 16-byte loads (``_rows``), so 16-byte loads
    carry >= 90 % of the bytes loaded (the state slice and those rows; the
    gates stay scalar) on >= 90 % used sectors. Before, the rows went one
    half a lane: 85 % at 5 tokens, 62 % at 17. Seen as misaligned (the scalar
    path a view not starting on 16 bytes takes) the rows go one half a lane
    again and the same check fails; both paths give the same bits."""
    from leverctl.profile import memtrace as mt
    from leverctl_kernels.gdn import _rows

    if not aligned:
        monkeypatch.setattr(_rows, "aligned16", lambda a: False)
    model = next(s for s in VERIFY.shapes("model", None) if s["t"] == 17)
    shape = VERIFY.extra["profile_shape"](model)
    assert (shape["dk"], shape["dv"], shape["hk"], shape["hv"]) == (128, 128, 1, 2)
    d = 128 if aligned else 64  # the misaligned case needs only to fail: 2 blocks
    shape = Shape(shape.label, {**shape.dims, "t": 5, "hv": 1, "dk": d, "dv": d})
    x = inputs_for(VERIFY, shape)
    box = []
    trace = mt.run_traced(lambda: box.append(launch_variant(VERIFY, shape, x, "recurrent")))
    check_all(VERIFY, "recurrent", shape, box[0], VERIFY.reference(shape, x))
    prof = mt.summarize(trace)
    loads = [r for r in prof.sites if r.space == mt.GLOBAL and r.kind == "load"]
    staged = [r for r in loads if "_rows.py" in r.site]
    if not aligned:
        assert all(r.wide_bytes == 0 for r in staged) and prof.wide_load_share < 0.9, prof.wide_load_share
        return
    blocks = shape["dv"] // 32
    rows = blocks * shape["t"] * (2 * 2 * shape["dk"] + 2 * 32)  # q, k rows and v's 32 columns, fp16
    assert sum(r.wide_bytes for r in staged) == sum(r.bytes for r in staged) == rows, [r.to_json() for r in staged]
    assert prof.wide_load_share >= 0.9, [r.to_json() for r in loads]
    assert prof.sector_efficiency >= 0.9, [r.to_json() for r in prof.sites if r.space == mt.GLOBAL]


# Whole-warp shapes whose rows are several 16-byte pieces (q/k: 4, v's slice: 2).
TAIL_CASES = [WHOLE_WARP[0], WHOLE_WARP[2]]


@pytest.mark.sim
@pytest.mark.parametrize("fault", [0, 1, 2], ids=["staged", "last-piece-dropped", "last-piece-twice"])
@pytest.mark.parametrize("path,variant,shape", [pytest.param(*c, id=f"{c[0].name}-{c[1]}") for c in TAIL_CASES])
def test_the_row_staging_takes_every_piece_once(path, variant, shape, fault, monkeypatch):
    """The decode's and the recurrent verify's 16-byte row staging with
    ``_rows``' planted faults: each row's last piece left unstaged, or the
    piece before it staged in its place (its elements counted twice), fails
    the check; staged right, it matches, bit for bit the scalar path."""
    from leverctl_kernels.gdn import _layout, _rows

    tile = _layout.tile_for(shape["dk"], shape["dv"])
    assert shape["dk"] // 8 >= 2 and tile.bv // 8 >= 2  # a last piece and one before it in every row
    x = inputs_for(path, shape, seed=5)
    launch = path.variants[variant].build(shape, TAIL_FAULT=fault)
    got = launch_variant(path, shape, x, launch=launch)
    ref = path.reference(shape, x)
    ok = [compare(got[n], ref[n], path.tolerance)[0] for n in ("o", "state")]
    if fault:
        assert not any(ok), [compare(got[n], ref[n], path.tolerance) for n in ("o", "state")]
        return
    assert all(ok)
    monkeypatch.setattr(_rows, "aligned16", lambda a: False)  # the scalar path
    narrow = launch_variant(path, shape, x, launch=launch)
    for n in ("o", "state"):
        assert np.array_equal(got[n], narrow[n]), n


@pytest.mark.sim
@pytest.mark.parametrize("variant", ["fused", "separate"])
def test_the_conv_takes_eight_channels_16_bytes_a_load_bit_for_bit(variant, monkeypatch):
    """At d = 64 (whole-warp blocks, rows of whole 16-byte pieces) the conv
    reads x, its taps and its rolling state 16 bytes a load and writes the
    state back 16 bytes a store (``_conv.make_conv_piece``): traced, every
    conv load is a 16-byte one, and the outputs, the carried state and the
    conv state are those of the channel-by-channel path bit for bit."""
    from leverctl.profile import memtrace as mt
    from leverctl_kernels.gdn import _conv

    shape = WHOLE_WARP[4][2]
    x = inputs_for(FUSED, shape, seed=2)
    box = []
    trace = mt.run_traced(lambda: box.append(launch_variant(FUSED, shape, x, variant)))
    got = box[0]
    check_all(FUSED, variant, shape, got, FUSED.reference(shape, x))
    conv = [r for r in mt.summarize(trace).sites if r.space == mt.GLOBAL and "_conv.py" in r.site]
    assert conv and all(r.wide_bytes == r.bytes for r in conv), [r.to_json() for r in conv]
    monkeypatch.setattr(_conv, "aligned16", lambda a: False)
    narrow = launch_variant(FUSED, shape, x, variant)
    for n in got:
        assert np.array_equal(got[n], narrow[n]), n


@pytest.mark.sim
@pytest.mark.parametrize("fault", [1, 2], ids=["last-taps-dropped", "last-taps-twice"])
@pytest.mark.parametrize("variant", ["fused"])  # separate's conv is the same code (_conv), checked bit for bit above
def test_a_conv_piece_with_its_last_taps_dropped_or_doubled_fails(variant, fault):
    """``_conv.make_conv_piece``'s planted faults on the 16-byte path (the
    last 16-byte piece of eight channels' taps dropped, or the piece before
    it read in its place) make the outputs wrong: the check sees them."""
    shape = WHOLE_WARP[4][2]
    x = inputs_for(FUSED, shape, seed=2)
    got = launch_variant(FUSED, shape, x, launch=FUSED.variants[variant].build(shape, TAIL_FAULT=fault))
    ref = FUSED.reference(shape, x)
    assert not compare(got["out"], ref["out"], FUSED.tolerance)[0]


def test_the_patch_layout_at_model_and_smoke_shapes():
    """d = 128: 32 columns a block as 8 groups of 4, 16 row parts of 8 rows,
    128 threads, a warp 8 groups by 4 row parts; shapes whose rows do not
    split into 16-byte quads keep one column a thread."""
    from leverctl_kernels.gdn import _layout, _step

    t = _layout.tile_for(128, 128)
    assert (t.bv, t.cw, t.groups, t.ksplit, t.rows, t.threads) == (32, 4, 8, 16, 8, 128)
    st = _step.make_step(128, 128, t.bv, t.threads)
    assert (st.whole, st.qw, st.wp, st.cg, st.kg) == (True, 8, 4, 1, 4)
    fused = _step.make_step(128, 128, 128, 512)
    assert (fused.tile.threads, fused.tile.rows, fused.qw, fused.wp, fused.cg, fused.kg) == (512, 8, 8, 4, 4, 4)
    assert _layout.tile_for(12, 12).cw == 1  # 6-column slices
    assert _layout.tile_for(8, 10).cw == 1  # rows of 10 floats: not 16-byte aligned
    t8 = _layout.tile_for(8, 8)
    assert (t8.cw, t8.threads, t8.dk % t8.ksplit) == (4, 8, 0)


# ------------------------------------------------ carried state, chunking


@pytest.mark.sim
@pytest.mark.parametrize("variant", list(PREFILL.variants))
def test_prefill_state_carries_across_calls(variant):
    """Two calls (19 then 14 tokens, the state handed over in place) equal
    one reference run over the 33 tokens."""
    hk, hv, d, C = 2, 4, 8, 8
    s1 = _shape("a", t=19, chunk=C, hk=hk, hv=hv, dk=d, dv=d)
    s2 = _shape("b", t=14, chunk=C, hk=hk, hv=hv, dk=d, dv=d)
    whole = inputs_for(PREFILL, _shape("w", t=33, chunk=C, hk=hk, hv=hv, dk=d, dv=d), seed=5)

    def part(a, b):
        return {n: (x if n == "state" else x[a:b]) for n, x in whole.items()}

    first = launch_variant(PREFILL, s1, part(0, 19), variant)
    second_in = part(19, 33)
    second_in["state"] = first["state"]
    second = launch_variant(PREFILL, s2, second_in, variant)
    o_ref, s_ref = naive.naive_recurrent(whole["q"], whole["k"], whole["v"], whole["g"], whole["beta"], whole["state"])
    tol = PREFILL.variant_tolerance(variant)
    for got, ref in ((np.concatenate([first["o"], second["o"]]), o_ref), (second["state"], s_ref)):
        ok, rel, mx = compare(got, ref, tol)
        assert ok, (rel, mx)


@pytest.mark.sim
def test_verify_and_decode_carry_state():
    """A 5-token verify (wyn), a 17-token verify (wy17), then one decode step
    on the same state (pool of one slot): equal to one 23-token reference."""
    hk, hv, d = 2, 4, 8
    whole = inputs_for(VERIFY, _shape("w", t=23, hk=hk, hv=hv, dk=d, dv=d), seed=7)

    def part(a, b):
        return {n: (x if n == "state" else x[a:b]) for n, x in whole.items()}

    a = launch_variant(VERIFY, _shape("a", t=5, hk=hk, hv=hv, dk=d, dv=d), part(0, 5), "wyn")
    x = part(5, 22)
    x["state"] = a["state"]
    b = launch_variant(VERIFY, _shape("b", t=17, hk=hk, hv=hv, dk=d, dv=d), x, "wy17")
    dshape = _shape("c", n=1, slots=1, hk=hk, hv=hv, dk=d, dv=d)
    dx = {n: whole[n][22:23] for n in ("q", "k", "v", "g", "beta")}
    dx["slots"] = np.zeros(1, np.int32)
    dx["state"] = b["state"][None]
    c = launch_variant(DECODE, dshape, dx, "batched")
    o_ref, s_ref = naive.naive_recurrent(whole["q"], whole["k"], whole["v"], whole["g"], whole["beta"], whole["state"])
    got_o = np.concatenate([a["o"], b["o"], c["o"]])
    for got, ref in ((got_o, o_ref), (c["state"][0], s_ref)):
        ok, rel, mx = compare(got, ref, VERIFY.tolerance)
        assert ok, (rel, mx)


@pytest.mark.sim
def test_prefill_split_across_chunks_equals_unsplit():
    """The same 29 tokens in chunks of 8 (3 full + 5) and as one chunk of 32."""
    dims = dict(t=29, hk=2, hv=4, dk=8, dv=8)
    split, whole = _shape("split", chunk=8, **dims), _shape("whole", chunk=32, **dims)
    x = inputs_for(PREFILL, split, seed=11)
    a = launch_variant(PREFILL, split, x, "regresident")
    b = launch_variant(PREFILL, whole, x, "regresident")
    for name in ("o", "state"):
        ok, rel, mx = compare(a[name], b[name], Tolerance(1e-5, 1e-5))
        assert ok, (name, rel, mx)


@pytest.mark.sim
def test_fused_conv_state_carries_across_two_steps():
    """Two fused decode steps equal two reference steps (conv and GDN state)."""
    shape = FUSED.shapes("smoke", None)[1]
    assert eligible(shape)[0]
    x1 = inputs_for(FUSED, shape, seed=3)
    x2 = inputs_for(FUSED, shape, seed=4)
    for n in ("conv_weight", "norm_weight", "slots"):
        x2[n] = x1[n]
    got1 = launch_variant(FUSED, shape, x1, "fused")
    x2["conv_state"], x2["state"] = got1["conv_state"], got1["state"]
    got2 = launch_variant(FUSED, shape, x2, "fused")
    ref1 = FUSED.reference(shape, x1)
    r2in = {**x2, "conv_state": ref1["conv_state"], "state": ref1["state"]}
    ref2 = FUSED.reference(shape, r2in)
    for name in ("out", "state"):
        ok, rel, mx = compare(got2[name], ref2[name], FUSED.tolerance)
        assert ok, (name, rel, mx)


# ----------------------------------------------------- broken variants


def _broken_skip_tail(shape):
    """A prefill that forgets the last partial chunk (zero outputs there)."""
    C, T = shape["chunk"], shape["t"]
    full = (T // C) * C
    assert 0 < full < T
    inner = PREFILL.variants["regresident"].build(_shape("head", **{**dict(shape.dims), "t": full}))

    def launch(b):
        inner({**b, **{n: b[n][:full] for n in ("q", "k", "v", "g", "beta", "o")}})
        b["o"][full:].copy_to_device(np.zeros((T - full, shape["hv"], shape["dv"]), np.float32))

    return launch


def _broken_no_decay(shape, token=3):
    """A WY verify that drops the decay of one token (as if exp(g_t) = 1)."""
    from numba import cuda

    inner = VERIFY.variants["wyn"].build(shape)

    def launch(b):
        g = b["g"].copy_to_host()
        g[token] = 0.0
        inner({**b, "g": cuda.to_device(g)})

    return launch


@pytest.mark.sim
def test_comparator_rejects_a_prefill_that_skips_the_last_partial_chunk():
    shape = PREFILL.shapes("smoke", None)[0]
    x = inputs_for(PREFILL, shape)
    got = launch_variant(PREFILL, shape, x, launch=_broken_skip_tail(shape))
    ref = PREFILL.reference(shape, x)
    tol = PREFILL.tolerance
    assert not compare(got["o"], ref["o"], tol)[0]
    assert not compare(got["state"], ref["state"], tol)[0]
    # while the outputs before the tail are right: the failure is the tail's
    full = (shape["t"] // shape["chunk"]) * shape["chunk"]
    assert compare(got["o"][:full], ref["o"][:full], tol)[0]


# A short last chunk on the 16-byte staging: dk = 16 (two 16-byte pieces a
# q/k row), 8-column slices of 16-wide v rows (one piece), chunks of 8 over
# 11 tokens: the last chunk is 3 rows.
SHORT_TAIL = _shape("t11 c8 hk1 hv1 d16", t=11, chunk=8, hk=1, hv=1, dk=16, dv=16)


def _poisoned_tail(x: dict, rows: int = 5) -> dict:
    """``q``, ``k``, ``g``, ``beta`` with ``rows`` NaN rows after the
    sequence (``v``, whose length is the kernel's ``T``, as it is): a kernel
    that staged or used a row past the sequence turns NaN."""

    def pad(a):
        return np.concatenate([a, np.full((rows, *a.shape[1:]), np.nan, a.dtype)])

    return {n: (pad(a) if n in ("q", "k", "g", "beta") else a) for n, a in x.items()}


@pytest.mark.sim
@pytest.mark.parametrize("resident", [True, False], ids=["regresident", "global_state"])
@pytest.mark.parametrize("fault", [None, "drop", "dup"], ids=["staged", "last-row-dropped", "last-row-twice"])
def test_a_short_last_chunk_stages_exactly_its_rows(resident, fault):
    """The short last chunk (3 of 8 rows) staged 16 bytes a lane, with NaN
    rows past the sequence: staged right, it matches the reference (nothing
    past row ``L - 1`` is read); staged one row short (the slot keeps the
    chunk before's row) or with the next-to-last row in the last one's slot
    (``_chunk.make_stage``'s knob), the check fails, while every output
    before the short chunk is still right: the failure is the tail's."""
    from leverctl_kernels.gdn import _chunk, _layout, _prefill

    tile = _layout.tile_for(SHORT_TAIL["dk"], SHORT_TAIL["dv"])
    assert SHORT_TAIL["dk"] % 8 == 0 and tile.bv % 8 == 0  # both on the 16-byte path
    assert _chunk.row_stride(SHORT_TAIL["dk"]) == 72  # 36 words a row: 4 (mod 32) banks apart
    x = inputs_for(PREFILL, SHORT_TAIL, seed=3)
    launch = _prefill.build_prefill(SHORT_TAIL, resident=resident, fault=fault)
    got = launch_variant(PREFILL, SHORT_TAIL, _poisoned_tail(x), launch=launch)
    ref = PREFILL.reference(SHORT_TAIL, x)
    tol = PREFILL.tolerance
    ok = [compare(got[n], ref[n], tol)[0] for n in ("o", "state")]
    if fault is None:
        assert all(ok), [compare(got[n], ref[n], tol) for n in ("o", "state")]
        return
    assert not any(ok), [compare(got[n], ref[n], tol) for n in ("o", "state")]
    full = (SHORT_TAIL["t"] // SHORT_TAIL["chunk"]) * SHORT_TAIL["chunk"]
    assert compare(got["o"][:full], ref["o"][:full], tol)[0]


def test_the_stage_knob_refuses_an_unknown_fault():
    from leverctl_kernels.gdn import _chunk

    with pytest.raises(ValueError, match="stage fault"):
        _chunk.make_stage(8, 16, 8, 32, "skip")


@pytest.mark.sim
def test_comparator_rejects_a_wy_verify_that_drops_one_decay():
    shape = VERIFY.shapes("smoke", None)[1]  # T = 5
    x = inputs_for(VERIFY, shape)
    got = launch_variant(VERIFY, shape, x, launch=_broken_no_decay(shape))
    ref = VERIFY.reference(shape, x)
    ok_o, rel_o, _ = compare(got["o"], ref["o"], VERIFY.tolerance)
    ok_s, rel_s, _ = compare(got["state"], ref["state"], VERIFY.tolerance)
    assert not ok_o and not ok_s
    # a small but clear miss: well past the tolerance, far from garbage
    assert 10 * VERIFY.tolerance.rel < rel_s < 0.5


# ------------------------------------------------------ tensor cores


def _a_transposed(lane, i):
    # The A fragment read as A^T: row and column of each element exchanged.
    r, c = mma.a_elem(lane, i)
    return c, r


def _b_next_column(lane, i):
    # B fragments one lane group off: lane (g, t) loads column g + 1.
    k, n = mma.b_elem(lane, i)
    return k, (n + 1) % mma.N


def _c_rows_swapped(lane, i):
    # D stored with rows g and g + 8 exchanged.
    r, c = mma.c_elem(lane, i)
    return (r + 8) % mma.M, c


def _layout_with(**broken):
    dev = lambda f: cuda.jit(device=True, inline="always")(f)  # noqa: E731
    maps = {"a": mma.a_elem, "b": mma.b_elem, "c": mma.c_elem}
    maps.update({k: dev(f) for k, f in broken.items()})
    return maps["a"], maps["b"], maps["c"]


# One head, dk = 12 (a padded k-step), 17 tokens in chunks of 16: a full
# 16-row tile, where rows g and g + 8 both hold tokens, then a 1-token tail.
TC_SHAPE = _shape("t17 c16 hk1 hv1 d12", t=17, chunk=16, hk=1, hv=1, dk=12, dv=12)


@pytest.mark.sim
@pytest.mark.parametrize(
    "broken",
    [{}, {"a": _a_transposed}, {"b": _b_next_column}, {"c": _c_rows_swapped}],
    ids=["correct", "A-fragment-transposed", "B-on-the-wrong-lanes", "D-rows-g-g8-swapped"],
)
def test_a_broken_tensor_core_product_fails_the_check(broken):
    """The chunk's MMA with one fragment map wrong: the check rejects it
    (the correct one, on the same shape and inputs, passes)."""
    from leverctl_kernels.gdn import _prefill

    x = inputs_for(PREFILL, TC_SHAPE, seed=2)
    launch = _prefill.build_prefill(TC_SHAPE, resident=True, layout=_layout_with(**broken))
    got = launch_variant(PREFILL, TC_SHAPE, x, launch=launch)
    ref = PREFILL.reference(TC_SHAPE, x)
    ok = [compare(got[n], ref[n], PREFILL.tolerance)[0] for n in ("o", "state")]
    if not broken:
        assert all(ok)
        assert all(compare(got[n], ref[n], TC_SMOKE_TOL)[0] for n in ("o", "state"))
    else:
        assert not any(ok), [compare(got[n], ref[n], PREFILL.tolerance) for n in ("o", "state")]


@pytest.mark.sim
@pytest.mark.parametrize(
    "path,variant,shape",
    [
        pytest.param(
            PREFILL,
            "regresident",
            _shape("t19 c16 hk1 hv1 dk32 dv8", t=19, chunk=16, hk=1, hv=1, dk=32, dv=8),
            id="prefill-dk32-two-whole-k-steps",
        ),
        pytest.param(
            VERIFY,
            "wyn",
            _shape("t5 hk1 hv2 dk24 dv8", t=5, hk=1, hv=2, dk=24, dv=8),
            id="wyn-dk24-second-k-step-padded",
        ),
    ],
)
def test_the_mma_accumulates_over_several_k_steps(path, variant, shape):
    """The smoke shapes' dk (8, 12) is one padded k-step; the model's 128 is
    eight whole ones. dk = 32 (two whole steps, the model's unpadded loads)
    and dk = 24 (a whole step, then a padded one) against the reference."""
    x = inputs_for(path, shape, seed=3)
    got = launch_variant(path, shape, x, variant)
    check_all(path, variant, shape, got, path.reference(shape, x))


def test_the_chunked_variants_say_they_run_on_mma_sync_with_fp16_inputs():
    for path in PATHS:
        for name, variant in path.variants.items():
            tc = (path.name, name) in TENSOR_CORE_VARIANTS
            assert variant.tensor_cores == ("mma.sync" if tc else None), (path.name, name)
            shape = next(s for s in path.shapes("smoke", None) if _buildable(path, name, s))
            launch = variant.build(shape)
            assert getattr(launch, "tensor_cores", None) == ("mma.sync" if tc else None), (path.name, name)
            assert getattr(launch, "tc_dtype", None) == ("f16" if tc else None), (path.name, name)


def test_the_lower_triangle_tiles_cover_it_and_nothing_more():
    """The 16 x 8 tiles a chunk's MMA makes (``min(2 mi + 2, cols)`` of row
    tile ``mi``): every ``(i, l <= i)`` of an ``L x L`` matrix in exactly one,
    and no tile without one, for every ``L`` up to the model chunk."""
    from leverctl_kernels.gdn._mma_qk import TM, TN, lower_tiles, mma_flops

    for L in range(1, 66):
        rows, cols = -(-L // TM), -(-L // TN)
        seen = np.zeros((rows * TM, cols * TN), int)
        n = 0
        for mi in range(rows):
            for ni in range(min(2 * mi + 2, cols)):
                tile = np.tril(np.ones((L, L), bool))[mi * TM : (mi + 1) * TM, ni * TN : (ni + 1) * TN]
                assert tile.any(), (L, mi, ni)
                seen[mi * TM : (mi + 1) * TM, ni * TN : (ni + 1) * TN] += 1
                n += 1
        assert np.array_equal(seen[:L, :L] * np.tril(np.ones((L, L), int)), np.tril(np.ones((L, L), int)))
        assert n == lower_tiles(L)
    assert lower_tiles(64) == 20 and lower_tiles(16) == 2 and lower_tiles(5) == 1
    assert mma_flops(64, 128) == 20 * 8 * 2 * 16 * 8 * 16


def test_the_mma_product_refuses_blocks_that_are_not_whole_warps():
    from leverctl_kernels.gdn import _layout
    from leverctl_kernels.gdn._mma_qk import make_lower_product

    with pytest.raises(ValueError, match="whole warps"):
        make_lower_product(8, 16, True)
    assert _layout.warp_threads(_layout.tile_for(128, 128)) == 128
    assert _layout.warp_threads(_layout.tile_for(8, 8)) == 32  # 16 threads of work
    assert _layout.warp_threads(_layout.tile_for(12, 12)) == 32  # 24


# ------------------------------------------------ references (fast, no sim)


@pytest.mark.parametrize("T,C,hk,hv,d", [(37, 16, 2, 4, 8), (23, 8, 3, 3, 12), (64, 64, 1, 2, 8), (5, 2, 2, 2, 4)])
def test_naive_chunked_equals_naive_recurrent(T, C, hk, hv, d):
    x = spec.token_inputs(_shape("x", t=T, hk=hk, hv=hv, dk=d, dv=d), np.random.default_rng(T))
    o1, s1 = naive.naive_recurrent(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"])
    o2, s2 = naive.naive_chunked(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"], C)
    np.testing.assert_allclose(o2, o1, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s2, s1, rtol=1e-10, atol=1e-12)


def test_forward_substitution_inverts_unit_lower_triangular():
    rng = np.random.default_rng(0)
    A = np.tril(rng.standard_normal((9, 9)) * 0.3, -1)
    T = naive.forward_substitution_inverse(A)
    np.testing.assert_allclose(T @ (np.eye(9) + A), np.eye(9), atol=1e-12)


def test_naive_recurrent_is_the_stated_recurrence_for_one_token():
    rng = np.random.default_rng(1)
    dk, dv = 4, 3
    q, k = rng.standard_normal((1, 1, dk)), rng.standard_normal((1, 1, dk))
    v = rng.standard_normal((1, 1, dv))
    g, beta = np.array([[-0.3]]), np.array([[0.6]])
    S0 = rng.standard_normal((1, dk, dv))
    o, S = naive.naive_recurrent(q, k, v, g, beta, S0)
    kn = k[0, 0] / np.sqrt(k[0, 0] @ k[0, 0] + naive.L2_EPS)
    qn = q[0, 0] / np.sqrt(q[0, 0] @ q[0, 0] + naive.L2_EPS) / np.sqrt(dk)
    Sd = np.exp(-0.3) * S0[0]
    delta = 0.6 * (v[0, 0] - Sd.T @ kn)
    S1 = Sd + np.outer(kn, delta)
    np.testing.assert_allclose(S[0], S1)
    np.testing.assert_allclose(o[0, 0], S1.T @ qn)


def test_naive_conv_decode_shifts_the_rolling_state():
    x = np.array([[1.0, 2.0]])
    w = np.array([[1.0, 0.0, 0.0, 2.0], [0.0, 0.0, 1.0, 1.0]])  # [C, W]
    cs = np.array([[[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]]])  # [slots, W-1, C]
    y, cs2 = naive.naive_conv_decode(x, w, cs, np.array([0]))
    np.testing.assert_allclose(y[0], naive.silu([10.0 + 2.0, 60.0 + 2.0]))
    np.testing.assert_allclose(cs2[0], [[30.0, 40.0], [50.0, 60.0], [1.0, 2.0]])


def test_naive_gated_rmsnorm_normalises_before_the_gate():
    o = np.array([[[3.0, 4.0]]])
    z = np.array([[[0.0, 50.0]]])
    out = naive.naive_gated_rmsnorm(o, z, np.array([1.0, 2.0]))
    rms = math.sqrt((9 + 16) / 2 + naive.RMS_EPS)
    np.testing.assert_allclose(out[0, 0], [3 / rms * 1 * 0.0, 4 / rms * 2 * naive.silu(50.0)])


# ---------------------------------------------------------------- select


def _combos(path):
    return [dict(zip(path.levers, vals)) for vals in itertools.product([True, False, None], repeat=len(path.levers))]


@pytest.mark.parametrize("t", [1, 5, 16, 17, 18, 64])
def test_verify_select_for_every_lever_combination(t):
    shape = _shape("x", t=t, hk=2, hv=4, dk=8, dv=8)
    for lv in _combos(VERIFY):
        wy17 = lv["gdn_wy17"] is not False
        wyn = lv["gdn_wyn"] is not False
        c = VERIFY.select(lv, shape)
        assert c.variant in VERIFY.variants
        if t == 17 and wy17:
            assert (c.variant, c.note) == ("wy17", "")
        elif wyn:
            assert c.variant == "wyn"
            assert ("gdn_wy17 off" in c.note) == (t == 17)
        else:
            assert c.variant == "recurrent"
            assert "gdn_wyn" in c.note and "off" in c.note


def test_verify_select_defaults_and_missing_levers():
    s17 = _shape("x", t=17, hk=2, hv=4, dk=8, dv=8)
    s5 = _shape("y", t=5, hk=2, hv=4, dk=8, dv=8)
    assert VERIFY.select({}, s17).variant == "wy17"
    assert VERIFY.select({}, s5).variant == "wyn"
    assert VERIFY.select(dict(VERIFY.lever_defaults), s17).variant == "wy17"
    assert VERIFY.select({"gdn_wy17": False, "gdn_wyn": True}, s5).note == ""


def test_prefill_select():
    s = PREFILL.shapes("smoke", None)[0]
    assert PREFILL.select({"gdn_regresident": True}, s).variant == "regresident"
    assert PREFILL.select({"gdn_regresident": None}, s).variant == "regresident"
    c = PREFILL.select({"gdn_regresident": False}, s)
    assert c.variant == "global_state" and "gdn_regresident off" in c.note


def test_decode_select():
    s1, s3 = DECODE.shapes("smoke", None)[:2]
    assert DECODE.select({"gdn_batched_fla": True}, s3).variant == "batched"
    c = DECODE.select({"gdn_batched_fla": False}, s3)
    assert c.variant == "per_sequence" and "gdn_batched_fla off" in c.note
    assert DECODE.select({}, s1) == DECODE.select({"gdn_batched_fla": False}, s1)
    assert DECODE.select({}, s1).note == ""  # one sequence: nothing lost


def test_fused_conv_select_and_eligibility():
    ok1, ok3, one_to_one = FUSED.shapes("smoke", None)
    for s in (ok1, ok3):
        assert FUSED.select({"gdn_fused_conv": True}, s).variant == "fused"
        assert FUSED.select({"gdn_fused_conv": False}, s).variant == "separate"
    c = FUSED.select({"gdn_fused_conv": True}, one_to_one)
    assert c.variant == "separate" and "Hv == 2*Hk" in c.note
    # the head-dim rule: 128 unless the shape overrides it
    plain = _shape("p", n=1, slots=2, hk=2, hv=4, dk=12, dv=12, conv_width=4)
    c = FUSED.select({"gdn_fused_conv": True}, plain)
    assert c.variant == "separate" and "128" in c.note
    for s in FUSED.shapes("model", None):
        assert FUSED.select({"gdn_fused_conv": True}, s).variant == "fused"
    assert FUSED.engines == ("metrale",)


def test_every_path_selects_a_declared_variant_for_every_combination_and_shape():
    for path in PATHS:
        for preset in ("smoke", "model"):
            for shape in path.shapes(preset, None):
                for lv in _combos(path):
                    assert path.select(lv, shape).variant in path.variants


# ------------------------------------------------ shapes, inputs, traffic


def _recipe_model(name):
    return tomllib.loads((ROOT / "recipes" / name).read_text())["model"]


def test_model_shapes_read_the_recipe_and_fall_back_to_qwen3_next():
    model = _recipe_model("qwen3-next-80b-a3b.toml")
    for path in PATHS:
        assert [s.dims for s in path.shapes("model", model)] == [s.dims for s in path.shapes("model", None)]
    pf = PREFILL.shapes("model", None)
    assert [s["t"] for s in pf] == [1024, 4096]
    assert all((s["hk"], s["hv"], s["dk"], s["dv"], s["chunk"]) == (16, 32, 128, 128, 64) for s in pf)
    assert [s["t"] for s in VERIFY.shapes("model", None)] == [17, 5]
    assert [s["n"] for s in DECODE.shapes("model", None)] == [1, 8, 32]
    custom = {"gdn": {"qk_heads": 8, "v_heads": 16, "chunk": 32}, "bench": {"prefill_tokens": [100]}}
    (s,) = PREFILL.shapes("model", custom)
    assert (s["t"], s["hk"], s["hv"], s["chunk"], s["dk"]) == (100, 8, 16, 32, 128)


def test_smoke_shapes_are_small_odd_and_labelled_uniquely():
    for path in PATHS:
        shapes = path.shapes("smoke", None)
        assert len({s.label for s in shapes}) == len(shapes)
    for path in RECURRENCE:
        for s in path.shapes("smoke", None):
            assert s["dk"] in (8, 12) and s["dv"] in (8, 12)
    assert any(s["t"] % s["chunk"] for s in PREFILL.shapes("smoke", None))
    assert {s["t"] for s in VERIFY.shapes("smoke", None)} == {17, 5}
    assert {s["n"] for s in DECODE.shapes("smoke", None)} == {1, 3}
    for path in RECURRENCE:
        assert any(s["hk"] == s["hv"] for s in path.shapes("smoke", None))
        assert any(s["hv"] == 2 * s["hk"] for s in path.shapes("smoke", None))
    with pytest.raises(ValueError):
        PREFILL.shapes("huge", None)


def test_inputs_are_seeded_fresh_and_in_range():
    for path in RECURRENCE:
        shape = path.shapes("smoke", None)[0]
        a = path.make_inputs(shape, np.random.default_rng(1))
        b = path.make_inputs(shape, np.random.default_rng(1))
        rng = np.random.default_rng(1)
        c, d = path.make_inputs(shape, rng), path.make_inputs(shape, rng)
        for n in a:
            assert np.array_equal(a[n], b[n])
        assert not np.array_equal(c["g"], d["g"])
        assert np.all(a["g"] < 0) and np.all((a["beta"] > 0) & (a["beta"] < 1))
        assert a["state"].dtype == np.float32
        outs = path.outputs(shape)
        for name, (oshape, dtype) in outs.items():
            if name in a:  # carried state: same buffer in and out
                assert a[name].shape == tuple(oshape) and a[name].dtype == np.dtype(dtype)
        if "slots" in a:
            assert len(set(a["slots"].tolist())) == len(a["slots"]) and a["slots"].dtype == np.int32


def test_the_log_decay_is_drawn_in_the_natural_log_the_kernels_apply():
    """g = -rate_h softplus(N(0,1)) with rates in [0.02, 0.3]: each head's
    median -g is its rate times ln 2 (softplus's median), so the rates read
    back lie in that range (a g drawn in log2 units, as before, reads back
    rates up to 0.43)."""
    g, _ = spec.random_gates(np.random.default_rng(3), 20000, 64)
    rates = np.median(-g.astype(np.float64), axis=0) / math.log(2.0)
    assert rates.min() >= 0.02 * 0.95 and rates.max() <= 0.3 * 1.05, (rates.min(), rates.max())
    assert rates.max() > 0.25  # the fast heads are there: the bound is the spec's, not slack


def test_traffic_declares_the_state_round_trips():
    s = PREFILL.shapes("model", None)[1]  # 4096 tokens, chunk 64
    base = PREFILL.variant_traffic("regresident", s)
    glob = PREFILL.variant_traffic("global_state", s)
    state = 32 * 128 * 128 * 4
    assert glob.bytes - base.bytes == 2 * (4096 // 64 - 1) * state
    assert glob.flops == base.flops > 0
    v17 = VERIFY.shapes("model", None)[0]
    st = VERIFY.extra["state_traffic"](v17)
    assert st == {"verify_bytes": 2 * state, "single_steps_bytes": 17 * 2 * state, "saved_bytes": 16 * 2 * state}
    for name in VERIFY.variants:
        t = VERIFY.variant_traffic(name, v17)
        assert t.bytes_read >= state and t.bytes_written >= state
    d32 = DECODE.shapes("model", None)[2]
    assert DECODE.traffic(d32).bytes > 2 * 32 * state  # every sequence's state, read and written
    f = FUSED.shapes("model", None)[0]
    assert FUSED.variant_traffic("separate", f).bytes > FUSED.variant_traffic("fused", f).bytes


def test_flop_counts_agree_between_forms():
    # per token both forms do ~6-7 dk*dv flops per head on the state; the WY
    # form's extra T x T work is small at T = 17
    s = VERIFY.shapes("model", None)[0]
    rec = VERIFY.variant_traffic("recurrent", s).flops
    for v in ("wyn", "wy17"):
        assert 0.8 * rec < VERIFY.variant_traffic(v, s).flops < 1.2 * rec
    assert rec == 17 * 32 * (7 * 128 * 128 + 6 * 128)
