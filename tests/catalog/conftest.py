"""The engines' lever files as Rust sources, and leverctl run in-process.

The repository reaches the engines' lever files as ``../shared/seeds/``
beside its root. Each is a numbered listing with a path header and footer;
:func:`rust_of` turns it back into the Rust file it lists.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from catalog_helpers import LISTINGS, REPO, SEEDS, rust_of
from cli_result import run_cli

# The oracle of the lever rules lives with the lever tests.
sys.path.insert(0, str(REPO / "tests" / "levers"))


def seed_source(engine: str) -> str:
    path = SEEDS / LISTINGS[engine]
    if not path.is_file():
        pytest.skip(f"the {engine} lever file is not at {path}")
    return rust_of(path.read_text(encoding="utf-8"))


@pytest.fixture
def rust_file(tmp_path):
    """Write (engine's source, edited by ``edit``) as model_levers.rs; return its path."""

    def make(engine: str, edit=None, name: str = "model_levers.rs") -> Path:
        text = seed_source(engine)
        if edit is not None:
            text = edit(text)
        path = tmp_path / engine / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return make


@pytest.fixture
def cli(capsys):
    return lambda *args: run_cli(capsys, *args)
