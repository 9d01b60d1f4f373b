"""`leverctl show` in every format, with every source of settings."""

from __future__ import annotations

import json
import os
import tomllib

import pytest
from cli_helpers import RECIPES


def test_the_table_groups_levers_by_subsystem_and_marks_what_differs_from_default(cli, monkeypatch):
    monkeypatch.setenv("ATLAS_GDN_WY17", "0")
    r = cli("show")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    for title in ("SSM / GDN recurrence", "FFN / MoE", "Attention", "Diagnostics", "Serve configuration"):
        assert any(title in line for line in lines), title
    (wy17,) = [line for line in lines if " gdn_wy17 " in line]
    assert "off *" in wy17 and "env" in wy17 and 'ATLAS_GDN_WY17="0"' in wy17 and "opt-out" in wy17
    (wyn,) = [line for line in lines if " gdn_wyn " in line]
    assert "*" not in wyn and "default" in wyn
    assert "* differs from the default" in r.out


def test_only_changed_lists_just_the_levers_off_their_default(cli):
    r = cli("show", "--recipe", RECIPES / "qwen3-next-80b-a3b.toml", "--only-changed")
    assert r.code == 0
    rows = [line for line in r.out.splitlines() if line.startswith("│   ")]
    assert [row.split()[1] for row in rows] == ["gdn_batched_fla", "max_decode_seqs"]


def test_only_changed_with_nothing_changed_says_so(cli):
    r = cli("show", "--only-changed", "--no-env")
    assert r.code == 0
    assert "Every Atlas lever is at its default." in r.out


def test_json_is_a_stable_contract_with_engine_and_a_value_and_source_per_field(cli, monkeypatch):
    monkeypatch.setenv("ATLAS_DRAFTER_PREFILL_ONLY", "1")
    r = cli("show", "--format", "json", "--set", "ATLAS_GDN_WY17=false")
    assert r.code == 0
    doc = json.loads(r.out)
    assert doc["engine"] == "atlas"
    assert set(doc["levers"]) == {
        "gdn_regresident",
        "gdn_batched_fla",
        "gdn_wy17",
        "gdn_wyn",
        "gemv_sw",
        "decode_ffn_via_gemm",
        "ffn_small_m",
        "holo_moe_down_fp4",
        "holo_moe_gateup_fp4",
        "moe_union_stats",
        "dflash_contig_attn",
        "lora_eager",
        "lora_rotate",
        "k4_diag",
        "gemma4_diag",
        "bf16_tc_proj",
        "max_decode_seqs",
        "shadow_topk",
        "kv_poison",
        "drafter",
    }
    for entry in doc["levers"].values():
        assert {"value", "source"} <= set(entry)
    assert doc["levers"]["drafter"]["value"] == {"prefill": True, "carry": False}
    assert doc["levers"]["drafter"]["source"] == "env"
    assert (doc["levers"]["gdn_wy17"]["value"], doc["levers"]["gdn_wy17"]["source"]) == (True, "set")
    assert doc["levers"]["gdn_wy17"]["raw"] == "false"


def test_json_for_metrale_carries_tri_states_and_counts_as_json_values(cli):
    r = cli(
        "show",
        "-e",
        "metrale",
        "-f",
        "json",
        "--set",
        "METRALE_MOE_PREFILL_EXACT_TILES=0",
        "--set",
        "METRALE_MOE_PREFILL_MAX_LOAD_FACTOR=3",
        "--max-batch-size",
        "16",
    )
    doc = json.loads(r.out)
    assert doc["engine"] == "metrale" and len(doc["levers"]) == 70
    assert doc["levers"]["moe_prefill_exact_tiles"]["value"] is False
    assert doc["levers"]["moe_prefill_max_load_factor"]["value"] == 3
    assert doc["levers"]["max_decode_seqs"] == doc["levers"]["max_decode_seqs"] | {"value": 16, "source": "flag"}


def test_toml_is_a_recipe_that_reproduces_the_resolution(cli, tmp_path):
    r = cli("show", "-r", RECIPES / "qwen3-8b.toml", "--set", "METRALE_NO_SSD=0", "-f", "toml")
    assert r.code == 0
    doc = tomllib.loads(r.out)
    assert doc["engine"] == "metrale"
    assert doc["levers"] == {"METRALE_NO_SSD": "0"}
    assert doc["serve"] == {"max_batch_size": 16}
    p = tmp_path / "again.toml"
    p.write_text(r.out)
    a = json.loads(cli("show", "-r", RECIPES / "qwen3-8b.toml", "--set", "METRALE_NO_SSD=0", "-f", "json").out)
    b = json.loads(cli("show", "-r", p, "-f", "json").out)
    assert {f: e["value"] for f, e in a["levers"].items()} == {f: e["value"] for f, e in b["levers"].items()}


def test_env_format_prints_quoted_exports_and_unsets_the_rest(cli):
    r = cli("show", "-f", "env", "--set", "ATLAS_GDN_WY17=it's 0", "--no-env")
    assert r.code == 0
    lines = r.out.splitlines()
    assert "export ATLAS_GDN_WY17='it'\"'\"'s 0'" in lines
    assert "unset ATLAS_K4_DIAG" in lines


def test_an_env_file_is_the_whole_environment_and_names_its_engine(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("ATLAS_GDN_WY17", "0")  # ignored: the file is the whole environment
    f = tmp_path / "report.env"
    f.write_text("# from the bug report\nexport METRALE_GDN_WY17=0\nMETRALE_NO_SSD='1'\n")
    r = cli("show", "--env-file", f, "-f", "json")
    assert r.code == 0
    doc = json.loads(r.out)
    assert doc["engine"] == "metrale"
    assert doc["levers"]["gdn_wy17"]["value"] is False
    assert doc["levers"]["ssd"]["value"] is False
    assert "engine metrale" in r.err


def test_an_env_file_with_an_explicit_engine_keeps_that_engine(cli, tmp_path):
    f = tmp_path / "report.env"
    f.write_text("ATLAS_GDN_WY17=0\n")
    doc = json.loads(cli("show", "--env-file", f, "-e", "atlas", "-f", "json").out)
    assert doc["levers"]["gdn_wy17"]["value"] is False


def test_precedence_is_recipe_then_environment_then_set_and_unset_removes(cli, monkeypatch, tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('engine = "atlas"\n[levers]\nATLAS_GDN_WY17 = "0"\nATLAS_GDN_WYN = "0"\nATLAS_FFN_SMALLM = "0"\n')
    monkeypatch.setenv("ATLAS_GDN_WYN", "1")
    monkeypatch.setenv("ATLAS_FFN_SMALLM", "1")
    doc = json.loads(cli("show", "-r", p, "--set", "ATLAS_FFN_SMALLM=0", "--unset", "ATLAS_GDN_WY17", "-f", "json").out)
    lv = doc["levers"]
    assert (lv["gdn_wy17"]["value"], lv["gdn_wy17"]["source"]) == (True, "unset")
    assert (lv["gdn_wyn"]["value"], lv["gdn_wyn"]["source"]) == (True, "env")
    assert (lv["ffn_small_m"]["value"], lv["ffn_small_m"]["source"]) == (False, "set")
    assert lv["gdn_wy17"]["file"] is None


def test_recipe_provenance_names_the_file_and_line(cli):
    doc = json.loads(cli("show", "-r", RECIPES / "qwen3-next-80b-a3b.toml", "-f", "json").out)
    assert doc["levers"]["gdn_batched_fla"]["file"].endswith("qwen3-next-80b-a3b.toml:9")


def test_a_recipe_can_be_named_without_its_folder_or_suffix(cli):
    r = cli("show", "-r", "qwen3-8b", "-f", "json")
    assert r.code == 0 and json.loads(r.out)["engine"] == "metrale"


def test_unknown_prefixed_environment_variables_are_warned_about_with_a_suggestion(cli, monkeypatch):
    monkeypatch.setenv("ATLAS_GDN_WY71", "0")
    r = cli("show", "-f", "json")
    assert r.code == 0
    assert "ATLAS_GDN_WY71 is not a known Atlas lever variable (did you mean ATLAS_GDN_WY17?)" in r.err
    assert json.loads(r.out)["ignored"][0]["var"] == "ATLAS_GDN_WY71"


@pytest.mark.parametrize("fmt", ["table", "json", "toml", "env"])
def test_a_value_that_is_not_utf8_never_crashes_any_format(cli, monkeypatch, fmt):
    monkeypatch.setitem(os.environb, b"ATLAS_GDN_WY17", b"0\xff")
    monkeypatch.setitem(os.environb, b"ATLAS_BF16_TC_PROJ", b"\xfe[bold]")
    r = cli("show", "-f", fmt)
    # Shell lines carry the exact bytes ($'\xfe'), so only there is the value no bad input.
    assert r.code == (0 if fmt == "env" else 2), r.err
    assert r.out, "the output is still written, showing how the engine reads the value"
    assert "not valid UTF-8" in r.err
    if fmt == "env":
        assert "export ATLAS_BF16_TC_PROJ=$'\\xfe[bold]'" in r.out.splitlines()
        assert "export ATLAS_GDN_WY17=$'0\\xff'" in r.out.splitlines()
    if fmt == "json":
        lv = json.loads(r.out)["levers"]
        assert lv["gdn_wy17"]["value"] is True, "unset to a value rule"
        assert lv["bf16_tc_proj"]["value"] is True, "set to a presence rule"
        assert lv["bf16_tc_proj"]["raw_valid_utf8"] is False
    if fmt == "toml":
        assert tomllib.loads(r.out)["levers"] == {"ATLAS_BF16_TC_PROJ": ""}
    if fmt == "table":
        assert "[bold]" in r.out, "user data is printed, never interpreted as markup"


def test_control_characters_in_shell_lines_are_escaped_and_a_posix_shell_gets_them_back(cli, monkeypatch):
    """A value holding control characters is written with them as printf
    octal escapes (never raw inside single quotes, where they would reach
    the terminal), and sh and bash evaluate the line back to the value."""
    import shutil
    import subprocess

    value = "a\x01b\x1b[31m\tc"
    monkeypatch.setenv("ATLAS_GDN_WY17", value)
    r = cli("show", "-f", "env")
    assert r.code == 0, r.err
    line = next(x for x in r.out.splitlines() if x.startswith("export ATLAS_GDN_WY17="))
    assert line == "export ATLAS_GDN_WY17=a\"$(printf '\\001')\"b\"$(printf '\\033')\"'[31m'\"$(printf '\\011')\"c"
    assert not any(ord(c) < 0x20 for c in r.out.replace("\n", ""))
    for shell in ("sh", "bash"):
        if shutil.which(shell):
            got = subprocess.run(
                [shell, "-c", line + '; printf %s "$ATLAS_GDN_WY17"'], capture_output=True, check=True
            ).stdout
            assert got == value.encode(), shell


def test_a_set_value_from_undecodable_argv_bytes_is_treated_as_not_utf8(cli):
    r = cli("show", "-f", "json", "--set", "ATLAS_K4_DIAG=1\udcff")
    assert r.code == 2 and "not valid UTF-8" in r.err
    assert json.loads(r.out)["levers"]["k4_diag"]["value"] is False


def test_max_batch_size_overrides_the_recipe(cli):
    doc = json.loads(cli("show", "-r", RECIPES / "qwen3-8b.toml", "--max-batch-size", "4", "-f", "json").out)
    assert doc["levers"]["max_decode_seqs"]["value"] == 4


def test_only_keeps_a_group_a_name_part_or_a_shell_pattern(cli):
    doc = json.loads(cli("show", "--no-env", "--only", "attention", "-f", "json").out)
    assert list(doc["levers"]) == ["dflash_contig_attn", "bf16_tc_proj"]  # the group, by its id
    doc = json.loads(cli("show", "--no-env", "--only", "*WY*", "-f", "json").out)
    assert list(doc["levers"]) == ["gdn_wy17", "gdn_wyn"]
    doc = json.loads(cli("show", "--no-env", "--only", "gemv", "--only", "LORA_EAGER", "-f", "json").out)
    assert list(doc["levers"]) == ["gemv_sw", "lora_eager"]
    r = cli("show", "--no-env", "--only", "gdn_wy")
    assert r.code == 0 and "gdn_wy17" in r.out and "gemv_sw" not in r.out and "Attention" not in r.out


def test_only_that_keeps_nothing_or_with_a_whole_recipe_format_is_bad_input(cli):
    r = cli("show", "--no-env", "--only", "nothing")
    assert r.code == 2 and r.out == "" and "--only 'nothing'" in r.err and "groups: gdn (SSM / GDN recurrence)" in r.err
    for fmt in ("toml", "env"):
        r = cli("show", "--no-env", "--only", "gdn", "-f", fmt)
        assert r.code == 2 and r.out == "" and f"--only with --format {fmt}" in r.err
