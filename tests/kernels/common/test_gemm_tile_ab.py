"""``scripts/gemm-tile-ab.py``, the GPU A/B of the 64-row tile on one
warpgroup against two, each with its copies by TMA and by cp.async: in the
simulator (``--device sim``) all four builds run and their outputs are the
same bits, written atomically as JSON; on a machine without a GPU the
default device is one line on stderr and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "gemm-tile-ab.py"


def _run(*args):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.sim
def test_both_layouts_and_both_copies_run_in_the_simulator_and_give_the_same_bits(tmp_path):
    out = tmp_path / "tiles.json"
    got = _run("--device", "sim", "-m", "5", "-n", "72", "-k", "128", "-o", str(out))
    assert got.returncode == 0, got.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    one, two = "one warpgroup", "two warpgroups, one a column half"
    assert [(r["layout"], r["copies"]) for r in rows] == [
        (one, "tma"),
        (one, "cp.async"),
        (two, "tma"),
        (two, "cp.async"),
    ]
    assert all(r["same_bits"] and r["max_abs_diff"] == 0 for r in rows)
    assert "are the same bits" in got.stdout


@pytest.mark.skipif(os.environ.get("LEVERCTL_TEST_DEVICE") == "gpu", reason="a GPU is here")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_2():
    got = _run("-m", "64", "-n", "64", "-k", "128")
    assert got.returncode == 2 and got.stderr.strip().count("\n") == 0 and "no CUDA GPU" in got.stderr, got.stderr
