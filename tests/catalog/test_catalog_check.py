"""`leverctl catalog check`: both engines' lever files agree with the shipped
catalogs, and each kind of drift put into them is reported with exit 1."""

from __future__ import annotations

import json

import pytest


def findings(r):
    return [(f["field"], f["what"]) for f in json.loads(r.out)["findings"]]


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
def test_each_engines_lever_file_checks_clean_against_its_shipped_catalog(cli, rust_file, engine):
    path = rust_file(engine)
    r = cli("catalog", "check", "-e", engine, "-f", "json", path)
    assert r.code == 0, r.out + r.err
    doc = json.loads(r.out)
    assert doc["agrees"] is True and doc["drift"] == 0
    assert not [f for f in doc["findings"] if f["drift"]]


def test_the_table_says_the_catalog_agrees_and_the_engine_is_found_by_its_prefix(cli, rust_file):
    r = cli("catalog", "check", rust_file("atlas"))  # no -e: the ATLAS_ variables name the catalog
    assert r.code == 0, r.err
    assert "atlas.toml" in r.out
    assert "agrees with the source on all 20 fields" in r.out


def test_atlas_rules_the_file_cannot_show_are_notes_not_drift(cli, rust_file):
    r = cli("catalog", "check", "-f", "json", rust_file("atlas"))
    notes = {(f["field"], f["what"]): f for f in json.loads(r.out)["findings"]}
    assert set(notes) == {("gemv_sw", "unverified"), ("shadow_topk", "unverified"), ("drafter", "unverified")}
    assert "gemv_sw_from" in notes[("gemv_sw", "unverified")]["message"]
    assert notes[("gemv_sw", "unverified")]["source"].endswith("model_levers.rs:134")


def test_a_helper_in_a_second_file_is_checked_when_that_file_is_given(cli, rust_file, tmp_path):
    helper = tmp_path / "gemv_sw.rs"
    # A kill switch, as the catalog says: only the exact string 1 turns the single-warp GEMV off.
    helper.write_text('pub fn gemv_sw_from(raw: Option<&str>) -> bool {\n    raw != Some("1")\n}\n')
    r = cli("catalog", "check", "-f", "json", rust_file("atlas"), helper)
    assert r.code == 0, r.out
    assert ("gemv_sw", "unverified") not in findings(r)
    helper.write_text('pub fn gemv_sw_from(raw: Option<&str>) -> bool {\n    raw != Some("0")\n}\n')
    r = cli("catalog", "check", "-f", "json", rust_file("atlas"), helper)
    assert r.code == 1
    assert ("gemv_sw", "rule") in findings(r)


def test_metrale_mentions_and_its_prose_only_rules_are_listed_as_such(cli, rust_file):
    r = cli("catalog", "check", "-f", "json", rust_file("metrale"))
    assert r.code == 0
    got = json.loads(r.out)["findings"]
    mentions = {(f["field"], f["message"].split()[3]) for f in got if f["what"] == "mention"}
    assert mentions == {("lora_rotate", "METRALE_LORA_PEER"), ("ms_profile", "METRALE_SSM_MS_PROFILE")}
    unchecked = [f["message"] for f in got if f["what"] == "unchecked"]
    assert len(unchecked) == 2
    assert all("model_levers_resolve.rs" in m for m in unchecked)
    assert any(m.startswith("defaults()") for m in unchecked)


def _replace(old: str, new: str):
    def edit(text: str) -> str:
        assert text.count(old) == 1, old
        return text.replace(old, new)

    return edit


ATLAS_MUTATIONS = {
    "field-added": (
        _replace(
            "    pub gdn_batched_fla: bool,\n",
            "    pub gdn_batched_fla: bool,\n    /// `ATLAS_GDN_CHUNK64=1` halves the chunk.\n"
            "    pub gdn_chunk64: bool,\n",
        ),
        ("gdn_chunk64", "added"),
    ),
    "field-removed": (_replace("    pub k4_diag: bool,\n", ""), ("k4_diag", "removed")),
    "variable-renamed-in-from_values": (
        _replace('value("ATLAS_GDN_BATCHED_FLA")', 'value("ATLAS_GDN_BATCH_FLA")'),
        ("gdn_batched_fla", "rule"),
    ),
    "opt_out-became-opt_in": (_replace("gdn_wyn: opt_out(", "gdn_wyn: opt_in("), ("gdn_wyn", "rule")),
    "bool-became-option": (_replace("pub lora_eager: bool,", "pub lora_eager: Option<bool>,"), ("lora_eager", "type")),
    "default-flipped": (
        _replace(
            "            gemv_sw: true,\n            ..Self::default()",
            "            gemv_sw: false,\n            ..Self::default()",
        ),
        ("gemv_sw", "default"),
    ),
    "variable-dropped-from-doc": (
        _replace("`ATLAS_MTP_SHADOW_TOPK=k` (0 = off", "The shadow count (0 = off"),
        ("shadow_topk", "variable"),
    ),
    "presence-became-opt_in": (
        _replace(
            'bf16_tc_proj: present("ATLAS_BF16_TC_PROJ")',
            'bf16_tc_proj: opt_in(value("ATLAS_BF16_TC_PROJ").as_deref())',
        ),
        ("bf16_tc_proj", "rule"),
    ),
}

METRALE_MUTATIONS = {
    "field-added": (
        _replace(
            "    pub moe_prefill_zero: bool,\n",
            "    pub moe_prefill_zero: bool,\n    /// 2026-10-01: `METRALE_MOE_PREFILL_SPLIT=1`: split.\n"
            "    pub moe_prefill_split: bool,\n",
        ),
        ("moe_prefill_split", "added"),
    ),
    "field-removed": (_replace("    pub ssd: bool,\n", ""), ("ssd", "removed")),
    "variable-renamed-in-doc": (_replace("`METRALE_GDN_WY17=0`", "`METRALE_GDN_WY17_OFF=0`"), ("gdn_wy17", "variable")),
    "bool-became-option": (
        _replace("pub moe_prefill_zero: bool,", "pub moe_prefill_zero: Option<bool>,"),
        ("moe_prefill_zero", "type"),
    ),
    "usize-became-option": (
        _replace("pub shadow_topk: usize,", "pub shadow_topk: Option<usize>,"),
        ("shadow_topk", "type"),
    ),
    "variable-dropped-from-doc": (
        _replace("`METRALE_NO_FP8_MOE_GROUPED_DECODE` (presence)", "the veto (presence)"),
        ("moe_fp8_grouped_decode_target", "variable"),
    ),
}


@pytest.mark.parametrize(
    "engine, name", [("atlas", n) for n in ATLAS_MUTATIONS] + [("metrale", n) for n in METRALE_MUTATIONS]
)
def test_each_mutation_of_the_source_is_reported_as_drift(cli, rust_file, engine, name):
    edit, expected = (ATLAS_MUTATIONS if engine == "atlas" else METRALE_MUTATIONS)[name]
    path = rust_file(engine, edit)
    r = cli("catalog", "check", "-e", engine, "-f", "json", path)
    assert r.code == 1, r.out + r.err
    doc = json.loads(r.out)
    assert doc["agrees"] is False
    drift = [(f["field"], f["what"]) for f in doc["findings"] if f["drift"]]
    assert expected in drift, drift


def test_a_drift_row_names_the_source_line_and_the_catalog_line(cli, rust_file):
    edit, _ = ATLAS_MUTATIONS["opt_out-became-opt_in"]
    r = cli("catalog", "check", "-f", "json", rust_file("atlas", edit))
    row = next(f for f in json.loads(r.out)["findings"] if f["drift"])
    assert row["source"].endswith("model_levers.rs:132")
    assert row["catalog"] == "leverctl/catalogs/atlas.toml:43"
    assert "opt_in" in row["message"] and "opt_out" in row["message"]
    table = cli("catalog", "check", rust_file("atlas", edit))
    assert table.code == 1
    assert "1 difference between the source and the catalog" in table.out


def test_a_form_the_reader_does_not_evaluate_is_a_note_and_a_rule_of_no_kind_is_drift(cli, tmp_path):
    cat = tmp_path / "nova.toml"
    cat.write_text(
        'engine = "nova"\nprefix = "NOVA_"\n[groups]\ng = "G"\n'
        '[levers.fast]\nvars = ["NOVA_FAST"]\nkind = "opt_in"\ndefault = false\ngroup = "g"\n'
        'summary = "Fast"\n'
    )
    src = tmp_path / "model_levers.rs"

    def write(init: str) -> None:
        src.write_text(
            "pub struct NovaLevers {\n    /// `NOVA_FAST=1`: fast.\n    pub fast: bool,\n}\n\n"
            "fn from_values(mut value: impl FnMut(&str) -> Option<String>) -> NovaLevers {\n"
            f"    NovaLevers {{ fast: {init} }}\n}}\n"
        )

    write('matches!(value("NOVA_FAST").as_deref(), Some("1"))')  # a macro: not evaluated
    r = cli("catalog", "check", "--catalog", cat, "-f", "json", src)
    assert r.code == 0, r.out
    assert [f["what"] for f in json.loads(r.out)["findings"] if f["field"]] == ["unverified"]
    write('value("NOVA_FAST").as_deref() == Some("2")')  # on for 2 only: no kind leverctl knows
    r = cli("catalog", "check", "--catalog", cat, "-f", "json", src)
    assert r.code == 1
    assert [(f["what"], f["drift"]) for f in json.loads(r.out)["findings"] if f["field"]] == [("rule", True)]
    write('value("NOVA_FAST").as_deref() == Some("1")')
    assert cli("catalog", "check", "--catalog", cat, src).code == 0
