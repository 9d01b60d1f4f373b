"""Every bad input leverctl knows of, as one table: one line on stderr naming
the input and the problem, exit 2, promptly, nothing half-written.

The rows live in the ``bad_cases_*.py`` modules beside this file, one per
topic; see ``bad_input.py`` for the row type and what a row must show.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from bad_input import Case, run_case

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
