"""Running leverctl in-process: ``cli("show", "--format", "json")`` returns
(exit code, stdout, stderr). Each test starts with no lever variables in the
process environment, and sets what it needs through ``monkeypatch``."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from cli_result import run_cli

PREFIXES = (b"ATLAS_", b"METRALE_", b"TQ_PLUS_")


@pytest.fixture(autouse=True)
def _no_lever_variables(monkeypatch):
    for key in list(os.environb):
        if key.startswith(PREFIXES):
            monkeypatch.delitem(os.environb, key)


@pytest.fixture
def cli(capsys):
    return lambda *args: run_cli(capsys, *args)


@pytest.fixture(scope="session")
def leverctl_exe() -> str:
    exe = Path(sys.executable).parent / "leverctl"
    if exe.exists():
        return str(exe)
    found = shutil.which("leverctl")
    if not found:
        pytest.skip("the leverctl console script is not installed")
    return found
