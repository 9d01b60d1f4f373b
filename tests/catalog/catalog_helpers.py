"""Helpers of the catalog tests: the engines' lever files as Rust, and results."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEEDS = REPO.parent / "shared" / "seeds"
LISTINGS = {"atlas": "000_aed729ec977a34e9.txt", "metrale": "004_4a78f54b6b3482cb.txt"}


def rust_of(listing: str) -> str:
    """The Rust source of a numbered listing: the lines numbered 1, 2, ... in
    order, each without its number; the path header and footer dropped."""
    out: list[str] = []
    n = 1
    for line in listing.splitlines():
        tag = str(n)
        if line.startswith(tag) and not line[len(tag):len(tag) + 1].isdigit():
            out.append(line[len(tag):])
            n += 1
    return "\n".join(out) + "\n"


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def assert_one_line_error(r: Result, *fragments: str) -> None:
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err
    assert len(r.err_lines) == 1, r.err
    assert r.err_lines[0].startswith("leverctl: ")
    for frag in fragments:
        assert frag in r.err_lines[0], (frag, r.err_lines[0])
