"""The Mamba2 decision tables against Metrale's rules, for every
combination of their levers and of the conditions they read: the state
size on both sides of the SSD scan's fit, the row count on both sides of
512, the W4A4 kernels loaded or not, and the FP8 activation buffer large
enough or not. ``engine_*`` restate the lever file as a call site would
branch on it. The fit is the SSD kernels' own shared memory."""

from __future__ import annotations

import itertools

import pytest

from leverctl_kernels.mamba2.prefill_scan.geometry import SSD_MAX_STATE, ssd_scan_fits, ssd_shared_bytes
from leverctl_kernels.selection.mamba2 import PREFILL_PROJ as MAMBA2_PREFILL_PROJ
from leverctl_kernels.selection.mamba2 import PREFILL_SCAN as MAMBA2_PREFILL_SCAN


def engine_scan(ssd: bool, persistent: bool, state: int) -> str:
    if ssd and ssd_scan_fits(state):
        return "ssd"
    if persistent:
        return "persistent"
    return "sequential"


def engine_proj(w4a4: bool, rows: int, loaded: bool, fp8_fits: bool) -> str:
    return "w4a4" if w4a4 and rows >= 512 and loaded and fp8_fits else "w4a16"


STATES = (16, 128, SSD_MAX_STATE, SSD_MAX_STATE + 1, 256)


def test_the_scan_table_is_the_engines_for_every_lever_combination_and_state_size():
    seen = set()
    for ssd, persistent, n in itertools.product((False, True), (False, True), STATES):
        got = MAMBA2_PREFILL_SCAN.select({"ssd": ssd, "ssm_persistent": persistent}, {"n": n}).variant
        assert got == engine_scan(ssd, persistent, n), (ssd, persistent, n)
        seen.add(got)
    assert seen == {"ssd", "persistent", "sequential"}


def test_the_ssd_fit_is_the_chunk_kernels_shared_memory_at_48_kib():
    assert ssd_scan_fits(SSD_MAX_STATE) and not ssd_scan_fits(SSD_MAX_STATE + 1)
    assert ssd_shared_bytes(SSD_MAX_STATE) <= 48 * 1024 < ssd_shared_bytes(SSD_MAX_STATE + 1)
    assert ssd_scan_fits(128) and not ssd_scan_fits(256)  # Nemotron-H's 128 fits; 256 does not


def test_the_ssd_builder_refuses_a_state_past_the_fit_and_takes_the_largest_that_fits():
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.mamba2.prefill_scan import ssd

    base = dict(t=5, h=2, p=4, g=1, chunk=256)
    ssd.build(Shape("fits", {**base, "n": SSD_MAX_STATE}))  # its check_shared passes at the longest chunk
    with pytest.raises(ValueError, match="does not fit"):
        ssd.build(Shape("too big", {**base, "n": SSD_MAX_STATE + 1}))


def test_a_state_past_the_fit_says_why_ssd_was_not_taken():
    c = MAMBA2_PREFILL_SCAN.select({}, {"n": 256})
    assert c.variant == "persistent" and "256 does not fit" in c.note
    c = MAMBA2_PREFILL_SCAN.select({"ssm_persistent": False}, {"n": 256})
    assert c.variant == "sequential" and "ssm_persistent is off" in c.note
    assert MAMBA2_PREFILL_SCAN.select({}, {"n": 128}) == MAMBA2_PREFILL_SCAN.select({}, {"n": 128, "t": 1})


@pytest.mark.parametrize("rows", [1, 511, 512, 4096])
def test_the_projection_table_is_the_engines_for_every_combination(rows):
    k = 4096
    for w4a4, loaded, fits in itertools.product((False, True), repeat=3):
        dims = {"m": rows, "n": 18560, "k": k, "w4a4_loaded": int(loaded), "fp8_act": rows * k - (0 if fits else 1)}
        got = MAMBA2_PREFILL_PROJ.select({"ssm_w4a4": w4a4}, dims)
        assert got.variant == engine_proj(w4a4, rows, loaded, fits), (w4a4, rows, loaded, fits)
        if w4a4 and got.variant == "w4a16":
            assert got.note.startswith("ssm_w4a4 is on but"), got.note


def test_the_projection_note_names_each_unmet_condition():
    dims = {"m": 600, "n": 8, "k": 64, "w4a4_loaded": 0, "fp8_act": 10}
    note = MAMBA2_PREFILL_PROJ.select({}, dims).note
    assert "not loaded" in note and "fp8_act buffer (10 bytes)" in note and "fewer than" not in note


def test_the_record_states_both_w4a4_conditions_at_model_and_smoke_shapes():
    from leverctl_kernels.mamba2.prefill_proj.spec import PATH as PREFILL_PROJ

    for preset in ("model", "smoke"):
        for s in PREFILL_PROJ.shapes(preset, None):
            assert s["w4a4_loaded"] == 1 and s["fp8_act"] >= s["m"] * s["k"]
            assert "w4a4_loaded" in s.as_dict() and "fp8_act" in s.as_dict()


def test_model_shapes_take_ssd_and_w4a4_from_512_rows_by_default():
    from leverctl_kernels.mamba2.prefill_proj.spec import PATH as PREFILL_PROJ
    from leverctl_kernels.mamba2.prefill_scan.spec import PATH as PREFILL_SCAN

    assert {PREFILL_SCAN.select({}, s).variant for s in PREFILL_SCAN.shapes("model", None)} == {"ssd"}
    assert {PREFILL_PROJ.select({}, s).variant for s in PREFILL_PROJ.shapes("model", None)} == {"w4a4"}
    smoke = {s["m"]: PREFILL_PROJ.select({}, s).variant for s in PREFILL_PROJ.shapes("smoke", None)}
    assert smoke == {19: "w4a4", 5: "w4a16"}  # the lowered threshold (16) on both sides


def test_the_model_shapes_follow_the_nemotron_recipe():
    from pathlib import Path

    from leverctl.levers.recipes import load_recipe
    from leverctl_kernels.mamba2.prefill_proj.spec import PATH as PREFILL_PROJ
    from leverctl_kernels.mamba2.prefill_scan.spec import PATH as PREFILL_SCAN

    recipe = load_recipe(Path(__file__).resolve().parents[3] / "recipes" / "nemotron-h-8b.toml")
    scan = PREFILL_SCAN.shapes("model", recipe.model)
    assert [(s["t"], s["h"], s["p"], s["n"], s["g"], s["chunk"]) for s in scan] == [
        (512, 128, 64, 128, 8, 128),
        (4096, 128, 64, 128, 8, 128),
    ]
    proj = PREFILL_PROJ.shapes("model", recipe.model)
    assert {(s["n"], s["k"]) for s in proj} == {(2 * 8192 + 2 * 8 * 128 + 128, 4096), (4096, 8192)}
