"""``leverctl sweep --slurm``: the sweep as a Slurm array job and a dependent
merge (the scripts and the scheduler's side are :mod:`leverctl.bench.slurm`).

Submitting plans the sweep here, once, and writes ``plan.json`` and the two
scripts into ``--out``; each task re-plans the same sweep from the options
the script gives it. The environment's levers are frozen into the script
(``--no-env`` and a ``--set`` per lever variable set here), so a compute node
whose environment differs still sweeps the plan that was submitted.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..levers.files import write_atomically
from . import common

MAX_DEFAULT_SHARDS = 8


def _say(text: str) -> None:
    common.err.print(f"leverctl sweep: {text}", markup=False, highlight=False)


def slurm_sweep(
    setup,
    *,
    kernel,
    only,
    shapes,
    axis,
    device,
    dry_run,
    shard,
    resume,
    out,
    suggest,
    seed,
    force,
    time_cap,
    shards,
    partition,
    gpus_per_task,
    time_limit,
    sbatch_args,
) -> None:
    from ..bench import slurm as sl

    if out is None:
        raise UserError(
            "--slurm needs --out DIR: the shared folder that the plan, the scripts, every shard's "
            "results and the merge go into"
        )
    if shard is not None:
        raise UserError("--slurm makes the shards itself (--shards N); --shard is for one shard's run")
    if suggest is not None:
        raise UserError(
            "--suggest needs the whole sweep's timings: run report show on DIR/merged after the "
            "array, or sweep --resume the merged directory with --suggest"
        )
    if shards is not None and shards < 1:
        raise UserError(f"--shards {shards}: give at least 1")
    if gpus_per_task is not None and gpus_per_task < 0:
        raise UserError(f"--gpus-per-task {gpus_per_task}: give 0 or more")
    for a in sbatch_args:
        if not a.startswith("-") or "\n" in a:
            raise UserError(f"--sbatch-arg {a!r}: give one sbatch option, as --account=NAME")
    out = Path(out).absolute()
    if out.exists() and not out.is_dir():
        raise UserError("--out exists and is not a directory", str(out))
    if resume:
        given = [
            k
            for k, v in (
                ("--shards", shards),
                ("--partition", partition),
                ("--gpus-per-task", gpus_per_task),
                ("--time", time_limit),
                ("--sbatch-arg", sbatch_args or None),
            )
            if v is not None
        ]
        if given:
            raise UserError(
                f"--slurm --resume resubmits {out / sl.SWEEP_SCRIPT} as it is; {given[0]} would "
                "change nothing (edit the script instead)"
            )
        _resume(out)
        return
    _submit(
        setup,
        out,
        kernel=kernel,
        only=only,
        shapes=shapes,
        axis=axis,
        device=device,
        dry_run=dry_run,
        seed=seed,
        force=force,
        time_cap=time_cap,
        shards=shards,
        partition=partition,
        gpus_per_task=1 if gpus_per_task is None else gpus_per_task,
        time_limit=time_limit,
        sbatch_args=sbatch_args,
    )


def _task_args(setup, catalog, *, kernel, only, preset, axis=(), device, seed, force, time_cap) -> list[str]:
    """The options that make a task plan exactly this sweep."""
    args: list[str] = []
    if setup.catalog is not None:
        args += ["--catalog", str(Path(setup.catalog).absolute())]
    elif setup.engine:
        args += ["--engine", setup.engine]
    if setup.recipe is not None:
        args += ["--recipe", str(common.find_recipe(setup.recipe).absolute())]
    sets = [s if isinstance(s, str) else f"{s[0]}={s[1]}" for s in setup.sets]
    named = {s.split("=", 1)[0] for s in sets} | set(setup.unsets)
    env = setup.environment()
    known = catalog.variables()
    frozen = []
    for var in sorted(v for v in env if v in known and v not in named):
        value = env[var]
        if isinstance(value, bytes):
            raise UserError(
                f"--slurm: {var}'s value is not UTF-8, which a script cannot pass on as it is; "
                f"set it with --set or unset it with --unset"
            )
        frozen += ["--set", f"{var}={value}"]
    args += ["--no-env", *frozen]
    for s in sets:
        args += ["--set", s]
    for u in setup.unsets:
        args += ["--unset", u]
    if setup.max_batch_size is not None:
        args += ["--max-batch-size", str(setup.max_batch_size)]
    for k in kernel or []:
        args += ["--kernel", k]
    if only:
        args += ["--levers", ",".join(only)]
    args += ["--shapes", preset, "--device", device, "--seed", str(seed), "--time-cap", f"{time_cap:g}"]
    for a in axis or ():
        args += ["--axis", a]
    if force:
        args.append("--force")
    return args


def _submit(
    setup,
    out: Path,
    *,
    kernel,
    only,
    shapes,
    axis,
    device,
    dry_run,
    seed,
    force,
    time_cap,
    shards,
    partition,
    gpus_per_task,
    time_limit,
    sbatch_args,
) -> None:
    from ..bench import device as devmod
    from ..bench import slurm as sl
    from ..bench import sweep as sw
    from ..bench.records.plans import write_plan
    from ..bench.records.schema import PLAN_FILE

    if (out / PLAN_FILE).exists() or (out / sl.STATE_FILE).exists():
        raise UserError(
            "already holds a sweep; pass --resume to resubmit its unfinished shards, or choose another --out", str(out)
        )
    if device not in devmod.CHOICES:
        raise UserError(f"--device {device!r}: choose one of {', '.join(devmod.CHOICES)}")
    if not dry_run:
        sl.slurm_command("sbatch")  # before anything is written
    resolution = setup.resolve()
    catalog, recipe = setup.load()
    common.check_selection(kernel, axis, resolution)
    # The tasks run on the cluster's GPUs: model shapes unless the simulator
    # is asked for (the submitting host's own device says nothing of theirs).
    preset = shapes or ("smoke" if device == "sim" else "model")
    if preset == "model" and device == "sim" and not force:
        common.shape_preset(preset, False, model_in_sim=False)  # raises the one-line explanation
    devmod.choose("sim")  # the declarations load without touching a GPU
    known = common.registered_paths()
    paths = common.select_paths(known, kernel, resolution)
    model = (recipe.model if recipe else None) or None
    axes = common.axes_for(axis, paths, preset, model, resolution)
    plan = sw.build_sweep(resolution, paths, preset=preset, model=model, only_levers=only, known_paths=known, axes=axes)
    if not plan.items:
        raise UserError(
            f"nothing to sweep: no kernel path applies to {resolution.engine}"
            + (" with these --kernel/--levers" if kernel or only else "")
        )
    groups = sw.distinct_runs(plan.items)
    n = shards if shards is not None else min(MAX_DEFAULT_SHARDS, groups)
    if n > groups:
        raise UserError(
            f"--shards {n}: this plan deals out {groups} run groups (the configurations that share a "
            f"run stay in one shard), so at most {groups} shards"
        )
    opts = sl.Options(
        out=out,
        shards=n,
        plan_hash=plan.hash,
        partition=partition,
        gpus_per_task=gpus_per_task,
        time=time_limit,
        sbatch_args=tuple(sbatch_args),
        sweep_args=tuple(
            _task_args(
                setup,
                catalog,
                kernel=kernel,
                only=only,
                preset=preset,
                axis=axis,
                device=device,
                seed=seed,
                force=force,
                time_cap=time_cap,
            )
        ),
    )
    scripts = {sl.SWEEP_SCRIPT: sl.sweep_script(opts), sl.MERGE_SCRIPT: sl.merge_script(opts)}
    if dry_run:
        text = "".join(f"# ── {out / name} ──\n{body}\n" for name, body in scripts.items())
        text += (
            f"# submit: sbatch {out / sl.SWEEP_SCRIPT}, then sbatch --dependency=afterok:<its job id> "
            f"{out / sl.MERGE_SCRIPT}\n"
        )
        common.write(text)
        _say(f"plan {plan.hash}: {plan.total} runs in {n} shards; dry run, nothing written or submitted")
        return
    try:
        (out / sl.LOGS_DIR).mkdir(parents=True, exist_ok=True)
        (out / sl.SHARDS_DIR).mkdir(exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the directory: {e.strerror or e}", str(out)) from None
    devkind = device if device in ("gpu", "sim") else None
    write_plan(out / PLAN_FILE, plan.plan_json({"kind": devkind, "name": None}, None))
    for name, body in scripts.items():
        write_atomically(out / name, body)
    state = {"schema": sl.STATE_SCHEMA, "plan": plan.hash, "shards": n, "submissions": []}
    sl.write_state(out, state)
    _arm(out, state, list(range(1, n + 1)), whole=True)


def _arm(out: Path, state: dict, tasks: list[int], *, whole: bool) -> None:
    """Submit the array for ``tasks`` (all of them: the script's own --array)
    and the merge after it; record both."""
    from ..bench import slurm as sl

    args = [] if whole else [f"--array={','.join(map(str, tasks))}"]
    array = sl.sbatch([*args, str(out / sl.SWEEP_SCRIPT)])
    state["submissions"].append(sl.submission(array, tasks, ""))
    sl.write_state(out, state)
    merge = sl.sbatch([f"--dependency=afterok:{array}", str(out / sl.MERGE_SCRIPT)])
    state["submissions"][-1]["merge"] = merge
    sl.write_state(out, state)
    which = (
        f"all {len(tasks)} shards"
        if whole
        else "shard" + ("s " if len(tasks) > 1 else " ") + ", ".join(map(str, tasks))
    )
    common.write(
        f"submitted {which} of plan {state['plan']} as Slurm array job {array}, and merge job {merge} "
        f"after it succeeds (into {out / sl.MERGED_DIR})\n"
        + "".join(f"  {line}\n" for line in sl.follow_lines([array, merge], out))
    )


def _resume(out: Path) -> None:
    from ..bench import slurm as sl
    from ..bench.records.plans import read_plan
    from ..bench.records.schema import PLAN_FILE

    state = sl.read_state(out)
    plan = read_plan(out) if out.is_dir() else None
    if state is None or plan is None or not (out / sl.SWEEP_SCRIPT).is_file():
        raise UserError(
            f"--slurm --resume: nothing to resume here (no {sl.STATE_FILE}, {PLAN_FILE} and "
            f"{sl.SWEEP_SCRIPT} of a --slurm sweep); submit it with --slurm first",
            str(out),
        )
    n = state["shards"]
    sl.slurm_command("sbatch")
    for sub in state.get("submissions", []):
        live = sl.live_tasks(sub["array"])
        if live:
            idx = ", ".join(f"{i} ({s.lower()})" for i, s in sorted(live.items()))
            raise UserError(
                f"--slurm --resume: shards {idx} of array job {sub['array']} are still with Slurm; "
                f"wait for them, or scancel {sub['array']}, then resume",
                str(out),
            )
    states = [sl.shard_state(out / sl.SHARDS_DIR / str(i), i, n, plan["hash"]) for i in range(1, n + 1)]
    todo = [s for s in states if not s.complete]
    for sub in state.get("submissions", []):
        if sub.get("merge") and sl.job_alive(sub["merge"]):
            sl.cancel(sub["merge"])  # waiting on an array that will never succeed
    if not todo:
        merged = out / sl.MERGED_DIR
        if (merged / PLAN_FILE).exists():
            _say(f"nothing to resume: all {n} shards are complete and merged into {merged}")
            return
        job = sl.sbatch([str(out / sl.MERGE_SCRIPT)])
        state["submissions"].append(sl.submission("", [], job))
        sl.write_state(out, state)
        common.write(
            f"all {n} shards are complete; submitted merge job {job} (into {merged})\n"
            + "".join(f"  {line}\n" for line in sl.follow_lines([job], out))
        )
        return
    _say("resubmitting " + "; ".join(f"shard {s.index} ({s.why})" for s in todo))
    _arm(out, state, [s.index for s in todo], whole=False)
