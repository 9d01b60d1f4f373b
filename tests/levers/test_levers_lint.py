"""Lint findings: what is flagged, at which severity, and what is left alone."""

from __future__ import annotations

import pytest

from leverctl.levers import load_catalog, resolve
from leverctl.levers.lint import exit_code, lint


@pytest.fixture(scope="module")
def cats():
    return {e: load_catalog(e) for e in ("atlas", "metrale")}


def findings(cats, engine, **env):
    return lint(resolve(cats[engine], env=env))


def codes(fs):
    return {(f.severity, f.code, f.var or f.field) for f in fs}


def test_a_clean_environment_has_no_findings_and_passes_even_strict(cats):
    for engine in cats:
        fs = findings(cats, engine)
        assert fs == []
        assert exit_code(fs, strict=True) == 0


def test_setting_levers_to_what_they_mean_is_not_a_finding(cats):
    fs = findings(
        cats,
        "atlas",
        ATLAS_GDN_WY17="0",
        ATLAS_NO_GEMV_SW="1",
        ATLAS_GDN_BATCHED_FLA="1",
        ATLAS_HOLO_MOE_DOWN_FP4="TRUE",
        ATLAS_BF16_TC_PROJ="1",
        ATLAS_FFN_SMALLM="1",
    )
    assert fs == []


def test_an_unknown_prefixed_variable_is_an_error_with_a_did_you_mean(cats):
    (f,) = findings(cats, "atlas", ATLAS_GDN_WY71="0")
    assert (f.severity, f.code) == ("error", "unknown-variable")
    assert "did you mean ATLAS_GDN_WY17?" in f.message


def test_an_unknown_prefixed_variable_with_no_near_match_is_a_warning(cats):
    (f,) = findings(cats, "metrale", METRALE_LORA_PEER="1")
    assert (f.severity, f.code) == ("warning", "unknown-variable")


@pytest.mark.parametrize(
    "engine,var,value,code",
    [
        ("atlas", "ATLAS_K4_DIAG", "true", "ignored"),
        ("atlas", "ATLAS_GDN_WY17", "false", "ignored"),
        ("atlas", "ATLAS_NO_GEMV_SW", "true", "ignored"),
        ("atlas", "ATLAS_BF16_TC_PROJ", "0", "presence"),
        ("atlas", "ATLAS_BF16_TC_PROJ", "false", "presence"),
        ("atlas", "ATLAS_KV_POISON", " 1", "whitespace"),
        ("atlas", "ATLAS_GDN_WY17", "0 ", "whitespace"),
        ("atlas", "ATLAS_MTP_SHADOW_TOPK", "4.0", "ignored"),
        ("metrale", "METRALE_NO_SSD", "0", "presence"),
        ("metrale", "METRALE_CONC_HSD", "True", "ignored"),
        ("metrale", "METRALE_MOE_PREFILL_EXACT_TILES", "true", "ignored"),
        ("metrale", "METRALE_NO_MTP_DRAFTER_CONTEXT", "true", "ignored"),
        ("metrale", "METRALE_GDN_WY17", b"0\xff", "not-utf8"),
    ],
)
def test_values_the_engine_ignores_or_reads_against_their_intent_are_errors(cats, engine, var, value, code):
    fs = [f for f in findings(cats, engine, **{var: value}) if f.var == var]
    assert [(f.severity, f.code) for f in fs][:1] == [("error", code)], [f.message for f in fs]
    assert exit_code(fs) == 1


def test_a_non_utf8_value_on_a_presence_lever_is_only_a_warning(cats):
    fs = findings(cats, "metrale", METRALE_FFN_MMQ=b"\xff")
    assert ("warning", "not-utf8", "METRALE_FFN_MMQ") in codes(fs)
    assert exit_code(fs) == 0 and exit_code(fs, strict=True) == 1


def test_a_clamped_count_is_a_warning_and_a_zero_load_factor_is_info(cats):
    assert ("warning", "clamped", "ATLAS_MTP_SHADOW_TOPK") in codes(findings(cats, "atlas", ATLAS_MTP_SHADOW_TOPK="20"))
    fs = findings(cats, "metrale", METRALE_MOE_PREFILL_MAX_LOAD_FACTOR="0")
    assert ("info", "zero-is-unset", "METRALE_MOE_PREFILL_MAX_LOAD_FACTOR") in codes(fs)


@pytest.mark.parametrize(
    "env,field",
    [
        ({"METRALE_HOLO_MOE_GROUPED_DOWN": "1"}, "moe_grouped_down"),
        ({"METRALE_INT8_FAITH5": "1"}, "int8_faith5"),
        ({"METRALE_FFN_MMQ_DOWN_Q4K": "1"}, "ffn_mmq_down_q4k"),
    ],
)
def test_a_lever_set_without_the_lever_it_depends_on_is_a_warning(cats, env, field):
    fs = [f for f in findings(cats, "metrale", **env) if f.code == "missing-dependency"]
    assert [(f.severity, f.field) for f in fs] == [("warning", field)]


def test_dependencies_that_are_met_are_not_findings(cats):
    fs = findings(
        cats,
        "metrale",
        METRALE_HOLO_MOE_GROUPED_DOWN="1",
        METRALE_HOLO_MOE_GROUPED_CUTLASS="1",
        METRALE_INT8_FAITH5="1",
        METRALE_INT8_PREFILL="1",
        METRALE_FFN_MMQ_DOWN_Q4K="1",
        METRALE_FFN_MMQ="1",
    )
    assert not [f for f in fs if f.code == "missing-dependency"]


def test_turning_off_the_nvfp4_gate_up_arm_notes_that_the_down_arm_has_no_effect(cats):
    fs = findings(cats, "metrale", METRALE_NO_FFN_NVFP4_MMQ="1")
    assert [(f.severity, f.field) for f in fs if f.code == "missing-dependency"] == [("info", "ffn_nvfp4_mmq_down")]
    assert exit_code(fs, strict=True) == 0


def test_the_fp8_grouped_decode_veto_overriding_the_opt_in_is_an_error(cats):
    fs = findings(cats, "metrale", METRALE_FP8_MOE_GROUPED_DECODE="1", METRALE_NO_FP8_MOE_GROUPED_DECODE="1")
    assert ("error", "overridden", "METRALE_NO_FP8_MOE_GROUPED_DECODE") in codes(fs)


def test_diagnostic_levers_left_on_are_warnings(cats):
    fs = findings(cats, "atlas", ATLAS_KV_POISON="1", ATLAS_MTP_SHADOW_TOPK="3")
    assert {f.field for f in fs if f.code == "diagnostic-on"} == {"kv_poison", "shadow_topk"}
    assert all(f.severity == "warning" for f in fs)


def test_the_prefill_only_drafter_is_a_warning_that_names_its_cost(cats):
    (f,) = findings(cats, "atlas", ATLAS_DRAFTER_PREFILL_ONLY="1")
    assert (f.severity, f.code) == ("warning", "drafter-prefill-only")
    assert "927 ms" in f.message


def test_findings_name_the_recipe_file_and_line(cats, tmp_path):
    from leverctl.levers import load_recipe

    p = tmp_path / "r.toml"
    p.write_text('engine = "atlas"\n[levers]\nATLAS_K4_DIAG = "true"\n')
    fs = lint(resolve(cats["atlas"], recipe=load_recipe(p)))
    assert fs[0].where == f"{p}:3"


def test_errors_sort_before_warnings_before_info(cats):
    fs = findings(cats, "metrale", METRALE_NO_FFN_NVFP4_MMQ="1", METRALE_K2_DIAG="1", METRALE_GDN_WY17="no")
    order = [f.severity for f in fs]
    assert order == sorted(order, key=["error", "warning", "info"].index)


# ── names the engine never reads: missing prefix, wrong case, other engine ───


def _recipe(tmp_path, text: str):
    from leverctl.levers import load_recipe

    p = tmp_path / "r.toml"
    p.write_text(text)
    return load_recipe(p)


def test_an_unprefixed_lever_name_in_a_recipe_says_it_lacks_the_prefix_and_suggests_the_prefixed_name(cats, tmp_path):
    rec = _recipe(tmp_path, 'engine = "metrale"\n[levers]\nGDN_WY17 = "0"\n')
    (f,) = lint(resolve(cats["metrale"], recipe=rec))
    assert (f.severity, f.code, f.var, f.field) == ("error", "unknown-variable", "GDN_WY17", "gdn_wy17")
    assert "GDN_WY17 lacks the engine prefix METRALE_" in f.message
    assert "did you mean METRALE_GDN_WY17?" in f.message
    assert "carries" not in f.message


def test_an_unknown_unprefixed_name_in_a_recipe_is_not_said_to_carry_the_prefix(cats, tmp_path):
    rec = _recipe(tmp_path, 'engine = "atlas"\n[levers]\nCOMPLETELY_OTHER = "1"\n')
    (f,) = lint(resolve(cats["atlas"], recipe=rec))
    assert f.severity == "warning" and "is not a lever variable of Atlas" in f.message
    assert "carries the ATLAS_ prefix" not in f.message and "ignores it" in f.message


def test_lever_names_an_env_file_sets_without_prefix_or_in_the_wrong_case_are_errors(cats):
    env = {"GDN_WY17": "0", "atlas_kv_poison": "1", "METRALE_GDN_WYN": "0", "PATH": "/bin"}
    fs = lint(resolve(cats["atlas"], env=env), lambda var: f"a.env:{sorted(env).index(var) + 1}", env)
    by_var = {f.var: f for f in fs}
    assert set(by_var) == {"GDN_WY17", "atlas_kv_poison", "METRALE_GDN_WYN"}
    assert all(f.severity == "error" and f.where.startswith("a.env:") for f in fs)
    assert "lacks the engine prefix ATLAS_" in by_var["GDN_WY17"].message
    assert "only in case" in by_var["atlas_kv_poison"].message
    assert "did you mean ATLAS_KV_POISON?" in by_var["atlas_kv_poison"].message
    assert "another engine's prefix METRALE_" in by_var["METRALE_GDN_WYN"].message


def test_in_the_process_environment_an_unprefixed_lever_name_is_a_warning_and_other_engines_are_left_alone(cats):
    env = {"GDN_WY17": "0", "METRALE_GDN_WYN": "0", "HOME": "/root"}
    (f,) = lint(resolve(cats["atlas"], env=env), None, env)
    assert (f.severity, f.var, f.where) == ("warning", "GDN_WY17", "environment")
    assert "did you mean ATLAS_GDN_WY17?" in f.message


def test_a_lever_name_in_the_wrong_case_in_the_process_environment_is_an_error_like_a_typo(cats):
    """atlas_gdn_wy17=0 is ignored by the engine exactly as ATLAS_GDN_WY71=0
    is: both are errors, each with the right spelling."""
    for var, meant in (("atlas_gdn_wy17", "ATLAS_GDN_WY17"), ("Atlas_Gdn_Wy17", "ATLAS_GDN_WY17")):
        env = {var: "0", "HOME": "/root"}
        (f,) = lint(resolve(cats["atlas"], env=env), None, env)
        assert (f.severity, f.var, f.where) == ("error", var, "environment")
        assert f"did you mean {meant}?" in f.message and "only in case" in f.message
    env = {"ATLAS_GDN_WY71": "0"}
    (typo,) = lint(resolve(cats["atlas"], env=env), None, env)
    assert typo.severity == "error"


# ── counts too large for the engine ─────────────────────────────────────────


def test_a_clamped_count_too_large_for_usize_says_the_engine_reads_it_as_off_not_clamped(cats):
    (f,) = findings(cats, "metrale", METRALE_MTP_SHADOW_TOPK="99999999999999999999999")
    assert (f.severity, f.code) == ("error", "overflow")
    assert "too large for the engine's count (usize, at most 18446744073709551615)" in f.message
    assert "shadow_topk is 0 (off), not clamped to 8" in f.message
    assert "99999999999999991611392" not in f.message  # no trip through a float


def test_an_optional_count_too_large_for_usize_says_the_engine_reads_it_as_unset(cats):
    (f,) = findings(cats, "metrale", METRALE_MOE_PREFILL_MAX_LOAD_FACTOR="18446744073709551616")
    assert (f.severity, f.code) == ("error", "overflow")
    assert "moe_prefill_max_load_factor is unset, as if it were not set" in f.message


def test_the_largest_usize_still_parses_and_is_only_clamped(cats):
    fs = findings(cats, "atlas", ATLAS_MTP_SHADOW_TOPK="18446744073709551615")
    assert ("warning", "clamped") in {(f.severity, f.code) for f in fs}
    assert not any(f.code == "overflow" for f in fs)
