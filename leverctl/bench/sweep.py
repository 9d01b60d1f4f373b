"""The sweep: every combination of the levers that steer each kernel path.

For each kernel path the engine has, the levers it declares that the
engine's catalog has are *swept*: booleans both ways, tri-states all three
ways, counts over a small declared set, the drafter over its three policies,
the serve batch over 1 and the recipe's value. Every other lever stays at the
recipe's value (a field the catalog lacks takes the path's ``lever_defaults``).
So the plan is a sum of small per-path products, not one product over every
lever of the engine; ``naive_total`` says what that product would have been.
Levers that steer no kernel path are named as not benchmarked.

A sweep directory holds ``plan.json`` (written once, atomically) and
``results.jsonl`` (one record per configuration, flushed and fsynced as each
finishes). A killed sweep loses only the configuration in flight; ``resume``
reads what is there, refuses a different plan, cuts a partial last line, and
runs only what is missing. ``--shard I/N`` runs the I-th of N deterministic
slices, so N jobs of a CI matrix or a cluster's job array cover the plan
exactly once, and ``report merge`` joins their directories.

In the simulator nothing is timed, and a configuration's check depends only
on (path, variant, shape): the variant's build sees only the shape, and the
inputs are seeded by path and shape. So configurations that choose the same
variant share one simulated run, each still getting its own record.

Nothing here imports numba: ``run`` takes the function that runs one item.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import UserError
from ..levers.kinds import DRAFTER_BOTH, DRAFTER_OFF, DRAFTER_PREFILL_ONLY
from .plan import HASH_CHARS, Plan, PlanItem, applies, config_key, items_for, lever_json, path_levers, shapes_of
from .records.columns import Records
from .records.plans import read_plan, write_plan
from .records.read import read_jsonl
from .records.rules import identity
from .records.schema import PLAN_FILE, PLAN_SCHEMA, RESULTS_FILE
from .records.write import Appender, cut_partial_tail

BOOL_KINDS = (
    "opt_in",
    "opt_out",
    "kill_switch",
    "truthy_ci",
    "truthy_cs",
    "presence",
    "presence_kill",
    "build_default",
    "opt_in_vetoed",
)
COUNT_OPT_VALUES = (None, 1, 4)  # unset, the smallest count, a typical one
COUNT_CLAMPED_VALUES = (0, 1, 8)  # off, the smallest, the usual cap
DRAFTER_VALUES = (DRAFTER_BOTH, DRAFTER_PREFILL_ONLY, DRAFTER_OFF)


def sweep_values(lever, recipe_value: Any) -> tuple[Any, ...]:
    """The values a sweep tries for ``lever``; the recipe's own value is
    always among them, so the recipe's configuration is in every plan."""
    k = lever.kind
    if k in BOOL_KINDS:
        vals: list[Any] = [True, False]
    elif k == "tristate":
        vals = [True, False, None]
    elif k == "count_opt":
        vals = list(COUNT_OPT_VALUES)
    elif k == "count_clamped":
        cap = lever.cap if lever.cap is not None else max(COUNT_CLAMPED_VALUES)
        vals = [min(v, cap) for v in COUNT_CLAMPED_VALUES]
    elif k == "drafter":
        vals = list(DRAFTER_VALUES)
    elif k == "config":
        vals = [1]
    else:  # pragma: no cover - KINDS is closed
        raise ValueError(f"no sweep values for kind {k!r}")
    vals.append(recipe_value)
    out: list[Any] = []
    for v in vals:
        if not any(v == o and type(v) is type(o) for o in out):
            out.append(v)
    return tuple(out)


# ── the plan ────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class KernelSweep:
    path: Any  # KernelPath
    levers: tuple[str, ...]  # swept, in the path's order
    values: Mapping[str, tuple[Any, ...]]  # per swept lever
    recipe_levers: Mapping[str, Any]  # every path lever at the recipe's value (or lever_defaults)
    shapes: tuple[Any, ...]  # Shape
    broken: str = ""  # the declaration failed (shapes or levers); one FAIL item says why

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def configurations(self) -> int:
        return math.prod(len(self.values[f]) for f in self.levers)

    @property
    def runs(self) -> int:
        """Records planned: per configuration and shape, the selected variant
        and each of the path's baselines."""
        return self.configurations * max(1, len(self.shapes)) * (1 + len(getattr(self.path, "baselines", ())))

    @property
    def recipe_config(self) -> str:
        return config_key(self.path, self.recipe_levers)

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.name,
            "levers": list(self.levers),
            "values": {f: [lever_json(v) for v in self.values[f]] for f in self.levers},
            "held": {f: lever_json(v) for f, v in self.recipe_levers.items() if f not in self.levers},
            "configurations": self.configurations,
            "shapes": [s.label for s in self.shapes],
            "runs": self.runs,
            "recipe_config": self.recipe_config,
            "recipe_levers": {f: lever_json(v) for f, v in self.recipe_levers.items()},
            **({"broken": self.broken} if self.broken else {}),
        }


@dataclass(frozen=True)
class Sweep:
    engine: str
    preset: str
    catalog: Any  # Catalog
    recipe: str | None
    kernels: tuple[KernelSweep, ...]
    not_benchmarked: tuple[tuple[str, str], ...]  # (field, why)
    naive_total: int
    plan: Plan  # stamped: every item carries the plan and catalog prefixes

    @property
    def hash(self) -> str:
        return self.plan.hash[:HASH_CHARS]

    @property
    def items(self) -> tuple[PlanItem, ...]:
        return self.plan.items

    @property
    def total(self) -> int:
        return len(self.plan.items)

    def summary_json(self) -> dict[str, Any]:
        """The ``--dry-run --format json`` object."""
        return {
            "schema": "leverctl.sweep-dry-run/1",
            "engine": self.engine,
            "recipe": self.recipe,
            "shapes": self.preset,
            "plan": self.hash,
            "kernels": [k.to_json() for k in self.kernels],
            "total": self.total,
            "naive_total": self.naive_total,
            "not_benchmarked": self.not_benchmarked_json(),
        }

    def not_benchmarked_json(self) -> list[dict[str, Any]]:
        return [
            {"lever": f, "why": why, "steers": list(self.catalog.lever(f).steers)} for f, why in self.not_benchmarked
        ]

    def not_benchmarked_by_reason(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for f, why in self.not_benchmarked:
            out.setdefault(why, []).append(f)
        return out

    def plan_json(self, device: Mapping[str, Any], shard: tuple[int, int] | None) -> dict[str, Any]:
        """``plan.json``: enough to resume, merge and rank without the code.
        A shard's plan lists its own items, each with its place ``n`` in the
        whole sweep (``total`` items), by which merge puts them back in order."""
        places = shard_places(self.items, shard)
        items = self.items
        return {
            "schema": PLAN_SCHEMA,
            "hash": self.hash,
            "engine": self.engine,
            "catalog": {"source": self.catalog.source, "digest": self.catalog.digest},
            "recipe": self.recipe,
            "shapes": self.preset,
            "device": {"kind": device.get("kind"), "name": device.get("name")},
            "shard": None if shard is None else {"index": shard[0], "count": shard[1], "items": len(places)},
            "kernels": [k.to_json() for k in self.kernels],
            "not_benchmarked": self.not_benchmarked_json(),
            "total": self.total,
            "naive_total": self.naive_total,
            "items": [
                {
                    "n": n,
                    "kernel": items[n].kernel,
                    "variant": items[n].variant,
                    "config": items[n].config,
                    "shape": items[n].shape.label,
                    "levers": {f: lever_json(v) for f, v in items[n].levers.items()},
                }
                for n in places
            ],
        }


def build_sweep(
    resolution,
    paths: Sequence[Any],
    *,
    preset: str = "smoke",
    model: Mapping[str, Any] | None = None,
    only_levers: Sequence[str] | None = None,
    known_paths: Sequence[Any] | None = None,
    axes: tuple = (),
) -> Sweep:
    """The sweep plan for the paths (already filtered by ``--kernel``, see
    :func:`leverctl.cli.common.select_paths`) that apply to the resolution's
    engine. ``only_levers`` restricts what is swept (``--levers``); the others
    stay at the resolution's values; ``axes`` refines the preset's shapes
    (``--axis``, :mod:`leverctl.bench.axes`).
    ``known_paths`` (default: ``paths``) are every registered path, so that a
    lever of a path left out by ``--kernel`` is not called pathless."""
    from leverctl_kernels.common.path import Shape

    catalog = resolution.catalog
    fields = catalog.fields
    values = resolution.values()
    engine = resolution.engine
    applicable = [p for p in paths if applies(p, engine, fields)]
    if only_levers is not None:
        wanted = list(dict.fromkeys(only_levers))
        for f in wanted:
            if f not in fields:
                from ..levers.suggest import did_you_mean

                raise UserError(f"--levers {f}: {catalog.title} has no such lever field{did_you_mean(f, fields)}")
            if not any(f in p.levers for p in applicable):
                raise UserError(
                    f"--levers {f}: steers none of the kernel paths being swept "
                    f"({', '.join(p.name for p in applicable) or 'none'})"
                )
        applicable = [p for p in applicable if any(f in p.levers for f in wanted)]

    kernels: list[KernelSweep] = []
    items: list[PlanItem] = []
    for p in applicable:
        swept = tuple(f for f in p.levers if f in fields and (only_levers is None or f in only_levers))
        try:
            base = path_levers(p, values, fields)
            shapes = tuple(shapes_of(p, preset, model, axes))
        except Exception as e:  # noqa: BLE001 - a broken declaration is one FAIL item, not a crash
            why = f"{type(e).__name__}: {' '.join(str(e).split())}"
            ks = KernelSweep(p, (), {}, {}, (), why)
            kernels.append(ks)
            items.append(PlanItem(p, "", {}, Shape(f"({preset} shapes)", {}), why, True, catalog.digest[:HASH_CHARS]))
            continue
        vals = {f: sweep_values(catalog.lever(f), base[f]) for f in swept}
        kernels.append(KernelSweep(p, swept, vals, base, shapes))
        for combo in itertools.product(*(vals[f] for f in swept)):
            lv = {**base, **dict(zip(swept, combo))}
            items.extend(items_for(p, lv, shapes, catalog=catalog.digest[:HASH_CHARS], engine=engine))

    swept_fields = {f for k in kernels for f in k.levers}
    all_path_levers = {f for p in (known_paths or paths) for f in p.levers}
    not_bench = []
    for f, lv in catalog.levers.items():
        if f in swept_fields:
            continue
        if only_levers is not None and any(f in p.levers for p in applicable):
            why = "held at the recipe's value (not in --levers)"
        elif f in all_path_levers:
            why = "its kernel paths are not in this sweep (--kernel)"
        elif lv.diagnostic:
            why = "diagnostic: steers no kernel"
        elif lv.steers:
            why = "no kernel path for what it steers yet"
        else:
            why = "steers no kernel path"
        not_bench.append((f, why))
    naive_per_shape = math.prod(len(sweep_values(lv, values[f])) for f, lv in catalog.levers.items())
    naive = naive_per_shape * sum(max(1, len(k.shapes)) for k in kernels)
    plan = Plan(engine, preset, catalog.digest, tuple(items)).stamped()
    return Sweep(engine, preset, catalog, resolution.recipe, tuple(kernels), tuple(not_bench), naive, plan)


# ── shards ──────────────────────────────────────────────────────────────────


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` (1 <= I <= N) -> (I, N)."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m:
        raise UserError(f"--shard {text!r}: write I/N, e.g. 2/4 for the second of four shards")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= i <= n:
        raise UserError(f"--shard {text}: I must be between 1 and N (the shards of N are 1/N .. N/N)")
    return i, n


def shard_items(items: Sequence[PlanItem], shard: tuple[int, int] | None) -> list[PlanItem]:
    """The I-th of N deterministic slices of the plan (:func:`shard_places`)."""
    return [items[n] for n in shard_places(items, shard)]


def shard_places(items: Sequence[PlanItem], shard: tuple[int, int] | None) -> list[int]:
    """The places in ``items`` of the I-th of N deterministic slices of the
    plan: together the shards hold each item exactly once. Items are dealt
    out by *run group* (same path, variant and shape), every N-th group from
    the I-th: a group stays in one shard, so the simulator checks each
    variant and shape once over all shards, and each shard gets a share of
    every kernel path."""
    if shard is None:
        return list(range(len(items)))
    i, n = shard
    groups: dict[tuple[str, ...], int] = {}
    out = []
    for place, it in enumerate(items):
        g = groups.setdefault(run_group(it), len(groups))
        if g % n == i - 1:
            out.append(place)
    return out


def run_group(it: PlanItem) -> tuple[str, ...]:
    """Items whose checks are one and the same in the simulator (the dims
    too: a path's bound levers live there, see ``KernelPath.bind``)."""
    return it.key if it.failed else (it.kernel, it.variant, it.shape.label, *sorted(it.shape.dims.items()))


# ── the results directory ───────────────────────────────────────────────────


@dataclass
class Opened:
    """A results directory ready for appending: what it already holds."""

    directory: Path
    done: Records  # records already there, for this plan and shard
    cut_bytes: int = 0  # a partial last line that was cut off
    duplicates: tuple[int, ...] = ()  # lines of results.jsonl repeating an earlier record (counted once)


def check_out_dir(directory: Path, *, resume: bool) -> dict | None:
    """What can be said of a sweep directory before the plan is known, so
    that the command refuses it before any work: it is not a directory; it
    holds a sweep and this is no --resume; or, with --resume, it holds no
    plan, an incomplete one, or records that cannot be read. Returns the
    directory's plan (None without --resume)."""
    d = Path(directory)
    plan_path, results_path = d / PLAN_FILE, d / RESULTS_FILE
    if d.exists() and not d.is_dir():
        raise UserError("--out exists and is not a directory", str(d))
    if not resume:
        if plan_path.exists() or (results_path.exists() and results_path.stat().st_size):
            raise UserError(
                "already holds a sweep; pass --resume to run what it is missing, or choose another --out", str(d)
            )
        return None
    old = read_plan(d) if d.is_dir() else None
    if old is None:
        raise UserError(
            f"--resume: nothing to resume here (no {PLAN_FILE}); run without --resume to start this sweep", str(d)
        )
    if results_path.exists():
        read_jsonl(results_path, (old.get("device") or {}).get("kind"))
    return old


def open_results(directory: Path, plan_doc: Mapping[str, Any], *, resume: bool) -> Opened:
    """Prepare ``directory`` for a sweep of ``plan_doc``. Every check happens
    before anything is written: a refusal leaves the directory as it was."""
    d = Path(directory)
    plan_path, results_path = d / PLAN_FILE, d / RESULTS_FILE
    old = check_out_dir(d, resume=resume)
    if not resume:
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the directory: {e.strerror or e}", str(d)) from None
        write_plan(plan_path, plan_doc)
        results_path.touch()
        return Opened(d, Records.empty())
    assert old is not None
    if old["catalog"]["digest"] != plan_doc["catalog"]["digest"]:
        raise UserError(
            "--resume: the lever catalog has changed since this sweep started "
            f"({old['catalog']['digest'][:12]} then, {plan_doc['catalog']['digest'][:12]} now); "
            "start a new sweep in another --out",
            str(d),
        )
    if old["hash"] != plan_doc["hash"]:
        raise UserError(
            f"--resume: this sweep's plan is {plan_doc['hash']}, the directory's is {old['hash']} "
            "(different engine, recipe, levers, kernels, shapes or --axis values); start it in another --out",
            str(d),
        )
    if old.get("shard") != plan_doc.get("shard"):
        raise UserError(
            f"--resume: the directory holds shard {_shard_text(old.get('shard'))}, not "
            f"{_shard_text(plan_doc.get('shard'))}",
            str(d),
        )
    ok, nk = (old.get("device") or {}).get("kind"), (plan_doc.get("device") or {}).get("kind")
    if ok != nk:
        raise UserError(
            f"--resume: the directory's runs are on {ok}, this one would be on {nk}; "
            "a result set holds one device's runs",
            str(d),
        )
    on, nn = (old.get("device") or {}).get("name"), (plan_doc.get("device") or {}).get("name")
    if ok == "gpu" and on != nn:
        raise UserError(f"--resume: the directory's runs are on {on}, this machine has {nn}", str(d))
    jl = read_jsonl(results_path, ok, old["hash"]) if results_path.exists() else None
    done = jl.records if jl is not None else Records.empty()
    # The first record of another plan (read_jsonl finds it) or of no planned item.
    planned = {(it["kernel"], it["shape"], it["config"]) for it in plan_doc["items"]}
    ids = zip(*(done.texts(k) for k in ("kernel", "shape", "config")))
    stray = next((n for n, key in enumerate(ids, 1) if key not in planned), None)
    wrong = [n for n in (stray, jl.foreign[0] if jl is not None and jl.foreign else None) if n is not None]
    if wrong:
        raise UserError(f"--resume: record {min(wrong)} is not part of this plan", str(results_path))
    # Checks done: now it is safe to change the file.
    if jl is None:
        results_path.touch()
        return Opened(d, done)
    if jl.tail_bytes:
        cut_partial_tail(results_path, jl.good_bytes)
    return Opened(d, done, jl.tail_bytes, jl.duplicates)


# ── one writer per directory ────────────────────────────────────────────────

LOCK_FILE = ".sweep.lock"


class DirectoryLock:
    """Keeps a second sweep out of a directory one is writing: an exclusive
    ``flock`` on ``DIR/.sweep.lock``, whose text is the holder's pid. The
    kernel drops the lock when its holder exits, however it ends, so a
    crashed sweep never leaves a stale lock: its file may stay, the lock
    does not. A sweep that ends (done, refused or interrupted) removes the
    file, so a finished directory holds only its plan and results. A second
    sweep is refused at once, naming the first's pid. A lock taken on a
    file that its holder removed meanwhile is dropped and taken again on
    the path's current file, so two sweeps never hold "the" lock at once."""

    def __init__(self, directory: Path | None):
        self.directory = None if directory is None else Path(directory)  # None: named later
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def probe(self) -> None:
        """Take the lock if the lock file is there already, creating nothing:
        a sweep writing the directory is refused before anything else is
        said of it, and a directory that is refused for another reason is
        left as it was."""
        if self._fd is None and self.directory is not None and (self.directory / LOCK_FILE).is_file():
            self._take(os.O_RDWR)

    def acquire(self, *, make_dir: bool) -> None:
        """Take the lock (again: a no-op), creating the lock file, and with
        ``make_dir`` the directory; without it, a directory that does not
        exist is left alone (there is nothing to lock)."""
        if self._fd is not None or self.directory is None:
            return
        d = self.directory
        if not d.is_dir():
            if not make_dir:
                return
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise UserError(f"cannot create the directory: {e.strerror or e}", str(d)) from None
        self._take(os.O_RDWR | os.O_CREAT)

    def _take(self, flags: int) -> None:
        import fcntl

        d = self.directory
        path = d / LOCK_FILE
        for _ in range(100):
            try:
                fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                if not flags & os.O_CREAT:
                    return  # removed by the sweep that held it: nothing to lock
                raise
            except OSError as e:
                raise UserError(f"cannot open the lock file {LOCK_FILE}: {e.strerror or e}", str(d)) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _lock_holder(fd)
                os.close(fd)
                raise UserError(
                    f"another sweep ({holder}) is writing this directory; wait for it to end, or choose another --out",
                    str(d),
                ) from None
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._fd = fd
                return
            os.close(fd)  # its holder removed it as we opened it: take the path's current file
        raise UserError(f"cannot hold the lock file {LOCK_FILE}: it keeps being replaced", str(d))

    def release(self) -> None:
        if self._fd is not None:
            try:
                os.unlink(self.directory / LOCK_FILE)  # while still held: no one takes a file about to go
            except OSError:
                pass
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> "DirectoryLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _lock_holder(fd: int) -> str:
    # The holder writes its pid right after taking the lock; give it a moment.
    for _ in range(10):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return f"pid {text}"
        time.sleep(0.02)
    return "pid unknown"


def _shard_text(shard: Mapping[str, int] | None) -> str:
    return "(none: the whole plan)" if not shard else f"{shard['index']}/{shard['count']}"


# ── running ─────────────────────────────────────────────────────────────────


class StopSweep(Exception):
    """Raised by a runner when no later item can run (a GPU context lost to
    a kernel fault): the sweep stops there, keeping what it wrote, and a
    ``--resume`` in a fresh process runs the rest."""


@dataclass
class Outcome:
    records: list[dict]  # every record of the shard that is on disk, in plan order where known
    before: int  # records that were there already (resume)
    ran: int  # records this run appended
    runs: int  # kernel runs this run made (fewer than `ran` when the simulator shared runs)
    missing: int  # items of the shard with no record
    interrupted: bool = False
    elapsed_s: float = 0.0
    stopped: str = ""  # why a runner stopped the sweep (StopSweep), if it did

    @property
    def failed(self) -> int:
        return sum(1 for r in self.records if r["status"] != "pass")

    @property
    def passed(self) -> int:
        return len(self.records) - self.failed


Progress = Callable[[int, int, str], None]  # (done, failures, description)


def run(
    items: Sequence[PlanItem],
    opened: Opened,
    runner: Callable[[PlanItem], dict],
    *,
    share_runs: bool = False,
    progress: Progress | None = None,
) -> Outcome:
    """Run the ``items`` that ``opened`` lacks, appending each record as it
    finishes. ``runner(item) -> record``. A KeyboardInterrupt stops the sweep
    after the record in flight is abandoned; everything finished is on disk
    and the Outcome says ``interrupted``. A runner raising :class:`StopSweep`
    stops it the same way, with its reason in ``stopped``."""
    start = time.monotonic()
    have = {identity(r): r for r in opened.done}
    todo = [it for it in items if it.key not in have]
    failures = opened.done.failed_count()
    done = len(opened.done)
    new: dict[tuple[str, str, str], dict] = {}
    shared: dict[tuple[str, str, str], dict] = {}
    runs = 0
    interrupted = False
    stopped = ""
    with Appender(opened.directory / RESULTS_FILE) as out:
        try:
            for it in todo:
                if progress:
                    progress(done, failures, f"{it.kernel} {it.variant or '?'} {it.shape.label}")
                share_key = run_group(it)
                if share_runs and not it.failed and share_key in shared:
                    rec = _reuse(shared[share_key], it)
                else:
                    plain = replace(it, note="") if share_runs else it
                    rec = runner(plain)
                    runs += 1
                    if share_runs and not it.failed:
                        shared[share_key] = rec
                        rec = _reuse(rec, it)
                rec = {**rec, "plan": it.plan, "catalog": it.catalog}
                out.append(rec)
                new[it.key] = rec
                done += 1
                failures += rec["status"] != "pass"
        except KeyboardInterrupt:
            interrupted = True
        except StopSweep as e:
            stopped = str(e)
    if progress:
        progress(done, failures, "interrupted" if interrupted else "stopped" if stopped else "done")
    ordered = [have.get(it.key) or new.get(it.key) for it in items]
    records = [r for r in ordered if r is not None]
    return Outcome(
        records,
        len(opened.done),
        len(new),
        runs,
        len(items) - len(records),
        interrupted,
        time.monotonic() - start,
        stopped,
    )


def _reuse(rec: Mapping[str, Any], it: PlanItem) -> dict:
    """A shared run's record for another configuration of the same variant."""
    note = "; ".join(x for x in (it.note, rec.get("note", "")) if x)
    return {**rec, "levers": {f: lever_json(v) for f, v in it.levers.items()}, "config": it.config, "note": note}


def default_out(sweep: Sweep, shard: tuple[int, int] | None) -> Path:
    tail = f"-shard{shard[0]}of{shard[1]}" if shard else ""
    return Path("results") / f"sweep-{sweep.engine}-{sweep.preset}-{sweep.hash[:8]}{tail}"


def distinct_runs(items: Iterable[PlanItem]) -> int:
    """How many simulated runs a shared-run sweep makes for ``items``."""
    return len({run_group(it) for it in items})
