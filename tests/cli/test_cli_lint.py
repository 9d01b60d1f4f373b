"""`leverctl lint`: findings, severities and the exit codes CI relies on."""

from __future__ import annotations

import json

from cli_helpers import RECIPES, assert_one_line_error


def test_the_shipped_recipes_lint_clean(cli):
    for recipe in sorted(RECIPES.glob("*.toml")):
        r = cli("lint", "--recipe", recipe, "--strict")
        assert r.code == 0, (recipe, r.out)
        assert "0 errors, 0 warnings" in r.out


def test_an_error_finding_exits_one_and_names_where_it_was_set(cli, tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('engine = "atlas"\n[levers]\nATLAS_K4_DIAG = "true"\n')
    r = cli("lint", "-r", p)
    assert r.code == 1
    assert f"{p}:3: error: ATLAS_K4_DIAG=true is ignored and keeps it off" in r.out
    assert "lint fails" in r.out


def test_warnings_pass_unless_strict(cli, monkeypatch):
    monkeypatch.setenv("ATLAS_KV_POISON", "1")
    r = cli("lint")
    assert r.code == 0 and "environment: warning: diagnostic lever kv_poison is on" in r.out
    assert cli("lint", "--strict").code == 1


def test_info_never_fails_even_strict(cli):
    r = cli("lint", "-e", "metrale", "--set", "METRALE_NO_FFN_NVFP4_MMQ=1", "--strict")
    assert r.code == 0, r.out
    assert "info: ffn_nvfp4_mmq_down stays on by default but has no effect" in r.out


def test_unknown_variables_in_a_recipe_are_findings_with_suggestions_not_bad_input(cli, tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('engine = "metrale"\n[levers]\nMETRALE_GDN_WY71 = "0"\n')
    r = cli("lint", "-r", p)
    assert r.code == 1
    assert (
        f"{p}:3: error: METRALE_GDN_WY71 is not a known Metrale lever variable (did you mean METRALE_GDN_WY17?)"
        in r.out
    )


def test_the_metrale_dependency_and_veto_findings(cli):
    r = cli(
        "lint",
        "-e",
        "metrale",
        "-f",
        "json",
        "--set",
        "METRALE_HOLO_MOE_GROUPED_DOWN=1",
        "--set",
        "METRALE_INT8_FAITH5=1",
        "--set",
        "METRALE_FFN_MMQ_DOWN_Q4K=1",
        "--set",
        "METRALE_NO_FFN_NVFP4_MMQ=1",
        "--set",
        "METRALE_FP8_MOE_GROUPED_DECODE=1",
        "--set",
        "METRALE_NO_FP8_MOE_GROUPED_DECODE=1",
    )
    doc = json.loads(r.out)
    got = {(f["severity"], f["code"], f["field"]) for f in doc["findings"]}
    assert {
        ("warning", "missing-dependency", "moe_grouped_down"),
        ("warning", "missing-dependency", "int8_faith5"),
        ("warning", "missing-dependency", "ffn_mmq_down_q4k"),
        ("info", "missing-dependency", "ffn_nvfp4_mmq_down"),
        ("error", "overridden", "moe_fp8_grouped_decode_target"),
    } <= got
    assert r.code == 1 and doc["exit_code"] == 1
    assert doc["counts"]["error"] >= 1


def test_values_read_against_intent_from_the_environment(cli, monkeypatch):
    monkeypatch.setenv("ATLAS_GDN_WY17", "false")
    monkeypatch.setenv("ATLAS_BF16_TC_PROJ", "0")
    monkeypatch.setenv("ATLAS_NO_GEMV_SW", " 1")
    r = cli("lint", "-f", "json")
    codes = {(f["var"], f["code"]) for f in json.loads(r.out)["findings"]}
    assert codes == {
        ("ATLAS_GDN_WY17", "ignored"),
        ("ATLAS_BF16_TC_PROJ", "presence"),
        ("ATLAS_NO_GEMV_SW", "whitespace"),
    }


def test_an_env_file_finding_names_the_file_and_line(cli, tmp_path):
    f = tmp_path / "bug.env"
    f.write_text("PATH=/bin\nATLAS_DRAFTER_PREFILL_ONLY=1\n")
    r = cli("lint", "--env-file", f)
    assert f"{f}:2: warning: the MTP drafter prefills its context but does not carry it" in r.out
    assert "927 ms" in r.out


def test_the_help_documents_the_exit_codes(cli):
    r = cli("lint", "--help")
    assert r.code == 0
    text = " ".join(r.out.split())
    assert "Exit codes" in text and "--strict" in text and "2 bad input" in text


def test_bad_input_to_lint_is_exit_two(cli, tmp_path):
    assert_one_line_error(cli("lint", "--set", "ATLAS_K4_DIAG"), "VAR=VALUE")
    assert_one_line_error(cli("lint", "--env-file", tmp_path / "missing.env"), "no such env file")


def test_an_env_file_with_an_unprefixed_lever_name_is_an_error_at_its_line(cli, tmp_path):
    p = tmp_path / "a.env"
    p.write_text("PATH=/bin\nGDN_WY17=0\n")
    r = cli("lint", "--env-file", p)
    assert r.code == 1, r.out
    assert (
        f"{p}:2: error: GDN_WY17 lacks the engine prefix ATLAS_: Atlas reads only ATLAS_GDN_WY17, "
        "so it ignores GDN_WY17 (did you mean ATLAS_GDN_WY17?)"
    ) in r.out


def test_an_overflowing_count_says_what_the_engine_reads(cli):
    r = cli("lint", "-e", "metrale", "--no-env", "--set", "METRALE_MTP_SHADOW_TOPK=99999999999999999999999")
    assert r.code == 1
    assert "shadow_topk is 0 (off), not clamped to 8" in r.out and "[overflow]" in r.out
