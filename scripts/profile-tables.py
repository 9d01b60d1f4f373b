#!/usr/bin/env python3
"""Write the README's two profile tables from the committed profile
summaries (docs/profiles/ENGINE-sm90a.json, `make profiles`): each table,
its "Profile of ENGINE kernels on ARCH" line with the table below it, is
replaced by `leverctl profile -f markdown`'s table of the
summary, so the README shows what tests/profile/test_roofline.py holds.

    .venv/bin/python scripts/profile-tables.py [README.md]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from leverctl.cli.profile import markdown

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("atlas", "metrale")


def table_span(text: str, engine: str) -> tuple[int, int]:
    """The README's table of ``engine``: its heading line, and every table
    (``|`` lines) and blank line after it up to the first other line, so
    tables an earlier version of this script left below it go too."""
    start = text.index(f"Profile of {engine} kernels on ")
    end = text.index("\n", start) + 1
    while end < len(text):
        nxt = text.find("\n", end)
        line = text[end : nxt if nxt >= 0 else len(text)]
        if line and not line.startswith("|"):
            break
        end = nxt + 1 if nxt >= 0 else len(text)
    return start, end


def main(readme: Path) -> None:
    text = readme.read_text()
    for engine in ENGINES:
        doc = json.loads((ROOT / "docs" / "profiles" / f"{engine}-sm90a.json").read_text())
        start, end = table_span(text, engine)
        text = text[:start] + markdown(doc) + "\n" + text[end:]
    readme.write_text(text)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "README.md")
