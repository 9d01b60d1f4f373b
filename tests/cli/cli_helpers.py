"""Helpers shared by the CLI tests."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def assert_one_line_error(r: Result, *fragments: str) -> None:
    """Bad input: exit 2, nothing on stdout, one line on stderr, no traceback."""
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err
    assert len(r.err_lines) == 1, r.err
    line = r.err_lines[0]
    assert line.startswith("leverctl: ")
    for frag in fragments:
        assert frag in line, (frag, line)
