"""Random environments resolved by leverctl agree with an independent table
of the engines' rules (levers_oracle.py, written from the engines' field docs)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from levers_oracle import ENGINES, expected

from leverctl.levers import load_catalog, resolve
from leverctl.levers.resolve import value_json

# Strings that sit on the rules' edges, plus arbitrary text and invalid UTF-8.
EDGES = [
    "1",
    "0",
    "",
    " 1",
    "1 ",
    "0 ",
    "true",
    "TRUE",
    "True",
    "tRuE",
    "false",
    "yes",
    "on",
    "2",
    "8",
    "9",
    "+3",
    "-1",
    "01",
    "3.0",
    "1_0",
    "\u0663",
    "\uff11",
    "\u0130rue",
    "18446744073709551615",
    "18446744073709551616",
    "1\n",
    "\t0",
]
NOT_UTF8 = st.binary(min_size=1, max_size=6).filter(lambda b: not _decodes(b))
# How Python hands over undecodable bytes from argv or os.environ: lone surrogates.
SURROGATES = NOT_UTF8.map(lambda b: b.decode("utf-8", "surrogateescape"))


def _decodes(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


VALUES = st.one_of(st.sampled_from(EDGES), st.text(max_size=6), NOT_UTF8, SURROGATES)


def environments(engine: str):
    _, variables = ENGINES[engine]
    noise = ["ATLAS_GDN_WY71", "METRALE_NO_SDD", "PATH", "ATLAS_K4_DIAG", "METRALE_K4_DIAG"]
    names = st.sampled_from([*variables, *noise])
    return st.dictionaries(names, VALUES, max_size=12)


CATALOGS = {e: load_catalog(e) for e in ENGINES}


def leverctl_values(engine, env, **kw):
    return {f: value_json(v) for f, v in resolve(CATALOGS[engine], env=env, **kw).values().items()}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_oracle_and_the_catalog_describe_the_same_fields_and_variables(engine):
    rules, variables = ENGINES[engine]
    cat = CATALOGS[engine]
    assert set(rules) == set(cat.fields)
    assert set(variables) == set(cat.variables())


@pytest.mark.parametrize("engine", sorted(ENGINES))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_environments_resolve_as_the_engines_rules_say(engine, data):
    env = data.draw(environments(engine))
    assert leverctl_values(engine, env) == expected(engine, env)


@pytest.mark.parametrize("engine", sorted(ENGINES))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_set_beats_the_environment_which_beats_the_recipe_and_unset_removes(engine, data, tmp_path_factory):
    from leverctl.levers.recipes import load_recipe

    _, variables = ENGINES[engine]
    names = st.sampled_from(variables)
    text_values = st.one_of(st.sampled_from(EDGES), st.text(max_size=4).filter(lambda s: "\x00" not in s))
    recipe_vars = data.draw(st.dictionaries(names, text_values, max_size=5))
    env = data.draw(st.dictionaries(names, VALUES, max_size=5))
    sets = data.draw(st.lists(st.tuples(names, text_values), max_size=3))
    unsets = data.draw(st.lists(names, max_size=2))
    path = tmp_path_factory.mktemp("r") / "r.toml"
    import tomli_w

    path.write_text(tomli_w.dumps({"engine": engine, "levers": recipe_vars}), encoding="utf-8")
    merged = {**recipe_vars, **env, **dict(sets)}
    for var in unsets:
        merged.pop(var, None)
    got = leverctl_values(engine, env, recipe=load_recipe(path), sets=sets, unsets=unsets)
    assert got == expected(engine, merged)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_usize_edges_parse_as_rust_does(engine):
    var = "ATLAS_MTP_SHADOW_TOPK" if engine == "atlas" else "METRALE_MTP_SHADOW_TOPK"
    for raw in ("+5", "5", "005", "18446744073709551615", "18446744073709551616", "\u0665", "5\n"):
        assert leverctl_values(engine, {var: raw})["shadow_topk"] == expected(engine, {var: raw})["shadow_topk"]
