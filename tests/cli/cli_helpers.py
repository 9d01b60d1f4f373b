"""Helpers shared by the CLI tests."""

from __future__ import annotations

from pathlib import Path

from cli_result import assert_one_line_error  # noqa: F401  (the CLI tests import it from here)

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
