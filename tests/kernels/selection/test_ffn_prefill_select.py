"""The dense-FFN prefill decision table against the engine's rules, for
every combination of its ten levers at both projections.

``engine_arm`` below restates Metrale's lever documentation as the call
site would branch on it: the NVFP4 MMQ arm before the Q4_K MMQ arm, down
following the gate/up arm, faith5 inside the int8 arm, v2 over v1 inside
the BF16 arm; and, where the engine's text is silent, leverctl's documented
order of the remaining arms (W4A4, int8, FP8, BF16, then the default). An
arm whose kernels are not loaded falls through to the next. The declared
table (``selection.ffn.PREFILL``, every arm loaded) must agree with it.

``composed`` builds the table again the way it was first built: each arm's
rules in that precedence, the Q4_K arm preceded by its guard (the later
arms' rules again, under ``ffn_mmq`` and ``k % 256 != 0``). With every arm
it must be the declared table, rule for rule; with fewer it must fall
through as the engine does.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from leverctl_kernels.selection.ffn import PREFILL
from leverctl_kernels.selection.rules import Rule, Table, divisible, flag, guard

LEVERS = PREFILL.levers
VARIANTS = ("w4a16", "bf16_v1", "bf16_v2", "fp8_m64", "int8_faith2", "int8_faith5", "nvfp4_mmq", "q4k_mmq", "w4a4")
ALL = frozenset(VARIANTS)


def engine_arm(lv: dict, down: bool, loaded=ALL, k: int = 256, lora: bool = False) -> str:
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


# (k, lora) of each test shape, at both projections: whole Q4_K super-blocks,
# NVFP4 blocks without them, neither; with and without a LoRA adapter.
KS_LORA = ((256, 0), (4096, 0), (160, 0), (200, 0), (256, 1), (160, 1))
SHAPES = [{"m": 7, "n": 9, "k": k, "down": down, "lora": lora} for down in (0, 1) for k, lora in KS_LORA]


def disagreements(table, loaded) -> list[str]:
    bad = []
    for lv in every_combination():
        for shape in SHAPES:
            got = table.select(lv, shape).variant
            want = engine_arm(lv, bool(shape["down"]), loaded, shape["k"], bool(shape["lora"]))
            if got != want:
                on = sorted(f for f, v in lv.items() if v)
                bad.append(
                    f"{'down' if shape['down'] else 'gate+up'} k={shape['k']} lora={shape['lora']} {on}: "
                    f"table {got}, engine {want}"
                )
    return bad


def test_the_declared_table_agrees_with_the_engine_for_all_1024_combinations_at_both_projections_ks_and_lora():
    assert len(LEVERS) == 10
    bad = disagreements(PREFILL, ALL)
    assert not bad, bad[:10]


def test_every_arm_has_its_kernel_and_the_path_runs_the_declared_table():
    from leverctl_kernels.registry import get_path

    path = get_path("ffn.prefill")
    assert set(PREFILL.variants) == ALL and tuple(path.variants) == PREFILL.variants
    assert path.select == PREFILL.select and path.family == "ffn"


# ── the table composed from the arms, as it was first built ─────────────────

_GATE_UP = flag("down", on="down", off="gate+up", want=False, why="the down projection")
_DOWN = flag("down", on="down", off="gate+up", why="the gate+up projection")
_NO_LORA = flag("lora", on="a LoRA adapter", off="no LoRA adapter", want=False, default=0, why="a LoRA adapter")
_K16 = divisible("k", 16, why="k={k}")
_NO_Q4K = guard(divisible("k", 256))
_Q4K = frozenset({"q4k_mmq", "int8_faith2"})

# (the variants an arm needs loaded, its rules), in the engine's precedence.
ARMS = (
    (
        frozenset({"nvfp4_mmq"}),
        (
            Rule("nvfp4_mmq", {"ffn_nvfp4_mmq": True}, (_GATE_UP, _NO_LORA, _K16)),
            Rule("nvfp4_mmq", {"ffn_nvfp4_mmq": True, "ffn_nvfp4_mmq_down": True}, (_DOWN, _NO_LORA, _K16)),
            Rule("w4a16", {"ffn_nvfp4_mmq": True, "ffn_nvfp4_mmq_down": False}, (_DOWN, _NO_LORA)),
            Rule("w4a16", {"ffn_nvfp4_mmq": True}, (_DOWN, _NO_LORA)),
        ),
    ),
    (
        _Q4K,
        (
            Rule("q4k_mmq", {"ffn_mmq": True}, (_GATE_UP,)),
            Rule("q4k_mmq", {"ffn_mmq": True, "ffn_mmq_down_q4k": True}),
            Rule("int8_faith2", {"ffn_mmq": True}),
        ),
    ),
    (frozenset({"w4a4"}), (Rule("w4a4", {"fp4_prefill": True}, (_K16,)),)),
    (frozenset({"int8_faith5"}), (Rule("int8_faith5", {"int8_prefill": True, "int8_faith5": True}),)),
    (frozenset({"int8_faith2"}), (Rule("int8_faith2", {"int8_prefill": True}),)),
    (frozenset({"fp8_m64"}), (Rule("fp8_m64", {"fp8_m64_prefill": True}),)),
    (frozenset({"bf16_v2"}), (Rule("bf16_v2", {"bf16_tc_prefill": True, "prefill_v2": True}),)),
    (frozenset({"bf16_v1"}), (Rule("bf16_v1", {"bf16_tc_prefill": True}),)),
    (frozenset({"w4a16"}), (Rule("w4a16"),)),
)


def composed(loaded: frozenset = ALL) -> Table:
    """The table of the arms whose variants are all ``loaded``: each arm's
    rules in order, the Q4_K arm after its guard (every later arm's rule
    that does not name ffn_mmq, also requiring ffn_mmq and k % 256 != 0)."""
    arms = [(needs, rules) for needs, rules in ARMS if needs <= loaded]
    out: list[Rule] = []
    for i, (needs, rules) in enumerate(arms):
        if needs == _Q4K:
            later = [r for _, rs in arms[i + 1 :] for r in rs if "ffn_mmq" not in r.levers]
            out.extend(Rule(r.variant, {"ffn_mmq": True, **r.levers}, (_NO_Q4K, *r.shape)) for r in later)
        out.extend(rules)
    return Table(
        "ffn.prefill", "composed", LEVERS, tuple(v for v in VARIANTS if v in loaded), tuple(out), engines=("metrale",)
    )


def _structure(table) -> list:
    return [(r.variant, dict(r.levers), tuple(c.text for c in r.shape)) for r in table.rules]


def test_the_table_composed_from_the_arms_is_the_declared_table_rule_for_rule():
    assert _structure(composed()) == _structure(PREFILL)


def test_the_table_composed_from_the_arms_selects_as_the_declared_one_for_every_combination_at_every_shape():
    table = composed()
    compared = 0
    for lv in every_combination():
        for shape in SHAPES:
            assert table.select(lv, shape).variant == PREFILL.select(lv, shape).variant, (lv, shape)
            compared += 1
    assert compared == 1024 * len(SHAPES)


@pytest.mark.parametrize(
    "loaded",
    [
        frozenset({"w4a16"}),
        frozenset({"w4a16", "bf16_v1", "int8_faith5"}),
        frozenset({"w4a16", "q4k_mmq"}),
        frozenset({"w4a16", "q4k_mmq", "int8_faith2"}),
        ALL - {"nvfp4_mmq"},
    ],
    ids=["default-only", "v1-faith5", "q4k-without-faith2", "q4k", "all-but-nvfp4"],
)
def test_the_composition_falls_through_as_the_engine_does_for_any_set_of_loaded_arms(loaded):
    assert not disagreements(composed(loaded), loaded)


def test_the_check_sees_two_rules_of_the_declared_table_swapped():
    """The int8 faith2 arm's rule and the Q4_K arm's gate/up rule swapped:
    where the engine runs Q4_K on gate+up (ffn_mmq, k % 256 = 0) the table
    now runs int8 faith2, as it does where faith5 was asked for."""
    rules = list(PREFILL.rules)
    where = {(r.variant, tuple(r.levers.items())): i for i, r in reversed(list(enumerate(rules)))}  # the first
    q4k, int8 = where["q4k_mmq", (("ffn_mmq", True),)], where["int8_faith2", (("int8_prefill", True),)]
    assert q4k < int8
    rules[q4k], rules[int8] = rules[int8], rules[q4k]
    bad = disagreements(dataclasses.replace(PREFILL, rules=tuple(rules)), ALL)
    assert bad and all("table int8_faith2" in b for b in bad), bad[:5]
    assert "gate+up k=256 lora=0 ['ffn_mmq', 'int8_prefill']: table int8_faith2, engine q4k_mmq" in bad
    assert "gate+up k=256 lora=0 ['int8_faith5', 'int8_prefill']: table int8_faith2, engine int8_faith5" in bad


def test_defaults_take_nvfp4_mmq():
    """The levers left out take Metrale's catalog defaults: ffn_nvfp4_mmq and
    its down lever on."""
    from leverctl.levers import load_catalog

    cat = load_catalog("metrale")
    assert cat.lever("ffn_nvfp4_mmq").default is True and PREFILL.assumed["ffn_nvfp4_mmq"] is True
    for down in (0, 1):
        shape = {"m": 512, "n": 4096, "k": 4096, "down": down}
        assert PREFILL.select({}, shape).variant == "nvfp4_mmq"


def test_a_lora_adapter_or_a_k_without_nvfp4_blocks_leaves_the_nvfp4_mmq_arm_unloaded():
    gate = {"m": 5, "n": 9, "k": 256, "down": 0}
    assert PREFILL.select({}, {**gate, "lora": 1}).variant == "w4a16"
    assert PREFILL.select({"ffn_mmq": True}, {**gate, "lora": 1}).variant == "q4k_mmq"
    c = PREFILL.select({}, {**gate, "k": 200})
    assert c.variant == "w4a16" and not c.note
    c = PREFILL.select({}, {**gate, "k": 200, "down": 1})
    assert c.variant == "w4a16" and "no NVFP4 weights" in c.note, c


def test_notes_say_where_down_goes():
    down = {"m": 5, "n": 9, "k": 256, "down": 1}
    c = PREFILL.select({"ffn_nvfp4_mmq_down": False}, down)
    assert c.variant == "w4a16" and "ffn_nvfp4_mmq_down off" in c.note
    c = PREFILL.select({"ffn_nvfp4_mmq": False, "ffn_mmq": True}, down)
    assert c.variant == "int8_faith2" and "faith2" in c.note


def test_the_q4k_arm_falls_through_at_k_not_a_multiple_of_256_by_a_guard_the_note_names():
    lv = {"ffn_nvfp4_mmq": False, "ffn_mmq": True, "int8_prefill": True}
    for down in (0, 1):
        c = PREFILL.select(lv, {"m": 5, "n": 9, "k": 160, "down": down})
        assert c.variant == "int8_faith2" and "super-blocks of 256" in c.note, c
    assert PREFILL.select(lv, {"m": 5, "n": 9, "k": 512, "down": 0}).variant == "q4k_mmq"
    (guard,) = {id(c): c for r in PREFILL.rules for c in r.shape if c.text == "k % 256 != 0"}.values()
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
