"""Freezing a resolution into a recipe reproduces it exactly; shell lines quote safely."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from levers_oracle import ENGINES

from leverctl.levers import load_catalog, load_recipe, resolve
from leverctl.levers.freeze import dumps, freeze, shell_lines

CATALOGS = {e: load_catalog(e) for e in ENGINES}
NOT_UTF8 = st.sampled_from([b"\xff", b"0\xfe", b"\xc3", b"1\x80"])
VALUES = st.one_of(
    st.sampled_from(["1", "0", "", " 1", "true", "9", 'it\'s "quoted"', "a\nb", "\\"]),
    st.text(max_size=5).filter(lambda s: "\x00" not in s),
    NOT_UTF8,
)


def _reload(tmp_path, text):
    p = tmp_path / "frozen.toml"
    p.write_text(text, encoding="utf-8")
    return load_recipe(p)


@pytest.mark.parametrize("engine", sorted(ENGINES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_frozen_recipe_loaded_alone_resolves_to_the_same_values(engine, data, tmp_path_factory):
    cat = CATALOGS[engine]
    env = data.draw(st.dictionaries(st.sampled_from(ENGINES[engine][1]), VALUES, max_size=8))
    mbs = data.draw(st.none() | st.integers(1, 64))
    res = resolve(cat, env=env, max_batch_size=mbs)
    text = dumps(freeze(res))
    again = resolve(cat, recipe=_reload(tmp_path_factory.mktemp("f"), text))
    assert again.values() == res.values()


def test_a_non_utf8_value_keeps_its_behaviour_and_says_so(tmp_path):
    cat = CATALOGS["metrale"]
    res = resolve(cat, env={"METRALE_NO_SSD": b"\xff", "METRALE_GDN_WY17": b"0\xff"})
    frozen = freeze(res)
    assert frozen.doc["levers"] == {"METRALE_NO_SSD": ""}
    assert any("METRALE_NO_SSD" in n and "stays set" in n for n in frozen.notes)
    assert any("METRALE_GDN_WY17" in n and "left unset" in n for n in frozen.notes)


def test_freeze_keeps_the_recipe_build_defaults_serve_setting_and_model(tmp_path):
    from pathlib import Path

    recipe = load_recipe(Path(__file__).parents[2] / "recipes" / "qwen3-8b.toml")
    res = resolve(CATALOGS["metrale"], recipe=recipe)
    doc = freeze(res, recipe).doc
    assert doc["serve"] == {"max_batch_size": 16}
    assert doc["build"] == {"decode_split_silu": True}
    assert doc["model"]["name"] == "Qwen3-8B"
    again = resolve(CATALOGS["metrale"], recipe=_reload(tmp_path, dumps(freeze(res, recipe))))
    assert again.values() == res.values()


def test_unknown_variables_are_left_out_with_a_note():
    res = resolve(CATALOGS["atlas"], env={"ATLAS_GDN_WY71": "0"})
    frozen = freeze(res)
    assert "levers" not in frozen.doc
    assert frozen.notes == ["ATLAS_GDN_WY71 is not a lever variable of Atlas; left out"]


@settings(max_examples=40, deadline=None)
@given(value=st.text(min_size=0, max_size=8).filter(lambda s: "\x00" not in s))
def test_exported_values_survive_a_real_posix_shell_byte_for_byte(value):
    cat = CATALOGS["atlas"]
    lines, _ = shell_lines(cat, {"ATLAS_GDN_WY17": value}, unset_others=False)
    script = "\n".join(lines) + '\nprintf %s "$ATLAS_GDN_WY17"'
    out = subprocess.run(["sh", "-c", script], capture_output=True, check=True).stdout
    assert out == value.encode("utf-8", "surrogateescape")


def test_shell_lines_unset_every_other_lever_variable_unless_asked_not_to():
    cat = CATALOGS["atlas"]
    lines, _ = shell_lines(cat, {"ATLAS_GDN_WY17": "0"})
    assert lines[0] == "export ATLAS_GDN_WY17=0"
    assert {l.split()[1] for l in lines[1:]} == set(cat.variables()) - {"ATLAS_GDN_WY17"}
    lines, _ = shell_lines(cat, {"ATLAS_GDN_WY17": "0", "ATLAS_K4_DIAG": None}, unset_others=False)
    assert lines == ["export ATLAS_GDN_WY17=0", "unset ATLAS_K4_DIAG"]
