"""The MoE prefill kernels in the CUDA simulator at the tiny odd smoke
shapes (4 experts, top-1, 9 tokens; expert width and hidden 16: whole
NVFP4 blocks but partial 32-column tiles), run the way the bench runs them
(``leverctl.bench.run.run_item``: poisoned outputs and scratch, the check
against the float64 layer, ``rows_lost``).

Every variant passes under uniform routing. Under skewed routing (one
expert every token's first choice: 9 rows against 8 per tile) a tile bound
of one M tile (a load factor of 1, the sorted prefill's estimate) drops the
hot expert's ninth row: the record FAILs with ``rows_lost`` 1, its output
NaN where the scratch was left as the bench poisoned it, and finite but
wrong where the levers zeroed it. The same levers pass under uniform
routing, and the single-launch route and exact tiles pass under skew. A
kernel with the wrong activation is caught, and the sort places every row.
One launch of the grouped GEMM alone (gated, gathered, E4M3 weights), at
an N whose tile is partial and an expert past one 64-row tile, matches its
operands rounded once to fp16 to f32 accuracy, and so does the W4A4 up
projection's, its NVFP4 activations read through the row map.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.sim


def _path(name):
    from leverctl_kernels.registry import get_path

    return get_path(name)


def _shape(path, skew: str):
    """The smoke shape of ``skew``: hidden 16, one K stage of the engine's
    64 (its multi-stage loop has tests of its own in ``common/gemm``) and
    half of down's 32-column tile."""
    shapes = path.shapes("smoke", None)
    return next((s for s in shapes if s.label.startswith(skew)), shapes[0])  # the shared expert has no routing


def _record(name: str, levers: dict, skew: str = "uniform", variant: str | None = None, path=None):
    """The bench's record for ``levers`` at the smoke shape of ``skew``
    (the variant ``select`` picks, or ``variant``)."""
    from leverctl.bench.device import SIM_NAME, Device
    from leverctl.bench.plan import items_for
    from leverctl.bench.run import run_item

    path = path or _path(name)
    (item,) = items_for(path, levers, [_shape(path, skew)], engine="metrale")
    if variant is not None:
        from dataclasses import replace

        item = replace(item, variant=variant)
    return run_item(item, Device("sim", SIM_NAME), rng_seed=3)


GROUPED_OFF = {
    "moe_grouped_cutlass": False,
    "moe_grouped_down": False,
    "moe_prefill_fp8_down": False,
    "moe_prefill_exact_tiles": False,
    "moe_prefill_max_load_factor": None,
    "moe_prefill_zero": False,
}


@pytest.mark.parametrize(
    "levers, variant",
    [
        ({"moe_grouped_cutlass": True, "moe_grouped_down": True}, "grouped"),
        ({"moe_grouped_cutlass": True, "moe_prefill_fp8_down": True}, "grouped+fp8_down"),
        ({"moe_grouped_cutlass": True}, "grouped+bounded_down"),
        ({"moe_prefill_fp8_down": True}, "bounded+fp8_down"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_every_routed_variant_matches_the_float64_layer_under_uniform_routing(levers, variant):
    rec = _record("moe.prefill_grouped", {**GROUPED_OFF, **levers})
    assert (rec["variant"], rec["status"], rec["rows_lost"]) == (variant, "pass", 0), rec["note"]
    assert rec["error"]["nonfinite"] == 0 and rec["error"]["unwritten"] == 0


def test_a_one_tile_bound_passes_under_uniform_routing():
    rec = _record("moe.prefill_grouped", {**GROUPED_OFF, "moe_prefill_max_load_factor": 1})
    assert (rec["variant"], rec["status"], rec["rows_lost"]) == ("bounded", "pass", 0), rec["note"]
    assert rec["shape"]["m_tiles"] == 1 and rec["shape"]["zero"] == 0  # a factor of 1: 9 rows / 4 experts


def test_under_skew_a_one_tile_bound_drops_a_row_and_unzeroed_scratch_turns_the_output_to_nan():
    rec = _record("moe.prefill_grouped", {**GROUPED_OFF, "moe_prefill_max_load_factor": 1}, "skewed")
    assert (rec["variant"], rec["status"], rec["rows_lost"]) == ("bounded", "fail", 1)
    assert rec["error"]["nonfinite"] > 0  # the dropped row's scratch, read as the bench poisoned it
    assert "1 routed row(s) beyond the per-expert tile bound were never computed" in rec["note"]
    assert rec["shape"]["label"].startswith("skewed")


def test_under_skew_the_single_launch_route_and_exact_tiles_lose_nothing():
    rec = _record(
        "moe.prefill_grouped",
        {**GROUPED_OFF, "moe_grouped_cutlass": True, "moe_grouped_down": True, "moe_prefill_max_load_factor": 1},
        "skewed",
    )
    assert (rec["variant"], rec["status"], rec["rows_lost"]) == ("grouped", "pass", 0), rec["note"]
    rec = _record(
        "moe.prefill_grouped",
        {**GROUPED_OFF, "moe_prefill_exact_tiles": None, "moe_prefill_max_load_factor": 1},
        "skewed",
    )
    assert rec["shape"]["m_tiles"] == 0  # exact (read back): unset is on for NVFP4 experts
    assert (rec["variant"], rec["status"], rec["rows_lost"]) == ("bounded", "pass", 0), rec["note"]


SORTED_DEFAULTS = {"moe_w4a4": False, "moe_max_m_tiles_estimate": False, "moe_zero_intermediates": True}


def test_the_sorted_prefill_estimate_passes_uniform_and_drops_a_zeroed_row_under_skew():
    rec = _record("moe.prefill_sorted", {**SORTED_DEFAULTS, "moe_max_m_tiles_estimate": True})
    assert (rec["variant"], rec["status"], rec["rows_lost"]) == ("a16", "pass", 0), rec["note"]
    rec = _record("moe.prefill_sorted", {**SORTED_DEFAULTS, "moe_max_m_tiles_estimate": True}, "skewed")
    assert (rec["status"], rec["rows_lost"]) == ("fail", 1)
    # zeroed: the dropped row adds nothing, finite; the count names it
    assert rec["error"]["nonfinite"] == 0 and "never computed" in rec["note"]


def test_the_sorted_prefills_w4a4_up_projection_matches_the_layer_within_nvfp4s_error():
    rec = _record("moe.prefill_sorted", SORTED_DEFAULTS, variant="w4a4_up")
    assert (rec["variant"], rec["status"], rec["rows_lost"]) == ("w4a4_up", "pass", 0), rec["note"]
    assert rec["error"]["rel"] > 1e-2  # the activations really were quantised


@pytest.mark.parametrize("variant", ["a16", "w4a4_up", "w4a4_down", "w4a4"])
def test_every_shared_expert_variant_matches_the_float64_expert(variant):
    rec = _record("moe.shared_expert", {"shared_w4a4": False, "shared_w4a4_down": False}, variant=variant)
    assert rec["status"] == "pass", rec["note"]
    assert (rec["error"]["rel"] > 1e-2) == (variant != "a16")
    assert rec["rows_lost"] is None


def test_a_kernel_with_the_wrong_activation_is_rejected(monkeypatch):
    """The shared expert built with no activation after the up projection
    fails the bench's check."""
    from leverctl_kernels.moe._prefill import grouped as G
    from leverctl_kernels.moe._prefill import shared as _shared

    real = G.launcher
    monkeypatch.setattr(
        _shared.G, "launcher", lambda sched, gather, act, afmt, wfmt: real(sched, gather, G.NONE, afmt, wfmt)
    )
    rec = _record("moe.shared_expert", {"shared_w4a4": False, "shared_w4a4_down": False}, variant="a16")
    assert rec["status"] == "fail" and "rel error" in rec["note"], rec["note"]


def test_the_grouped_gemm_rounds_its_operands_once_to_fp16_and_masks_a_partial_tile():
    """One launch of the grouped GEMM, gated, gathered, fp16 activations and
    E4M3 weights with a scale per weight row, at an N (20) short of the
    tile's 32 columns and two experts of 5 and 70 rows (the second past one
    64-row tile): it matches the float64 product of the operands decoded and
    rounded once to fp16 (f32 accumulation: ~1e-7), closer than the product
    of the unrounded scaled weights, and writes exactly the rows and columns
    it owns."""
    from numba import cuda

    from leverctl_kernels.common import bits
    from leverctl_kernels.moe._prefill import grouped as G

    rng = np.random.default_rng(7)
    tokens, n, k = 7, 20, 32
    off = np.array([0, 5, 75], np.int32)
    tok = rng.integers(0, tokens, size=75).astype(np.int32)
    codes = (rng.integers(0, 0x7F, size=(2, 2 * n, k)) | (rng.integers(0, 2, size=(2, 2 * n, k)) << 7)).astype(
        np.uint8
    )  # every E4M3 code but the NaNs
    a = (rng.standard_normal((tokens, k)) * 0.05).astype(np.float16)
    w_sc = rng.uniform(0.001, 0.002, (2, 2 * n)).astype(np.float32)
    out = np.full((76, n), np.nan, np.float32)  # one row past the experts' 75
    d_out = cuda.to_device(out)
    unused = cuda.to_device(np.zeros(1, np.float32))
    G.launcher(G.GROUPED, True, G.SILU_GLU, G.FLOAT, G.E4M3)(
        d_out,
        cuda.to_device(a),
        unused,
        unused,
        cuda.to_device(tok),
        cuda.to_device(codes),
        cuda.to_device(w_sc),
        unused,
        cuda.to_device(off),
        cuda.to_device(off),
        1,
        75,
    )
    got = d_out.copy_to_host()

    wf = bits.e4m3_to_f32_np(codes).astype(np.float64)

    def layer(ws):
        x = a.astype(np.float64)
        y = np.empty((75, n))
        for e in range(2):
            r = slice(off[e], off[e + 1])
            g, u = x[tok[r]] @ ws[e, :n].T, x[tok[r]] @ ws[e, n:].T
            y[r] = g / (1 + np.exp(-g)) * u
        return y

    rounded = layer(wf * w_sc[:, :, None])  # E4M3 codes are exact in fp16, the scales applied in f32
    unrounded = layer(wf * w_sc[:, :, None].astype(np.float16).astype(np.float64))  # the scales rounded first
    scale = np.abs(rounded).max()
    assert np.isnan(got[75]).all()  # no expert's row
    err_rounded = np.abs(got[:75] - rounded).max() / scale
    err_other = np.abs(got[:75] - unrounded).max() / scale
    assert err_rounded < 1e-5 < err_other, (err_rounded, err_other)


def test_gathered_nvfp4_activations_are_read_through_the_row_map():
    """The W4A4 up projection (bounded, gathered NVFP4 activations through
    ``nvfp4_f16_rows``, NVFP4 weights, squared ReLU) against the float64
    product of the decoded codes, both tensor scales applied: f32 accuracy
    (the codes are exact in fp16); the rows read in sorted order instead of
    through the map would miss by far more."""
    from numba import cuda

    from leverctl_kernels.common import bits
    from leverctl_kernels.moe._prefill import grouped as G
    from leverctl_kernels.moe._prefill import inputs

    rng = np.random.default_rng(11)
    tokens, n, k = 9, 20, 32
    off = np.array([0, 6, 6, 13], np.int32)  # an empty expert
    tok = rng.permutation(np.concatenate([np.arange(tokens), rng.integers(0, tokens, 4)])).astype(np.int32)
    xp, xs, _ = bits.nvfp4_encode_np(rng.standard_normal((tokens, k)), tensor_scale=1.0)
    x_ts = np.array([0.5], np.float32)
    w = inputs.expert_weights(rng, 3, n, k)
    dev = {name: cuda.to_device(v) for name, v in dict(xp=xp, xs=xs, x_ts=x_ts, tok=tok, off=off, **w).items()}
    d_out = cuda.to_device(np.full((13, n), np.nan, np.float32))
    G.launcher(G.BOUNDED, True, G.RELU2, G.NVFP4, G.NVFP4)(
        d_out,
        dev["xp"],
        dev["xs"],
        dev["x_ts"],
        dev["tok"],
        dev["fp4"],
        dev["sc"],
        dev["ts"],
        dev["off"],
        dev["off"],
        1,
        13,
    )
    got = d_out.copy_to_host()
    x = bits.nvfp4_decode_np(xp, xs, 1.0).astype(np.float64) * 0.5
    wd = inputs.decode(w).astype(np.float64)
    ge = np.repeat(np.arange(3), np.diff(off))

    def relu2(rows):
        return np.maximum(np.einsum("pk,pnk->pn", rows, wd[ge]), 0) ** 2

    ref = relu2(x[tok])
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() / scale < 1e-5
    assert np.abs(got - relu2(x[np.arange(13) % tokens])).max() / scale > 1e-2


def test_the_sort_places_every_routed_row_once_by_expert():
    from numba import cuda

    from leverctl_kernels.moe._prefill import inputs
    from leverctl_kernels.moe._prefill import route as _route

    ids, _ = inputs.routing(np.random.default_rng(0), 9, 8, 2, True)
    sort, ws = _route.sorter(8, 18)
    sort(cuda.to_device(ids))
    off, tok, slot = (ws[n].copy_to_host() for n in ("off", "tok", "slot"))
    np.testing.assert_array_equal(np.diff(off), np.bincount(ids.ravel(), minlength=8))
    assert sorted(slot) == list(range(18))
    flat = ids.ravel()
    for r in range(18):
        e = flat[r]
        assert off[e] <= slot[r] < off[e + 1] and tok[slot[r]] == r // 2


@pytest.mark.simulator_only
def test_zeroing_adds_the_two_launches_the_variants_declare(monkeypatch):
    """The zeroing levers' kernels are counted in ``launches`` (the
    roofline's launch term); no kernel runs."""
    from test_path_declarations import count_launches, fake_bufs

    for name, levers in (
        ("moe.prefill_grouped", {**GROUPED_OFF, "moe_prefill_zero": True}),
        ("moe.prefill_sorted", SORTED_DEFAULTS),
    ):
        path = _path(name)
        shape = path.bind(levers, _shape(path, "uniform"), "metrale")
        assert shape["zero"] == 1
        for v, variant in path.variants.items():
            n = count_launches(monkeypatch, variant.build(shape), fake_bufs(path, shape))
            assert n == path.variant_launches(v, shape) == path.variant_launches(v, _shape(path, "uniform")) + 2


# ------------------------------------------------------------------ GPU

# Mid-sized on purpose: 1024 tokens (past the W4A4 threshold of 512 rows) at
# top-8 over 64 experts, 128 rows per expert on average, so the one-tile
# bound (8 rows) is far below even the uniform load and a load factor of 4
# covers uniform routing but not the hot expert's 1024 rows.
GPU_DIMS = {"t": 1024, "h": 512, "i": 256, "e": 64, "k": 8, "nvfp4": 1, "graph": 0, "fp8_loaded": 1}


def _gpu_record(path_name, levers, skew, variant=None, dims=None):
    from leverctl.bench.device import Device
    from leverctl.bench.plan import items_for
    from leverctl.bench.run import run_item
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.moe._prefill import family as spec

    path = _path(path_name)
    d = {**(dims or GPU_DIMS), "skew": ("uniform", "skewed").index(skew)}
    shape = Shape(spec.label(d) if "e" in d else f"t{d['t']}", d)
    (item,) = items_for(path, levers, [shape], engine="metrale")
    if variant is not None:
        from dataclasses import replace

        item = replace(item, variant=variant)
    return run_item(item, Device("sim", "gpu check (untimed)"), rng_seed=5)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "variant", ["grouped", "grouped+fp8_down", "grouped+bounded_down", "bounded+fp8_down", "bounded"]
)
def test_on_a_gpu_every_routed_variant_passes_uniform_routing_with_a_load_factor_of_4(variant):
    rec = _gpu_record("moe.prefill_grouped", {**GROUPED_OFF, "moe_prefill_max_load_factor": 4}, "uniform", variant)
    assert (rec["status"], rec["rows_lost"]) == ("pass", 0), rec["note"]


@pytest.mark.gpu
def test_on_a_gpu_skew_drops_rows_past_a_load_factor_of_4_and_exact_tiles_do_not():
    rec = _gpu_record("moe.prefill_grouped", {**GROUPED_OFF, "moe_prefill_max_load_factor": 4}, "skewed")
    assert rec["status"] == "fail" and rec["rows_lost"] == 1024 - 4 * 128 and rec["error"]["nonfinite"] > 0
    rec = _gpu_record(
        "moe.prefill_grouped", {**GROUPED_OFF, "moe_prefill_max_load_factor": 4, "moe_prefill_zero": True}, "skewed"
    )
    assert rec["status"] == "fail" and rec["rows_lost"] == 512 and rec["error"]["nonfinite"] == 0
    rec = _gpu_record("moe.prefill_grouped", {**GROUPED_OFF, "moe_prefill_exact_tiles": True}, "skewed")
    assert (rec["status"], rec["rows_lost"]) == ("pass", 0), rec["note"]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["a16", "w4a4_up"])
def test_on_a_gpu_the_sorted_prefill_passes_and_its_estimate_drops_the_hot_experts_rows(variant):
    rec = _gpu_record("moe.prefill_sorted", SORTED_DEFAULTS, "uniform", variant)
    assert (rec["status"], rec["rows_lost"]) == ("pass", 0), rec["note"]
    rec = _gpu_record("moe.prefill_sorted", {**SORTED_DEFAULTS, "moe_max_m_tiles_estimate": True}, "skewed", variant)
    assert rec["status"] == "fail" and rec["rows_lost"] == 1024 - 2 * 128


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["a16", "w4a4_up", "w4a4_down", "w4a4"])
def test_on_a_gpu_every_shared_expert_variant_passes(variant):
    rec = _gpu_record("moe.shared_expert", {}, "uniform", variant, dims={"t": 1024, "h": 512, "s": 384})
    assert rec["status"] == "pass", rec["note"]
