"""Explain: finding a lever by any of its names, and the traps it spells out."""

from __future__ import annotations

import pytest

from leverctl.errors import UserError
from leverctl.levers import load_catalog
from leverctl.levers.explain import explain, find
from leverctl.levers.intent import judge, reading


@pytest.fixture(scope="module")
def cats():
    return [load_catalog("atlas"), load_catalog("metrale")]


@pytest.mark.parametrize("name", ["gdn_wy17", "GDN_WY17", "ATLAS_GDN_WY17", "atlas_gdn_wy17"])
def test_a_lever_is_found_by_field_or_variable_forgiving_case_and_prefix(cats, name):
    cat, lv = find(cats, name)
    assert (cat.engine, lv.field) == ("atlas", "gdn_wy17")


def test_a_variable_only_one_engine_has_finds_that_engine(cats):
    cat, lv = find(cats, "TQ_PLUS_WEIGHT_ROTATION")
    assert (cat.engine, lv.field) == ("metrale", "weight_pre_rotated")


def test_a_near_miss_is_an_error_that_suggests_the_nearest_name(cats):
    with pytest.raises(UserError, match="did you mean ATLAS_GDN_WY17"):
        find(cats, "ATLAS_GDN_WY71")
    with pytest.raises(UserError, match="did you mean kv_poison"):
        find(cats, "kv_poision")


@pytest.mark.parametrize(
    "field,trap",
    [
        ("gdn_wy17", "ATLAS_GDN_WY17=false is ignored and keeps it on"),
        ("bf16_tc_proj", "ATLAS_BF16_TC_PROJ=0 turns it on"),
        ("k4_diag", "ATLAS_K4_DIAG=true is ignored and keeps it off"),
    ],
)
def test_the_famous_atlas_traps_are_spelled_out(cats, field, trap):
    x = explain(cats[0], cats[0].lever(field))
    assert any(trap in t for t in x.traps), x.traps


def test_an_explanation_has_the_rule_values_default_and_what_it_steers(cats):
    x = explain(cats[0], cats[0].lever("gemv_sw"))
    assert x.rule.startswith("kill switch")
    assert ("1", "off (the kill switch fires)") in x.values
    assert x.default == "on"
    assert "w4a16.gemv" in x.steers
    assert ("ATLAS_NO_GEMV_SW=1", "off") in x.examples


def test_dependencies_are_shown_both_ways(cats):
    m = cats[1]
    assert explain(m, m.lever("moe_grouped_down")).requires == ("moe_grouped_cutlass",)
    assert explain(m, m.lever("moe_grouped_cutlass")).needed_by == ("moe_grouped_down",)


def test_an_asked_value_gets_its_result_and_verdict(cats):
    a = cats[0]
    x = explain(a, a.lever("gdn_wy17"), asked=("ATLAS_GDN_WY17", "false"))
    assert x.asked_result == "on"
    assert "keeps it on" in x.asked_verdict
    x = explain(a, a.lever("gdn_wy17"), asked=("ATLAS_GDN_WY17", "0"))
    assert (x.asked_result, x.asked_verdict) == ("off", None)


def test_the_config_lever_explains_that_no_variable_reaches_it(cats):
    x = explain(cats[0], cats[0].lever("max_decode_seqs"))
    assert x.vars == () and x.examples == ()
    assert any("no effect" in t for t in x.traps)


def test_yes_and_no_words_are_read_loosely_but_other_strings_are_not():
    assert reading(" TRUE ") == "on" and reading("off") == "off" and reading("") == "off"
    assert reading("2") is None and reading("maybe") is None


def test_every_lever_of_both_engines_can_be_explained_and_judged_without_error(cats):
    for cat in cats:
        for lv in cat.levers.values():
            explain(cat, lv)
            for var in lv.vars:
                for raw in ("1", "0", "", " x", b"\xff", "\udcff"):
                    judge(lv, var, raw)


@pytest.mark.parametrize(
    "name,how,var",
    [
        ("gdn_wy17", "field", None),
        ("ATLAS_GDN_WY17", "variable", "ATLAS_GDN_WY17"),
        ("GDN_WY17", "unprefixed", "ATLAS_GDN_WY17"),
        ("Gdn_Wy17", "field-case", None),
        ("atlas_gdn_wy17", "variable-case", "ATLAS_GDN_WY17"),
        ("gdn_WY17", "field-case", None),
    ],
)
def test_every_match_says_how_the_name_matched(cats, name, how, var):
    from leverctl.levers.explain import lookup

    cat, lv, m = lookup(cats, name)
    assert (lv.field, m.how, m.var) == ("gdn_wy17", how, var)
    assert "gdn_wy17" in m.text and "ATLAS_GDN_WY17" in m.text
    assert ("case-insensitively" in m.text) == how.endswith("-case")
    assert ("engine prefix ATLAS_" in m.text) == (how == "unprefixed")


def test_a_miss_names_the_name_as_where_it_went_wrong(cats):
    with pytest.raises(UserError) as e:
        find(cats, "ATLAS_GDN_WY71")
    assert e.value.where == "ATLAS_GDN_WY71"


def test_explaining_a_clamped_count_names_the_overflow_trap_that_is_not_clamped(cats):
    m = cats[1]
    x = explain(m, m.lever("shadow_topk"))
    assert any(
        "METRALE_MTP_SHADOW_TOPK=18446744073709551616 is too large" in t and "not clamped to 8" in t for t in x.traps
    ), x.traps
    assert ("METRALE_MTP_SHADOW_TOPK=18446744073709551616", "0") in x.examples
