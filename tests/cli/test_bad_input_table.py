"""Every bad input leverctl knows of, as one table: one line on stderr naming
the input and the problem, exit 2, promptly, nothing half-written.

The rows live in the ``bad_cases_*.py`` modules beside this file, one per
topic; see ``bad_input.py`` for the row type and what a row must show.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from bad_input import Case, run_case, run_row

HERE = Path(__file__).parent


def _all_cases() -> list[Case]:
    cases: list[Case] = []
    for mod in sorted(HERE.glob("bad_cases_*.py")):
        cases.extend(importlib.import_module(mod.stem).CASES)
    ids = [c.id for c in cases]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, f"bad-input cases share ids: {dupes}"
    return cases


CASES = _all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_exit_two(case, tmp_path):
    run_case(case, tmp_path)


def test_the_table_runner_fails_a_command_that_succeeds():
    """The table can fail: a row whose command is fine is caught."""
    with pytest.raises(AssertionError):
        run_case(Case("fine", ("explain", "ATLAS_GDN_WY17")), Path("/tmp"))


# Rows of each kind the forked runner serves: a plain one, one reading stdin,
# one whose command loads the kernels (numba, imported in the child), one
# that writes nothing because its output folder is missing.
SAME_ROWS = ("unknown-engine", "env-file-from-stdin-bad-line-show", "bench-axis-unknown-dimension", "absent-env-file")


@pytest.mark.parametrize("row", SAME_ROWS)
def test_a_forked_row_gives_what_a_fresh_interpreter_gives(row, tmp_path):
    """The table forks most rows' processes from one that has imported the
    CLI: the same exit status, bytes on stdout and stderr as `python -m
    leverctl` started afresh."""
    (case,) = [c for c in CASES if c.id == row]
    assert not case.env  # such rows always start afresh
    got = []
    for fresh in (False, True):
        folder = tmp_path / str(fresh)
        folder.mkdir()
        if case.files is not None:
            case.files(folder)
        p = run_row(case, folder, fresh=fresh)
        got.append((p.returncode, p.stdout, p.stderr.replace(str(folder).encode(), b"{tmp}")))
    assert got[0] == got[1]
    assert got[0][0] == 2 and got[0][2].startswith(b"leverctl: ")
