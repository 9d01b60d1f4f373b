"""The shape conditions of the decision tables (``selection.rules``): each
maker (``compare``, ``divisible``, ``flag``, ``relation``, ``guard``) gives
a condition's text, negation, test, reason and symbols from one
declaration; and in every table, every condition whose text is a
comparison or a divisibility (``T = 17``, ``k % 16 = 0``) tests what its
text and its negation say, at shapes on both sides of its bound."""

from __future__ import annotations

import operator
import re

import pytest

from leverctl_kernels.selection import TABLES, Cond
from leverctl_kernels.selection.rules import compare, divisible, flag, guard, relation

# ── compare ──────────────────────────────────────────────────────────────────


def test_compare_writes_its_text_and_negation_with_the_symbol_and_tests_the_key():
    c = compare("t", "=", 17, symbol="T", why="T={t}, not {bound}")
    assert (c.text, c.negation, dict(c.symbols)) == ("T = 17", "T != 17", {"t": "T"})
    assert c.test({"t": 17}) and not c.test({"t": 5})
    assert c.why({"t": 5}) == "T=5, not 17"


def test_compare_without_a_symbol_writes_the_key():
    c = compare("m", "<=", 64, why="m={m} > {bound}")
    assert (c.text, c.negation, dict(c.symbols)) == ("m <= 64", "m > 64", {"m": "m"})
    assert c.test({"m": 64}) and not c.test({"m": 65})
    assert c.why({"m": 65}) == "m=65 > 64"


@pytest.mark.parametrize(
    "op, neg, holds, fails",
    [("=", "!=", 8, 9), ("!=", "=", 9, 8), ("<", ">=", 7, 8), ("<=", ">", 8, 9), (">", "<=", 9, 8), (">=", "<", 8, 7)],
)
def test_compare_negates_every_operator(op, neg, holds, fails):
    c = compare("x", op, 8, why="x={x}")
    assert (c.text, c.negation) == (f"x {op} 8", f"x {neg} 8")
    assert c.test({"x": holds}) and not c.test({"x": fails})


def test_least_makes_the_negation_of_more_than_the_smallest_size_an_equality():
    c = compare("n", ">", 1, symbol="N", least=1, why="N={n}")
    assert (c.text, c.negation) == ("N > 1", "N = 1")
    assert c.test({"n": 3}) and not c.test({"n": 1}) and c.why({"n": 1}) == "N=1"
    assert compare("n", ">", 1, symbol="N", why="N={n}").negation == "N <= 1"  # without least
    assert compare("n", ">", 2, symbol="N", least=1, why="N={n}").negation == "N <= 2"  # least is not the bound
    assert compare("n", ">=", 1, symbol="N", least=1, why="N={n}").negation == "N < 1"  # only "> least"


def test_a_quiet_comparison_has_no_negation_and_gives_no_reason():
    c = compare("m", "<=", 4, symbol="rows", quiet=True)
    assert (c.text, c.negation) == ("rows <= 4", "")
    assert c.test({"m": 4}) and not c.test({"m": 5}) and c.why({"m": 5}) == ""


def test_a_comparison_that_is_not_quiet_must_say_why_and_the_operator_must_be_known():
    with pytest.raises(ValueError, match="compare rows <= 4: a condition that is not quiet says why it failed"):
        compare("m", "<=", 4, symbol="rows")
    with pytest.raises(ValueError, match="compare: unknown operator '=='"):
        compare("m", "==", 4, why="m")


def test_bound_at_sets_the_bound_per_shape_while_the_text_names_the_declared_one():
    c = compare(
        "m", ">=", 512, symbol="rows", bound_at=lambda d: d.get("min_rows", 512), why="{m} rows, fewer than {bound}"
    )
    assert (c.text, c.negation) == ("rows >= 512", "rows < 512")
    assert c.test({"m": 512}) and not c.test({"m": 511}) and c.why({"m": 511}) == "511 rows, fewer than 512"
    assert c.test({"m": 19, "min_rows": 16}) and not c.test({"m": 5, "min_rows": 16})
    assert c.why({"m": 5, "min_rows": 16}) == "5 rows, fewer than 16"


def test_default_is_the_value_of_a_key_the_shape_leaves_out_in_the_test_and_the_reason():
    c = compare("hc_mult", ">", 0, least=0, default=0, why="no hyper-connections (hc_mult = {hc_mult})")
    assert (c.text, c.negation) == ("hc_mult > 0", "hc_mult = 0")
    assert not c.test({}) and c.test({"hc_mult": 2})
    assert c.why({}) == "no hyper-connections (hc_mult = 0)"
    required = compare("hc_mult", ">", 0, why="hc_mult={hc_mult}")
    with pytest.raises(KeyError):
        required.test({})


# ── divisible, flag, relation, guard ────────────────────────────────────────


def test_divisible_writes_the_remainder_and_gives_the_divisor_as_the_bound():
    c = divisible("k", 16, why="k={k} is not a multiple of {bound}")
    assert (c.text, c.negation, dict(c.symbols)) == ("k % 16 = 0", "k % 16 != 0", {"k": "k"})
    assert c.test({"k": 256}) and c.test({"k": 0}) and not c.test({"k": 200})
    assert c.why({"k": 200}) == "k=200 is not a multiple of 16"
    assert divisible("k", 8, symbol="K", why="").text == "K % 8 = 0"


def test_a_flag_holds_where_the_key_is_set_or_with_want_false_clear():
    on = flag("down", on="down", off="gate+up", why="the gate+up projection")
    assert (on.text, on.negation, dict(on.symbols)) == ("down", "gate+up", {})
    assert on.test({"down": 1}) and not on.test({"down": 0}) and on.why({"down": 0}) == "the gate+up projection"
    off = flag("down", on="down", off="gate+up", want=False, why="the down projection at {down}")
    assert (off.text, off.negation) == ("gate+up", "down")
    assert off.test({"down": 0}) and not off.test({"down": 1}) and off.why({"down": 1}) == "the down projection at 1"
    with pytest.raises(KeyError):
        on.test({})


def test_a_flags_default_is_the_value_of_a_shape_that_leaves_it_out():
    c = flag("lora", on="a LoRA adapter", off="no LoRA adapter", want=False, default=0, why="lora={lora}")
    assert c.test({}) and not c.test({"lora": 1}) and c.why({}) == "lora=0"
    loaded = flag("w4a4_loaded", on="loaded", off="not loaded", default=1, why="not loaded")
    assert loaded.test({}) and not loaded.test({"w4a4_loaded": 0})


def test_a_relation_negates_its_first_operator_unless_given_a_negation():
    c = relation("Hv = 2 Hk", lambda d: d["hv"] == 2 * d["hk"], why="got Hv={hv}, Hk={hk}")
    assert (c.text, c.negation) == ("Hv = 2 Hk", "Hv != 2 Hk")
    assert c.test({"hv": 4, "hk": 2}) and not c.test({"hv": 4, "hk": 4})
    assert c.why({"hv": 4, "hk": 4}) == "got Hv=4, Hk=4"
    assert relation("a >= b x c", lambda d: True, why="").negation == "a < b x c"
    given = relation("dk = dv = 8", lambda d: d["dk"] == d["dv"] == 8, negation="dk or dv != 8", why="")
    assert given.negation == "dk or dv != 8"
    with pytest.raises(ValueError, match="relation 'fits': no operator to negate; give the negation"):
        relation("fits", lambda d: True, why="")


def test_a_relations_reason_fills_defaults_and_its_bound_per_shape():
    c = relation(
        "buf >= m x k",
        lambda d: d.get("buf", d["m"] * d["k"]) >= d["m"] * d["k"],
        defaults={"buf": None},
        why="buf {buf} < {m} x {k}",
    )
    assert c.test({"m": 2, "k": 3}) and not c.test({"m": 2, "k": 3, "buf": 5})
    assert c.why({"m": 2, "k": 3, "buf": 5}) == "buf 5 < 2 x 3" and c.why({"m": 2, "k": 3}) == "buf None < 2 x 3"
    d = relation(
        "d = 128",
        lambda s: s["d"] == s.get("want", 128),
        bound_at=lambda s: s.get("want", 128),
        why="d={d}, not {bound}",
    )
    assert d.why({"d": 8}) == "d=8, not 128" and d.why({"d": 12, "want": 8}) == "d=12, not 8"


def test_a_guard_is_written_as_its_conditions_negation_and_holds_where_it_fails_giving_no_reason():
    inner = divisible("k", 256, why="k={k}")
    g = guard(inner)
    assert (g.text, g.negation, dict(g.symbols)) == ("k % 256 != 0", "", {"k": "k"})
    assert g.test({"k": 160}) and not g.test({"k": 512})
    assert g.why({"k": 512}) == g.why({"k": 160}) == ""


# ── every table's conditions test what their text says ─────────────────────

_OPS = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_COMPARISON = re.compile(r"^(\S+) (=|!=|<=|>=|<|>) (\d+)$")
_REMAINDER = re.compile(r"^(\S+) % (\d+) (=|!=) 0$")


def _reads(text: str, symbols) -> tuple[str, int, object] | None:
    """(shape key, the number, value -> bool) that ``text`` says, where it
    is a comparison or a remainder of one symbol (None otherwise)."""
    keys = {sym: key for key, sym in symbols.items()}
    if m := _COMPARISON.match(text):
        sym, op, bound = m.group(1), m.group(2), int(m.group(3))
        return (keys[sym], bound, lambda v: _OPS[op](v, bound)) if sym in keys else None
    if m := _REMAINDER.match(text):
        sym, by, op = m.group(1), int(m.group(2)), m.group(3)
        return (keys[sym], by, lambda v: _OPS[op](v % by, 0)) if sym in keys else None
    return None


def _values(n: int) -> list[int]:
    """Sizes on both sides of ``n``, halfway to it and past it, and a multiple."""
    return sorted({v for v in (0, 1, n // 2, n - 1, n, n + 1, 3 * n // 2, 2 * n, 3 * n + 1) if v >= 0})


def text_disagreements(cond: Cond) -> tuple[list[str], int]:
    """Where ``cond``'s test disagrees with its text (and, where it has
    one, with its negation), and how many values were compared."""
    said = _reads(cond.text, cond.symbols)
    if said is None:
        return [], 0
    key, n, holds = said
    negated = _reads(cond.negation, cond.symbols) if cond.negation else None
    # "N > 1" negated "N = 1": the size is at least 1
    least = n if re.match(r"^\S+ > \d+$", cond.text) and re.match(r"^\S+ = \d+$", cond.negation) else None
    bad, compared = [], 0
    for v in _values(n):
        if least is not None and v < least:
            continue
        got = cond.test({key: v})
        compared += 1
        if got != holds(v):
            bad.append(f"{cond.text!r} at {key}={v}: test {got}")
        if negated is not None and negated[2](v) == got:
            bad.append(f"{cond.negation!r} (the negation of {cond.text!r}) at {key}={v}: test {got}")
    return bad, compared


def test_every_tables_comparison_and_remainder_conditions_test_what_their_text_and_negation_say():
    bad, checked = [], set()
    for name, table in TABLES.items():
        for rule in table.rules:
            for cond in rule.shape:
                found, compared = text_disagreements(cond)
                bad += [f"{name}: {b}" for b in found]
                if compared:
                    checked.add(cond.text)
    assert not bad, bad
    assert {
        "T = 17",
        "N > 1",
        "m <= 64",
        "k % 16 != 0",
        "k % 16 = 0",
        "k % 256 != 0",
        "rows <= 4",
        "rows <= 16",
        "rows > 16",
        "rows > 1",
        "rows >= 512",
        "n >= 512",
        "d = 128",
        "hc_mult > 0",
    } <= checked, checked
    assert any(t.startswith("state <= ") for t in checked)


def test_the_text_check_catches_a_test_that_says_otherwise():
    off_by_one = Cond("m <= 64", "m > 64", lambda d: d["m"] < 64, lambda d: "", {"m": "m"})
    bad, _ = text_disagreements(off_by_one)
    assert bad == ["'m <= 64' at m=64: test False", "'m > 64' (the negation of 'm <= 64') at m=64: test False"]
    wrong_negation = Cond("k % 16 = 0", "k % 8 != 0", lambda d: d["k"] % 16 == 0, lambda d: "", {"k": "k"})
    bad, _ = text_disagreements(wrong_negation)
    assert "'k % 8 != 0' (the negation of 'k % 16 = 0') at k=8: test False" in bad
