"""The cluster flow without a cluster: ``--shard auto`` from a scheduler's
environment, the scripts ``--slurm`` writes and submits (to a stand-in
``sbatch`` on PATH that logs its arguments), ``--slurm --resume`` choosing
the unfinished shards, and ``report merge`` naming missing shards by index.
On the fake kernel paths; the real Slurm is test_slurm_real.py."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sweep"))
import sweep_fakes as fk  # noqa: E402
from sweep_fakes import cli  # noqa: E402

from leverctl.bench import slurm as sl  # noqa: E402
from leverctl.bench.records.read import load_results  # noqa: E402
from leverctl.bench.records.rules import identity  # noqa: E402
from leverctl.bench.records.schema import PLAN_FILE, RESULTS_FILE  # noqa: E402
from leverctl.errors import UserError  # noqa: E402

BASE = ["sweep", "-e", "metrale", "--no-env", "--device", "sim"]


@pytest.fixture
def fake(monkeypatch):
    for var in (
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_MAX",
        "SLURM_ARRAY_TASK_COUNT",
        "SLURM_JOB_ID",
        "JOB_COMPLETION_INDEX",
    ):
        monkeypatch.delenv(var, raising=False)
    return fk.install(monkeypatch)


@pytest.fixture
def sbatch(tmp_path, monkeypatch):
    """A stand-in sbatch (and squeue, scancel) on PATH: job ids from 100,
    each call's arguments one line of the log."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "sbatch.log"
    (bin_ / "sbatch").write_text(f"""#!/bin/sh
echo "$@" >> {log}
n=$(wc -l < {log})
echo $((99 + n))
""")
    (bin_ / "squeue").write_text("#!/bin/sh\nexit 0\n")
    (bin_ / "scancel").write_text(f'#!/bin/sh\necho scancel "$@" >> {log}\n')
    for f in bin_.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    return log


# ── --shard auto ─────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "env, spec, shard",
    [
        ({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"}, "auto", (1, 4)),
        ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "4"}, "auto", (4, 4)),
        ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_MAX": "8"}, "auto", (3, 4)),
        ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "1"}, "AUTO", (1, 1)),
        # auto/N: the task ids are the shard numbers, so a resubmitted subset keeps them.
        ({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "2", "SLURM_ARRAY_TASK_COUNT": "2"}, "auto/6", (5, 6)),
        ({"JOB_COMPLETION_INDEX": "0"}, "auto/3", (1, 3)),
        ({"JOB_COMPLETION_INDEX": "2"}, "auto / 3", (3, 3)),
    ],
    ids=[
        "slurm-from-0-first",
        "slurm-from-0-last",
        "slurm-min-max",
        "slurm-one",
        "slurm-auto-n-subset",
        "k8s-first",
        "k8s-last",
    ],
)
def test_shard_auto_maps_the_schedulers_index_to_a_shard_counted_from_1(env, spec, shard):
    assert sl.shard_from_env(spec, env) == shard


@pytest.mark.parametrize(
    "env, spec, says",
    [
        ({}, "auto", "neither SLURM_ARRAY_TASK_ID"),
        ({"SLURM_JOB_ID": "12"}, "auto", "Slurm job 12, but not an array task"),
        (
            {"SLURM_ARRAY_TASK_ID": "x1", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "2"},
            "auto",
            "SLURM_ARRAY_TASK_ID='x1' is not a whole number",
        ),
        ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2"}, "auto", "SLURM_ARRAY_TASK_MIN is not set"),
        ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "0"}, "auto", "neither SLURM_ARRAY_TASK_COUNT"),
        (
            {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "3"},
            "auto",
            "do not make a shard of a contiguous array",
        ),
        (
            {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "3"},
            "auto/3",
            "SLURM_ARRAY_TASK_ID=0 is not a shard of 3",
        ),
        ({"JOB_COMPLETION_INDEX": "1"}, "auto", "write --shard auto/N"),
        ({"JOB_COMPLETION_INDEX": "3"}, "auto/3", "past the last of 3 shards"),
        ({"JOB_COMPLETION_INDEX": "-1"}, "auto/3", "is not a whole number"),
        ({"JOB_COMPLETION_INDEX": "0"}, "auto/0", "N must be a whole number from 1"),
        ({"JOB_COMPLETION_INDEX": "0"}, "automatic", "write auto, or auto/N"),
    ],
    ids=[
        "nothing",
        "not-an-array",
        "malformed-id",
        "no-min",
        "no-count",
        "stepped-array",
        "auto-n-from-0",
        "k8s-no-count",
        "k8s-past-count",
        "k8s-negative",
        "zero-count",
        "misspelt",
    ],
)
def test_shard_auto_refuses_missing_malformed_or_inconsistent_variables_naming_them(env, spec, says):
    with pytest.raises(UserError) as e:
        sl.shard_from_env(spec, env)
    assert says in e.value.line() and "\n" not in e.value.line()


def test_sweep_shard_auto_runs_the_shard_the_environment_names(fake, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "12")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "10")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    code, _, err = cli([*BASE, "--shard", "auto", "--out", tmp_path / "s"], capsys)
    assert code in (0, 1), err
    assert json.loads((tmp_path / "s" / PLAN_FILE).read_text())["shard"]["index"] == 3
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "oops")
    code, _, err = cli([*BASE, "--shard", "auto", "--out", tmp_path / "t"], capsys)
    assert code == 2 and err.count("\n") == 1 and "SLURM_ARRAY_TASK_ID='oops'" in err
    assert not (tmp_path / "t").exists()


# ── --slurm ─────────────────────────────────────────────────────────────────


def test_slurm_dry_run_prints_both_scripts_and_writes_and_submits_nothing(fake, capsys, tmp_path, sbatch, monkeypatch):
    monkeypatch.setenv("ATLAS_NO_GEMV_SW", "1")  # another engine's variable: not frozen into a Metrale script
    monkeypatch.setenv("METRALE_GDN_WY17", "0")
    code, out, err = cli(
        [
            *BASE[:3],
            "--device",
            "sim",
            "--slurm",
            "--shards",
            "3",
            "--partition",
            "gpu-h100",
            "--time",
            "01:00:00",
            "--sbatch-arg=--account=lab",
            "--dry-run",
            "--out",
            tmp_path / "c",
        ],
        capsys,
    )
    assert code == 0, err
    assert "#SBATCH --array=1-3" in out and "#SBATCH --gres=gpu:1" in out and "#SBATCH --partition=gpu-h100" in out
    assert "#SBATCH --time=01:00:00" in out and out.count("#SBATCH --account=lab") == 2
    assert "--shard auto/3" in out and "report merge" in out and '"$out"/shards/{1..3}' in out
    assert "--no-env --set METRALE_GDN_WY17=0" in out and "ATLAS_NO_GEMV_SW" not in out
    assert not (tmp_path / "c").exists() and not sbatch.exists()


def test_slurm_submits_the_array_then_the_merge_after_it_and_says_how_to_follow_them(fake, capsys, tmp_path, sbatch):
    out_dir = tmp_path / "c"
    code, out, err = cli([*BASE, "--slurm", "--shards", "2", "--out", out_dir], capsys)
    assert code == 0, err
    calls = sbatch.read_text().splitlines()
    assert calls == [
        f"--parsable {out_dir / sl.SWEEP_SCRIPT}",
        f"--parsable --dependency=afterok:100 {out_dir / sl.MERGE_SCRIPT}",
    ]
    assert "array job 100" in out and "merge job 101" in out and "squeue -j 100,101" in out and "sacct -j" in out
    state = json.loads((out_dir / sl.STATE_FILE).read_text())
    assert state["shards"] == 2 and state["submissions"][0]["array"] == "100"
    plan = json.loads((out_dir / PLAN_FILE).read_text())
    assert plan["shard"] is None and len(plan["items"]) == 46
    # A second submission into the same folder is refused; --resume is the way.
    code, _, err = cli([*BASE, "--slurm", "--out", out_dir], capsys)
    assert code == 2 and "--resume" in err and len(sbatch.read_text().splitlines()) == 2


def test_slurm_resume_resubmits_the_shards_that_are_missing_or_short_and_rearms_the_merge(
    fake, capsys, tmp_path, sbatch
):
    out_dir = tmp_path / "c"
    code, _, err = cli([*BASE, "--slurm", "--shards", "3", "--out", out_dir], capsys)
    assert code == 0, err
    # Shard 1 ran to the end, shard 2 was cut off after one record, shard 3 never started.
    for i in (1, 2):
        code, _, err = cli([*BASE, "--shard", f"{i}/3", "--out", out_dir / sl.SHARDS_DIR / str(i)], capsys)
    two = out_dir / sl.SHARDS_DIR / "2" / RESULTS_FILE
    first = two.read_bytes().split(b"\n")[0]
    two.write_bytes(first + b"\n" + b'{"kernel": "fake.g')  # and a partial line, as a kill leaves
    code, out, err = cli(["sweep", "--slurm", "--resume", "--out", out_dir], capsys)
    assert code == 0, err
    assert "shard 2 (1 of" in err and "shard 3 (not started)" in err and "shard 1" not in err
    assert sbatch.read_text().splitlines()[-2:] == [
        f"--parsable --array=2,3 {out_dir / sl.SWEEP_SCRIPT}",
        f"--parsable --dependency=afterok:102 {out_dir / sl.MERGE_SCRIPT}",
    ]
    assert "shards 2, 3" in out and "array job 102" in out


def test_slurm_refuses_what_it_cannot_submit_with_one_line(fake, capsys, tmp_path, sbatch):
    for args, says in [
        ([*BASE, "--slurm"], "--slurm needs --out DIR"),
        ([*BASE, "--shards", "2", "--out", tmp_path / "x"], "--shards is an option of --slurm"),
        ([*BASE, "--slurm", "--shard", "1/2", "--out", tmp_path / "x"], "--shard is for one shard's run"),
        ([*BASE, "--slurm", "--shards", "99", "--out", tmp_path / "x"], "at most"),
        ([*BASE, "--slurm", "--sbatch-arg", "account=x", "--out", tmp_path / "x"], "give one sbatch option"),
        (["sweep", "--slurm", "--resume", "--out", tmp_path / "x"], "nothing to resume here"),
    ]:
        code, out, err = cli(args, capsys)
        assert code == 2 and err.count("\n") == 1 and says in err, (args, err)
    assert not (tmp_path / "x").exists() and not sbatch.exists()


def test_slurm_without_sbatch_says_so_before_writing_anything(fake, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    code, _, err = cli([*BASE, "--slurm", "--out", tmp_path / "x"], capsys)
    assert code == 2 and "sbatch is not on PATH" in err and not (tmp_path / "x").exists()


# ── report merge: missing shards ────────────────────────────────────────────


def test_merge_names_the_missing_shards_by_index_and_merges_them_only_with_partial(fake, capsys, tmp_path):
    for i in (1, 3):
        cli([*BASE, "--shard", f"{i}/4", "--out", tmp_path / f"s{i}"], capsys)
    parts = [tmp_path / "s1", tmp_path / "s3"]
    code, _, err = cli(["report", "merge", *parts, "--out", tmp_path / "m"], capsys)
    assert code == 2 and err.count("\n") == 1 and "shards 2, 4 of 4 not given" in err and "--partial" in err
    assert not (tmp_path / "m").exists()
    # A shard cut short is named too.
    res3 = tmp_path / "s3" / RESULTS_FILE
    lines = res3.read_bytes().splitlines(keepends=True)
    res3.write_bytes(b"".join(lines[:-1]))
    code, _, err = cli(["report", "merge", *parts, "--out", tmp_path / "m", "--partial"], capsys)
    assert code in (0, 1), err
    assert f"shard 3 has {len(lines) - 1} of {len(lines)}" in err and "shards 2, 4 of 4 not given" in err
    merged = load_results(tmp_path / "m")
    assert len(merged.records) == len(load_results(tmp_path / "s1").records) + len(lines) - 1
    assert "shards 2, 4 of 4 not given" in json.loads((tmp_path / "m" / PLAN_FILE).read_text())["partial"]


def test_the_kubernetes_template_asks_one_gpu_per_pod_and_its_count_agrees_with_shard_auto():
    import re

    text = (Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "sweep-indexed-job.yaml").read_text()
    n = int(re.search(r"^  completions: (\d+)", text, re.M).group(1))
    assert "completionMode: Indexed" in text and "nvidia.com/gpu: 1" in text
    assert f"--shard auto/{n}" in text and f"/results/shards/{{1..{n}}}" in text
    assert "shards/$((JOB_COMPLETION_INDEX + 1))" in text  # the folder is the shard's number, from 1
