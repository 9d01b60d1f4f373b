"""Metrale's lever fields, one behaviour per documented rule.

The engine's seed declares its tests but does not print their bodies, so these
follow its field documentation: what switches each field, with which exact
value, and what the absent environment yields.
"""

from __future__ import annotations

import pytest

from leverctl.levers import load_catalog, resolve
from leverctl.levers.kinds import DRAFTER_BOTH, DRAFTER_OFF, DRAFTER_PREFILL_ONLY


@pytest.fixture(scope="module")
def metrale():
    return load_catalog("metrale")


def levers(cat, **env):
    return resolve(cat, env=env).values()


ON_UNLESS_ONE = {  # on unless VAR=1 exactly
    "METRALE_NO_GDN_REGRESIDENT": "gdn_regresident",
    "METRALE_NO_GEMV_SW": "gemv_sw",
}
ON_UNLESS_ZERO = {  # on unless VAR=0 exactly
    "METRALE_GDN_WY17": "gdn_wy17",
    "METRALE_GDN_WYN": "gdn_wyn",
    "METRALE_FFN_SMALLM": "ffn_small_m",
    "METRALE_SSM_GEMV_BATCH4": "ssm_gemv_batch4",
}
EXACT_ONE = {
    "METRALE_GDN_BATCHED_FLA": "gdn_batched_fla",
    "METRALE_DECODE_FFN_VIA_GEMM": "decode_ffn_via_gemm",
    "METRALE_MOE_UNION_STATS": "moe_union_stats",
    "METRALE_FP32_ROUTING": "fp32_routing",
    "METRALE_FP32_GATE": "fp32_gate",
    "METRALE_FRANKENSTEIN_DECODE_VIA_PREFILL": "frankenstein_decode_via_prefill",
    "METRALE_K2_DIAG": "k2_diag",
    "METRALE_HOLO_MOE_GROUPED_CUTLASS": "moe_grouped_cutlass",
    "METRALE_HOLO_MOE_GROUPED_DOWN": "moe_grouped_down",
    "METRALE_MOE_PREFILL_ZERO": "moe_prefill_zero",
    "METRALE_MOE_PREFILL_FP8_DOWN": "moe_prefill_fp8_down",
    "METRALE_DFLASH_CONTIG_ATTN": "dflash_contig_attn",
    "METRALE_K4_DIAG": "k4_diag",
    "METRALE_DFLASH_DEBUG_DUMP_FULL": "dflash_debug_dump_full",
    "METRALE_MTP_DEBUG_NORMS": "mtp_debug_norms",
    "METRALE_MTP_CHAIN_POSTNORM": "mtp_chain_postnorm",
    "METRALE_MTP_TARGET_POSTNORM": "mtp_target_postnorm",
    "METRALE_MTP_KV_EXACT": "mtp_kv_exact",
    "METRALE_FP8_MOE_GROUPED_DECODE": "moe_fp8_grouped_decode_target",
    "METRALE_FP8_ATTN_M32": "fp8_attn_m32",
    "METRALE_HC_PERSEQ_DECODE": "hc_perseq_decode",
    "METRALE_DECODE_BATCH_LOG": "decode_batch_log",
    "METRALE_MS_PROFILE": "ms_profile",
    "METRALE_SSM_MS_PROFILE": "ssm_ms_profile",
    "METRALE_SSM_DETAIL_PROFILE": "ssm_detail_profile",
    "METRALE_GDN_FUSED_CONV": "gdn_fused_conv",
    "METRALE_MOE_LEGACY_PERTOKEN_DECODE": "moe_legacy_pertoken_decode",
    "METRALE_KV_POISON": "kv_poison",
}
ONE_OR_TRUE_ANY_CASE = {
    "METRALE_HOLO_MOE_DOWN_FP4": "holo_moe_down_fp4",
    "METRALE_HOLO_MOE_GATEUP_FP4": "holo_moe_gateup_fp4",
    "METRALE_LORA_EAGER": "lora_eager",
    "METRALE_LORA_ROTATE": "lora_rotate",
    "METRALE_DIAG_GEMMA4": "gemma4_diag",
    "TQ_PLUS_WEIGHT_ROTATION": "weight_pre_rotated",
}
ONE_OR_TRUE_EXACT = {
    "METRALE_MLA_PERSEQ_FALLBACK": "mla_perseq_fallback",
    "METRALE_CONC_HSD": "conc_hsd",
    "METRALE_EP_GRAPHS": "ep_graphs",
    "METRALE_GDN_DECODE_GRAPH": "gdn_decode_graph",
}
PRESENCE_ON = {
    "METRALE_BF16_TC_PREFILL": "bf16_tc_prefill",
    "METRALE_FP8_M64_PREFILL": "fp8_m64_prefill",
    "METRALE_INT8_PREFILL": "int8_prefill",
    "METRALE_INT8_FAITH5": "int8_faith5",
    "METRALE_FFN_MMQ": "ffn_mmq",
    "METRALE_FFN_MMQ_DOWN_Q4K": "ffn_mmq_down_q4k",
    "METRALE_FP4_PREFILL": "fp4_prefill",
    "METRALE_MOE_MAX_M_TILES_ESTIMATE": "moe_max_m_tiles_estimate",
    "METRALE_MOE_W4A4": "moe_w4a4",
    "METRALE_SHARED_W4A4_DOWN": "shared_w4a4_down",
    "METRALE_SSM_SAVE_DUMP": "ssm_save_dump",
    "METRALE_BF16_TC_PROJ": "bf16_tc_proj",
}
PRESENCE_OFF = {
    "METRALE_NO_FFN_NVFP4_MMQ": "ffn_nvfp4_mmq",
    "METRALE_NO_FFN_NVFP4_MMQ_DOWN": "ffn_nvfp4_mmq_down",
    "METRALE_DISABLE_PREFILL_V2": "prefill_v2",
    "METRALE_NO_SSM_W4A4": "ssm_w4a4",
    "METRALE_NO_SSD": "ssd",
    "METRALE_NO_SSM_PERSISTENT": "ssm_persistent",
    "METRALE_MOE_NO_ZERO_INTERMEDIATES": "moe_zero_intermediates",
    "METRALE_NO_SHARED_W4A4": "shared_w4a4",
    "METRALE_NO_DECODE_SPLIT_SILU": "decode_split_silu",
}


def test_with_nothing_set_the_on_unless_levers_are_on_and_everything_else_is_off(metrale):
    d = levers(metrale)
    on = {*ON_UNLESS_ONE.values(), *ON_UNLESS_ZERO.values(), *PRESENCE_OFF.values()}
    for field, value in d.items():
        if field in on:
            assert value is True, field
        elif field in ("moe_prefill_exact_tiles", "moe_prefill_max_load_factor"):
            assert value is None, field
        elif field == "max_decode_seqs":
            assert value == 1
        elif field == "shadow_topk":
            assert value == 0
        elif field == "drafter":
            assert value == DRAFTER_BOTH
        else:
            assert value is False, field


def test_every_field_of_the_struct_is_covered_by_one_of_the_rule_tables(metrale):
    tables = (
        ON_UNLESS_ONE,
        ON_UNLESS_ZERO,
        EXACT_ONE,
        ONE_OR_TRUE_ANY_CASE,
        ONE_OR_TRUE_EXACT,
        PRESENCE_ON,
        PRESENCE_OFF,
    )
    covered = {f for t in tables for f in t.values()}
    special = {"moe_prefill_exact_tiles", "moe_prefill_max_load_factor", "max_decode_seqs", "shadow_topk", "drafter"}
    assert covered | special == set(metrale.fields)
    assert len(metrale.fields) == 70


@pytest.mark.parametrize("var,field", sorted(ON_UNLESS_ONE.items()))
def test_kill_switches_fire_only_on_the_exact_string_one(metrale, var, field):
    assert levers(metrale, **{var: "1"})[field] is False
    for other in ("0", "true", "yes", " 1", "1 ", ""):
        assert levers(metrale, **{var: other})[field] is True, repr(other)


@pytest.mark.parametrize("var,field", sorted(ON_UNLESS_ZERO.items()))
def test_opt_outs_turn_off_only_on_the_exact_string_zero(metrale, var, field):
    assert levers(metrale, **{var: "0"})[field] is False
    for other in ("1", "false", "no", "off", "", " 0"):
        assert levers(metrale, **{var: other})[field] is True, repr(other)


@pytest.mark.parametrize("var,field", sorted(EXACT_ONE.items()))
def test_exact_one_opt_ins_map_to_their_own_fields_and_ignore_true(metrale, var, field):
    d = levers(metrale, **{var: "1"})
    changed = {f for f, v in d.items() if v != metrale.lever(f).default}
    assert changed == {field}
    for other in ("true", "TRUE", "yes", " 1", "01", "0"):
        assert levers(metrale, **{var: other})[field] is False, repr(other)


@pytest.mark.parametrize("var,field", sorted(ONE_OR_TRUE_ANY_CASE.items()))
def test_one_or_true_in_any_ascii_case_turns_these_on(metrale, var, field):
    for on in ("1", "true", "TRUE", "TrUe"):
        assert levers(metrale, **{var: on})[field] is True, on
    for off in ("yes", "on", " true", "tru", "truee", "0", "\u0130rue"):
        assert levers(metrale, **{var: off})[field] is False, off


@pytest.mark.parametrize("var,field", sorted(ONE_OR_TRUE_EXACT.items()))
def test_one_or_true_case_sensitive_levers_reject_other_casings(metrale, var, field):
    assert levers(metrale, **{var: "1"})[field] is True
    assert levers(metrale, **{var: "true"})[field] is True
    for off in ("True", "TRUE", "yes", "0"):
        assert levers(metrale, **{var: off})[field] is False, off


@pytest.mark.parametrize("var,field", sorted(PRESENCE_ON.items()))
def test_presence_levers_turn_on_for_any_value_zero_and_empty_included(metrale, var, field):
    for value in ("1", "0", "", "false", b"\xff"):
        assert levers(metrale, **{var: value})[field] is True, value


@pytest.mark.parametrize("var,field", sorted(PRESENCE_OFF.items()))
def test_presence_kill_switches_turn_off_for_any_value_zero_included(metrale, var, field):
    for value in ("1", "0", "", "false", b"\xff"):
        assert levers(metrale, **{var: value})[field] is False, value


def test_the_two_fp8_grouped_decode_variables_combine_as_opt_in_with_a_presence_veto(metrale):
    f = "moe_fp8_grouped_decode_target"
    assert levers(metrale, METRALE_FP8_MOE_GROUPED_DECODE="1")[f] is True
    for veto in ("1", "0", ""):
        assert (
            levers(metrale, METRALE_FP8_MOE_GROUPED_DECODE="1", METRALE_NO_FP8_MOE_GROUPED_DECODE=veto)[f] is False
        ), veto


def test_exact_tiles_is_a_tri_state_left_to_the_call_site_unless_one_or_zero(metrale):
    f = "moe_prefill_exact_tiles"
    assert levers(metrale, METRALE_MOE_PREFILL_EXACT_TILES="1")[f] is True
    assert levers(metrale, METRALE_MOE_PREFILL_EXACT_TILES="0")[f] is False
    for other in ("true", "false", "2", "", " 1"):
        assert levers(metrale, METRALE_MOE_PREFILL_EXACT_TILES=other)[f] is None, other


def test_the_load_factor_is_a_count_where_zero_or_unparseable_means_worst_case(metrale):
    f = "moe_prefill_max_load_factor"
    assert levers(metrale, METRALE_MOE_PREFILL_MAX_LOAD_FACTOR="4")[f] == 4
    assert levers(metrale, METRALE_MOE_PREFILL_MAX_LOAD_FACTOR="+4")[f] == 4
    for none in ("0", "", " 4", "4.0", "-4", "four", "18446744073709551616"):
        assert levers(metrale, METRALE_MOE_PREFILL_MAX_LOAD_FACTOR=none)[f] is None, none


def test_the_shadow_top_k_is_capped_at_eight_and_unparseable_is_off(metrale):
    assert levers(metrale, METRALE_MTP_SHADOW_TOPK="3")["shadow_topk"] == 3
    assert levers(metrale, METRALE_MTP_SHADOW_TOPK="9")["shadow_topk"] == 8
    assert levers(metrale, METRALE_MTP_SHADOW_TOPK="x")["shadow_topk"] == 0


def test_the_drafter_policy_is_one_value_whose_carry_implies_prefill(metrale):
    assert levers(metrale, METRALE_NO_MTP_DRAFTER_CONTEXT="1")["drafter"] == DRAFTER_OFF
    assert levers(metrale, METRALE_MTP_DRAFTER_CONTEXT_PREFILL_ONLY_UNSAFE="1")["drafter"] == DRAFTER_PREFILL_ONLY
    for v in (DRAFTER_BOTH, DRAFTER_OFF, DRAFTER_PREFILL_ONLY):
        assert not (v.carry and not v.prefill)


def test_decode_split_silu_follows_the_build_default_unless_the_kill_variable_is_present(metrale, tmp_path):
    from leverctl.levers import load_recipe

    assert levers(metrale)["decode_split_silu"] is True, "an undeclared build inherits on"
    off = tmp_path / "off.toml"
    off.write_text('engine = "metrale"\n[build]\ndecode_split_silu = false\n')
    r = resolve(metrale, recipe=load_recipe(off))
    assert r["decode_split_silu"].value is False
    assert r["decode_split_silu"].provenance.source == "build"
    on = tmp_path / "on.toml"
    on.write_text('engine = "metrale"\n[build]\ndecode_split_silu = true\n')
    assert (
        resolve(metrale, recipe=load_recipe(on), env={"METRALE_NO_DECODE_SPLIT_SILU": "0"})["decode_split_silu"].value
        is False
    )


def test_the_rotation_variable_has_no_engine_prefix_and_is_still_read(metrale):
    assert levers(metrale, TQ_PLUS_WEIGHT_ROTATION="True")["weight_pre_rotated"] is True


def test_the_two_halves_of_the_dflash_dump_name_the_same_flag(metrale):
    # The drafter resolves the same variable for its half; leverctl has one
    # field for it, read from exactly that variable.
    assert metrale.lever("dflash_debug_dump_full").vars == ("METRALE_DFLASH_DEBUG_DUMP_FULL",)


def test_max_decode_seqs_is_one_unless_the_serve_setting_says_otherwise(metrale):
    assert levers(metrale)["max_decode_seqs"] == 1
    assert resolve(metrale, max_batch_size=32).values()["max_decode_seqs"] == 32


def test_variables_of_the_other_engine_are_not_read(metrale):
    assert levers(metrale, ATLAS_GDN_WY17="0")["gdn_wy17"] is True
