"""Sweeps on a cluster: --shard auto without (or with a malformed) scheduler
environment, --slurm options that do not fit together, and a merge missing
shards without --partial."""

import json
from pathlib import Path

from bad_input import Case

SWEEP = ("sweep", "-e", "atlas", "--no-env", "--device", "sim")


def one_shard_of_two(tmp: Path) -> None:
    d = tmp / "s1"
    d.mkdir()
    items = [
        {
            "kernel": "w4a16.gemv",
            "variant": "gemv_sw",
            "config": f"gemv_sw={i}",
            "shape": "n37",
            "levers": {"gemv_sw": bool(i)},
        }
        for i in (0, 1)
    ]
    (d / "plan.json").write_text(
        json.dumps(
            {
                "schema": "leverctl.sweep-plan/1",
                "hash": "0123456789abcdef",
                "catalog": {"digest": "c" * 64},
                "device": {"kind": "sim", "name": None},
                "shard": {"index": 1, "count": 2, "items": 1},
                "kernels": [],
                "not_benchmarked": [],
                "items": items,
            }
        )
    )
    (d / "results.jsonl").write_text("")


CASES = [
    Case(
        "sweep-shard-auto-outside-a-scheduler",
        (*SWEEP, "--shard", "auto", "--out", "{tmp}/s"),
        ("--shard auto", "SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"),
        untouched=("{tmp}/s",),
    ),
    Case(
        "sweep-shard-auto-malformed-slurm-id",
        (*SWEEP, "--shard", "auto", "--out", "{tmp}/s"),
        ("SLURM_ARRAY_TASK_ID='1a'", "not a whole number"),
        env={"SLURM_ARRAY_TASK_ID": "1a", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "2"},
        untouched=("{tmp}/s",),
    ),
    Case(
        "sweep-shard-auto-slurm-without-count",
        (*SWEEP, "--shard", "auto", "--out", "{tmp}/s"),
        ("SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MAX"),
        env={"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "0"},
        untouched=("{tmp}/s",),
    ),
    Case(
        "sweep-shard-auto-stepped-array",
        (*SWEEP, "--shard", "auto", "--out", "{tmp}/s"),
        ("SLURM_ARRAY_TASK_ID=9", "contiguous"),
        env={"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "5"},
        untouched=("{tmp}/s",),
    ),
    Case(
        "sweep-shard-auto-k8s-without-count",
        (*SWEEP, "--shard", "auto", "--out", "{tmp}/s"),
        ("JOB_COMPLETION_INDEX", "auto/N"),
        env={"JOB_COMPLETION_INDEX": "0"},
        untouched=("{tmp}/s",),
    ),
    Case("sweep-slurm-without-out", (*SWEEP, "--slurm"), ("--slurm needs --out DIR",)),
    Case(
        "sweep-shards-without-slurm",
        (*SWEEP, "--shards", "4", "--out", "{tmp}/s"),
        ("--shards", "--slurm"),
        untouched=("{tmp}/s",),
    ),
    Case(
        "sweep-slurm-with-shard",
        (*SWEEP, "--slurm", "--shard", "1/2", "--out", "{tmp}/s"),
        ("--shard is for one shard's run",),
        untouched=("{tmp}/s",),
    ),
    Case(
        "sweep-slurm-resume-nothing-there",
        ("sweep", "--slurm", "--resume", "--out", "{tmp}/s"),
        ("nothing to resume here", "slurm.json"),
        untouched=("{tmp}/s",),
    ),
    Case(
        "report-merge-a-shard-missing",
        ("report", "merge", "{tmp}/s1", "--out", "{tmp}/m"),
        ("shard 2 of 2 not given", "shard 1 has 0 of 1", "--partial"),
        files=one_shard_of_two,
        untouched=("{tmp}/m",),
    ),
]
