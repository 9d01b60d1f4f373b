"""The generated lever references: ``docs/levers-atlas.md`` and
``docs/levers-metrale.md`` are exactly what ``leverctl catalog doc`` writes
now (``make docs`` writes them again), and the page says for every lever
what ``explain`` says: its variable, rule, default, traps and the paths it
steers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from leverctl.levers import load_catalog
from leverctl.levers.reference import markdown

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
def test_the_checked_in_reference_is_what_catalog_doc_writes(engine):
    page = DOCS / f"levers-{engine}.md"
    assert page.read_text() == markdown(load_catalog(engine)), f"{page} is stale: run `make docs`"


def test_a_changed_catalog_makes_the_reference_stale():
    cat = load_catalog("atlas")
    lv = cat.levers["gdn_wy17"]
    changed = dataclasses.replace(cat, levers={**cat.levers, "gdn_wy17": dataclasses.replace(lv, summary="changed")})
    assert markdown(changed) != (DOCS / "levers-atlas.md").read_text()


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
def test_every_lever_has_its_variable_rule_default_and_steers(engine):
    cat = load_catalog(engine)
    page = markdown(cat)
    for f, lv in cat.levers.items():
        section = page.split(f"\n### {f}\n", 1)[1].split("\n### ", 1)[0]
        for var in lv.vars:
            assert f"`{var}`" in section, (f, var)
        assert "- **Rule:**" in section and "- **Default:**" in section and "Steers:" in section, f
        for path in lv.steers:
            assert f"`{path}`" in section, (f, path)


def test_the_wy17_section_says_what_each_value_selects(cli):
    r = cli("catalog", "doc", "-e", "atlas")
    assert r.code == 0
    section = r.out.split("\n### gdn_wy17\n", 1)[1].split("\n### ", 1)[0]
    assert "| 0 | off |" in section and "On `gdn.verify`" in section and "wy17" in section


def test_catalog_doc_writes_a_file_and_refuses_another_format(cli, tmp_path):
    r = cli("catalog", "doc", "-e", "metrale", "-o", tmp_path / "m.md")
    assert r.code == 0 and (tmp_path / "m.md").read_text() == markdown(load_catalog("metrale"))
    r = cli("catalog", "doc", "-f", "html")
    assert r.code == 2 and "catalog doc writes markdown" in r.err
