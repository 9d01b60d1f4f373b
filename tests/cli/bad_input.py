"""The bad-input table's row type and runner.

Every way a user can hand leverctl bad input is one row, a :class:`Case`,
listed in a ``bad_cases_*.py`` module beside this file (one module per
topic: input files, output paths, results files...);
``test_bad_input_table.py`` collects every module's ``CASES`` and runs each
row as a real process. Adding a case is adding one line.

A row passes when the command exits ``code`` (2, bad input, unless said
otherwise) within ``TIME_LIMIT`` seconds of its start, printed nothing on
stdout, printed exactly one line on stderr that starts with ``leverctl:``,
names every fragment, and shows no traceback; and when every path the row
lists in ``untouched`` is as the row's set-up left it (nothing half-written).

``{tmp}`` in ``argv``, ``fragments``, ``stdin`` and ``untouched`` stands for
the row's own empty temporary folder, made before ``files`` runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# The command must answer within a second of its own work; the rest is the
# interpreter's start-up on a loaded two-core machine.
TIME_LIMIT = 10.0


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    fragments: tuple[str, ...] = ()
    files: Callable[[Path], None] | None = None  # makes what the row needs inside {tmp}
    stdin: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)  # added to a lever-free environment
    code: int = 2
    untouched: tuple[str, ...] = ()  # paths whose bytes (or absence) must survive the run
    skip_as_root: bool = False  # permission cases: root reads and writes whatever the mode


def _sub(text: str, tmp: Path) -> str:
    return text.replace("{tmp}", str(tmp))


def _snapshot(paths: list[Path]) -> dict[Path, bytes | None]:
    snap = {}
    for p in paths:
        try:
            snap[p] = p.read_bytes() if p.is_file() else ("dir" if p.is_dir() else None)
        except OSError:
            snap[p] = "unreadable"
    return snap


def run_case(case: Case, tmp: Path) -> None:
    if case.skip_as_root and os.geteuid() == 0:
        import pytest

        pytest.skip("root reads and writes files whatever their mode")
    if case.files is not None:
        case.files(tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLAS_", "METRALE_", "TQ_PLUS_"))}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env.update({k: _sub(v, tmp) for k, v in case.env.items()})
    argv = [sys.executable, "-m", "leverctl", *(_sub(a, tmp) for a in case.argv)]
    watched = [Path(_sub(u, tmp)) for u in case.untouched]
    before = _snapshot(watched)
    start = time.monotonic()
    p = subprocess.run(
        argv,
        env=env,
        capture_output=True,
        timeout=TIME_LIMIT * 3,
        input=_sub(case.stdin.decode("utf-8", "surrogateescape"), tmp).encode("utf-8", "surrogateescape")
        if case.stdin is not None
        else None,
        stdin=None if case.stdin is not None else subprocess.DEVNULL,
    )
    took = time.monotonic() - start
    err = p.stderr.decode("utf-8", "replace")
    lines = [line for line in err.splitlines() if line.strip()]
    context = f"{case.id}: rc={p.returncode} stderr={err!r} stdout={p.stdout[:300]!r}"
    assert took < TIME_LIMIT, f"{case.id}: took {took:.1f}s"
    assert p.returncode == case.code, context
    assert "Traceback" not in err, context
    assert p.stdout == b"", context
    assert len(lines) == 1 and lines[0].startswith("leverctl: "), context
    for frag in case.fragments:
        assert _sub(frag, tmp) in lines[0], (frag, context)
    assert _snapshot(watched) == before, f"{case.id}: a watched path changed"
