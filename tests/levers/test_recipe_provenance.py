"""Every number a shipped recipe states is either the model's published
configuration or says it is assumed: a user reading a record's shape must
know which figures are the model's and which are the recipe's choice."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
MODELS = sorted(p for p in RECIPES.glob("*.toml") if "defaults" not in p.name)

# Sections whose every number is a choice of the recipe, never the model's.
CHOSEN = ("serve", "model.bench")
# Keys of the model tables that no model configuration holds.
NOT_IN_CONFIG = {("model.gdn", "chunk"), ("model.mla", "served_context")}

_SECTION = re.compile(r"^\[([^\]]+)\]")
_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=")


def sections(text: str):
    """``(section, key, the comments above it in its block, its own comment)``
    for every key."""
    section, above, out = "", [], []
    for line in text.splitlines():
        stripped = line.strip()
        if m := _SECTION.match(stripped):
            section, above = m.group(1), []
        elif stripped.startswith("#"):
            above.append(stripped)
        elif m := _KEY.match(stripped):
            out.append((section, m.group(1), " ".join(above), line.partition("#")[2]))
    return out


def block_comments(text: str, section: str) -> str:
    """The comments inside ``[section]``."""
    inside, out = False, []
    for line in text.splitlines():
        if m := _SECTION.match(line.strip()):
            inside = m.group(1) == section
        elif inside and line.strip().startswith("#"):
            out.append(line)
    return " ".join(out)


@pytest.mark.parametrize("recipe", MODELS, ids=lambda p: p.stem)
def test_a_recipes_chosen_sections_say_they_are_assumed(recipe):
    text = recipe.read_text()
    for section in CHOSEN:
        if f"[{section}]" in text:
            assert "assumed" in block_comments(text, section), f"{recipe.name} [{section}]"


@pytest.mark.parametrize("recipe", MODELS, ids=lambda p: p.stem)
def test_a_recipe_says_where_its_model_numbers_come_from_and_marks_the_rest(recipe):
    text = recipe.read_text()
    assert "config.json" in text, recipe.name
    for section, key, above, own in sections(text):
        if (section, key) in NOT_IN_CONFIG:
            assert "assum" in own or "assum" in above, f"{recipe.name} [{section}] {key}"


def test_the_checks_fail_on_a_recipe_that_hides_an_assumption():
    text = (RECIPES / "qwen3-next-80b-a3b.toml").read_text()
    bare = re.sub(r"chunk = 64\s*#.*", "chunk = 64", text)
    assert not any("assum" in own for s, k, _, own in sections(bare) if (s, k) == ("model.gdn", "chunk"))
    plain = re.sub(r"(?i)an assumed deployment", "A deployment", bare)
    assert "assumed" not in block_comments(plain, "serve").lower()
