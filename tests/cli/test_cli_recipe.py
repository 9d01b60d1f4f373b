"""`leverctl recipe freeze` and `leverctl env RECIPE`."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib

from cli_helpers import RECIPES, assert_one_line_error


def _values(cli, *args):
    return {f: e["value"] for f, e in json.loads(cli("show", "-f", "json", *args).out)["levers"].items()}


def test_freeze_writes_a_recipe_that_reproduces_the_resolution_exactly(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("METRALE_NO_SSD", "0")
    args = (
        "-r",
        RECIPES / "qwen3-next-80b-a3b-metrale.toml",
        "--set",
        "METRALE_GDN_WY17=false",
        "--max-batch-size",
        "8",
    )
    out = tmp_path / "frozen.toml"
    r = cli("recipe", "freeze", *args, "--out", out)
    assert r.code == 0, r.err
    assert r.out == "" and f"wrote {out}" in r.err
    doc = tomllib.loads(out.read_text())
    assert doc["levers"] == {
        "METRALE_GDN_BATCHED_FLA": "1",
        "METRALE_GDN_WY17": "false",
        "METRALE_NO_SSD": "0",
        "METRALE_GDN_FUSED_CONV": "1",
    }
    assert doc["serve"] == {"max_batch_size": 8}
    assert doc["model"]["name"] == "Qwen3-Next-80B-A3B"
    expected = _values(cli, *args)
    monkeypatch.delenv("METRALE_NO_SSD")
    assert _values(cli, "-r", out) == expected


def test_freeze_to_stdout_is_the_same_recipe(cli):
    r = cli("recipe", "freeze", "--set", "ATLAS_K4_DIAG=1", "--no-env")
    assert tomllib.loads(r.out)["levers"] == {"ATLAS_K4_DIAG": "1"}


def test_the_freeze_header_names_the_set_and_unset_values_it_holds(cli):
    r = cli("recipe", "freeze", "--no-env", "--set", "ATLAS_GDN_WY17=0", "--unset", "ATLAS_GDN_WYN")
    assert r.code == 0, r.err
    head = r.out.splitlines()[0]
    assert head.startswith("# Atlas levers as resolved by leverctl") and head.endswith(
        "without the environment and --set ATLAS_GDN_WY17=0 --unset ATLAS_GDN_WYN."
    )
    plain = cli("recipe", "freeze", "--no-env").out.splitlines()[0]
    assert "--set" not in plain and plain.endswith("without the environment.")


def test_freeze_replaces_an_existing_file_atomically_and_leaves_no_temporaries(cli, tmp_path):
    out = tmp_path / "frozen.toml"
    out.write_text("old")
    assert cli("recipe", "freeze", "--no-env", "-o", out).code == 0
    assert tomllib.loads(out.read_text())["engine"] == "atlas"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["frozen.toml"]


def test_freeze_keeps_the_behaviour_of_a_value_that_is_not_utf8_and_warns(cli, monkeypatch):
    monkeypatch.setitem(os.environb, b"METRALE_INT8_PREFILL", b"\xff")
    monkeypatch.setitem(os.environb, b"METRALE_GDN_WY17", b"0\xff")
    r = cli("recipe", "freeze", "-e", "metrale")
    assert r.code == 2  # bad input, said on stderr; the behaviour-keeping recipe is still written
    assert tomllib.loads(r.out)["levers"] == {"METRALE_INT8_PREFILL": ""}
    assert 'METRALE_INT8_PREFILL=\\xff is not valid UTF-8; written as ""' in r.err
    assert "METRALE_GDN_WY17=0\\xff is not valid UTF-8; left unset" in r.err


def test_freeze_to_a_missing_folder_or_a_directory_is_bad_input(cli, tmp_path):
    assert_one_line_error(cli("recipe", "freeze", "-o", tmp_path / "no" / "x.toml"), "no such folder")
    assert_one_line_error(cli("recipe", "freeze", "-o", tmp_path), "is a directory")


def test_env_prints_exports_for_the_recipe_and_unsets_for_the_rest(cli):
    r = cli("env", RECIPES / "qwen3-next-80b-a3b.toml")
    assert r.code == 0
    lines = r.out.splitlines()
    assert "export ATLAS_GDN_BATCHED_FLA=1" in lines
    assert "unset ATLAS_GDN_WY17" in lines
    assert any("max_batch_size = 32" in line and line.startswith("#") for line in lines)


def test_env_lines_evaluated_by_a_shell_reproduce_the_recipe(cli, tmp_path, leverctl_exe):
    p = tmp_path / "r.toml"
    p.write_text(
        'engine = "atlas"\n[levers]\nATLAS_GDN_WY17 = "it\'s $(not run) `x` \\"q\\" \\\\"\n'
        'ATLAS_BF16_TC_PROJ = ""\nATLAS_MTP_SHADOW_TOPK = " 3"\n'
    )
    script = cli("env", p).out
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLAS_", "METRALE_"))}
    env["ATLAS_K4_DIAG"] = "1"  # the recipe does not set it, so eval must unset it
    shown = subprocess.run(
        ["sh", "-c", script + f'\n"{leverctl_exe}" show -f json'], env=env, capture_output=True, text=True, check=True
    ).stdout
    got = {f: e["value"] for f, e in json.loads(shown)["levers"].items()}
    assert got == _values(cli, "-r", p)
    raw = json.loads(shown)["levers"]["gdn_wy17"]["raw"]
    assert raw == 'it\'s $(not run) `x` "q" \\'


def test_env_keep_others_prints_only_the_recipe(cli):
    r = cli("env", RECIPES / "qwen3-next-80b-a3b.toml", "--keep-others")
    assert [line for line in r.out.splitlines() if not line.startswith("#")] == ["export ATLAS_GDN_BATCHED_FLA=1"]


def test_env_of_a_recipe_with_an_unknown_variable_is_bad_input_with_a_suggestion(cli, tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('engine = "atlas"\n[levers]\nATLAS_GDN_WY71 = "0"\n')
    assert_one_line_error(cli("env", p), f"{p}:3", "did you mean ATLAS_GDN_WY17?")
