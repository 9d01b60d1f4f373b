"""``leverctl sweep``: every lever combination of every kernel path.

Plans per path (:mod:`leverctl.bench.sweep`), runs each configuration
through the bench's ``run_item``, appends each record to ``--out`` as it
finishes, and reports rankings (GPU) or pass/fail (simulator).

Exit codes: 0 every configuration passed, 1 any FAIL, 2 bad input (a bad
``--shard``, a plan mismatch on ``--resume``, a foreign results file...),
130 interrupted (everything finished is on disk; ``--resume`` runs the rest).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UserError
from ..levers.files import check_output_path, write_atomically
from . import common


def _kernels_table(sweep, shard_count: int | None, width: int | None, color: bool) -> str:
    import io

    from rich.console import Console
    from rich.table import Table

    from ..bench.plan import lever_json
    from ..bench.rank import value_text
    from ..tables import fit

    buf = io.StringIO()
    c = Console(
        file=buf, width=width or 200, force_terminal=color, no_color=not color, soft_wrap=False, highlight=False
    )
    c.print(
        f"sweep plan {sweep.hash}: {sweep.engine}, {sweep.preset} shapes, recipe {sweep.recipe or '(engine defaults)'}",
        markup=False,
    )
    t = Table()
    for col, just in (
        ("kernel", "left"),
        ("levers swept (values)", "left"),
        ("configurations", "right"),
        ("shapes", "right"),
        ("runs", "right"),
        ("recipe's configuration", "left"),
    ):
        t.add_column(col, justify=just, no_wrap=col != "levers swept (values)")
    for k in sweep.kernels:
        levers = "; ".join(f"{f} ({', '.join(value_text(lever_json(v)) for v in k.values[f])})" for f in k.levers)
        t.add_row(
            k.name,
            levers or (f"BROKEN: {k.broken}" if k.broken else "–"),
            str(k.configurations),
            str(len(k.shapes)),
            str(k.runs),
            k.recipe_config or "–",
        )
    c.print(fit(t, c.width))
    line = f"total: {sweep.total} runs; {_naive(sweep)}"
    if shard_count is not None:
        line += f"; this shard: {shard_count}"
    c.print(line, markup=False)
    for why, fields in sweep.not_benchmarked_by_reason().items():
        c.print(f"not benchmarked, {why} ({len(fields)}): {', '.join(fields)}", markup=False)
    return "\n".join(x.rstrip() for x in buf.getvalue().splitlines()) + "\n"


def _naive(sweep) -> str:
    """What one product over every lever would have planned at the same
    kernel shapes: it scales with the shapes (-k picks fewer), not with the
    levers, which are always all of them."""
    shapes = sum(max(1, len(k.shapes)) for k in sweep.kernels)
    return (
        f"every combination of all {len(sweep.catalog.levers)} levers at each of these {shapes} kernel shapes "
        f"would be {sweep.naive_total:,} runs"
    )


def _kernels_markdown(sweep, shard_count: int | None) -> str:
    from ..bench.plan import lever_json
    from ..bench.rank import value_text

    out = [
        f"### leverctl sweep plan `{sweep.hash}`: {sweep.engine}, {sweep.preset} shapes",
        "",
        "| kernel | levers swept (values) | configurations | shapes | runs |",
        "|---|---|---|---|---|",
    ]
    for k in sweep.kernels:
        levers = "; ".join(f"`{f}` ({', '.join(value_text(lever_json(v)) for v in k.values[f])})" for f in k.levers)
        out.append(f"| {k.name} | {levers or '–'} | {k.configurations} | {len(k.shapes)} | {k.runs} |")
    out += [
        "",
        f"Total: **{sweep.total}** runs ({_naive(sweep)})."
        + (f" This shard: {shard_count}." if shard_count is not None else ""),
        "",
    ]
    for why, fields in sweep.not_benchmarked_by_reason().items():
        out.append(f"- Not benchmarked, {why} ({len(fields)}): " + ", ".join(f"`{f}`" for f in fields))
    return "\n".join(out) + "\n"


class _Bar:
    """Progress on stderr: a Rich bar (count done, failures, time left) on a
    terminal; otherwise a plain line about every tenth of the way."""

    def __init__(self, total: int, done: int):
        self.total, self.start_done = total, done
        self.bar = None
        self.last_line = -1
        self.t0 = time.monotonic()
        if common.err.is_terminal and total:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description}", style="bold"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[failures]} failed"),
                TimeElapsedColumn(),
                TextColumn("elapsed,"),
                TimeRemainingColumn(),
                TextColumn("left"),
                console=common.err,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("sweep", total=total, completed=done, failures=0)

    def __call__(self, done: int, failures: int, desc: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, failures=failures, description=desc[:60])
            return
        step = max(1, self.total // 10)
        if done == self.total or done // step != self.last_line:
            self.last_line = done // step
            ran = done - self.start_done
            elapsed = time.monotonic() - self.t0
            left = f", about {elapsed / ran * (self.total - done):.0f} s left" if ran and done < self.total else ""
            common.err.print(
                f"leverctl sweep: {done}/{self.total} done, {failures} failed{left}", markup=False, highlight=False
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _suggest_checks(path: Path, shard, dev_is_gpu: bool, dry_run: bool) -> None:
    if path.suffix != ".toml":
        raise UserError("--suggest writes a TOML recipe: give it a .toml file name", str(path))
    if path.exists():
        raise UserError("--suggest: the file exists; choose a new file name (nothing is overwritten)", str(path))
    if not path.resolve().parent.is_dir():
        raise UserError("--suggest: its folder does not exist", str(path.parent))
    if shard is not None:
        raise UserError(
            "--suggest needs the whole sweep: run it without --shard (or merge the shards "
            "and sweep --resume the merged directory)"
        )
    if not dev_is_gpu and not dry_run:
        raise UserError("--suggest needs timings, and the simulator has none: run the sweep on a GPU")


def write_suggestion(path: Path, sweep, records, plan_doc, recipe_path: str | None, device_name: str) -> str:
    """Write the winning levers as a recipe extending the swept one, verify
    that it resolves to them, and return a one-line summary."""
    import tomli_w

    from ..bench.rank import canon, suggested_recipe, winners
    from ..levers import load_recipe, resolve
    from ..levers.resolve import value_json

    w = winners(records, plan_doc)
    desc = (
        f"Winning levers of a {sweep.preset}-shape sweep (plan {sweep.hash}) of "
        f"{recipe_path or sweep.engine + ' defaults'} on {device_name}"
    )
    doc = suggested_recipe(sweep.catalog, recipe_path, path, w.values, desc)
    text = "# Written by `leverctl sweep --suggest`: the fastest correct lever values found.\n" + tomli_w.dumps(doc)

    def reproduces_the_winners(tmp: Path) -> None:
        got = resolve(sweep.catalog, recipe=load_recipe(tmp), env={}).values()
        wrong = [f for f, v in w.values.items() if canon(value_json(got[f])) != canon(v)]
        if wrong:  # a bug in the rules table, never the user's input
            raise RuntimeError(f"the suggested recipe does not reproduce {', '.join(wrong)}")

    write_atomically(path, text, check=reproduces_the_winners)
    changed = ", ".join(f"{f}" for f in w.changed) or "none (the recipe's values won)"
    notes = f" ({'; '.join(w.notes)})" if w.notes else ""
    return f"wrote {path}: levers changed from the recipe: {changed}{notes}"


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    @common.with_setup
    def sweep(
        setup: common.Setup,
        kernel: common.KernelOpt = None,
        levers: Annotated[
            Optional[str],
            typer.Option(
                "--levers", metavar="FIELD,...", help="Sweep only these lever fields; the rest stay at the recipe's."
            ),
        ] = None,
        shapes: common.ShapesOpt = None,
        axis: common.AxisOpt = None,
        device: common.DeviceOpt = "auto",
        dry_run: Annotated[
            bool,
            typer.Option(
                "--dry-run", help="Print the plan (levers and configurations per kernel, totals) and run nothing."
            ),
        ] = False,
        shard: Annotated[
            Optional[str],
            typer.Option(
                "--shard",
                metavar="I/N",
                help="Run the I-th of N deterministic slices of the plan (1 <= I <= N); "
                "auto (or auto/N) takes them from a Slurm array task or a Kubernetes "
                "Indexed Job.",
            ),
        ] = None,
        resume: Annotated[
            bool,
            typer.Option(
                "--resume", help="Continue the sweep in --out: run only the configurations it has no record of."
            ),
        ] = False,
        out: Annotated[
            Optional[Path],
            typer.Option(
                "--out",
                "-o",
                metavar="DIR",
                help="The sweep directory (plan.json, results.jsonl). Default: results/sweep-ENGINE-SHAPES-PLAN.",
                parser=lambda s: check_output_path(s, "--out", directory=True),
            ),
        ] = None,
        fmt: common.FormatOpt = "table",
        suggest: Annotated[
            Optional[Path],
            typer.Option(
                "--suggest",
                metavar="FILE",
                help="GPU: write a recipe extending the swept one with the winning levers.",
                parser=lambda s: check_output_path(s, "--suggest"),
            ),
        ] = None,
        seed: common.SeedOpt = 0,
        force: common.ForceOpt = False,
        time_cap: common.TimeCapOpt = 2.0,
        slurm: Annotated[
            bool,
            typer.Option(
                "--slurm",
                help="Submit the sweep as a Slurm array (a shard per task) and a dependent merge into "
                "--out/merged; with --resume, resubmit only the unfinished shards.",
            ),
        ] = False,
        shards: Annotated[
            Optional[int], typer.Option("--shards", metavar="N", help="--slurm: the array's tasks (default: up to 8).")
        ] = None,
        partition: Annotated[
            Optional[str], typer.Option("--partition", metavar="P", help="--slurm: the partition to submit to.")
        ] = None,
        gpus_per_task: Annotated[
            Optional[int],
            typer.Option(
                "--gpus-per-task", metavar="G", help="--slurm: GPUs per task, as --gres=gpu:G (default 1; 0: none)."
            ),
        ] = None,
        time_limit: Annotated[
            Optional[str],
            typer.Option("--time", metavar="T", help="--slurm: each task's time limit, in sbatch's --time form."),
        ] = None,
        sbatch_arg: Annotated[
            Optional[list[str]],
            typer.Option(
                "--sbatch-arg",
                metavar="ARG",
                help="--slurm: one more #SBATCH line for both scripts, verbatim (--account=x). Repeatable.",
            ),
        ] = None,
    ) -> None:
        """Run every combination of the levers that steer each kernel path
        (every other lever at the recipe's value), appending each record to
        --out as it finishes; resumable and shardable."""
        from ..bench import slurm as sl
        from ..bench import sweep as sw

        common.check_run_options(fmt, shapes, time_cap)
        cluster = {
            "--shards": shards,
            "--partition": partition,
            "--gpus-per-task": gpus_per_task,
            "--time": time_limit,
            "--sbatch-arg": sbatch_arg or None,
        }
        if not slurm:
            given = [k for k, v in cluster.items() if v is not None]
            if given:
                raise UserError(f"{given[0]} is an option of --slurm (it shapes the array job); add --slurm")
            shard_spec = (
                (sl.shard_from_env(shard) if sl.is_auto(shard) else sw.parse_shard(shard))
                if shard is not None
                else None
            )
        only = None
        if levers is not None:
            only = [f.strip() for f in levers.split(",") if f.strip()]
            if not only:
                raise UserError("--levers: name at least one lever field (FIELD,FIELD,...)")
        if resume and dry_run:
            raise UserError("--resume and --dry-run: choose one")
        if slurm:
            from .sweep_slurm import slurm_sweep

            slurm_sweep(
                setup,
                kernel=kernel,
                only=only,
                shapes=shapes,
                axis=axis or [],
                device=device,
                dry_run=dry_run,
                shard=shard,
                resume=resume,
                out=out,
                suggest=suggest,
                seed=seed,
                force=force,
                time_cap=time_cap,
                shards=shards,
                partition=partition,
                gpus_per_task=gpus_per_task,
                time_limit=time_limit,
                sbatch_args=sbatch_arg or [],
            )
            return
        lock = None if dry_run else sw.DirectoryLock(out)
        try:
            if lock is not None and out is not None:
                # Before any planning: a directory another sweep is writing, one
                # that holds a sweep (without --resume), or one with nothing to
                # resume or a plan or records that cannot be read, is refused at once.
                lock.probe()
                sw.check_out_dir(out, resume=resume)
            _sweep(
                setup,
                kernel,
                only,
                shapes,
                axis,
                device,
                dry_run,
                shard_spec,
                resume,
                out,
                fmt,
                suggest,
                seed,
                force,
                time_cap,
                lock,
            )
        finally:
            if lock is not None:
                lock.release()


def _sweep(
    setup,
    kernel,
    only,
    shapes,
    axis,
    device,
    dry_run,
    shard_spec,
    resume,
    out,
    fmt,
    suggest,
    seed,
    force,
    time_cap,
    lock,
) -> None:
    """The sweep itself, once the options are read (and ``lock``, the
    directory's, is taken where --out was given)."""
    from ..bench import sweep as sw

    res = setup.resolve()
    _cat, the_recipe = setup.load()
    common.check_selection(kernel, axis, res)

    from ..bench import device as devmod

    if dry_run:
        # Plan only: the kernel declarations load in simulator mode, so a
        # dry run never initialises a GPU; the driver probe alone decides
        # what a real run here would default to.
        if device not in devmod.CHOICES:
            raise UserError(f"--device {device!r}: choose one of {', '.join(devmod.CHOICES)}")
        probe = devmod.probe_gpu() if device != "sim" else None
        if device == "gpu" and not probe.ok:
            raise UserError(f"--device gpu: {probe.reason}")
        on_gpu = bool(probe and probe.ok)
        dev = devmod.choose("sim")
    else:
        dev = devmod.choose(device)
        on_gpu = dev.is_gpu
    if suggest is not None:
        _suggest_checks(suggest, shard_spec, on_gpu, dry_run)
    preset = common.shape_preset(shapes, on_gpu, model_in_sim=force or dry_run)

    known = common.registered_paths()
    paths = common.select_paths(known, kernel, res)
    model = (the_recipe.model if the_recipe else None) or None
    axes = common.axes_for(axis, paths, preset, model, res)
    plan = sw.build_sweep(res, paths, preset=preset, model=model, only_levers=only, known_paths=known, axes=axes)
    mine = sw.shard_items(plan.items, shard_spec)

    if dry_run:
        width, color = common.tty_table(fmt)
        if fmt == "json":
            import json

            doc = plan.summary_json()
            if shard_spec:
                doc["shard"] = {"index": shard_spec[0], "count": shard_spec[1], "runs": len(mine)}
            common.write(json.dumps(doc, indent=2) + "\n")
        elif fmt == "markdown":
            common.write(_kernels_markdown(plan, len(mine) if shard_spec else None))
        else:
            common.write(_kernels_table(plan, len(mine) if shard_spec else None, width, color))
        return

    if not plan.items:
        raise UserError(
            f"nothing to sweep: no kernel path applies to {res.engine}"
            + (" with these --kernel/--levers" if kernel or only else "")
        )
    out_dir = out if out is not None else sw.default_out(plan, shard_spec)
    plan_doc = plan.plan_json({"kind": dev.kind, "name": dev.name}, shard_spec)
    lock.directory = Path(out_dir)
    lock.acquire(make_dir=not resume)
    opened = sw.open_results(out_dir, plan_doc, resume=resume)
    if opened.cut_bytes:
        common.err.print(
            f"leverctl sweep: cut a partial last line ({opened.cut_bytes} bytes) left by the "
            "interrupted run; that configuration runs again",
            markup=False,
            highlight=False,
        )
    if opened.duplicates:
        from ..bench.records.read import repeated_note
        from ..bench.records.schema import RESULTS_FILE

        common.warn(repeated_note(str(Path(out_dir) / RESULTS_FILE), [f"line {n}" for n in opened.duplicates]))
    have = {(r["kernel"], r["shape"]["label"], r["config"]) for r in opened.done}
    todo = sum(1 for it in mine if it.key not in have)
    where = (
        ""
        if dev.is_gpu
        else (
            f" in the CUDA simulator ({dev.why_sim}; correctness only)"
            if dev.why_sim
            else " in the CUDA simulator (correctness only)"
        )
    )
    shard_txt = f", shard {shard_spec[0]}/{shard_spec[1]}" if shard_spec else ""
    common.err.print(
        f"leverctl sweep: {res.engine}, {plan.total} runs at {preset} shapes{shard_txt}{where}: "
        f"{len(mine) - todo} on disk, {todo} to run -> {out_dir}",
        markup=False,
        highlight=False,
    )

    from ..bench.run import run_item
    from ..bench.timing import StopRule

    stop = StopRule(max_seconds=time_cap)

    def runner(item):
        # A kernel fault that loses the CUDA context fails every later
        # item without running it; stop instead of writing those records,
        # so that --resume (a fresh process, a fresh context) runs them.
        if dev.lost:
            raise sw.StopSweep(dev.lost)
        return run_item(item, dev, seed, stop=stop)

    bar = _Bar(len(mine), len(mine) - todo)
    try:
        outcome = sw.run(mine, opened, runner, share_runs=not dev.is_gpu, progress=bar)
    finally:
        bar.close()
    if outcome.interrupted:
        common.err.print(
            f"leverctl sweep: interrupted with {len(outcome.records)} of {len(mine)} records on "
            f"disk in {out_dir}; the same command with --resume runs the rest",
            markup=False,
            highlight=False,
        )
        raise common.Interrupted
    if outcome.stopped:
        # A finding, not bad input: the failing record is on disk.
        common.err.print(
            f"leverctl sweep: stopped with {len(outcome.records)} of {len(mine)} records on disk "
            f"in {out_dir}: {outcome.stopped}; the same command with --resume runs the rest in "
            "a fresh process",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(1)

    from ..bench.records.read import load_results
    from .report import render_results

    rs = load_results(out_dir)
    width, color = common.tty_table(fmt)
    common.write(render_results(rs, fmt, width=width, color=color))
    shared = (
        f" ({outcome.runs} simulated runs: configurations choosing the same variant share one)"
        if not dev.is_gpu and outcome.runs < outcome.ran
        else ""
    )
    common.err.print(
        f"leverctl sweep: {outcome.passed} pass, {outcome.failed} fail of {len(mine)}; "
        f"{outcome.before} were on disk, {outcome.ran} ran now{shared}, "
        f"in {outcome.elapsed_s:.0f} s -> {out_dir}",
        markup=False,
        highlight=False,
    )
    if suggest is not None:
        line = write_suggestion(
            suggest,
            plan,
            rs.records,
            plan_doc,
            str(common.find_recipe(setup.recipe)) if setup.recipe else None,
            dev.name,
        )
        common.err.print(f"leverctl sweep: {line}", markup=False, highlight=False)
    if outcome.failed:
        raise typer.Exit(1)
