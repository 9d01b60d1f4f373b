"""Helpers of the catalog tests: the engines' lever files as Rust, and results."""

from __future__ import annotations

from pathlib import Path

from cli_result import assert_one_line_error  # noqa: F401  (the catalog tests import it from here)

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
        if line.startswith(tag) and not line[len(tag) : len(tag) + 1].isdigit():
            out.append(line[len(tag) :])
            n += 1
    return "\n".join(out) + "\n"
