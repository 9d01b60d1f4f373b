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


def engine_arm(lv: dict, down: bool, loaded=frozenset(FFN_PREFILL_VARIANTS), k: int = 256) -> str:
    """The variant Metrale's dense FFN runs for one projection of K = ``k``
    (Q4_K weights exist only for K a multiple of 256)."""
    if lv["ffn_nvfp4_mmq"] and "nvfp4_mmq" in loaded:
        if not down:
            return "nvfp4_mmq"
        return "nvfp4_mmq" if lv["ffn_nvfp4_mmq_down"] else "w4a16"
    if lv["ffn_mmq"] and {"q4k_mmq", "int8_faith2"} <= loaded and k % 256 == 0:
        if not down:
            return "q4k_mmq"
        return "q4k_mmq" if lv["ffn_mmq_down_q4k"] else "int8_faith2"
    if lv["fp4_prefill"] and "w4a4" in loaded:
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
            for k in (256, 4096, 160):
                got = table.select(lv, {"m": 7, "n": 9, "k": k, "down": down}).variant
                want = engine_arm(lv, bool(down), loaded, k)
                if got != want:
                    on = sorted(f for f, v in lv.items() if v)
                    bad.append(f"{'down' if down else 'gate+up'} k={k} {on}: table {got}, engine {want}")
    return bad


def test_the_engine_table_agrees_with_the_engine_for_all_1024_combinations_at_both_projections_and_ks():
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


def test_defaults_take_nvfp4_mmq_in_the_engine_and_the_default_gemm_here():
    defaults = {}
    for down in (0, 1):
        shape = {"m": 512, "n": 4096, "k": 4096, "down": down}
        assert FFN_PREFILL_ENGINE.select(defaults, shape).variant == "nvfp4_mmq"
        assert FFN_PREFILL.select(defaults, shape).variant == "w4a16"


def test_notes_say_where_down_goes():
    down = {"m": 5, "n": 9, "k": 256, "down": 1}
    c = FFN_PREFILL_ENGINE.select({"ffn_nvfp4_mmq_down": False}, down)
    assert c.variant == "w4a16" and "ffn_nvfp4_mmq_down off" in c.note
    c = FFN_PREFILL_ENGINE.select({"ffn_nvfp4_mmq": False, "ffn_mmq": True}, down)
    assert c.variant == "int8_faith2" and "faith2" in c.note


def test_explain_words_the_down_projection_from_the_table():
    from leverctl.levers import load_catalog
    from leverctl.levers.explain import explain

    cat = load_catalog("metrale")
    (st,) = [s for s in explain(cat, cat.lever("ffn_mmq_down_q4k")).selects if s.path == "ffn.prefill"]
    assert st.kernel and st.applies
    texts = {(s.value, s.with_): s.text for s in st.selected}
    on, off = texts[(True, ("ffn_mmq", True))], texts[(False, ("ffn_mmq", True))]
    assert "down and k % 256 = 0: q4k_mmq" in on and "int8_faith2" not in on, on
    assert "down and k % 256 = 0: int8_faith2" in off, off
    (st,) = [s for s in explain(cat, cat.lever("int8_faith5")).selects if s.path == "ffn.prefill"]
    texts = {(s.value, s.with_): s.text for s in st.selected}
    assert texts[(True, ("int8_prefill", True))].startswith("int8_faith5")
    assert texts[(False, ("int8_prefill", True))].startswith("int8_faith2")
