"""Which MoE prefill variant every lever combination selects, against the
seed's rules written out again here independently of the decision tables;
the tile bound the levers bind into the run; the shapes (the label says the
routing); and what ``explain`` words from the tables. No kernel runs."""

from __future__ import annotations

import itertools

import pytest

from leverctl_kernels.common.path import Shape
from leverctl_kernels.selection.moe import PREFILL_GROUPED as MOE_PREFILL_GROUPED
from leverctl_kernels.selection.moe import PREFILL_SORTED as MOE_PREFILL_SORTED
from leverctl_kernels.selection.moe import SHARED_EXPERT as MOE_SHARED_EXPERT


def _grouped_expected(cutlass, down, fp8, fp8_loaded):
    up = "grouped" if cutlass else "bounded"
    if cutlass and down:
        return "grouped"
    if fp8 and fp8_loaded:
        return f"{up}+fp8_down"
    return "grouped+bounded_down" if cutlass else "bounded"


@pytest.mark.parametrize("fp8_loaded", [1, 0])
def test_every_routed_prefill_lever_combination_selects_the_seeds_route(fp8_loaded):
    shape = {"t": 1024, "fp8_loaded": fp8_loaded}
    for cutlass, down, fp8, exact, lf, zero in itertools.product(
        (False, True), (False, True), (False, True), (None, False, True), (None, 1, 4), (False, True)
    ):
        levers = {
            "moe_grouped_cutlass": cutlass,
            "moe_grouped_down": down,
            "moe_prefill_fp8_down": fp8,
            "moe_prefill_exact_tiles": exact,
            "moe_prefill_max_load_factor": lf,
            "moe_prefill_zero": zero,
        }
        got = MOE_PREFILL_GROUPED.select(levers, shape)
        assert got.variant == _grouped_expected(cutlass, down, fp8, fp8_loaded), levers
        if down and not cutlass:
            assert "moe_grouped_down needs moe_grouped_cutlass" in got.note
        if fp8 and not fp8_loaded and not (cutlass and down):
            assert "not loaded" in got.note


@pytest.mark.parametrize("t, latent", [(511, 1), (512, 1), (4096, 0), (4096, 1)])
def test_the_sorted_prefill_takes_w4a4_only_for_a_latent_input_from_512_rows(t, latent):
    for w4a4, est, zero in itertools.product((False, True), repeat=3):
        levers = {"moe_w4a4": w4a4, "moe_max_m_tiles_estimate": est, "moe_zero_intermediates": zero}
        got = MOE_PREFILL_SORTED.select(levers, {"t": t, "latent": latent})
        assert got.variant == ("w4a4_up" if w4a4 and latent and t >= 512 else "a16")
        if w4a4 and got.variant == "a16":
            assert ("latent" in got.note) if not latent else ("< 512" in got.note)


@pytest.mark.parametrize("t, fp8_up", [(511, 0), (512, 0), (512, 1)])
def test_the_shared_experts_up_and_down_take_w4a4_independently_from_512_rows(t, fp8_up):
    for up, down in itertools.product((False, True), repeat=2):
        got = MOE_SHARED_EXPERT.select({"shared_w4a4": up, "shared_w4a4_down": down}, {"t": t, "fp8_shared_up": fp8_up})
        w_up = up and t >= 512 and not fp8_up
        w_down = down and t >= 512
        assert got.variant == {(0, 0): "a16", (1, 0): "w4a4_up", (0, 1): "w4a4_down", (1, 1): "w4a4"}[w_up, w_down]


def test_the_shared_expert_defaults_to_w4a4_up_at_model_sizes():
    # On unless METRALE_NO_SHARED_W4A4 is present; the down lever is off by default.
    assert MOE_SHARED_EXPERT.select({}, {"t": 1024}).variant == "w4a4_up"
    assert MOE_SHARED_EXPERT.select({}, {"t": 9}).variant == "a16"


# ── the tile bound the levers give the run ─────────────────────────────────


def _grouped_path():
    from leverctl_kernels.moe.prefill_grouped.spec import PATH

    return PATH


DIMS = {"t": 9, "e": 8, "k": 2, "fp8_loaded": 1}


@pytest.mark.parametrize(
    "lever, nvfp4, graph, want",
    [(None, 1, 0, 0), (None, 0, 0, 2), (True, 0, 0, 0), (False, 1, 0, 2), (True, 1, 1, 2), (None, 1, 1, 2)],
)
def test_exact_tiles_unset_is_on_for_nvfp4_experts_and_graph_capture_forces_it_off(lever, nvfp4, graph, want):
    """``m_tiles`` 0 is exact (read back); 2 is the worst case of 9 tokens."""
    shape = Shape("s", {**DIMS, "nvfp4": nvfp4, "graph": graph})
    bound = _grouped_path().bind({"moe_prefill_exact_tiles": lever}, shape, "metrale")
    assert bound["m_tiles"] == want and bound.label == "s"


def test_the_load_factor_caps_the_bound_and_zero_reaches_the_run():
    path = _grouped_path()
    s = Shape("s", {**DIMS, "nvfp4": 0})
    one = path.bind({"moe_prefill_max_load_factor": 1, "moe_prefill_zero": True}, s, "metrale")
    assert (one["m_tiles"], one["zero"]) == (1, 1)
    assert path.bind({"moe_prefill_max_load_factor": 4}, s, "metrale")["m_tiles"] == 2  # capped at the worst case
    b = path.bind({}, s, "metrale")
    assert (b["m_tiles"], b["zero"]) == (2, 0)
    # the single-launch route has no bound to take
    assert "m_tiles" not in path.bind({"moe_grouped_cutlass": True, "moe_grouped_down": True}, s, "metrale").dims


def test_the_sorted_prefill_zeroes_unless_told_not_to_and_its_estimate_is_twice_the_average():
    from leverctl_kernels.moe.prefill_sorted.spec import PATH as PREFILL_SORTED

    s = Shape("s", DIMS)
    assert PREFILL_SORTED.bind({}, s, "metrale")["zero"] == 1
    assert PREFILL_SORTED.bind({"moe_zero_intermediates": False}, s, "metrale")["zero"] == 0
    assert PREFILL_SORTED.bind({}, s, "metrale")["m_tiles"] == 2
    assert PREFILL_SORTED.bind({"moe_max_m_tiles_estimate": True}, s, "metrale")["m_tiles"] == 1


def test_the_tile_bounds_at_qwen3_next_sizes():
    from leverctl_kernels.moe._prefill import bounds

    bm = bounds.BM
    # 4096 tokens x top-10 over 512 experts: 80 rows per expert on average.
    assert bounds.worst_case(4096) == 4096 // bm
    assert bounds.load_factor_cap(4096, 10, 512, 1) == 80 // bm
    assert bounds.load_factor_cap(4096, 10, 512, 4) == 320 // bm
    assert bounds.load_factor_cap(4096, 10, 512, 10_000) == bounds.worst_case(4096)  # never above the worst case
    assert bounds.estimate(4096, 10, 512) == 160 // bm
    assert bounds.exact([0, 3, 81, 80]) == -(-81 // bm)
    # a hot expert with every token: everything past the cap is lost
    assert bounds.rows_lost([4096, 80, 80], 80 // bm) == 4096 - 80
    assert bounds.rows_lost([4096], None) == 0


# ── shapes ──────────────────────────────────────────────────────────────────


def test_routed_shapes_come_in_both_routings_and_the_label_says_which():
    from leverctl_kernels.registry import get_path

    for path in (get_path("moe.prefill_grouped"), get_path("moe.prefill_sorted")):
        for preset in ("smoke", "model"):
            labels = [s.label for s in path.shapes(preset, None)]
            assert {lab.split()[0] for lab in labels} == {"uniform", "skewed"}, labels


def test_model_shapes_come_from_the_recipes():
    from leverctl.levers.recipes import load_recipe
    from leverctl_kernels.registry import get_path

    grouped, sorted_, shared = (get_path(f"moe.{n}") for n in ("prefill_grouped", "prefill_sorted", "shared_expert"))
    qwen = load_recipe("recipes/qwen3-next-80b-a3b-metrale.toml").model
    dims = [s.dims for s in grouped.shapes("model", qwen)]
    assert {(d["t"], d["h"], d["i"], d["e"], d["k"]) for d in dims} == {
        (1024, 2048, 512, 512, 10),
        (4096, 2048, 512, 512, 10),
    }
    nano = load_recipe("recipes/nemotron-3-nano-30b-a3b-metrale.toml").model
    dims = [s.dims for s in sorted_.shapes("model", nano)]
    assert {(d["h"], d["i"], d["e"], d["k"], d["latent"]) for d in dims} == {(2688, 1856, 128, 6, 0)}
    assert {(s["h"], s["s"]) for s in shared.shapes("model", nano)} == {(2688, 3712)}
    assert sorted_.shapes("model", None)[0]["h"] == 2688  # without a recipe: Nemotron-3 Nano


def test_explain_words_the_routed_prefill_levers_from_the_table():
    from leverctl.levers import load_catalog
    from leverctl.levers.explain import explain

    cat = load_catalog("metrale")
    (st,) = explain(cat, cat.lever("moe_grouped_down")).selects
    on = next(s for s in st.selected if s.value is True and s.with_ is None)
    assert on.text.startswith("bounded") and "needs moe_grouped_cutlass" in on.text
    (st,) = explain(cat, cat.lever("moe_prefill_max_load_factor")).selects
    assert "uncomputed" in st.binds


def _cli(capsys, *args):
    from leverctl.cli.app import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(list(args))
    return e.value.code, capsys.readouterr().out


def test_leverctl_kernels_lists_the_moe_prefill_paths_and_their_variants_from_the_tables(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    code, out = _cli(capsys, "kernels", "--engine", "metrale", "--no-env")
    assert code == 0
    for table in (MOE_PREFILL_GROUPED, MOE_PREFILL_SORTED, MOE_SHARED_EXPERT):
        assert table.path in out
        for v in table.variants:
            assert v in out, (table.path, v)


def test_explain_says_what_the_load_factor_does_to_the_run(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    code, out = _cli(capsys, "explain", "METRALE_MOE_PREFILL_MAX_LOAD_FACTOR", "--engine", "metrale")
    assert code == 0
    assert "moe.prefill_grouped" in out and "average rows per expert" in out


def test_the_reference_decodes_the_expert_weights_as_ml_dtypes_does():
    """An independent decoder: ml_dtypes' E2M1 and E4M3 values times the
    tensor scale, against the reference's (``spec.decoded``); and the FP8
    down projection's E4M3 weights re-encoded within E4M3's rounding."""
    import ml_dtypes
    import numpy as np

    from leverctl_kernels.moe._prefill import family as spec
    from leverctl_kernels.moe._prefill import inputs

    w = inputs.expert_weights(np.random.default_rng(2), 3, 5, 32)
    nib = np.stack([w["fp4"] & 0xF, w["fp4"] >> 4], axis=-1).reshape(3, 5, 32)
    e2m1 = nib.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    scale = np.repeat(w["sc"].view(ml_dtypes.float8_e4m3fn).astype(np.float32), 16, axis=-1)
    want = e2m1 * scale * w["ts"][:, None, None]
    got = spec.decoded({"dn_fp4": w["fp4"], "dn_sc": w["sc"], "dn_ts": w["ts"]}, "dn")
    np.testing.assert_array_equal(got, want)
    q = inputs.e4m3_rows(want)
    back = q["q"].view(ml_dtypes.float8_e4m3fn).astype(np.float32) * q["s"][..., None]
    assert np.all(np.abs(back - want) <= np.abs(want) * 2.0**-4 + 1e-6)
