"""Running leverctl in-process: ``cli("show", "--format", "json")`` returns
(exit code, stdout, stderr). Each test starts with no lever variables in the
process environment, and sets what it needs through ``monkeypatch``."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from cli_helpers import Result

from leverctl.cli.app import main

PREFIXES = (b"ATLAS_", b"METRALE_", b"TQ_PLUS_")


@pytest.fixture(autouse=True)
def _no_lever_variables(monkeypatch):
    for key in list(os.environb):
        if key.startswith(PREFIXES):
            monkeypatch.delitem(os.environb, key)


@pytest.fixture
def cli(capsys):
    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        else:  # main always exits; reaching here is a bug
            raise AssertionError("leverctl main() returned without exiting")
        cap = capsys.readouterr()
        return Result(code, cap.out, cap.err)

    return run


@pytest.fixture(scope="session")
def leverctl_exe() -> str:
    exe = Path(sys.executable).parent / "leverctl"
    if exe.exists():
        return str(exe)
    found = shutil.which("leverctl")
    if not found:
        pytest.skip("the leverctl console script is not installed")
    return found
