"""The console script's entry point.

Importing the CLI stack (Typer, Rich) is most of leverctl's start-up, so a
Ctrl-C is most likely to land there, before ``app.main`` can map it. It is
caught here and said like any other interruption: one line, exit 130.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from .app import main as run
    except KeyboardInterrupt:
        print("leverctl: interrupted", file=sys.stderr)
        sys.exit(130)
    run()
