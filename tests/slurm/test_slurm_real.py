"""``leverctl sweep --slurm`` against a real single-node Slurm (munged,
slurmctld and slurmd started for the session by ``conftest.py``), in the
CUDA simulator on a small smoke selection: one W4A16 path and one GDN path.

The node has one GPU generic resource (a stand-in device file), so the
array's ``--gres=gpu:1`` tasks run one after another, as they would queue
for a GPU each on a busy cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leverctl.bench import slurm as sl
from leverctl.bench.records.read import load_results
from leverctl.bench.records.rules import identity
from leverctl.bench.records.schema import PLAN_FILE, RESULTS_FILE

pytestmark = [pytest.mark.sim, pytest.mark.xdist_group("slurm")]
ROOT = Path(__file__).resolve().parents[2]
SELECTION = ["-e", "atlas", "--no-env", "--device", "sim", "--shapes", "smoke", "-k", "w4a16.gemv", "-k", "gdn.decode"]


def leverctl(cluster, *args, **kw) -> subprocess.Popen:
    env = {k: v for k, v in cluster.env.items() if not k.startswith(("SLURM_ARRAY", "JOB_COMPLETION"))}
    return subprocess.Popen(
        [sys.executable, "-m", "leverctl", *map(str, args)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def cli(cluster, monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """leverctl in this process, as a client of the cluster: submitting
    needs the plan, and this process has the kernel declarations loaded
    already (a fresh one takes seconds to load them)."""
    from leverctl.cli.app import main

    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    monkeypatch.delenv("SLURM_CONF")
    return e.value.code, out, err


def finish(p: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


@pytest.fixture(scope="module")
def unsharded(tmp_path_factory, slurm_cluster):
    """The same selection swept in one process, outside Slurm, started at
    once so that it runs beside the array."""
    out = tmp_path_factory.mktemp("unsharded") / "full"
    p = leverctl(slurm_cluster, "sweep", *SELECTION, "--out", out)
    done = {}

    def get() -> set:
        if not done:
            code, _o, err = finish(p, 300)
            assert code == 0, err
            done["ids"] = ids(out)
        return done["ids"]

    yield get
    if p.poll() is None:
        p.kill()
        p.wait()


def ids(d: Path) -> set:
    recs = load_results(d).records
    assert all(r["status"] == "pass" for r in recs)
    return {identity(r) for r in recs}


def job_state(cluster, job: str) -> dict[str, str]:
    text = cluster.run("scontrol", "-o", "show", "job", job).stdout
    first = text.splitlines()[0]
    return dict(kv.split("=", 1) for kv in first.split() if "=" in kv)


def wait_gone(cluster, job: str, timeout: float) -> None:
    """Until Slurm holds no pending or running task of ``job``."""
    deadline = time.monotonic() + timeout
    while cluster.run("squeue", "-h", "-j", job, check=False).stdout.strip():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"job {job} still queued after {timeout:.0f} s: "
                + cluster.run("squeue", "-j", job, check=False).stdout
                + cluster.logs_tail()
            )
        time.sleep(0.25)


def submitted(out: str) -> tuple[str, str]:
    """(array job, merge job) from --slurm's first line."""
    words = out.split()
    return words[words.index("job", words.index("array")) + 1].rstrip(","), words[words.index("merge") + 2]


def submit_array(cluster, monkeypatch, capsys, out: Path) -> tuple[str, str, str]:
    """Sweep ``SELECTION`` with ``--slurm`` in three shards into ``out``:
    (what it said, array job, merge job)."""
    code, said, err = cli(cluster, monkeypatch, capsys, "sweep", *SELECTION, "--slurm", "--shards", "3", "--out", out)
    assert code == 0, err
    return (said, *submitted(said))


def test_an_array_sweep_and_its_dependent_merge_give_the_records_of_the_unsharded_sweep(
    slurm_cluster, unsharded, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "sweep"
    said, array, merge = submit_array(slurm_cluster, monkeypatch, capsys, out)
    assert f"squeue -j {array},{merge}" in said and "sacct -j" in said
    assert (out / sl.SWEEP_SCRIPT).read_text().count("--gres=gpu:1") == 1
    assert "#SBATCH --dependency" not in (out / sl.MERGE_SCRIPT).read_text()  # given at submission, by job id
    assert job_state(slurm_cluster, merge)["Dependency"].startswith(f"afterok:{array}")

    wait_gone(slurm_cluster, array, 120)
    wait_gone(slurm_cluster, merge, 60)
    assert job_state(slurm_cluster, merge)["JobState"] == "COMPLETED", slurm_cluster.logs_tail()
    for i in (1, 2, 3):
        plan = json.loads((out / sl.SHARDS_DIR / str(i) / PLAN_FILE).read_text())
        assert plan["shard"]["index"] == i and plan["shard"]["count"] == 3
    merged = out / sl.MERGED_DIR
    assert ids(merged) == unsharded()
    assert json.loads((merged / PLAN_FILE).read_text())["hash"] == json.loads((out / PLAN_FILE).read_text())["hash"]


def test_a_task_cancelled_mid_run_keeps_the_others_and_resume_reruns_only_that_shard(
    slurm_cluster, unsharded, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "sweep"
    said, array, merge = submit_array(slurm_cluster, monkeypatch, capsys, out)

    # Cancel task 2 once it has planned its shard (its sweep is running).
    two = out / sl.SHARDS_DIR / "2"
    deadline = time.monotonic() + 90
    while not (two / PLAN_FILE).exists():
        assert time.monotonic() < deadline, "task 2 never started: " + slurm_cluster.logs_tail()
        time.sleep(0.05)
    slurm_cluster.run("scancel", f"{array}_2")
    wait_gone(slurm_cluster, array, 120)
    assert job_state(slurm_cluster, f"{array}_2")["JobState"] == "CANCELLED"
    st = [
        sl.shard_state(out / sl.SHARDS_DIR / str(i), i, 3, json.loads((out / PLAN_FILE).read_text())["hash"])
        for i in (1, 2, 3)
    ]
    assert [s.complete for s in st] == [True, False, True]
    kept = {i: (out / sl.SHARDS_DIR / str(i) / RESULTS_FILE).read_bytes() for i in (1, 3)}
    # The merge waits on an array that will never succeed.
    assert job_state(slurm_cluster, merge)["JobState"] == "PENDING"
    assert not (out / sl.MERGED_DIR).exists()

    code, said, err = cli(slurm_cluster, monkeypatch, capsys, "sweep", "--slurm", "--resume", "--out", out)
    assert code == 0, err
    assert "shard 2 (" in err and "shard 1" not in err and "shard 3" not in err
    array2, merge2 = submitted(said)
    assert json.loads((out / sl.STATE_FILE).read_text())["submissions"][-1]["tasks"] == [2]
    wait_gone(slurm_cluster, array2, 120)
    wait_gone(slurm_cluster, merge2, 60)
    assert job_state(slurm_cluster, merge)["JobState"] == "CANCELLED"  # the old merge, re-armed
    assert job_state(slurm_cluster, merge2)["JobState"] == "COMPLETED", slurm_cluster.logs_tail()
    assert sorted(p.name for p in (out / sl.LOGS_DIR).glob(f"sweep-{array2}_*")) == [f"sweep-{array2}_2.out"]
    assert {i: (out / sl.SHARDS_DIR / str(i) / RESULTS_FILE).read_bytes() for i in (1, 3)} == kept
    assert ids(out / sl.MERGED_DIR) == unsharded()

    # Nothing left to do: said so, nothing submitted.
    code, said, err = cli(slurm_cluster, monkeypatch, capsys, "sweep", "--slurm", "--resume", "--out", out)
    assert code == 0 and "nothing to resume" in err and not said


def test_shard_auto_in_a_job_that_is_not_an_array_task_exits_2_with_one_line(slurm_cluster, tmp_path):
    log = tmp_path / "job.out"
    cmd = " ".join(
        [sys.executable, "-m", "leverctl", "sweep", *SELECTION, "--shard", "auto", "--out", str(tmp_path / "s")]
    )
    job = slurm_cluster.run(
        "sbatch", "--parsable", f"--output={log}", f"--chdir={ROOT}", "--wrap", f"{cmd}; echo exit=$?"
    ).stdout.strip()
    wait_gone(slurm_cluster, job, 60)
    lines = log.read_text().splitlines()
    assert lines[-1] == "exit=2", lines
    assert len(lines) == 2 and "SLURM_ARRAY_TASK_ID" in lines[0] and f"Slurm job {job}" in lines[0], lines
    assert not (tmp_path / "s").exists()

    # A malformed array environment, as a task would see it: one line, exit 2.
    env = {
        **slurm_cluster.env,
        "SLURM_ARRAY_TASK_ID": "two",
        "SLURM_ARRAY_TASK_MIN": "1",
        "SLURM_ARRAY_TASK_COUNT": "3",
    }
    p = subprocess.run(
        [sys.executable, "-m", "leverctl", "sweep", *SELECTION, "--shard", "auto", "--out", str(tmp_path / "s")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "SLURM_ARRAY_TASK_ID='two'" in p.stderr
    assert not (tmp_path / "s").exists()
    assert os.environ.get("SLURM_CONF") is None  # the cluster is the tests' own, never the process's
