"""``leverctl bench``: run, check and (on a GPU) time the kernel path each
lever chooses.

Exit codes: 0 every record passed, 1 any FAIL, 2 bad input (including
``--device gpu`` with no usable GPU, and ``--shapes model`` in the simulator
without ``--force``: model shapes take hours there).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UserError
from ..levers.files import write_atomically
from . import common

FORMATS = ("table", "json", "markdown")
SHAPES = ("smoke", "model")


def registered_paths():
    """Every declared kernel path (imports numba: call after choosing the device)."""
    from leverctl_kernels.registry import all_paths

    return all_paths()


def select_paths(paths, names: list[str] | None):
    """The paths named by ``--kernel`` (a path such as ``w4a16.gemv`` or a
    whole family such as ``w4a16``), in registry order; all when none named."""
    if not names:
        return list(paths)
    known = [p.name for p in paths]
    families = sorted({p.family for p in paths})
    chosen = set()
    for name in names:
        hits = [p.name for p in paths if name in (p.name, p.family)]
        if not hits:
            from ..levers.suggest import did_you_mean

            near = did_you_mean(name, known + families)
            listing = ", ".join(known) if known else "none are registered yet"
            raise UserError(f"--kernel {name}: no such kernel path{near}; known: {listing}")
        chosen.update(hits)
    return [p for p in paths if p.name in chosen]


def _against(spec: str, setup: common.Setup, catalog):
    """The ``--against`` resolution: the catalog's defaults, or a recipe alone
    (no process environment, no --set)."""
    from ..levers import load_recipe, resolve

    if spec == "defaults":
        return "defaults", None, resolve(catalog)
    recipe = load_recipe(common.find_recipe(Path(spec)))
    return str(recipe.path), recipe, resolve(catalog, recipe=recipe)


def register(app: typer.Typer) -> None:
    @app.command("bench")
    def bench(
        engine: common.EngineOpt = None,
        catalog: common.CatalogOpt = None,
        recipe: common.RecipeOpt = None,
        set_: common.SetOpt = None,
        unset: common.UnsetOpt = None,
        env_file: common.EnvFileOpt = None,
        max_batch_size: common.MaxBatchOpt = None,
        no_env: common.NoEnvOpt = False,
        kernel: Annotated[Optional[list[str]], typer.Option(
            "--kernel", "-k", help="Only this kernel path (w4a16.gemv) or family (w4a16). Repeatable.")] = None,
        shapes: Annotated[Optional[str], typer.Option(
            "--shapes", help="smoke (tiny, odd) or model (the recipe's sizes). "
                             "Default: model on a GPU, smoke in the simulator.")] = None,
        device: Annotated[str, typer.Option(
            "--device", help="auto (a GPU if there is one, else the simulator), gpu, or sim.")] = "auto",
        against: Annotated[Optional[str], typer.Option(
            "--against", metavar="defaults|RECIPE",
            help="Also run the engine's defaults (or a recipe alone) and report each kernel's speedup.")] = None,
        fmt: Annotated[str, typer.Option("--format", "-f", help="table, json or markdown.")] = "table",
        out: Annotated[Optional[Path], typer.Option(
            "--out", "-o", help="Write the report to this file (atomically) instead of stdout.")] = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the random inputs.")] = 0,
        force: Annotated[bool, typer.Option(
            "--force", help="Run model shapes in the simulator anyway (hours, not minutes).")] = False,
        time_cap: Annotated[float, typer.Option(
            "--time-cap", metavar="SECONDS",
            help="GPU: stop sampling a configuration after this long if the noise is still above 0.5%.")] = 2.0,
    ) -> None:
        """Check every kernel path the levers choose against its float64
        reference; on a GPU also time it against the measured roofline."""
        if fmt not in FORMATS:
            raise UserError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
        if shapes is not None and shapes not in SHAPES:
            raise UserError(f"--shapes {shapes!r}: choose smoke or model")
        if time_cap <= 0:
            raise UserError(f"--time-cap must be positive, not {time_cap}")
        setup = common.setup(engine, catalog, recipe, set_, unset, env_file, max_batch_size, no_env)
        res = setup.resolve()
        _cat, main_recipe = setup.load()
        other = _against(against, setup, res.catalog) if against else None

        from ..bench import device as devmod

        dev = devmod.choose(device)
        preset = shapes or ("model" if dev.is_gpu else "smoke")
        if not dev.is_gpu and preset == "model" and not force:
            raise UserError("--shapes model in the CUDA simulator would take hours (about a millisecond per "
                            "simulated thread); use --shapes smoke, a GPU, or --force")

        from ..bench.plan import applies, plan_for
        from ..bench.report import counts, render
        from ..bench.run import document, run_plan, speedups
        from ..bench.timing import StopRule

        paths = select_paths(registered_paths(), kernel)
        if kernel:
            for p in paths:
                if not applies(p, res.engine, res.catalog.fields):
                    raise UserError(f"--kernel {p.name}: {res.engine} has no such path "
                                    f"(none of its levers {', '.join(p.levers)} is in the catalog)")
        model = (main_recipe.model if main_recipe else None) or (other[1].model if other and other[1] else None)
        stop = StopRule(max_seconds=time_cap)

        plan = plan_for(res, paths, shapes=preset, model=model or None)
        if not dev.is_gpu:  # said once, after the input was found good
            why = f"no GPU: {dev.why_sim}. " if dev.why_sim else ""
            common.err.print(f"leverctl bench: {why}Correctness checks in the CUDA simulator at {preset} "
                             "shapes, without timings.", markup=False, highlight=False)
        if not plan.items:
            common.err.print(f"leverctl bench: no kernel path applies to {res.engine}.", markup=False)
        cache: dict = {}
        records = run_plan(plan, dev, seed, stop=stop, cache=cache)
        against_doc = None
        if other is not None:
            name, _r, ares = other
            aplan = plan_for(ares, paths, shapes=preset, model=model or None)
            arecords = run_plan(aplan, dev, seed, stop=stop, cache=cache)
            speedups(records, arecords)
            against_doc = {"name": name, "levers": ares.to_json(), "results": arecords}
        doc = document(engine=res.engine, device=dev, levers=res.to_json(), results=records, against=against_doc)

        if out is not None:
            write_atomically(out, render(doc, fmt), make_folder=True)
            common.err.print(f"leverctl bench: wrote {out}", markup=False, highlight=False)
        else:
            color = fmt == "table" and sys.stdout.isatty()
            sys.stdout.write(render(doc, fmt, width=common.out.width if color else None, color=color))
            sys.stdout.flush()
        _passed, failed = counts(doc)
        if failed:
            raise typer.Exit(1)
