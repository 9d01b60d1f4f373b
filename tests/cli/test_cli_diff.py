"""`leverctl diff A B`: recipes, env, defaults, and show/bench JSON on either side."""

from __future__ import annotations

import json

from cli_helpers import RECIPES, assert_one_line_error


def test_two_recipes_list_only_the_levers_that_differ_with_provenance_and_steers(cli):
    r = cli("diff", RECIPES / "atlas-defaults.toml", RECIPES / "qwen3-next-80b-a3b.toml")
    assert r.code == 1
    assert "2 Atlas lever(s) differ" in r.out
    rows = [line for line in r.out.splitlines() if line.startswith("│ ") and line.split()[1] != ""]
    fields = {line.split()[1] for line in rows if line.split()[1] not in ("│",)}
    assert {"gdn_batched_fla", "max_decode_seqs"} <= fields
    assert "gdn_wy17" not in r.out
    assert "gdn.decode" in r.out and 'ATLAS_GDN_BATCHED_FLA="1"' in r.out


def test_identical_sides_exit_zero(cli):
    r = cli("diff", RECIPES / "atlas-defaults.toml", RECIPES / "atlas-defaults.toml")
    assert r.code == 0
    assert "resolve every Atlas lever alike" in r.out


def test_json_output_lists_both_values_and_provenances(cli):
    r = cli("diff", "defaults", RECIPES / "qwen3-next-80b-a3b-metrale.toml", "-f", "json")
    assert r.code == 1
    doc = json.loads(r.out)
    assert doc["engine"] == "metrale" and doc["equal"] is False
    by = {d["field"]: d for d in doc["differences"]}
    assert set(by) == {"gdn_batched_fla", "gdn_fused_conv", "max_decode_seqs"}
    assert by["gdn_fused_conv"]["a"]["value"] is False and by["gdn_fused_conv"]["b"]["value"] is True
    assert "METRALE_GDN_FUSED_CONV" in by["gdn_fused_conv"]["b"]["provenance"]
    assert by["gdn_fused_conv"]["steers"] == ["gdn.fused_conv"]


def test_env_against_defaults_shows_what_this_shell_changes(cli, monkeypatch):
    monkeypatch.setenv("ATLAS_BF16_TC_PROJ", "0")
    r = cli("diff", "env", "defaults", "-f", "json")
    assert r.code == 1
    (d,) = json.loads(r.out)["differences"]
    assert d["field"] == "bf16_tc_proj" and d["a"]["value"] is True


def test_a_show_json_side_compares_against_a_recipe(cli, tmp_path):
    saved = tmp_path / "show.json"
    saved.write_text(cli("show", "-r", RECIPES / "qwen3-8b.toml", "-f", "json", "--no-env").out)
    assert cli("diff", saved, RECIPES / "qwen3-8b.toml").code == 0
    r = cli("diff", saved, RECIPES / "metrale-defaults.toml", "-f", "json")
    assert r.code == 1
    (d,) = json.loads(r.out)["differences"]
    assert d["field"] == "max_decode_seqs" and (d["a"]["value"], d["b"]["value"]) == (16, 1)


def test_a_bench_json_side_is_read_through_its_levers_key(cli, tmp_path):
    show = json.loads(cli("show", "--set", "ATLAS_NO_GEMV_SW=1", "-f", "json", "--no-env").out)
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"schema": "leverctl.bench/1", "engine": "atlas", "levers": show, "results": []}))
    r = cli("diff", bench, "defaults", "-f", "json")
    assert r.code == 1
    (d,) = json.loads(r.out)["differences"]
    assert (d["field"], d["a"]["value"], d["b"]["value"]) == ("gemv_sw", False, True)
    assert "ATLAS_NO_GEMV_SW" in d["a"]["provenance"]


def test_an_only_changed_show_json_fills_the_rest_with_defaults(cli, tmp_path):
    saved = tmp_path / "changed.json"
    saved.write_text(cli("show", "--set", "ATLAS_K4_DIAG=1", "--only-changed", "-f", "json", "--no-env").out)
    r = cli("diff", saved, "defaults", "-f", "json")
    assert [d["field"] for d in json.loads(r.out)["differences"]] == ["k4_diag"]


def test_an_env_file_side_is_resolved_as_a_whole_environment(cli, tmp_path):
    f = tmp_path / "a.env"
    f.write_text("ATLAS_GDN_WY17=0\n")
    r = cli("diff", f"env:{f}", "defaults", "-f", "json")
    assert [d["field"] for d in json.loads(r.out)["differences"]] == ["gdn_wy17"]


def test_the_drafter_differs_as_a_prefill_carry_object(cli, tmp_path):
    f = tmp_path / "a.env"
    f.write_text("ATLAS_DRAFTER_PREFILL_ONLY=1\n")
    (d,) = json.loads(cli("diff", f"env:{f}", "defaults", "-f", "json").out)["differences"]
    assert d["a"]["value"] == {"prefill": True, "carry": False}
    assert d["b"]["value"] == {"prefill": True, "carry": True}


def test_sides_of_different_engines_are_bad_input(cli):
    r = cli("diff", RECIPES / "qwen3-8b.toml", RECIPES / "atlas-defaults.toml")
    assert_one_line_error(r, "different engines")


def test_a_json_side_that_is_not_from_show_or_bench_is_bad_input(cli, tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    assert_one_line_error(cli("diff", p, "defaults"), str(p), "needs `engine` and a `levers` object")


def test_a_json_syntax_error_names_file_and_line(cli, tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"engine": "atlas",\n "levers": {,}}')
    assert_one_line_error(cli("diff", p, "defaults"), f"{p}:2", "JSON syntax error")


def test_a_json_value_of_the_wrong_type_is_bad_input(cli, tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"engine": "atlas", "levers": {"gdn_wy17": {"value": "yes", "source": "env"}}}))
    assert_one_line_error(cli("diff", p, "defaults"), "levers.gdn_wy17.value must be true or false")
    p.write_text(json.dumps({"engine": "atlas", "levers": {"drafter": {"value": True, "source": "env"}}}))
    assert_one_line_error(cli("diff", p, "defaults"), "levers.drafter.value")


def test_a_missing_side_is_bad_input_that_names_the_accepted_forms(cli, tmp_path):
    assert_one_line_error(cli("diff", tmp_path / "nope.toml", "defaults"), "no such file", "env:FILE")


def test_a_directory_or_binary_side_is_bad_input(cli, tmp_path):
    assert_one_line_error(cli("diff", tmp_path, "defaults"), "is a directory")
    b = tmp_path / "b.bin"
    b.write_bytes(b"\x00\x01garbage")
    assert_one_line_error(cli("diff", b, "defaults"), "binary")
