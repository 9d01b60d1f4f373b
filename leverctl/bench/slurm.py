"""Sweeps on a cluster's scheduler: the shard from its environment, and Slurm
array jobs with a dependent merge.

leverctl schedules nothing itself. A sweep is already deterministic slices
(``--shard I/N``) that ``report merge`` joins; a cluster runs them as an
array job, whose tasks know their index from the environment:

* Slurm array tasks: ``SLURM_ARRAY_TASK_ID``, the array's first index
  ``SLURM_ARRAY_TASK_MIN`` and ``SLURM_ARRAY_TASK_COUNT`` (or, where the
  count is absent, ``SLURM_ARRAY_TASK_MAX``). ``--shard auto`` is shard
  ``ID - MIN + 1`` of ``COUNT`` (``MAX - MIN + 1``): ``--array=0-3`` and
  ``--array=1-4`` both give shards 1/4 .. 4/4.
  ``--shard auto/N`` says the count, and then the array's task ids *are*
  the shard numbers 1..N: the scripts below submit ``--array=1-N``, and a
  resumed sweep resubmits the same script as ``--array=2,5``, the shards
  that are missing, which keep their numbers.
* Kubernetes Indexed Jobs: ``JOB_COMPLETION_INDEX`` (from 0) is shard
  ``JOB_COMPLETION_INDEX + 1``; the count is the Job's ``completions``,
  which the pod does not see, so it is written ``--shard auto/N``.

``leverctl sweep --slurm`` writes, into the sweep's ``--out DIR``, the plan
(``plan.json``, the whole sweep, once), ``sweep.sbatch`` (the array: one GPU
per task through ``--gres``, task I a ``--shard auto/N`` run into
``DIR/shards/I``, resuming what that directory holds) and ``merge.sbatch``
(``report merge`` of every shard into ``DIR/merged``), and submits the merge
``--dependency=afterok`` on the array. Both are plain scripts a person can
read, edit and submit by hand (the pattern of submitit). ``slurm.json``
keeps the job ids submitted, for ``--resume``, which resubmits only the
shards whose results are absent or incomplete (a task cancelled, preempted
or out of time) and re-arms the merge on them.

Nothing here imports numba or numpy.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import UserError
from .records.plans import read_plan
from .records.read import read_jsonl
from .records.schema import PLAN_FILE, RESULTS_FILE
from .records.write import write_json_atomic

SWEEP_SCRIPT = "sweep.sbatch"
MERGE_SCRIPT = "merge.sbatch"
STATE_FILE = "slurm.json"
SHARDS_DIR = "shards"
MERGED_DIR = "merged"
LOGS_DIR = "logs"
STATE_SCHEMA = "leverctl.slurm/1"

SLURM_ID, SLURM_MIN, SLURM_MAX, SLURM_COUNT = (
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_COUNT",
)
K8S_INDEX = "JOB_COMPLETION_INDEX"


# ── the shard from the scheduler's environment ──────────────────────────────


def is_auto(text: str) -> bool:
    return text.strip().split("/", 1)[0].strip().lower() == "auto"


def shard_from_env(text: str, env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``--shard auto`` or ``auto/N`` -> (I, N) from a Slurm array task's or a
    Kubernetes Indexed Job's environment (see the module doc). Missing,
    malformed or inconsistent variables are a UserError naming them."""
    env = os.environ if env is None else env
    m = re.fullmatch(r"\s*auto\s*(?:/\s*(\S*)\s*)?", text, re.IGNORECASE)
    if not m:
        raise UserError(f"--shard {text!r}: write auto, or auto/N to give the count")
    count = None
    if m.group(1) is not None:
        if not m.group(1).isdigit() or int(m.group(1)) < 1:
            raise UserError(f"--shard {text}: N must be a whole number from 1 (the shards of N are 1/N .. N/N)")
        count = int(m.group(1))
    if env.get(SLURM_ID) is not None:
        return _slurm_shard(env, count)
    if env.get(K8S_INDEX) is not None:
        return _k8s_shard(env, count)
    job = (
        " (this is Slurm job {}, but not an array task: submit it with --array)".format(env["SLURM_JOB_ID"])
        if env.get("SLURM_JOB_ID")
        else ""
    )
    raise UserError(
        f"--shard {text.strip()}: no scheduler index in the environment: neither {SLURM_ID} "
        f"(a Slurm array task) nor {K8S_INDEX} (a Kubernetes Indexed Job) is set{job}"
    )


def _int_var(env: Mapping[str, str], name: str) -> int:
    raw = env.get(name)
    if raw is None:
        raise UserError(f"--shard auto: {name} is not set (a Slurm array task has it; is this one?)")
    if not raw.strip().isdigit():
        raise UserError(f"--shard auto: {name}={raw!r} is not a whole number")
    return int(raw)


def _slurm_shard(env: Mapping[str, str], count: int | None) -> tuple[int, int]:
    tid = _int_var(env, SLURM_ID)
    if count is not None:
        if not 1 <= tid <= count:
            raise UserError(
                f"--shard auto/{count}: {SLURM_ID}={tid} is not a shard of {count}: with auto/N the "
                f"array's task ids are the shard numbers (submit --array=1-{count}, or some of them)"
            )
        return tid, count
    lo = _int_var(env, SLURM_MIN)
    if env.get(SLURM_COUNT) is not None:
        n = _int_var(env, SLURM_COUNT)
        names = f"{SLURM_ID}={tid}, {SLURM_MIN}={lo}, {SLURM_COUNT}={n}"
    elif env.get(SLURM_MAX) is not None:
        hi = _int_var(env, SLURM_MAX)
        n = hi - lo + 1
        names = f"{SLURM_ID}={tid}, {SLURM_MIN}={lo}, {SLURM_MAX}={hi}"
    else:
        raise UserError(
            f"--shard auto: {SLURM_ID} is set but neither {SLURM_COUNT} nor {SLURM_MAX} is: "
            "the shard count is unknown (give it: --shard auto/N)"
        )
    index = tid - lo + 1
    if n < 1 or not 1 <= index <= n:
        raise UserError(
            f"--shard auto: {names} do not make a shard of a contiguous array (ID - MIN + 1 must "
            "lie in 1..COUNT; submit --array=A-B without a step or list)"
        )
    return index, n


def _k8s_shard(env: Mapping[str, str], count: int | None) -> tuple[int, int]:
    raw = env[K8S_INDEX]
    if not raw.strip().isdigit():
        raise UserError(f"--shard auto: {K8S_INDEX}={raw!r} is not a whole number")
    if count is None:
        raise UserError(
            f"--shard auto: {K8S_INDEX} gives the index but not the count; write --shard auto/N "
            "with N the Indexed Job's completions"
        )
    index = int(raw) + 1
    if index > count:
        raise UserError(
            f"--shard auto/{count}: {K8S_INDEX}={raw} is past the last of {count} shards (indices 0..{count - 1})"
        )
    return index, count


# ── the scripts ─────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Options:
    """What the scripts need to say: where, how many, and how each task
    reruns exactly this sweep (``sweep_args``: every option that shapes the
    plan, the environment's levers frozen into ``--no-env --set``)."""

    out: Path  # absolute
    shards: int
    sweep_args: tuple[str, ...]
    plan_hash: str
    partition: str | None = None
    gpus_per_task: int = 1
    time: str | None = None
    sbatch_args: tuple[str, ...] = ()
    python: str = sys.executable


def _q(x: Any) -> str:
    return shlex.quote(str(x))


def _directives(o: Options, name: str, log: str, *, gpus: bool) -> list[str]:
    lines = [
        f"#SBATCH --job-name={name}",
        f"#SBATCH --output={o.out / LOGS_DIR / log}",
        "#SBATCH --open-mode=append",
        "#SBATCH --ntasks=1",
    ]
    if gpus and o.gpus_per_task:
        lines.append(f"#SBATCH --gres=gpu:{o.gpus_per_task}")
    if o.partition:
        lines.append(f"#SBATCH --partition={o.partition}")
    if o.time:
        lines.append(f"#SBATCH --time={o.time}")
    # Site-specific lines (--sbatch-arg), verbatim: an account, a QOS, a constraint.
    lines += [f"#SBATCH {a}" for a in o.sbatch_args]
    return lines


def sweep_script(o: Options) -> str:
    """The array: task I runs shard I of N into DIR/shards/I, resuming what
    that directory holds, so a task that is requeued, or resubmitted by
    ``--resume``, continues where its records end."""
    cmd = " ".join(_q(a) for a in (o.python, "-m", "leverctl", "sweep", *o.sweep_args))
    return "\n".join(
        [
            "#!/bin/bash",
            f"# leverctl sweep {o.plan_hash} as a Slurm array: task I runs shard I of {o.shards} into",
            f"# {o.out / SHARDS_DIR}/I. Submit: sbatch {o.out / SWEEP_SCRIPT}; to rerun some shards,",
            f"# sbatch --array=2,5 {o.out / SWEEP_SCRIPT} (each continues where its records end).",
            *_directives(o, f"leverctl-sweep-{o.plan_hash[:8]}", "sweep-%A_%a.out", gpus=True),
            f"#SBATCH --array=1-{o.shards}",
            "set -euo pipefail",
            f"out={_q(o.out)}",
            f'shard="$out/{SHARDS_DIR}/$SLURM_ARRAY_TASK_ID"',
            "resume=()",
            f'if [ -f "$shard/{PLAN_FILE}" ]; then resume=(--resume); fi',
            f"{cmd} \\",
            f'    --shard auto/{o.shards} --out "$shard" "${{resume[@]}}" || rc=$?',
            "# Exit 1 is a finding, not a failed task: a FAIL record, which the merge reports, or a sweep",
            "# stopped short, whose missing records the merge names and --slurm --resume reruns.",
            'if [ "${rc:-0}" -eq 1 ]; then exit 0; fi',
            'exit "${rc:-0}"',
            "",
        ]
    )


def merge_script(o: Options) -> str:
    """``report merge`` of every shard into DIR/merged, replaced as a whole:
    it is written beside it first, and only a complete merge replaces it."""
    cmd = " ".join(_q(a) for a in (o.python, "-m", "leverctl", "report", "merge"))
    return "\n".join(
        [
            "#!/bin/bash",
            f"# Merge the {o.shards} shards of leverctl sweep {o.plan_hash} into {o.out / MERGED_DIR}.",
            f"# Submitted with --dependency=afterok:<the array's job id>; by hand: sbatch {o.out / MERGE_SCRIPT}",
            *_directives(o, f"leverctl-merge-{o.plan_hash[:8]}", "merge-%j.out", gpus=False),
            "set -uo pipefail",
            f"out={_q(o.out)}",
            f'rm -rf "$out/{MERGED_DIR}.new"',
            f'{cmd} "$out"/{SHARDS_DIR}/{{1..{o.shards}}} --out "$out/{MERGED_DIR}.new"',
            "rc=$?  # 0 all pass, 1 some record failed: both wrote the merge",
            f'if [ -f "$out/{MERGED_DIR}.new/{PLAN_FILE}" ]; then',
            f'    rm -rf "$out/{MERGED_DIR}" && mv "$out/{MERGED_DIR}.new" "$out/{MERGED_DIR}"',
            "fi",
            "exit $rc",
            "",
        ]
    )


# ── submitting ──────────────────────────────────────────────────────────────


def slurm_command(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UserError(
            f"--slurm: {name} is not on PATH (is this a Slurm login node?); --dry-run prints the "
            "scripts without submitting"
        )
    return path


def sbatch(args: Sequence[str]) -> str:
    """Run ``sbatch --parsable ARGS``; the job id, or a UserError with
    sbatch's own complaint."""
    cmd = [slurm_command("sbatch"), "--parsable", *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise UserError("--slurm: sbatch did not answer within 120 s") from None
    if p.returncode != 0:
        said = " ".join((p.stderr or p.stdout).split()) or f"exit {p.returncode}"
        raise UserError(f"--slurm: sbatch refused the job: {said}")
    job = p.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise UserError(f"--slurm: sbatch answered {p.stdout.strip()!r}, not a job id")
    return job


def live_tasks(array_job: str) -> dict[int, str]:
    """The array's tasks Slurm still holds (pending or running): index -> state.
    A job that has ended and been purged (MinJobAge later) is an error to
    squeue ("Invalid job id"), with nothing on stdout: none held."""
    squeue = shutil.which("squeue")
    if squeue is None:
        return {}
    p = subprocess.run([squeue, "-h", "-r", "-j", array_job, "-o", "%K %T"], capture_output=True, text=True, timeout=60)
    out: dict[int, str] = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            out[int(parts[0])] = parts[1]
    return out


def job_alive(job: str) -> bool:
    """Whether Slurm still holds ``job`` (pending or running)."""
    squeue = shutil.which("squeue")
    if squeue is None:
        return False
    p = subprocess.run([squeue, "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=60)
    return bool(p.stdout.strip())


def cancel(job: str) -> None:
    scancel = shutil.which("scancel")
    if scancel is not None:
        subprocess.run([scancel, job], capture_output=True, timeout=60)


def follow_lines(jobs: Sequence[str], out: Path) -> list[str]:
    ids = ",".join(jobs)
    return [
        f"follow:  squeue -j {ids}",
        f"after:   sacct -j {ids} --format=JobID,State,Elapsed,ExitCode",
        f"logs:    {out / LOGS_DIR}/",
        f"results: {out / MERGED_DIR} (when the merge has run)",
    ]


# ── the state of a cluster sweep ────────────────────────────────────────────


def read_state(out: Path) -> dict | None:
    p = Path(out) / STATE_FILE
    if not p.exists():
        return None
    try:
        doc = json.loads(p.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise UserError(f"not a leverctl Slurm state file ({STATE_FILE} does not parse)", str(p)) from None
    if not isinstance(doc, dict) or doc.get("schema") != STATE_SCHEMA or not isinstance(doc.get("shards"), int):
        raise UserError(f"not a leverctl Slurm state file (schema is not {STATE_SCHEMA})", str(p))
    return doc


def write_state(out: Path, doc: Mapping[str, Any]) -> None:
    write_json_atomic(Path(out) / STATE_FILE, dict(doc))


def submission(array: str, tasks: Sequence[int], merge: str) -> dict[str, Any]:
    return {
        "array": array,
        "tasks": list(tasks),
        "merge": merge,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


@dataclass(frozen=True)
class ShardState:
    index: int
    records: int  # distinct planned records on disk
    planned: int | None  # the shard's items (None: it never started)
    why: str  # "" when complete

    @property
    def complete(self) -> bool:
        return not self.why


def shard_state(directory: Path, index: int, count: int, plan_hash: str) -> ShardState:
    """Whether shard ``index`` of ``count`` in ``directory`` holds all its
    records. A directory the task never made, or whose plan.json is missing
    (the task died before planning), has not started."""
    d = Path(directory)
    if not (d / PLAN_FILE).exists():
        return ShardState(index, 0, None, "not started")
    plan = read_plan(d)
    assert plan is not None
    shard = plan.get("shard") or {}
    if plan["hash"] != plan_hash or shard.get("index") != index or shard.get("count") != count:
        raise UserError(
            f"holds shard {shard.get('index')}/{shard.get('count')} of plan {plan['hash']}, not "
            f"{index}/{count} of {plan_hash}",
            str(d),
        )
    results = d / RESULTS_FILE
    n = len(read_jsonl(results, (plan.get("device") or {}).get("kind")).records) if results.exists() else 0
    want = int(shard["items"])
    return ShardState(index, n, want, "" if n >= want else f"{n} of {want} records")
