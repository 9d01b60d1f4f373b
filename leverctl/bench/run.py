"""Run plan items and build records (docs/records.md).

``run_item`` is the whole life of one item: fresh seeded inputs, build,
check against the reference on poisoned outputs, and on a GPU warm-up,
timing, roofline, an optional library reference, and a recheck on fresh
inputs. Anything an item raises becomes a ``fail`` record with the error in
``note``; the bench never prints a traceback for a kernel.
"""
from __future__ import annotations

import zlib
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Sequence

from .device import Device, versions
from .plan import Plan, PlanItem, lever_json, one_line
from .timing import REFERENCE_LIB, StopRule, roofline, sig

SCHEMA = "leverctl.bench/1"
WARMUP_LAUNCHES = 3


def item_seed(seed: int, item: PlanItem, trial: int = 0) -> list[int]:
    """Entropy for an item's inputs: the same for every variant and lever set
    of a (kernel, shape), so they are checked on identical data; ``trial``
    1 is the recheck's fresh draw."""
    return [seed, zlib.crc32(item.kernel.encode()), zlib.crc32(item.shape.label.encode()), trial]


def empty_record(item: PlanItem, device: Device) -> dict[str, Any]:
    return {
        "kernel": item.kernel,
        "variant": item.variant,
        "levers": {f: lever_json(v) for f, v in item.levers.items()},
        "config": item.config,
        "shape": item.shape.as_dict(),
        "status": "fail",
        "note": item.note,
        "error": None,
        "timing": None,
        "traffic": None,
        "roofline": None,
        "achieved": None,
        "reference_lib": None,
        "device": device.name,
        "plan": item.plan,
        "catalog": item.catalog,
    }


def _add_note(rec: dict, text: str) -> None:
    rec["note"] = f"{rec['note']}; {text}" if rec["note"] else text


def run_item(item: PlanItem, device: Device, rng_seed: int = 0, *, stop: StopRule | None = None) -> dict[str, Any]:
    """One record for one plan item. Never raises for a kernel's fault."""
    rec = empty_record(item, device)
    if item.failed:
        return rec
    if device.lost:
        _add_note(rec, f"not run: {device.lost}")
        return rec
    try:
        _run(item, device, rng_seed, stop or StopRule(), rec)
    except Exception as e:  # noqa: BLE001 - every fault becomes a FAIL record
        rec["status"] = "fail"
        _add_note(rec, f"{type(e).__name__}: {one_line(e)}")
        if device.is_gpu and _is_context_fault(e):
            device.lost = f"the CUDA context was lost in {item.kernel} {item.variant} ({type(e).__name__})"
    return rec


def _is_context_fault(e: BaseException) -> bool:
    # A launch fault (illegal address, ...) poisons the context for the rest
    # of the process; numba raises these as CudaAPIError/CudaDriverError.
    return type(e).__name__ in ("CudaAPIError", "CudaDriverError", "CudaSupportError")


def _run(item: PlanItem, device: Device, seed: int, stop: StopRule, rec: dict) -> None:
    import numpy as np
    from numba import cuda

    from . import check as chk

    path, shape = item.path, item.shape
    traffic = path.variant_traffic(item.variant, shape)
    rec["traffic"] = {"bytes": int(traffic.bytes), "flops": int(traffic.flops)}

    inputs = path.make_inputs(shape, np.random.default_rng(item_seed(seed, item)))
    launch = path.variants[item.variant].build(shape)
    bufs, fig = chk.check(path, item.variant, shape, launch, inputs, cuda)
    rec["error"] = fig.to_json()
    if not fig.passed:
        _add_note(rec, fig.why())
        return
    if not device.is_gpu:
        rec["status"] = "pass"
        return

    for _ in range(WARMUP_LAUNCHES):
        launch(bufs)
    cuda.synchronize()
    launches = path.variant_launches(item.variant, shape)
    stats = device.rig().time(lambda: launch(bufs), stop, launches=launches, with_host=path.launches_vary(shape))
    rec["timing"] = stats.to_json()
    roof, achieved = roofline(traffic.bytes, traffic.flops, stats.median_us, device.copy_gbps, device.fp32_tflops,
                              launch_us=device.rig().launch_us(), launches=launches)
    rec["roofline"], rec["achieved"] = roof, achieved
    mnk = path.extra.get("gemm_mnk")
    if mnk is not None:
        try:  # optional: its failure must not fail the kernel
            lib_us = device.rig().library_us(tuple(mnk(shape)), stop)
        except Exception as e:  # noqa: BLE001
            lib_us = None
            _add_note(rec, f"cuBLAS reference not timed: {type(e).__name__}: {one_line(e, 120)}")
        if lib_us:
            rec["reference_lib"] = {"name": REFERENCE_LIB, "median_us": sig(lib_us),
                                    "ratio": sig(stats.median_us / lib_us)}
    del bufs

    # Timing reused one set of buffers many times; check again on a fresh draw.
    fresh = path.make_inputs(shape, np.random.default_rng(item_seed(seed, item, trial=1)))
    _, fig2 = chk.check(path, item.variant, shape, launch, fresh, cuda)
    worse = fig2 if not fig2.passed else fig
    rec["error"] = {**worse.to_json(), "rechecked": True}
    if not fig2.passed:
        _add_note(rec, f"recheck on fresh inputs failed: {fig2.why()}")
        return
    rec["status"] = "pass"


def run_items(
    items: Sequence[PlanItem],
    device: Device,
    seed: int = 0,
    *,
    stop: StopRule | None = None,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
    cache: dict | None = None,
) -> list[dict[str, Any]]:
    """Records for ``items`` in order, with a progress bar on stderr when it
    is a terminal. Items equal in ``run_key`` are run once (``cache`` may be
    shared between calls, e.g. a run and its ``--against`` run)."""
    cache = {} if cache is None else cache
    records = []
    with _progress(len(items), enabled=progress) as advance:
        for item in items:
            advance(f"{item.kernel} {item.variant or '?'} {item.shape.label}")
            if not item.failed and item.run_key in cache:
                rec = {**cache[item.run_key], "plan": item.plan, "catalog": item.catalog}
            else:
                rec = run_item(item, device, seed, stop=stop)
                if not item.failed:
                    cache[item.run_key] = rec
            records.append(rec)
            if on_record is not None:
                on_record(rec)
    return records


def run_plan(plan: Plan, device: Device, seed: int = 0, **kw) -> list[dict[str, Any]]:
    return run_items(plan.items, device, seed, **kw)


class _progress:
    """A transient Rich progress bar on stderr (nothing when not a TTY)."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.enabled, self.bar, self.task = total, enabled, None, None

    def __enter__(self):
        from rich.console import Console

        console = Console(stderr=True)
        if self.enabled and console.is_terminal and self.total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("bench", total=self.total)
        first = [True]

        def advance(desc: str) -> None:
            if self.bar is None:
                return
            self.bar.update(self.task, advance=0 if first[0] else 1, description=desc)
            first[0] = False

        return advance

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def speedups(main: Iterable[dict], against: Iterable[dict]) -> None:
    """Give each main record ``speedup_vs_against``: the against run's median
    over this one's, for the same (kernel, shape) (> 1: this lever set is
    faster); null without timings on both sides."""
    by_shape = {(r["kernel"], r["shape"]["label"]): r for r in against}
    for r in main:
        other = by_shape.get((r["kernel"], r["shape"]["label"]))
        mine = (r.get("timing") or {}).get("median_us")
        theirs = ((other or {}).get("timing") or {}).get("median_us")
        r["speedup_vs_against"] = sig(theirs / mine) if mine and theirs else None


def document(
    *,
    engine: str,
    device: Device,
    levers: dict[str, Any],
    results: list[dict],
    against: dict[str, Any] | None = None,
    created: datetime | None = None,
) -> dict[str, Any]:
    """The versioned bench document (docs/records.md). ``against``, when
    given, is ``{"name": ..., "levers": ..., "results": [...]}``."""
    created = created or datetime.now(timezone.utc)
    return {
        "schema": SCHEMA,
        "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "engine": engine,
        "device": device.to_json(),
        "versions": versions(),
        "levers": levers,
        "against": against,
        "results": results,
    }
