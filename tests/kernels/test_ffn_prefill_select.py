"""The dense-FFN prefill decision table against the engine's rules, for
every combination of its ten levers at both projections.

``engine_arm`` below restates Metrale's lever documentation as the call
site would branch on it (every kernel loaded): the NVFP4 MMQ arm before the
Q4_K MMQ arm, down following the gate/up arm, faith5 inside the int8 arm,
v2 over v1 inside the BF16 arm; and, where the engine's text is silent,
leverctl's documented order of the remaining arms (W4A4, int8, FP8, BF16,
then the default). The declared path's table must agree with it once the
arms without a kernel here are treated as not loaded.
"""
from __future__ import annotations

import itertools

import pytest

from leverctl_kernels.selection import (FFN_PREFILL, FFN_PREFILL_BUILT, FFN_PREFILL_ENGINE, FFN_PREFILL_VARIANTS,
                                        ffn_prefill_table)

LEVERS = FFN_PREFILL_ENGINE.levers


def engine_arm(lv: dict, down: bool, loaded=frozenset(FFN_PREFILL_VARIANTS), k: int = 256, lora: bool = False) -> str:
    """The variant Metrale's dense FFN runs for one projection of K = ``k``
    (NVFP4 weights exist only for K a multiple of 16, Q4_K weights for K a
    multiple of 256; the NVFP4 MMQ arm also needs no LoRA adapter)."""
    if lv["ffn_nvfp4_mmq"] and "nvfp4_mmq" in loaded and not lora:  # the gate/up arm is active
        if not down:
            if k % 16 == 0:
                return "nvfp4_mmq"
        else:
            return "nvfp4_mmq" if lv["ffn_nvfp4_mmq_down"] and k % 16 == 0 else "w4a16"
    if lv["ffn_mmq"] and {"q4k_mmq", "int8_faith2"} <= loaded and k % 256 == 0:
        if not down:
            return "q4k_mmq"
        return "q4k_mmq" if lv["ffn_mmq_down_q4k"] else "int8_faith2"
    if lv["fp4_prefill"] and "w4a4" in loaded and k % 16 == 0:
        return "w4a4"
    if lv["int8_prefill"]:
        if lv["int8_faith5"] and "int8_faith5" in loaded:
            return "int8_faith5"
        if "int8_faith2" in loaded:
            return "int8_faith2"
    if lv["fp8_m64_prefill"] and "fp8_m64" in loaded:
        return "fp8_m64"
    if lv["bf16_tc_prefill"]:
        if lv["prefill_v2"] and "bf16_v2" in loaded:
            return "bf16_v2"
        if "bf16_v1" in loaded:
            return "bf16_v1"
    return "w4a16"


def every_combination():
    for values in itertools.product((False, True), repeat=len(LEVERS)):
        yield dict(zip(LEVERS, values))


def disagreements(table, loaded) -> list[str]:
    bad = []
    for lv in every_combination():
        for down in (0, 1):
            for k, lora in ((256, 0), (4096, 0), (160, 0), (200, 0), (256, 1), (160, 1)):
                got = table.select(lv, {"m": 7, "n": 9, "k": k, "down": down, "lora": lora}).variant
                want = engine_arm(lv, bool(down), loaded, k, bool(lora))
                if got != want:
                    on = sorted(f for f, v in lv.items() if v)
                    bad.append(f"{'down' if down else 'gate+up'} k={k} lora={lora} {on}: table {got}, engine {want}")
    return bad


def test_the_engine_table_agrees_with_the_engine_for_all_1024_combinations_at_both_projections_ks_and_lora():
    assert len(LEVERS) == 10
    bad = disagreements(FFN_PREFILL_ENGINE, frozenset(FFN_PREFILL_VARIANTS))
    assert not bad, bad[:10]


def test_the_declared_table_is_the_engine_with_the_unbuilt_arms_not_loaded():
    assert FFN_PREFILL.variants == tuple(v for v in FFN_PREFILL_VARIANTS if v in FFN_PREFILL_BUILT)
    bad = disagreements(FFN_PREFILL, FFN_PREFILL_BUILT)
    assert not bad, bad[:10]


@pytest.mark.parametrize("loaded", [frozenset({"w4a16"}), frozenset({"w4a16", "bf16_v1", "int8_faith5"}),
                                    frozenset({"w4a16", "q4k_mmq"}), frozenset({"w4a16", "q4k_mmq", "int8_faith2"}),
                                    frozenset(FFN_PREFILL_VARIANTS) - {"nvfp4_mmq"}],
                         ids=["default-only", "v1-faith5", "q4k-without-faith2", "q4k", "all-but-nvfp4"])
def test_any_set_of_loaded_arms_falls_through_as_the_engine_does(loaded):
    assert not disagreements(ffn_prefill_table(loaded), loaded)


def test_the_check_sees_a_swapped_precedence():
    import dataclasses

    from leverctl_kernels.selection import FFN_PREFILL_ARMS

    arms = list(FFN_PREFILL_ARMS)
    int8_first = [arms[4], *arms[:4], *arms[5:]]  # int8 faith2 ahead of the MMQ arms

    class Swapped:
        select = dataclasses.replace(FFN_PREFILL_ENGINE,
                                     rules=tuple(r for _, rs in int8_first for r in rs)).select

    bad = disagreements(Swapped, frozenset(FFN_PREFILL_VARIANTS))
    assert any("'ffn_mmq'" in b and "'int8_prefill'" in b for b in bad), bad[:5]


def test_defaults_take_nvfp4_mmq_now_that_its_kernel_is_built():
    assert FFN_PREFILL_BUILT == frozenset(FFN_PREFILL_VARIANTS)
    defaults = {}
    for down in (0, 1):
        shape = {"m": 512, "n": 4096, "k": 4096, "down": down}
        assert FFN_PREFILL_ENGINE.select(defaults, shape).variant == "nvfp4_mmq"
        assert FFN_PREFILL.select(defaults, shape).variant == "nvfp4_mmq"


def test_a_lora_adapter_or_a_k_without_nvfp4_blocks_leaves_the_nvfp4_mmq_arm_unloaded():
    gate = {"m": 5, "n": 9, "k": 256, "down": 0}
    assert FFN_PREFILL.select({}, {**gate, "lora": 1}).variant == "w4a16"
    assert FFN_PREFILL.select({"ffn_mmq": True}, {**gate, "lora": 1}).variant == "q4k_mmq"
    c = FFN_PREFILL.select({}, {**gate, "k": 200})
    assert c.variant == "w4a16" and not c.note
    c = FFN_PREFILL.select({}, {**gate, "k": 200, "down": 1})
    assert c.variant == "w4a16" and "no NVFP4 weights" in c.note, c


def test_notes_say_where_down_goes():
    down = {"m": 5, "n": 9, "k": 256, "down": 1}
    c = FFN_PREFILL_ENGINE.select({"ffn_nvfp4_mmq_down": False}, down)
    assert c.variant == "w4a16" and "ffn_nvfp4_mmq_down off" in c.note
    c = FFN_PREFILL_ENGINE.select({"ffn_nvfp4_mmq": False, "ffn_mmq": True}, down)
    assert c.variant == "int8_faith2" and "faith2" in c.note


def test_the_q4k_arm_falls_through_at_k_not_a_multiple_of_256_by_a_guard_the_note_names():
    lv = {"ffn_nvfp4_mmq": False, "ffn_mmq": True, "int8_prefill": True}
    for down in (0, 1):
        c = FFN_PREFILL.select(lv, {"m": 5, "n": 9, "k": 160, "down": down})
        assert c.variant == "int8_faith2" and "super-blocks of 256" in c.note, c
    assert FFN_PREFILL.select(lv, {"m": 5, "n": 9, "k": 512, "down": 0}).variant == "q4k_mmq"
    (guard,) = {c for r in FFN_PREFILL.rules for c in r.shape if c.text == "k % 256 != 0"}
    assert guard.negation == "" and guard.why({"k": 160}) == ""  # a guard: its failure is no later rule's reason


def _explained(field: str) -> dict:
    from leverctl.levers import load_catalog
    from leverctl.levers.explain import explain

    cat = load_catalog("metrale")
    (st,) = [s for s in explain(cat, cat.lever(field)).selects if s.path == "ffn.prefill"]
    assert st.kernel and st.applies
    return {(s.value, s.with_): s.text for s in st.selected}


def test_explain_words_the_down_projection_from_the_table():
    texts = _explained("ffn_mmq_down_q4k")
    on, off = texts[(True, ("ffn_mmq", True))], texts[(False, ("ffn_mmq", True))]
    assert "gate+up: q4k_mmq; otherwise: q4k_mmq" in on and "; otherwise: int8_faith2" not in on, on
    assert "gate+up: q4k_mmq; otherwise: int8_faith2" in off, off
    texts = _explained("int8_faith5")
    assert texts[(True, ("int8_prefill", True))].endswith("otherwise: int8_faith5")
    assert texts[(False, ("int8_prefill", True))].endswith("otherwise: int8_faith2")


def test_explain_prints_the_q4k_guard_before_the_q4k_arm_and_no_shadowed_case():
    text = _explained("ffn_mmq")[(True, ("ffn_nvfp4_mmq", False))]
    assert text.startswith("k % 256 != 0: w4a16 [Q4_K weights come in super-blocks of 256"), text
    assert text.index("k % 256 != 0") < text.index("gate+up: q4k_mmq"), text
    text = _explained("int8_prefill")[(True, ("ffn_mmq", True))]
    assert "k % 256 != 0: int8_faith2 [" in text and "k % 256 != 0: w4a16" not in text, text


def test_explain_says_when_the_nvfp4_mmq_arm_counts_as_loaded():
    text = _explained("ffn_nvfp4_mmq")[(True, None)]
    assert text.startswith("gate+up and no LoRA adapter and k % 16 = 0: nvfp4_mmq;"), text
