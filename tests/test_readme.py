"""The README's Design section is a map of the code: every module it names
exists where it says, and every module of the parts it maps (lever kinds,
decision tables, the bench's record life, the commands) is named in it.

A block of the section (a paragraph or a list item's paragraph) names its
folders first (`leverctl/levers/`, `records/`); a file named after them is
looked for in the folders named so far in that part of the section, or from
the repository's root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def design_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Design\n")
    return text[start : text.index("\n## ", start + 1)]


def parts(section: str) -> list[str]:
    """The section cut where a bold heading (``**Levers**``...) starts a part."""
    return re.split(r"\n(?=\*\*[A-Z])", section)


def named(part: str) -> list[str]:
    """Backticked names of files and folders, in order (templates such as
    ``<family>`` or ``_*.py`` left out)."""
    names = re.findall(r"`([A-Za-z0-9_./-]+(?:\.py|\.toml|\.md|/))`", part)
    return [n for n in names if "*" not in n]


def resolve_part(part: str) -> tuple[list[Path], list[str]]:
    """(the paths ``part`` names, the names that name nothing)."""
    bases, found, missing = [ROOT], [], []
    for name in named(part):
        hits = [b / name for b in bases if (b / name).exists()]
        if not hits:
            missing.append(name)
            continue
        found.append(hits[-1])
        if name.endswith("/"):
            bases.append(hits[-1])
    return found, missing


def all_named() -> set[Path]:
    return {p.resolve() for part in parts(design_section()) for p in resolve_part(part)[0]}


@pytest.mark.parametrize("part", parts(design_section())[1:], ids=lambda p: p[:30])
def test_every_file_the_design_section_names_exists(part):
    assert resolve_part(part)[1] == []


@pytest.mark.parametrize(
    "folder",
    [
        "leverctl/levers",
        "leverctl/bench",
        "leverctl/bench/records",
        "leverctl/cli",
        "kernels/selection",
        "leverctl/profile",
    ],
)
def test_every_module_of_the_mapped_folders_is_named(folder):
    modules = {p.resolve() for p in (ROOT / folder).glob("*.py") if p.name != "__init__.py"}
    unnamed = sorted(p.name for p in modules - all_named())
    assert unnamed == [], f"{folder}: not named in the README's Design section"


def test_the_check_finds_a_name_that_does_not_exist():
    part = "**Levers** (`leverctl/levers/`): `kinds.py`, `nowhere.py`, `leverctl/levers/`"
    assert resolve_part(part)[1] == ["nowhere.py"]
    # a name in another folder of the section does not count for this one
    assert resolve_part("**Commands** (`leverctl/cli/`): `kinds.py`")[1] == ["kinds.py"]
