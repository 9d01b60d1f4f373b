"""Run plan items and build records (docs/records.md).

``run_item`` is the whole life of one item: seeded inputs, build, check
against the reference on poisoned outputs, and on a GPU warm-up, timing,
roofline, an optional library reference, and a recheck on fresh inputs.
Anything an item raises becomes a ``fail`` record with the error in
``note``; the bench never prints a traceback for a kernel.

``run_items`` runs a list of items and hands each record to ``on_record``
the moment it is finished (the GPU run appends it to a JSONL file there),
so an interruption at any point loses only the item in flight. It stops
early, keeping what it has, when the CUDA context is lost (:mod:`.faults`)
or a deadline passes. Host work is shared: inputs and float64 references
are made once per (kernel, shape, draw) and kept in a :class:`HostCache`
while they fit, since every variant and lever set of a kernel is checked on
the same draw.
"""

from __future__ import annotations

import signal
import time
import zlib
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Sequence

from .device import Device, versions
from .faults import context_lost
from .plan import Plan, PlanItem, lever_json, one_line
from .records import schema
from .timing import FP32_RATE, REFERENCE_LIB, StopRule, compute_rate, roofline, sig

WARMUP_LAUNCHES = 3


def item_seed(seed: int, item: PlanItem, trial: int = 0) -> list[int]:
    """Entropy for an item's inputs: the same for every variant and lever set
    of a (kernel, shape), so they are checked on identical data; ``trial``
    1 is the recheck's fresh draw."""
    return [seed, zlib.crc32(item.kernel.encode()), zlib.crc32(item.shape.label.encode()), trial]


def empty_record(item: PlanItem, device: Device) -> dict[str, Any]:
    """The item's record before it runs (a failure until it passes): every
    field of ``records.schema``, in its order, null where nothing is known."""
    rec = schema.record(
        kernel=item.kernel,
        variant=item.variant,
        levers={f: lever_json(v) for f, v in item.levers.items()},
        config=item.config,
        shape=item.shape.as_dict(),
        status="fail",
        note=item.note,
        **_tensor_cores(item),
        baseline=item.baseline,
        device=device.name,
        plan=item.plan,
        catalog=item.catalog,
    )
    if item.weights is not None:
        rec["weights"] = dict(item.weights)
    return rec


def _tensor_cores(item: PlanItem, launch: Any = None) -> dict[str, str | None]:
    """``tensor_cores`` and ``tc_dtype``: the tensor-core instruction and
    input type the item's variant runs on (see ``Variant``), as the built
    ``launch`` says where it carries them (a variant that chooses wgmma or
    mma.sync by device at build time), else as the variant declares."""
    variant = item.path.variants.get(item.variant) if item.variant else None
    instr, dtype = getattr(variant, "tensor_cores", None), getattr(variant, "tc_dtype", None)
    if launch is not None:
        instr, dtype = getattr(launch, "tensor_cores", instr), getattr(launch, "tc_dtype", dtype)
    return {"tensor_cores": instr, "tc_dtype": dtype}


def _add_note(rec: dict, text: str) -> None:
    rec["note"] = f"{rec['note']}; {text}" if rec["note"] else text


class HostCache:
    """Inputs and float64 references by (what, kernel, shape, draw), made
    once and kept, least recently used first out, while their arrays fit in
    ``max_bytes``. Nothing may change a cached array: the check uploads
    copies and hands the reference copies."""

    def __init__(self, max_bytes: int = 8 << 30):
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self.hits = self.misses = 0

    def get(self, key: tuple, make: Callable[[], Any]) -> Any:
        if key in self._items:
            self._items.move_to_end(key)
            self.hits += 1
            return self._items[key][0]
        self.misses += 1
        value = make()
        size = _nbytes(value)
        if size <= self.max_bytes:
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._bytes -= dropped
        return value


def _nbytes(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return int(getattr(value, "nbytes", 0))


def run_item(
    item: PlanItem, device: Device, rng_seed: int = 0, *, stop: StopRule | None = None, host: HostCache | None = None
) -> dict[str, Any]:
    """One record for one plan item. Never raises for a kernel's fault; a
    fault that loses the CUDA context also sets ``device.lost``."""
    rec = empty_record(item, device)
    if item.failed:
        return rec
    if device.lost:
        _add_note(rec, f"not run: {device.lost}")
        return rec
    try:
        _run(item, device, rng_seed, stop or StopRule(), rec, host if host is not None else HostCache(0))
    except Exception as e:  # noqa: BLE001 - every fault becomes a FAIL record
        rec["status"] = "fail"
        _add_note(rec, f"{type(e).__name__}: {one_line(e)}")
        if context_lost(e):
            device.lost = f"the CUDA context was lost in {item.kernel} {item.variant} ({one_line(e, 120)})"
    return rec


def _drawn(path, shape, seed: list[int], host: HostCache):
    """(inputs, the path with its reference served from ``host``) for one draw."""
    import numpy as np

    key = (path.name, tuple(sorted(shape.dims.items())), tuple(seed))
    inputs = host.get(("inputs", *key), lambda: path.make_inputs(shape, np.random.default_rng(seed)))

    def reference(s, given):
        return host.get(("reference", *key), lambda: path.reference(s, given))

    return inputs, replace(path, reference=reference)


def _run(item: PlanItem, device: Device, seed: int, stop: StopRule, rec: dict, host: HostCache) -> None:
    from numba import cuda

    from . import check as chk

    path, shape = item.path, item.shape
    traffic = path.variant_traffic(item.variant, shape)
    rec["traffic"] = {"bytes": int(traffic.bytes), "flops": int(traffic.flops)}

    inputs, cpath = _drawn(path, shape, item_seed(seed, item), host)
    launch = path.variants[item.variant].build(shape)
    rec.update(_tensor_cores(item, launch))
    bufs, fig = chk.check(cpath, item.variant, shape, launch, inputs, cuda)
    rec["error"] = fig.to_json()
    lost = _rows_lost(path, item, launch, rec)
    if not fig.passed:
        _add_note(rec, fig.why())
        return
    if lost:
        return
    if not _batch_invariance(path, item, launch, bufs, cuda, rec):
        return
    _findings(path, item, launch, bufs, cuda, rec, device.is_gpu)
    if not device.is_gpu:
        rec["status"] = "pass"
        return

    for _ in range(WARMUP_LAUNCHES):
        launch(bufs)
    cuda.synchronize()
    launches = path.variant_launches(item.variant, shape)
    device.measure_figures()  # once per run, before the first timing
    if device.lost:
        raise RuntimeError(device.lost)
    stats = device.rig().time(lambda: launch(bufs), stop, launches=launches, with_host=path.launches_vary(shape))
    rec["timing"] = stats.to_json()
    rate, why = compute_rate(rec["tensor_cores"], rec["tc_dtype"])
    tflops = device.figure(rate) if rate else None
    if rate and tflops is None:
        why = (
            f"no {rate} on this device ({device.ceiling_notes.get(rate, 'not measured')}): "
            "the floor has no compute term"
        )
    if why:
        _add_note(rec, why)
    roof, achieved = roofline(
        traffic.bytes,
        traffic.flops,
        stats.median_us,
        device.copy_gbps,
        tflops,
        compute_rate=rate,
        launch_us=device.rig().launch_us(),
        launches=launches,
        tc_flops=traffic.tc_flops,
        fp32_tflops=device.figure(FP32_RATE),
    )
    rec["roofline"], rec["achieved"] = roof, achieved
    mnk = path.extra.get("gemm_mnk")
    if mnk is not None:
        try:  # optional: its failure must not fail the kernel
            lib_us = device.rig().library_us(tuple(mnk(shape)), stop)
        except Exception as e:  # noqa: BLE001
            lib_us = None
            _add_note(rec, f"cuBLAS reference not timed: {type(e).__name__}: {one_line(e, 120)}")
        if lib_us:
            rec["reference_lib"] = {
                "name": REFERENCE_LIB,
                "median_us": sig(lib_us),
                "ratio": sig(stats.median_us / lib_us),
            }
    bufs = None  # the timed buffers' device memory goes before the fresh draw below

    # Timing reused one set of buffers many times; check again on a fresh draw.
    fresh, cpath = _drawn(path, shape, item_seed(seed, item, trial=1), host)
    _, fig2 = chk.check(cpath, item.variant, shape, launch, fresh, cuda)
    worse = fig2 if not fig2.passed else fig
    rec["error"] = {**worse.to_json(), "rechecked": True}
    if not fig2.passed:
        _add_note(rec, f"recheck on fresh inputs failed: {fig2.why()}")
        return
    rec["status"] = "pass"


def _rows_lost(path, item: PlanItem, launch, rec: dict) -> int:
    """Routed rows the run left uncomputed (``extra["rows_lost"](variant,
    shape, launch)``: a grouped GEMM whose grid was sized below the
    routing's load), whatever the check said: the record's ``rows_lost``.
    Any is a failure of its own, with a note, since rows that were never
    computed can pass a check (a zeroed scratch, a small weight)."""
    fn = path.extra.get("rows_lost")
    if fn is None:
        return 0
    lost = int(fn(item.variant, item.shape, launch))
    rec["rows_lost"] = lost
    if lost:
        _add_note(rec, f"{lost} routed row(s) beyond the per-expert tile bound were never computed")
    return lost


def _findings(path, item: PlanItem, launch, bufs, cuda, rec: dict, on_gpu: bool) -> None:
    """The path's measurements beyond the check (``extra["findings"]``),
    if it declares one, on the buffers of the passing check: the record's
    ``findings`` (a dict; its ``note``, if any, joins the record's note).
    The hook is told whether it runs on a GPU (``on_gpu``) when it takes
    that keyword."""
    fn = path.extra.get("findings")
    if fn is None:
        return
    import inspect

    kw = {"on_gpu": on_gpu} if "on_gpu" in inspect.signature(fn).parameters else {}
    got = dict(fn(item.variant, item.shape, launch, bufs, cuda, **kw))
    if got.get("note"):
        _add_note(rec, got.pop("note"))
    rec["findings"] = got


def _batch_invariance(path, item: PlanItem, launch, bufs, cuda, rec: dict) -> bool:
    """The path's batch invariance check (``extra["batch_invariance"]``), if
    it declares one, on the buffers of the passing check: the record's
    ``batch_invariance``. False (the record fails) when the variant must be
    invariant and is not; a variant that need not be is flagged in the note."""
    inv = path.extra.get("batch_invariance")
    if inv is None:
        return True
    got = inv(item.variant, item.shape, launch, bufs, cuda)
    rec["batch_invariance"] = got
    if got["identical"]:
        return True
    what = (
        f"not batch-invariant: {got['differing']} of {got['sequences']} sequences decoded alone differ "
        f"from the batch (max {got['max_abs_diff']:.3g})"
    )
    _add_note(rec, what if got["required"] else f"{what}, as expected of {item.variant}")
    return not got["required"]


def run_items(
    items: Sequence[PlanItem],
    device: Device,
    seed: int = 0,
    *,
    stop: StopRule | None = None,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
    cache: dict | None = None,
    host: HostCache | None = None,
    deadline: float | None = None,
    console: Any = None,
) -> list[dict[str, Any]]:
    """Records for ``items`` in order, each handed to ``on_record`` as soon
    as it is finished, with a progress bar on stderr when it is a terminal.
    Items equal in ``run_key`` are run once (``cache`` may be shared between
    calls, e.g. a run and its ``--against`` run, or every recipe of a GPU
    run). Stops early, keeping what it has, once the CUDA context is lost
    (``device.lost``) or ``time.monotonic()`` passes ``deadline``: see
    :func:`why_stopped`."""
    cache = {} if cache is None else cache
    host = HostCache() if host is None else host
    records: list[dict[str, Any]] = []
    with Progress(len(items), enabled=progress, console=console) as bar:
        for item in items:
            if device.lost or (deadline is not None and time.monotonic() >= deadline):
                break
            bar.start(item)
            if not item.failed and item.run_key in cache:
                rec = {**cache[item.run_key], "plan": item.plan, "catalog": item.catalog}
            else:
                rec = run_item(item, device, seed, stop=stop, host=host)
                if not item.failed and not device.lost:
                    cache[item.run_key] = rec
            records.append(rec)
            if on_record is not None:
                on_record(rec)
            bar.done()
    return records


def why_stopped(planned: int, done: int, device: Device, budget_s: float | None = None) -> str | None:
    """The document's ``stopped``: None when every planned item has a record."""
    if done >= planned:
        return None
    left = f"{planned - done} of {planned} planned items not run"
    if device.lost:
        return f"{device.lost}; {left}"
    if budget_s is not None:
        return f"its time budget of {budget_s:g} s was spent; {left}"
    return left


def run_plan(plan: Plan, device: Device, seed: int = 0, **kw) -> list[dict[str, Any]]:
    return run_items(plan.items, device, seed, **kw)


class Progress:
    """A transient Rich progress bar on stderr, when it is a terminal (nothing
    otherwise): the item running (kernel, configuration, shape), how many are
    done, and the time elapsed."""

    def __init__(self, total: int, enabled: bool = True, console: Any = None):
        self.total, self.enabled, self.console = total, enabled, console
        self.bar = self.task = None

    def __enter__(self) -> "Progress":
        from rich.console import Console

        console = self.console or Console(stderr=True)
        if self.enabled and console.is_terminal and self.total:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self.bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("bench", total=self.total)
        return self

    def start(self, item: PlanItem) -> None:
        if self.bar is not None:
            what = f"{item.kernel} [{item.config or item.variant or '?'}] {item.shape.label}"
            from rich.markup import escape

            self.bar.update(self.task, description=escape(what))
            self.bar.refresh()

    def done(self) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


class Terminated(BaseException):
    """SIGTERM, turned into an exception so that the code that was running
    unwinds like on Ctrl-C and keeps what it has finished."""


class _Held:
    depth = 0  # nested signals_held() sections now open
    pending: type[BaseException] | None = None  # what a signal that arrived inside will raise


@contextmanager
def signals_held():
    """A SIGTERM or SIGINT that arrives inside waits until it ends, then
    raises as it would have (inside :func:`terminate_as_interrupt`): for
    work that must be done whole or not at all, such as a record written to
    two places. Python runs signal handlers in the main thread whichever
    thread the signal reached (the simulator runs each CUDA thread as a
    thread), so a per-thread signal mask could not hold them; this flag can."""
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
        if not _Held.depth and _Held.pending is not None:
            exc, _Held.pending = _Held.pending, None
            raise exc()


def _deliver(exc: type[BaseException]) -> None:
    if _Held.depth:
        if _Held.pending is None or exc is Terminated:  # a SIGTERM outranks a ^C
            _Held.pending = exc
        return
    raise exc()


@contextmanager
def terminate_as_interrupt():
    """While inside, SIGTERM raises :class:`Terminated` in the main thread
    (the default would end the process without a word), and SIGINT
    KeyboardInterrupt as always; either waits for the end of a
    :func:`signals_held` section."""

    def on_term(signum, frame):
        _deliver(Terminated)

    def on_int(signum, frame):
        _deliver(KeyboardInterrupt)

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    previous_int = signal.signal(signal.SIGINT, on_int)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        _Held.pending = None


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
    stopped: str | None = None,
) -> dict[str, Any]:
    """The versioned bench document (docs/records.md). ``against``, when
    given, is ``{"name": ..., "levers": ..., "results": [...]}``;
    ``stopped`` says why the run ended before its plan did (None: it did
    not). Describing the device reads only what was gathered."""
    created = created or datetime.now(timezone.utc)
    return {
        "schema": schema.BENCH_SCHEMA,
        "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "engine": engine,
        "device": device.to_json(),
        "versions": versions(device),
        "levers": levers,
        "against": against,
        "stopped": stopped,
        "results": results,
    }
