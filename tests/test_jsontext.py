"""leverctl.jsontext writes exactly the text of json.dumps(indent=2)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leverctl import jsontext

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8)
)
keys = st.one_of(st.text(max_size=6), st.sampled_from(["levers", "items", "a"]))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(keys, inner, max_size=4),
        st.dictionaries(st.one_of(st.integers(), st.booleans(), st.none()), inner, max_size=2),
    ),
    max_leaves=30,
)


def _expect(obj, allow_nan):
    try:
        return json.dumps(obj, indent=2, allow_nan=allow_nan)
    except ValueError as e:
        return ("ValueError", str(e))


def _got(obj, allow_nan):
    try:
        text = jsontext.dumps(obj, allow_nan=allow_nan)
    except ValueError as e:
        return ("ValueError", str(e))
    assert "".join(jsontext.pieces(obj, allow_nan=allow_nan)) == text
    return text


@settings(max_examples=400, deadline=None)
@given(values, st.booleans())
def test_same_text_as_json_dumps(obj, allow_nan):
    assert _got(obj, allow_nan) == _expect(obj, allow_nan)


def test_a_shared_lever_set_is_spelled_at_each_depth_it_appears():
    lv = {"a": True, "b": 1, "c": None, "d": "x\u00e9"}
    doc = {
        "rankings": [{"ranked": [{"levers": lv, "median_us": 1.5}, {"levers": lv, "median_us": math.pi}]}],
        "effects": [{"levers": lv}],
        "levers": lv,
    }
    assert jsontext.dumps(doc) == json.dumps(doc, indent=2)


def test_what_json_dumps_refuses_it_refuses():
    with pytest.raises(TypeError):
        jsontext.dumps({"a": [object()]})
    with pytest.raises(ValueError):
        jsontext.dumps({"a": [float("nan")]}, allow_nan=False)


def test_deep_nesting_is_laid_out_as_json_dumps_lays_it_out():
    deep = []
    for _ in range(70):
        deep = [deep, {"k": 1}]
    assert jsontext.dumps(deep) == json.dumps(deep, indent=2)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_rows_are_written_as_the_list_they_make(n):
    rows = [{"config": f"a={i}", "levers": {"a": i}, "us": i / 3} for i in range(n)]
    made = []

    def make():
        for r in rows:
            made.append(r)
            yield r

    doc = {"entries": jsontext.Rows(n, make), "deep": {"x": [jsontext.Rows(n, lambda: iter(rows))]}}
    want = json.dumps({"entries": rows, "deep": {"x": [rows]}}, indent=2)
    assert jsontext.dumps(doc) == want
    assert made == rows


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b\u00e9", "c%s"]),
            st.one_of(st.text(max_size=4), st.integers()),
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none(), st.integers(), st.booleans()),
            st.sampled_from([{"x": True}, {"y": None, "z": 3}, {}, "not levers"]),
        ),
        max_size=6,
    ),
    st.integers(0, 4),
    st.booleans(),
)
def test_a_table_is_spelled_as_its_list_of_dicts(rows, depth, allow_nan):
    keys = ("config", "variant", "median_us", "levers", "base_variant")
    rows = [(*r, [None, "v"][i % 2]) for i, r in enumerate(rows)]
    table = jsontext.Table(keys, ("str", "str", "num", "levers", "str?"), rows)
    doc, plain = {"ranked": table, "after": 1}, {"ranked": table.as_list(), "after": 1}
    for _ in range(depth):
        doc, plain = [doc], [plain]
    assert _got(doc, allow_nan) == _expect(plain, allow_nan)
    assert all(("base_variant" in d) == (i % 2 == 1) for i, d in enumerate(table.as_list()))


def test_a_table_streams_in_batches_that_join_to_its_text(monkeypatch):
    monkeypatch.setattr(jsontext, "TABLE_BATCH", 3)
    lv = {"x": True}
    rows = [(f"c{i}", "v", 1.5 * i, lv, None if i % 3 else "w") for i in range(10)]
    rows[4] = ("c4", "v", float("nan"), lv, None)  # one batch goes the general way
    table = jsontext.Table(
        ("config", "variant", "median_us", "levers", "base_variant"), ("str", "str", "num", "levers", "str?"), rows
    )
    assert _got({"entries": table}, True) == _expect({"entries": table.as_list()}, True)
    assert _got({"entries": table}, False) == _expect({"entries": table.as_list()}, False)


def test_a_table_with_several_optional_columns_is_spelled_as_json_dumps_spells_its_dicts():
    """A comparison's entries carry two optional columns (base_variant,
    base_config): still column by column, not a dict a row."""
    rows = [("a", None, "x", None, 1.5), ("b", "p", None, "q", None), ("c", "p", "y", "q", 2)]
    t = jsontext.Table(("k", "o1", "s", "o2", "n"), ("str", "str?", "str?", "str?", "num"), rows)
    assert jsontext.dumps({"e": t}) == json.dumps({"e": t.as_list()}, indent=2)
    parts = list(jsontext._table_parts(t, 0, True, {}))
    assert len(parts) >= 2  # batched rows, not one as_list() text
