"""The GPU run: every recipe's bench in one process, each record appended to
a JSONL file the moment it is finished. ``scripts/gpu-bench.sh`` runs it.

    python -m leverctl.bench.campaign OUTDIR [RECIPE ...] [--budget SECONDS] ...

Into OUTDIR:

* ``device.json``: the device, its measured figures (copy bandwidth, FP32
  rate, BF16 and FP8 tensor-core peaks, cuBLAS's BF16 GEMM rate; measured
  once for every recipe) and the CUDA versions (``{"device": ...,
  "versions": ...}``, the bench document's two objects, and ``note`` when a
  figure was not measured), written once the first, one-thread kernel has
  run and before any other. It is never rewritten from a context a kernel
  has lost. The figures are also said in one line on stderr.
* ``records.jsonl``: every record (docs/records.md) plus ``recipe`` and
  ``run`` (``main``, or ``against`` for the engine-defaults run it is
  compared with), appended, flushed and fsynced as it finishes. A SIGTERM or
  Ctrl-C at any point leaves every finished record there, and at most a
  partial last line, which readers ignore.
* ``bench-NAME.json`` and ``bench-NAME.md``: each recipe's bench document
  (``leverctl bench --format json`` / ``markdown``), written when the recipe
  ends, is stopped by its budget, or is interrupted (``stopped`` says which).

One process runs every recipe: kernels compile once (their factories are
cached by compile-time key), a record measured for one recipe is reused by
the next when kernel, variant, shape and levers are equal, and inputs and
float64 references are made once per (kernel, shape, draw). Each recipe's
budget is the time left divided by the recipes left, measured on the wall
clock, so it covers that host work too. Only paths the recipe's model has
are planned (see ``plan.model_lacks``), and they run breadth first (every
path's first shape before any path's second: :func:`breadth_first`), so a
budget that runs out still leaves a figure for every path.

A CUDA error inside one kernel fails that record and the run goes on; a lost
context (:mod:`.faults`) stops the run: what is finished is written, the
recipes not reached are named, and ``--left FILE`` lists them for a fresh
process to continue with.

Exit codes: 0 every record passed, 1 a FAIL or a recipe stopped before its
plan ended, 2 bad input or no usable GPU (one line), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import UserError
from ..levers.files import write_atomically

RECORDS_FILE = "records.jsonl"
DEVICE_FILE = "device.json"
MIN_SLOT_S = 30.0  # a recipe's share is at least this (of what is left): a first kernel's compile takes seconds
LAST_S = 5.0  # with less than this left, the recipes not started are skipped and named
ROOT = Path(__file__).resolve().parents[2]


def default_recipes(folder: Path = ROOT / "recipes") -> list[Path]:
    """Every recipe of the checkout, those that set levers first and each
    engine's plain defaults last."""
    found = sorted(folder.glob("*.toml"))
    return [p for p in found if not p.name.endswith("-defaults.toml")] + [
        p for p in found if p.name.endswith("-defaults.toml")
    ]


class _ArgError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every leverctl error
        raise _ArgError(message)


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="python -m leverctl.bench.campaign",
        description="Every recipe's bench in one process; records streamed to JSONL.",
    )
    ap.add_argument("out", type=Path, help="the folder to write into (made if absent)")
    ap.add_argument("recipes", nargs="*", type=Path, help="recipe files (default: every recipe in recipes/)")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for every recipe together")
    ap.add_argument("--time-cap", type=float, default=0.5, help="per-configuration sampling cap, seconds")
    ap.add_argument("--device", default="gpu", help="gpu (default), auto or sim")
    ap.add_argument("--shapes", default=None, help="smoke or model (default: model on a GPU, smoke in the simulator)")
    ap.add_argument("--kernel", action="append", default=None, help="only this path or family (repeatable)")
    ap.add_argument("--against", default="defaults", help="defaults (default) or none")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--left",
        type=Path,
        default=None,
        help="write the recipes not finished (one per line) here when the context is lost",
    )
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    from .run import Terminated, terminate_as_interrupt

    try:
        args = _parser().parse_args(argv)
        with terminate_as_interrupt():
            return run(args)
    except (KeyboardInterrupt, Terminated) as e:
        what = "interrupted" if isinstance(e, KeyboardInterrupt) else "terminated (SIGTERM)"
        print(f"leverctl: {what}", file=sys.stderr)
        return 130
    except _ArgError as e:
        print(f"leverctl: campaign: {e}", file=sys.stderr)
        return 2
    except UserError as e:
        print(f"leverctl: {e.line()}", file=sys.stderr)
        return 2


def _check(args) -> None:
    if not args.budget > 0:  # nan compares false either way
        raise UserError(f"--budget must be positive, not {args.budget:g}")
    if not (args.time_cap > 0 and math.isfinite(args.time_cap)):  # a cap is a finite time
        raise UserError(f"--time-cap must be positive, not {args.time_cap:g}")
    if args.against not in ("defaults", "none"):
        raise UserError(f"--against {args.against!r}: choose defaults or none")
    if args.shapes not in (None, "smoke", "model"):
        raise UserError(f"--shapes {args.shapes!r}: choose smoke or model")
    if args.out.exists() and not args.out.is_dir():
        raise UserError("exists and is not a folder", str(args.out))


def _say(text: str) -> None:
    print(f"leverctl campaign: {text}", file=sys.stderr, flush=True)


def run(args) -> int:
    from ..cli import common
    from . import device as devmod
    from .records.write import Appender

    _check(args)
    recipe_paths = list(args.recipes) or default_recipes()
    if not recipe_paths:
        raise UserError("no recipes to run")
    # Every recipe is read before the GPU is touched: a bad one is bad input now.
    setups = []
    for path in recipe_paths:
        st = common.setup(recipe=path, no_env=True)
        st.resolve(quiet=True)  # raises UserError at the recipe
        setups.append((path, st))

    start = time.monotonic()
    dev = devmod.choose(args.device)  # on a GPU, the one-thread kernel has run here
    preset = common.shape_preset(args.shapes, dev.is_gpu, model_in_sim=False)
    args.out.mkdir(parents=True, exist_ok=True)
    gathered = _gather_device(dev)
    write_atomically(args.out / DEVICE_FILE, json.dumps(gathered, indent=2) + "\n")
    toolkit = [f"{k} {v}" for k, v in gathered["versions"].items() if v and k.startswith(("cuda", "nvvm", "ptx"))]
    _say(f"{dev.name}: {', '.join(toolkit)}" if dev.is_gpu else f"{dev.name} at {preset} shapes (correctness only)")
    if dev.is_gpu:
        _say(figures_line(gathered))

    paths = common.select_paths(common.registered_paths(), args.kernel)
    from .run import HostCache

    state = _State(out=args.out, dev=dev, preset=preset, paths=paths, args=args, cache={}, host=HostCache())
    failed = stopped = False
    left: list[Path] = []
    with Appender(args.out / RECORDS_FILE) as appender:
        state.appender = appender
        for i, (path, st) in enumerate(setups):
            if dev.lost:
                left.append(path)
                continue
            remaining = args.budget - (time.monotonic() - start)
            if remaining < LAST_S:
                _say(f"{path.stem}: not run, the budget is spent")
                stopped = True
                continue
            # An equal share of what is left; a recipe that ends early leaves
            # its time to the next ones.
            slot = max(remaining / (len(setups) - i), min(MIN_SLOT_S, remaining))
            f, s = _one_recipe(state, path, st, slot)
            failed |= f
            stopped |= s
    if left:
        _say(f"the CUDA context was lost; not run: {', '.join(p.stem for p in left)}")
        if args.left is not None:
            write_atomically(args.left, "".join(f"{p}\n" for p in left))
    _say(f"done in {time.monotonic() - start:.0f} s; records in {args.out / RECORDS_FILE}")
    return 1 if failed or stopped or left else 0


def _gather_device(dev) -> dict[str, Any]:
    """The device and versions, with every device figure measured now, once
    for the whole run and before any kernel can lose the context. ``note``
    says what was not measured and why (a tensor-core form the device lacks,
    no torch for the cuBLAS reference, a failure)."""
    from .device import versions
    from .faults import context_lost

    notes = []
    if dev.is_gpu:
        try:
            dev.measure_figures()  # cached on the device: the records reuse them
        except Exception as e:  # noqa: BLE001 - said in the file; the records say the rest
            notes.append(f"measuring the ceilings failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
            if context_lost(e):
                dev.lost = f"the CUDA context was lost measuring the ceilings ({type(e).__name__})"
        notes += [f"{name} not measured: {why}" for name, why in dev.ceiling_notes.items()]
    note = "; ".join(notes)
    return {"device": dev.to_json(), "versions": versions(dev), **({"note": note} if note else {})}


def figures_line(gathered: dict[str, Any]) -> str:
    """The device figures in one line, as the campaign says them (and
    scripts/gpu-bench.sh copies them into summary.txt)."""
    from .report import describe_figures

    said = describe_figures(gathered["device"]) or "none measured"
    return f"device figures: {said}" + (f" ({gathered['note']})" if gathered.get("note") else "")


def breadth_first(items: Sequence) -> list:
    """The plan in rounds: every path's first shape (with the variants run
    beside it) before any path's second, and so on. A budget that ends the
    recipe early then leaves a figure for every path rather than every shape
    of the first few (the first H200 run, at 30 s a recipe, reached two
    paths of most recipes in plan order). Within a path the order is kept."""
    by_path: dict[str, list[list]] = {}
    for it in items:
        units = by_path.setdefault(it.path.name, [])
        if units and units[-1][0].shape.label == it.shape.label:
            units[-1].append(it)
        else:
            units.append([it])
    rounds = max((len(u) for u in by_path.values()), default=0)
    return [it for r in range(rounds) for units in by_path.values() if r < len(units) for it in units[r]]


class _State:
    def __init__(self, **kw):
        self.__dict__.update(kw)
        self.appender = None


def _one_recipe(state, path: Path, st, slot: float) -> tuple[bool, bool]:
    """Run one recipe (and its engine-defaults run) within ``slot`` seconds;
    write its document. Returns (some record failed, stopped early)."""
    from ..levers import resolve
    from .plan import plan_for
    from .report import counts, render
    from .run import Terminated, document, run_items, signals_held, speedups, terminate_as_interrupt, why_stopped
    from .timing import StopRule

    args, dev = state.args, state.dev
    name = path.stem
    res = st.resolve(quiet=True)
    _cat, recipe = st.load()
    model = dict(recipe.model) if recipe is not None and recipe.model else None
    plan = plan_for(res, state.paths, shapes=state.preset, model=model)
    for pname, why in plan.not_in_model:
        _say(f"{name}: {pname} not planned: {why}")
    stop = StopRule(max_seconds=args.time_cap)
    deadline = time.monotonic() + slot
    main: list[dict] = []
    other: list[dict] = []
    against = None

    def keep(into: list, run: str):
        def on_record(rec: dict) -> None:
            # Both or neither: a SIGTERM or ^C arriving while the record is
            # being fsynced would otherwise land between the two, leaving a
            # record on disk that the recipe's document lacks. It is raised
            # once both are done.
            with signals_held():
                state.appender.append({**rec, "recipe": name, "run": run})
                into.append(rec)

        return on_record

    stopped = None
    items = breadth_first(plan.items)
    _say(f"{name}: {len(items)} planned, {slot:.0f} s of the budget")
    try:
        with terminate_as_interrupt():
            run_items(
                items,
                dev,
                args.seed,
                stop=stop,
                cache=state.cache,
                host=state.host,
                deadline=deadline,
                on_record=keep(main, "main"),
            )
            stopped = why_stopped(len(items), len(main), dev, slot)
            if args.against == "defaults" and stopped is None:
                ares = resolve(res.catalog)
                aplan = plan_for(ares, state.paths, shapes=state.preset, model=model)
                against = {"name": "defaults", "levers": ares.to_json(), "results": other}
                run_items(
                    aplan.items,
                    dev,
                    args.seed,
                    stop=stop,
                    cache=state.cache,
                    host=state.host,
                    deadline=deadline,
                    on_record=keep(other, "against"),
                )
                speedups(main, other)
                stopped = why_stopped(len(aplan.items), len(other), dev, slot)
    except (KeyboardInterrupt, Terminated) as e:
        what = "interrupted" if isinstance(e, KeyboardInterrupt) else "terminated (SIGTERM)"
        _write_doc(
            state,
            name,
            document(
                engine=res.engine,
                device=dev,
                levers=res.to_json(),
                results=main,
                against=against,
                stopped=f"{what} after {len(main) + len(other)} records",
            ),
            render,
        )
        _say(f"{name}: {what}; {len(main) + len(other)} records kept in {state.out / RECORDS_FILE}")
        raise
    doc = document(engine=res.engine, device=dev, levers=res.to_json(), results=main, against=against, stopped=stopped)
    _write_doc(state, name, doc, render)
    passed, failed = counts(doc)
    _say(f"{name}: {passed} pass, {failed} fail" + (f"; stopped: {stopped}" if stopped else ""))
    return bool(failed), stopped is not None


def _write_doc(state, name: str, doc: dict, render) -> None:
    write_atomically(state.out / f"bench-{name}.json", render(doc, "json"))
    write_atomically(state.out / f"bench-{name}.md", render(doc, "markdown"))


if __name__ == "__main__":
    sys.exit(main())
