"""The Atlas engine's own unit tests, restated as behaviour tests of leverctl.

Like the engine's ``from_values`` tests, these drive the production resolution
with an explicit environment (a dict) and never touch the process's.
"""

from __future__ import annotations

import pytest

from leverctl.levers import load_catalog, resolve
from leverctl.levers.kinds import DRAFTER_BOTH, DRAFTER_OFF, DRAFTER_PREFILL_ONLY


@pytest.fixture(scope="module")
def atlas():
    return load_catalog("atlas")


def levers(atlas, **env):
    return resolve(atlas, env=env).values()


# What the engine resolves with no ATLAS_* set: every opt-in off, the opt-out
# and kill-switch levers on, max_decode_seqs 1, the drafter prefilling and carrying.
ATLAS_DEFAULTS = {
    "gdn_regresident": True,
    "gdn_batched_fla": False,
    "gdn_wy17": True,
    "gdn_wyn": True,
    "gemv_sw": True,
    "decode_ffn_via_gemm": False,
    "ffn_small_m": True,
    "holo_moe_down_fp4": False,
    "holo_moe_gateup_fp4": False,
    "moe_union_stats": False,
    "dflash_contig_attn": False,
    "lora_eager": False,
    "lora_rotate": False,
    "k4_diag": False,
    "gemma4_diag": False,
    "bf16_tc_proj": False,
    "max_decode_seqs": 1,
    "shadow_topk": 0,
    "kv_poison": False,
    "drafter": DRAFTER_BOTH,
}


def test_the_opt_out_lever_is_on_by_default_and_every_opt_in_is_off(atlas):
    assert levers(atlas) == ATLAS_DEFAULTS, "absent environment uses the public default"
    assert {f: lv.default for f, lv in atlas.levers.items()} == ATLAS_DEFAULTS


EXACT_ONE = ["kv_poison", "gdn_batched_fla", "decode_ffn_via_gemm", "moe_union_stats", "dflash_contig_attn", "k4_diag"]
EXACT_ONE_VARS = {
    "ATLAS_KV_POISON": "kv_poison",
    "ATLAS_GDN_BATCHED_FLA": "gdn_batched_fla",
    "ATLAS_DECODE_FFN_VIA_GEMM": "decode_ffn_via_gemm",
    "ATLAS_MOE_UNION_STATS": "moe_union_stats",
    "ATLAS_DFLASH_CONTIG_ATTN": "dflash_contig_attn",
    "ATLAS_K4_DIAG": "k4_diag",
}


@pytest.mark.parametrize("var", list(EXACT_ONE_VARS))
def test_exact_one_opt_ins_map_to_their_own_fields(atlas, var):
    got = levers(atlas, **{var: "1"})
    assert [got[f] for f in EXACT_ONE] == [f == EXACT_ONE_VARS[var] for f in EXACT_ONE], var


def test_the_k4_diagnostic_ignores_true(atlas):
    assert levers(atlas, ATLAS_K4_DIAG="true")["k4_diag"] is False


TRUTHY = ["holo_moe_down_fp4", "holo_moe_gateup_fp4", "lora_eager", "lora_rotate", "gemma4_diag"]
TRUTHY_VARS = {
    "ATLAS_HOLO_MOE_DOWN_FP4": "holo_moe_down_fp4",
    "ATLAS_HOLO_MOE_GATEUP_FP4": "holo_moe_gateup_fp4",
    "ATLAS_LORA_EAGER": "lora_eager",
    "ATLAS_LORA_ROTATE": "lora_rotate",
    "ATLAS_DIAG_GEMMA4": "gemma4_diag",
}


@pytest.mark.parametrize("var", list(TRUTHY_VARS))
def test_truthy_opt_ins_map_independently_in_any_case(atlas, var):
    got = levers(atlas, **{var: "TrUe"})
    assert [got[f] for f in TRUTHY] == [f == TRUTHY_VARS[var] for f in TRUTHY], var


def test_presence_is_distinct_from_truthiness_zero_turns_the_bf16_projection_on(atlas):
    assert levers(atlas, ATLAS_BF16_TC_PROJ="0")["bf16_tc_proj"] is True


def test_kill_switches_and_zero_opt_outs_keep_their_distinct_polarities(atlas):
    d = levers(
        atlas,
        ATLAS_NO_GDN_REGRESIDENT="1",
        ATLAS_NO_GEMV_SW="1",
        ATLAS_GDN_WY17="0",
        ATLAS_GDN_WYN="0",
        ATLAS_FFN_SMALLM="0",
    )
    assert not d["gdn_regresident"]
    assert not d["gemv_sw"]
    assert not d["gdn_wy17"]
    assert not d["gdn_wyn"]
    assert not d["ffn_small_m"]
    assert levers(atlas, ATLAS_NO_GDN_REGRESIDENT="0")["gdn_regresident"]
    assert levers(atlas, ATLAS_GDN_WY17="1")["gdn_wy17"]


def test_externally_resolved_shadow_and_drafter_values_are_carried(atlas):
    # The engine resolves these two outside from_values; leverctl reads their
    # variables itself, so the same values must come through.
    d = levers(atlas, ATLAS_MTP_SHADOW_TOPK="7", ATLAS_NO_DRAFTER_CONTEXT="1")
    assert d["shadow_topk"] == 7
    assert d["drafter"] == DRAFTER_OFF


def test_the_shadow_top_k_is_clamped_to_eight_and_unparseable_is_off(atlas):
    assert levers(atlas, ATLAS_MTP_SHADOW_TOPK="100")["shadow_topk"] == 8
    assert levers(atlas, ATLAS_MTP_SHADOW_TOPK="0")["shadow_topk"] == 0
    for bad in (" 3", "3 ", "three", "-1", "3.0", ""):
        assert levers(atlas, ATLAS_MTP_SHADOW_TOPK=bad)["shadow_topk"] == 0, bad


def test_the_drafter_halves_travel_as_one_value_and_prefill_only_drops_carry(atlas):
    assert levers(atlas, ATLAS_DRAFTER_PREFILL_ONLY="1")["drafter"] == DRAFTER_PREFILL_ONLY
    both = levers(atlas, ATLAS_NO_DRAFTER_CONTEXT="1", ATLAS_DRAFTER_PREFILL_ONLY="1")
    assert both["drafter"] == DRAFTER_OFF, "off wins over prefill-only"
    assert levers(atlas, ATLAS_DRAFTER_PREFILL_ONLY="true")["drafter"] == DRAFTER_BOTH


def test_max_decode_seqs_comes_from_the_serve_setting_never_the_environment(atlas):
    assert resolve(atlas, env={"ATLAS_MAX_DECODE_SEQS": "16"}).values()["max_decode_seqs"] == 1
    assert resolve(atlas, max_batch_size=16).values()["max_decode_seqs"] == 16


def test_a_value_that_is_not_utf8_is_unset_to_value_rules_and_set_to_presence_rules(atlas):
    d = levers(atlas, ATLAS_GDN_WY17=b"0\xff", ATLAS_BF16_TC_PROJ=b"\xff", ATLAS_KV_POISON=b"1\xff")
    assert d["gdn_wy17"] is True, "unreadable is unset, and the opt-out stays on"
    assert d["bf16_tc_proj"] is True, "presence sees it"
    assert d["kv_poison"] is False
