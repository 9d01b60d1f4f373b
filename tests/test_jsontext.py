"""leverctl.jsontext writes exactly the text of json.dumps(indent=2)."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from leverctl import jsontext

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=8))
keys = st.one_of(st.text(max_size=6), st.sampled_from(["levers", "items", "a"]))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(keys, inner, max_size=4),
                            st.dictionaries(st.one_of(st.integers(), st.booleans(), st.none()), inner, max_size=2)),
    max_leaves=30)


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
    doc = {"rankings": [{"ranked": [{"levers": lv, "median_us": 1.5}, {"levers": lv, "median_us": math.pi}]}],
           "effects": [{"levers": lv}], "levers": lv}
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


flat_values = st.one_of(scalars, st.dictionaries(st.text(max_size=3), scalars, max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["config", "levers", "median_us", "é", "a\"b"]), unique=True, max_size=5)
       .flatmap(lambda keys: st.tuples(st.just(tuple(keys)),
                                       st.tuples(*[flat_values for _ in keys]))),
       st.integers(0, 5), st.booleans())
def test_a_flat_row_is_spelled_as_its_dict(row, depth, allow_nan):
    keys, values = row
    flat = jsontext.Flat(keys, values)
    doc = {"rows": [flat]}
    for _ in range(depth):
        doc = [doc]
    plain = {"rows": [flat.as_dict()]}
    for _ in range(depth):
        plain = [plain]
    assert _got(doc, allow_nan) == _expect(plain, allow_nan)
