"""`leverctl explain NAME`."""

from __future__ import annotations

import json
import os

from cli_helpers import assert_one_line_error


def test_explaining_an_opt_out_spells_out_that_false_keeps_it_on(cli):
    r = cli("explain", "ATLAS_GDN_WY17")
    assert r.code == 0, r.err
    out = r.out
    assert "gdn_wy17" in out and "(Atlas, SSM / GDN recurrence)" in out
    assert "Rule: opt-out: on unless the exact string 0" in out
    assert "Default: on" in out
    assert "Steers: gdn.verify" in out
    assert "ATLAS_GDN_WY17=false is ignored and keeps it on" in out
    assert "What each kind of value does" in out


def test_explaining_a_presence_lever_spells_out_that_zero_turns_it_on(cli):
    r = cli("explain", "bf16_tc_proj")
    assert "ATLAS_BF16_TC_PROJ=0 turns it on" in r.out


def test_explaining_the_k4_diagnostic_spells_out_that_true_is_ignored(cli):
    r = cli("explain", "k4_diag", "--engine", "atlas")
    assert "ATLAS_K4_DIAG=true is ignored and keeps it off" in r.out
    assert "Diagnostic: yes" in r.out


def test_a_name_with_a_value_reports_what_that_exact_spelling_does(cli):
    r = cli("explain", "ATLAS_K4_DIAG=true")
    assert "ATLAS_K4_DIAG=true: off" in r.out
    assert "trap: ATLAS_K4_DIAG=true is ignored" in r.out


def test_a_metrale_variable_finds_the_metrale_lever_and_its_dependencies(cli):
    r = cli("explain", "METRALE_HOLO_MOE_GROUPED_DOWN")
    assert "(Metrale, MoE)" in r.out
    assert "Needs: moe_grouped_cutlass on" in r.out


def test_a_field_both_engines_have_defaults_to_atlas_and_says_metrale_has_one_too(cli):
    r = cli("explain", "gdn_wy17")
    assert "(Atlas," in r.out and "Also a lever of metrale" in r.out
    assert "(Metrale," in cli("explain", "gdn_wy17", "-e", "metrale").out


def test_the_current_environment_setting_is_shown(cli, monkeypatch):
    monkeypatch.setenv("ATLAS_GDN_WY17", "false")
    assert "In this environment: ATLAS_GDN_WY17=false -> on" in cli("explain", "gdn_wy17").out


def test_a_current_value_that_is_not_utf8_is_shown_without_crashing(cli, monkeypatch):
    monkeypatch.setitem(os.environb, b"ATLAS_BF16_TC_PROJ", b"\xff")
    r = cli("explain", "ATLAS_BF16_TC_PROJ")
    assert r.code == 0
    assert "(not UTF-8) -> on" in r.out


def test_json_output_carries_rule_values_traps_default_and_steers(cli):
    doc = json.loads(cli("explain", "gemv_sw", "-f", "json").out)
    assert doc["field"] == "gemv_sw" and doc["kind"] == "kill_switch" and doc["default"] == "on"
    assert doc["steers"] == ["w4a16.gemv", "w4a16.gemv_dual", "w4a16.ffn_decode"]
    assert any("ATLAS_NO_GEMV_SW=true" in t for t in doc["traps"])


def test_the_config_lever_explains_itself_and_refuses_a_value(cli):
    r = cli("explain", "max_decode_seqs")
    assert r.code == 0 and "never from the environment" in r.out
    assert_one_line_error(cli("explain", "max_decode_seqs=4"), "reads no variable")


def test_a_near_miss_is_bad_input_with_a_suggestion(cli):
    assert_one_line_error(cli("explain", "ATLAS_GDN_WY71"), "did you mean ATLAS_GDN_WY17?")
    assert_one_line_error(cli("explain", "gdn_wy71", "-e", "metrale"), "no Metrale lever", "gdn_wy17")


def test_an_unknown_engine_is_bad_input(cli):
    assert_one_line_error(cli("explain", "gdn_wy17", "-e", "atlsa"), "unknown engine", "did you mean atlas?")


def test_explain_says_what_a_field_name_matched(cli):
    assert "Matched: field gdn_wy17 of Atlas (variable ATLAS_GDN_WY17)" in cli("explain", "gdn_wy17").out


def test_explain_says_a_lower_case_variable_matched_case_insensitively_and_is_not_what_the_engine_reads(cli):
    r = cli("explain", "atlas_gdn_wy17")
    assert r.code == 0
    assert (
        "Matched: variable ATLAS_GDN_WY17, field gdn_wy17 of Atlas, case-insensitively: the engine "
        "reads only ATLAS_GDN_WY17; atlas_gdn_wy17 is a different variable it ignores"
    ) in r.out


def test_explain_says_an_unprefixed_variable_matched_by_adding_the_prefix(cli):
    r = cli("explain", "NO_GEMV_SW")
    assert "Matched: variable ATLAS_NO_GEMV_SW, field gemv_sw of Atlas, adding the engine prefix ATLAS_" in r.out


def test_an_asked_value_on_a_lower_case_name_is_judged_on_the_variable_it_matched(cli):
    r = cli("explain", "atlas_k4_diag=true")
    assert "ATLAS_K4_DIAG=true: off" in r.out


def test_explain_names_the_variant_a_17_token_verify_falls_back_to(cli):
    out = cli("explain", "ATLAS_GDN_WY17").out
    assert "gdn_wy17 on (default): T = 17: wy17; otherwise: wyn" in out
    assert "gdn_wy17 off: wyn [T = 17: gdn_wy17 off: 17 tokens take the general WY-N kernel]" in out
    assert "gdn_wy17 off, gdn_wyn off: recurrent" in out
    assert "falls back to the token-by-token recurrence" not in out


def test_metrales_batched_fla_is_explained_as_the_multi_stream_prefill_path(cli):
    r = cli("explain", "METRALE_GDN_BATCHED_FLA")
    assert "Steers: gdn.prefill_multi_stream\n" in r.out and "no kernel in leverctl yet" not in r.out
    assert "gdn_batched_fla off (default): per_stream [gdn_batched_fla off: one prefill launch per stream]" in r.out
    assert (
        "gdn_batched_fla on: dk = dv = 128: batched; otherwise: per_stream "
        "[gdn_batched_fla on but not taken: dk or dv != 128]"
    ) in r.out
    assert "gdn.decode" not in r.out
    doc = json.loads(cli("explain", "METRALE_GDN_BATCHED_FLA", "-f", "json").out)
    (st,) = doc["selects"]
    assert st["path"] == "gdn.prefill_multi_stream" and st["kernel"] and st["applies"]
    doc = json.loads(cli("explain", "ATLAS_GDN_BATCHED_FLA", "-f", "json").out)
    (st,) = doc["selects"]
    assert st["path"] == "gdn.decode" and st["kernel"] and st["applies"]
    assert [s["text"] for s in st["selected"]] == [
        "per_sequence [N > 1: gdn_batched_fla off: one launch per sequence]",
        "batched",
    ]
    assert doc["matched"]["how"] == "variable"


def test_kernels_lists_the_steered_paths_that_have_no_kernel(cli):
    doc = json.loads(cli("kernels", "-e", "metrale", "--no-env", "-f", "json").out)
    # Metrale's multi-stream prefill has its kernel now; what is left unmeasured
    # (if anything) is the per-sequence decode its fallback levers steer.
    assert {u["path"] for u in doc["unmeasured"]} <= {"decode.per_sequence"}
    ms = next(p for p in doc["paths"] if p["name"] == "gdn.prefill_multi_stream")
    assert ms["applies"] is True and {s["variant"] for s in ms["selected"]} == {"per_stream"}
    assert [v["name"] for v in ms["variants"]] == ["batched", "per_stream"]
    decode = next(p for p in doc["paths"] if p["name"] == "gdn.decode")
    assert decode["applies"] is False and decode["selected"] == []
    r = cli("kernels", "-e", "metrale", "--no-env")
    assert "gdn.prefill_multi_stream" in r.out
    assert ("no kernel in leverctl yet" in r.out) == bool(doc["unmeasured"])
    on = json.loads(cli("kernels", "-e", "metrale", "--no-env", "-s", "METRALE_GDN_BATCHED_FLA=1", "-f", "json").out)
    ms = next(p for p in on["paths"] if p["name"] == "gdn.prefill_multi_stream")
    assert {s["variant"] for s in ms["selected"]} == {"batched"}
    atlas = json.loads(cli("kernels", "-e", "atlas", "--no-env", "-f", "json").out)
    assert not any(u["path"].startswith("gdn.") for u in atlas["unmeasured"])


def test_the_per_sequence_decode_levers_steer_a_measured_path(cli):
    """decode.per_sequence has kernels: explain and kernels no longer call it
    unmeasured (the list of unmeasured paths may hold others, or none)."""
    doc = json.loads(cli("kernels", "-e", "metrale", "--no-env", "-f", "json").out)
    assert all(u["path"] != "decode.per_sequence" for u in doc["unmeasured"])
    (ps,) = [p for p in doc["paths"] if p["name"] == "decode.per_sequence"]
    assert ps["applies"] and {v["name"] for v in ps["variants"]} == {"batched", "per_sequence"}
    for var in ("METRALE_MLA_PERSEQ_FALLBACK", "METRALE_HC_PERSEQ_DECODE"):
        r = cli("explain", var)
        assert r.code == 0, r.err
        assert "decode.per_sequence (no kernel" not in r.out and "decode.per_sequence  (other levers" in r.out
        x = json.loads(cli("explain", var, "-f", "json").out)
        (st,) = [s for s in x["selects"] if s["path"] == "decode.per_sequence"]
        assert st["kernel"] and st["applies"]
