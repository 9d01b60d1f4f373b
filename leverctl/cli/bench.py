"""``leverctl bench``: run, check and (on a GPU) time the kernel path each
lever chooses.

Exit codes: 0 every record passed, 1 any FAIL (or a run the CUDA context
was lost in, which stops it), 130 interrupted (Ctrl-C or SIGTERM: the records
finished so far are written to ``--out`` first), 2 bad input (including
``--device gpu`` with no usable GPU, and ``--shapes model`` in the simulator
without ``--force``: model shapes take hours there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..levers.files import check_output_path, write_atomically
from . import common


def _against(spec: str, setup: common.Setup, catalog):
    """The ``--against`` resolution: the catalog's defaults, or a recipe alone
    (no process environment, no --set)."""
    from ..levers import load_recipe, resolve

    if spec == "defaults":
        return "defaults", None, resolve(catalog)
    recipe = load_recipe(common.find_recipe(Path(spec)))
    return str(recipe.path), recipe, resolve(catalog, recipe=recipe)


def _check_weights_options(weights, tensor, layer, against, axis) -> None:
    """``--weights``'s company, checked before anything is read."""
    from ..errors import UserError

    if weights is None:
        if tensor is not None or layer is not None:
            raise UserError(
                f"{'--tensor' if tensor is not None else '--layer'} names what --weights FILE reads: give --weights"
            )
        return
    if tensor is None and layer is None:
        raise UserError("--weights FILE needs --tensor NAME (a tensor of the file) or --layer N (that layer's tensors)")
    if layer is not None and layer < 0:
        raise UserError(f"--layer {layer}: a layer number is 0 or more")
    if against:
        raise UserError("--weights with --against: every variant is already run side by side")
    if axis:
        raise UserError("--axis and --weights: the tensors' own shapes are the shapes; give one")


def _weights_plan(ck, tensor, layer, paths, known, res, preset: str, model):
    """The plan on the opened file's tensors (``bench.weights``), or bad input."""
    from ..bench import checkpoint
    from ..bench import weights as wmod
    from ..bench.plan import applies

    paths = [p for p in paths if applies(p, res.engine, res.catalog.fields)]
    sel = checkpoint.select(ck, tensor, layer, wmod.used_roles(paths))
    wplan = wmod.plan_on(sel, paths, res, preset, model, known)
    for name, names, why in wplan.not_fitting:
        common.err.print(f"leverctl bench: {name} not run on {', '.join(names)}: {why}", markup=False, highlight=False)
    skipped: dict[tuple[str, str], list[str]] = {}
    for name, label, variant in wplan.skipped:
        skipped.setdefault((name, variant), []).append(label)
    for (name, variant), labels in skipped.items():
        at = labels[0] if len(labels) == 1 else f"{len(labels)} shapes ({labels[0]}; ...)"
        common.err.print(
            f"leverctl bench: {name} {variant} not run at {at}: no lever setting selects it there",
            markup=False,
            highlight=False,
        )
    return wmod.stamped(wplan, res, preset)


def _profiles(items, dev, arch: str | None) -> dict:
    """``--profile``: each planned (path, variant, shape)'s profile block,
    compiled for ``arch`` (the GPU's own where there is one, else sm_90a)
    and traced in the simulator, both in child processes."""
    from ..profile import run

    arch = arch or run.arch_for(dev.compute_capability if dev.is_gpu else None)
    common.err.print(
        f"leverctl bench: profiling the planned kernels for {arch} (machine code and simulated memory accesses)",
        markup=False,
        highlight=False,
    )
    return run.record_blocks(items, arch, run.default_cache())


def _ncu_runner(dev):
    """``--ncu``: the hardware-counter runner, or None after one line
    saying why there is none (the bench goes on without counters)."""
    import os

    from ..profile import ncu

    def no(why: str) -> None:
        common.err.print(f"leverctl bench: --ncu: {why}; the bench goes on without them", markup=False)

    if not dev.is_gpu:
        return no("hardware counters need a GPU")
    found = ncu.find_ncu()
    if found is None:
        return no("ncu (Nsight Compute) is not on PATH, so there are no hardware counters")
    logs = os.environ.get("LEVERCTL_NCU_LOGS")
    return ncu.Runner(found, keep=Path(logs) if logs else None)


def _with_profile(keep, blocks: dict | None, runner, seed: int):
    """``keep`` of each record with its profile block (null where it has
    none), and, with ``runner`` (``--ncu``), a passing record's hardware
    counters in the block's ``hardware``."""
    from ..profile import ncu

    said = set()

    def add(rec: dict) -> None:
        key = (rec["kernel"], rec["variant"], rec["shape"]["label"])
        block = blocks.get(key) if blocks is not None else None
        if runner is not None and rec["status"] == "pass" and not runner.unusable:
            import copy

            block = copy.deepcopy(block) if block else {"arch": None, "kernels": [], "memory": None, "flags": []}
            try:
                dims = {k: v for k, v in rec["shape"].items() if k != "label"}
                block["hardware"] = runner.measure(key[0], key[1], {"label": key[2], "dims": dims}, [seed])
            except ncu.NcuUnusable as e:
                block["hardware"] = None
                if str(e) not in said:
                    said.add(str(e))
                    common.err.print(
                        f"leverctl bench: --ncu: {e}; the bench goes on without hardware counters", markup=False
                    )
            except RuntimeError as e:
                block["hardware"] = {"tool": "ncu", "kernels": [], "error": str(e)}
        rec["profile"] = block
        keep(rec)

    return add


def register(app: typer.Typer) -> None:
    @app.command("bench")
    @common.with_setup
    def bench(
        setup: common.Setup,
        kernel: common.KernelOpt = None,
        shapes: common.ShapesOpt = None,
        axis: common.AxisOpt = None,
        device: common.DeviceOpt = "auto",
        against: Annotated[
            Optional[str],
            typer.Option(
                "--against",
                metavar="defaults|RECIPE",
                help="Also run the engine's defaults (or a recipe alone) and report each kernel's speedup.",
            ),
        ] = None,
        fmt: common.RecordFormatOpt = None,
        out: Annotated[
            Optional[Path],
            typer.Option(
                "--out",
                "-o",
                metavar="FILE",
                help="Write the report to this file (atomically) instead of stdout, in the format its suffix "
                "names (.txt .json .md .csv) unless --format says.",
                parser=lambda s: check_output_path(s, "--out", make_folder=True),
            ),
        ] = None,
        seed: common.SeedOpt = 0,
        force: common.ForceOpt = False,
        time_cap: common.TimeCapOpt = 2.0,
        weights: Annotated[
            Optional[Path],
            typer.Option(
                "--weights",
                metavar="FILE",
                help="Run every kernel path that reads model weights, every variant, on tensors of this GGUF or "
                "safetensors file (only those read), named by --tensor or --layer; needs the gguf or safetensors "
                "extra (pip install 'leverctl\\[gguf]', 'leverctl\\[safetensors]'). Roles: "
                "attn_q attn_k attn_v attn_qkv attn_output (self_attn.q_proj...), ffn_gate ffn_up ffn_down "
                "(mlp.gate_proj...), ffn_gate_inp (mlp.gate: the MoE router), "
                "ffn_gate_exps ffn_up_exps ffn_down_exps (mlp.experts.E.gate_proj..., stacked), "
                "ffn_gate_shexp ffn_up_shexp ffn_down_shexp (mlp.shared_expert(s).gate_proj...), ssm_in ssm_out "
                "(mixer.in_proj, linear_attn.in_proj_qkvz...).",
            ),
        ] = None,
        tensor: Annotated[
            Optional[str],
            typer.Option(
                "--tensor",
                metavar="NAME|ROLE",
                help="What --weights reads: a full tensor name (blk.0.ffn_down.weight, "
                "model.layers.0.self_attn.q_proj.weight), or with --layer a role (ffn_down): that role's groups.",
            ),
        ] = None,
        layer: Annotated[
            Optional[int],
            typer.Option(
                "--layer",
                metavar="N",
                help="--weights reads layer N's tensors, each role some kernel path reads, found by name.",
            ),
        ] = None,
        profile: Annotated[
            bool,
            typer.Option(
                "--profile",
                help="Add each record's machine-code and memory profile (as leverctl profile shows it); "
                "needs the profile extra (pip install 'leverctl\\[profile]').",
            ),
        ] = False,
        arch: common.ArchOpt = None,
        ncu: Annotated[
            bool,
            typer.Option(
                "--ncu",
                help="On a GPU, run each passing variant once more under Nsight Compute (ncu on PATH) and add its "
                "hardware counters to the record's profile.",
            ),
        ] = False,
    ) -> None:
        """Check every kernel path the levers choose against its float64
        reference; on a GPU also time it against the measured roofline."""
        fmt = common.output_format(fmt, out, common.RECORD_FORMATS)
        common.check_run_options(fmt, shapes, time_cap, common.RECORD_FORMATS)
        res = setup.resolve()
        _cat, main_recipe = setup.load()
        _check_weights_options(weights, tensor, layer, against, axis)
        common.check_selection(kernel, axis, res)
        opened = None
        if weights is not None:  # opened now: an absent, cut-short or unknown file is told before the kernels load
            from ..bench.checkpoint import open_file

            opened = open_file(weights)
        other = _against(against, setup, res.catalog) if against else None
        if arch is not None and not profile:
            from ..errors import UserError

            raise UserError("--arch is the architecture --profile compiles for: give --profile too")
        if profile:
            common.check_arch(arch)
            from ..profile.run import check_tools

            check_tools()

        from ..bench import device as devmod

        dev = devmod.choose(device)
        preset = common.shape_preset(shapes, dev.is_gpu, model_in_sim=force)

        from ..bench.plan import plan_for
        from ..bench.report import counts, render
        from ..bench.run import Terminated, document, run_plan, speedups, terminate_as_interrupt, why_stopped
        from ..bench.timing import StopRule

        paths = common.select_paths(common.registered_paths(), kernel, res)
        model = (main_recipe.model if main_recipe else None) or (other[1].model if other and other[1] else None)
        stop = StopRule(max_seconds=time_cap)

        axes = common.axes_for(axis, paths, preset, model or None, res)
        if weights is not None:
            known = common.registered_paths()
            plan = _weights_plan(opened, tensor, layer, paths, known, res, preset, model or None)
        else:
            plan = plan_for(res, paths, shapes=preset, model=model or None, axes=axes)
        if not dev.is_gpu:  # said once, after the input was found good
            why = f"no GPU: {dev.why_sim}. " if dev.why_sim else ""
            common.err.print(
                f"leverctl bench: {why}Correctness checks in the CUDA simulator at {preset} shapes, without timings.",
                markup=False,
                highlight=False,
            )
        for name, why in plan.not_in_model:
            common.err.print(f"leverctl bench: {name} not planned: {why}", markup=False, highlight=False)
        if not plan.items and not plan.not_in_model:
            common.err.print(f"leverctl bench: no kernel path applies to {res.engine}.", markup=False)

        # Records are kept as they finish, so Ctrl-C (or SIGTERM) leaves the
        # finished ones in --out; see _finish.
        records: list = []
        arecords: list = []
        keep, akeep = records.append, arecords.append
        blocks = None
        if profile:
            aplan_items = (
                plan_for(other[2], paths, shapes=preset, model=model or None, axes=axes).items if other else []
            )
            blocks = _profiles([*plan.items, *aplan_items], dev, arch)
        runner = _ncu_runner(dev) if ncu else None
        if blocks is not None or runner is not None:
            keep, akeep = _with_profile(keep, blocks, runner, seed), _with_profile(akeep, blocks, runner, seed)
        against_doc = None
        cache: dict = {}
        stopped = None
        try:
            with terminate_as_interrupt():
                run_plan(plan, dev, seed, stop=stop, cache=cache, on_record=keep)
                stopped = why_stopped(len(plan.items), len(records), dev)
                if other is not None and stopped is None:
                    name, _r, ares = other
                    aplan = plan_for(ares, paths, shapes=preset, model=model or None, axes=axes)
                    against_doc = {"name": name, "levers": ares.to_json(), "results": arecords}
                    run_plan(aplan, dev, seed, stop=stop, cache=cache, on_record=akeep)
                    speedups(records, arecords)
                    stopped = why_stopped(len(aplan.items), len(arecords), dev)
        except (KeyboardInterrupt, Terminated) as e:
            what = "interrupted" if isinstance(e, KeyboardInterrupt) else "terminated (SIGTERM)"
            stopped = f"{what} after {len(records) + len(arecords)} records"
            doc = document(
                engine=res.engine,
                device=dev,
                levers=res.to_json(),
                results=records,
                against=against_doc,
                stopped=stopped,
            )
            if out is not None:
                write_atomically(out, render(doc, fmt), make_folder=True)
                common.err.print(
                    f"leverctl: {what}; the {len(records) + len(arecords)} records finished so far are in {out}",
                    markup=False,
                    highlight=False,
                )
            else:
                common.err.print(f"leverctl: {what}", markup=False, highlight=False)
            raise common.Interrupted() from None
        if dev.lost:
            common.err.print(f"leverctl bench: stopped: {stopped}", markup=False, highlight=False)
        doc = document(
            engine=res.engine, device=dev, levers=res.to_json(), results=records, against=against_doc, stopped=stopped
        )

        if out is not None:
            write_atomically(out, render(doc, fmt), make_folder=True)
            common.err.print(f"leverctl bench: wrote {out}", markup=False, highlight=False)
        else:
            width, color = common.tty_table(fmt)
            common.write(render(doc, fmt, width=width, color=color))
        _passed, failed = counts(doc)
        if failed or stopped:
            raise typer.Exit(1)
