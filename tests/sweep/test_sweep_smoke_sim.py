"""The real kernel paths in the CUDA simulator: a smoke sweep through the
command, with one shard killed and resumed on the way.

``leverctl sweep --device sim --shapes smoke`` runs every combination of
every path (Metrale's whole plan: 2498 records, 171 simulated runs, about
ten CPU-minutes; ``make sweep``). Each family's own tests already run every
variant at its smoke shapes against the reference, so this module sweeps a
selection of paths from four families (``KERNELS``), enough for what only a
sweep shows: the plan across families, two shards in parallel (two cores),
one of them killed with SIGKILL and resumed, the merge into one result set,
and the MoE prefill's row-dropping lever sets failing only under skewed
routing. Every check of Atlas's plan of those paths is one of Metrale's: a
check depends only on (path, variant, shape), since a variant's build sees
only the shape and the inputs are seeded by path and shape; the test asserts
that coverage and runs whatever Atlas has beyond it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leverctl.bench.records.read import load_results, read_jsonl, whole_records
from leverctl.bench.records.rules import identity
from leverctl.bench.records.schema import PLAN_FILE, RESULTS_FILE

pytestmark = [pytest.mark.sim, pytest.mark.long]
ROOT = Path(__file__).resolve().parents[2]
KERNELS = ("w4a16.gemv", "gdn.verify", "moe.union_stats", "moe.prefill_sorted")
SELECTION = [a for k in KERNELS for a in ("--kernel", k)]


def leverctl(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return subprocess.Popen(
        [sys.executable, "-m", "leverctl", *map(str, args)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(p: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out.decode(), err.decode()


def lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_the_smoke_sweep_runs_every_combination_all_pass_and_a_killed_shard_resumes(tmp_path):
    common = [
        "sweep",
        "-e",
        "metrale",
        "--no-env",
        "--device",
        "sim",
        "--shapes",
        "smoke",
        "--format",
        "json",
        *SELECTION,
    ]
    d1, d2 = tmp_path / "s1", tmp_path / "s2"
    first = leverctl(*common, "--shard", "1/2", "--out", d1)
    second = leverctl(*common, "--shard", "2/2", "--out", d2)

    # Kill shard 1 (SIGKILL: no chance to clean up) once it has finished two.
    deadline = time.monotonic() + 300
    while lines(d1 / RESULTS_FILE) < 2 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    assert first.returncode == -signal.SIGKILL
    kept = read_jsonl(d1 / RESULTS_FILE)
    mine = json.loads((d1 / PLAN_FILE).read_text())["shard"]["items"]
    assert 2 <= len(kept.records) < mine
    intact = (d1 / RESULTS_FILE).read_bytes()[: kept.good_bytes]

    code, _out, err = finish(leverctl(*common, "--shard", "1/2", "--out", d1, "--resume"))
    assert code in (0, 1), err  # 1: the MoE prefill's expected drops under skew (below)
    assert f"{len(kept.records)} were on disk, {mine - len(kept.records)} ran now" in err
    code, _out, err = finish(second)
    assert code in (0, 1), err
    final = read_jsonl(d1 / RESULTS_FILE)
    assert (d1 / RESULTS_FILE).read_bytes().startswith(intact) and final.tail_bytes == 0
    assert final.records[: len(kept.records)] == kept.records
    ids = [identity(r) for r in final.records]
    assert len(ids) == len(set(ids)) == mine  # nothing lost, nothing run twice

    code, out, err = finish(leverctl("report", "merge", d1, d2, "--out", tmp_path / "metrale", "--format", "json"))
    report = json.loads(out)
    plan = json.loads((tmp_path / "metrale" / PLAN_FILE).read_text())
    records = list(whole_records(load_results(tmp_path / "metrale"), tmp_path / "metrale"))  # rows_lost too
    # Every failure is a MoE prefill lever set whose tile bound is below the
    # skewed routing's load, which drops rows there (rows_lost) and must fail;
    # the same lever set passes under uniform routing.
    failed = [r for r in records if r["status"] == "fail"]
    assert all(r["rows_lost"] and r["shape"]["label"].startswith("skewed") for r in failed), [
        (r["kernel"], r["config"], r["shape"]["label"], r["note"]) for r in failed if not r["rows_lost"]
    ]
    uniform_ok = {
        (r["kernel"], r["config"])
        for r in records
        if r["status"] == "pass" and r["shape"]["label"].startswith("uniform")
    }
    assert all((r["kernel"], r["config"]) in uniform_ok for r in failed)
    assert code == (1 if failed else 0), err
    assert report["counts"] == {
        "records": plan["total"],
        "pass": plan["total"] - len(failed),
        "fail": len(failed),
        "planned": plan["total"],
    }
    assert plan["total"] == sum(k["runs"] for k in plan["kernels"]) > 0
    assert {identity(r) for r in records} == {(i["kernel"], i["shape"], i["config"]) for i in plan["items"]}
    checked = {(r["kernel"], r["variant"], r["shape"]["label"]) for r in records if r["status"] == "pass"}

    from leverctl.bench import sweep as sw
    from leverctl.cli.common import registered_paths, select_paths
    from leverctl.levers import load_catalog, resolve

    paths = registered_paths()
    # The plan built in this process is the command's (the hash is stable).
    metrale, atlas = resolve(load_catalog("metrale"), env={}), resolve(load_catalog("atlas"), env={})
    mine = select_paths(paths, list(KERNELS), metrale)
    assert sw.build_sweep(metrale, mine, preset="smoke", known_paths=paths).hash == plan["hash"]
    theirs = select_paths(paths, [k for k in KERNELS if k in {p.name for p in paths if "atlas" in p.engines}], atlas)
    atlas = sw.build_sweep(atlas, theirs, preset="smoke", known_paths=paths)
    assert atlas.total > 0
    extra = sorted({it.kernel for it in atlas.items if (it.kernel, it.variant, it.shape.label) not in checked})
    if extra:  # a path or variant only Atlas has: run Atlas's sweep of it
        args = [a for k in extra for a in ("--kernel", k)]
        code, out, err = finish(
            leverctl(
                "sweep",
                "-e",
                "atlas",
                "--no-env",
                "--device",
                "sim",
                "--shapes",
                "smoke",
                *args,
                "--out",
                tmp_path / "atlas",
                "--format",
                "json",
            )
        )
        assert code == 0, err
