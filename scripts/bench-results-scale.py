#!/usr/bin/env python3
"""How `report merge`, `report show` and `compare` scale with the records of a
cluster-sized sweep: wall time and peak memory of each, as real processes.

    .venv/bin/python scripts/bench-results-scale.py [--records 1000000] [--shards 8] [--keep DIR]

It writes a synthetic GPU sweep of about --records records (kernels x 2^10
lever configurations x 8 shapes, each record shaped as a real one: levers,
shape, error, timing, traffic, roofline), as --shards shard directories of
one plan (each with its plan.json, as `sweep --shard` writes them), then
times, one after another:

* ``report merge`` of the shards into one directory;
* ``report show`` of the merged directory (JSON, so no terminal drawing);
* ``compare`` of it against a second run of the same plan whose timings
  differ by a few per cent.

The target (the Slurm-sweeps issue): each under 30 s and 2 GB for 1,000,000
records on the two-core CI machine.

With ``--documents`` it writes the same records as two bench JSON documents
(what ``bench -o results.json`` writes: one indented document, its records
in ``results``) and times ``report show`` of one and ``compare`` of the two. It is a benchmark, not a test: run it
by hand; it takes minutes and disk space of about 1 KB per record per copy.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from leverctl.bench.records.plans import write_plan  # noqa: E402
from leverctl.bench.records.schema import PLAN_SCHEMA  # noqa: E402

LEVERS = [f"lever_{i}" for i in range(10)]  # 2^10 configurations per kernel and shape
SHAPES = [f"m{m}-n4096-k4096" for m in (1, 2, 4, 8, 16, 32, 64, 128)]
PLAN = "5ca1e0000000beef"
CATALOG = "c0ffee0000000000"


def items(n: int):
    per_kernel = len(SHAPES) << len(LEVERS)
    kernels = max(1, -(-n // per_kernel))
    for k in range(kernels):
        for shape in SHAPES:
            for c in range(1 << len(LEVERS)):
                levers = {f: bool(c >> i & 1) for i, f in enumerate(LEVERS)}
                config = ",".join(f"{f}={int(v)}" for f, v in levers.items())
                yield f"scale.k{k:03d}", "v" + str(c & 3), shape, config, levers


def plan_doc(all_items, mine, shard=None) -> dict:
    """The plan.json of a directory running ``mine`` (places in ``all_items``),
    as ``sweep`` writes it: a shard's plan lists its own items."""
    kernels = sorted({it[0] for it in all_items})
    return {
        "schema": PLAN_SCHEMA,
        "hash": PLAN,
        "engine": "atlas",
        "catalog": {"source": "synthetic", "digest": CATALOG + "0" * 48},
        "recipe": None,
        "shapes": "model",
        "device": {"kind": "gpu", "name": "Synthetic H200"},
        "shard": shard,
        "kernels": [
            {
                "kernel": k,
                "levers": LEVERS,
                "recipe_levers": {f: True for f in LEVERS},
                "recipe_config": ",".join(f"{f}=1" for f in LEVERS),
            }
            for k in kernels
        ],
        "not_benchmarked": [],
        "total": len(all_items),
        "naive_total": len(all_items),
        "items": [
            {
                "n": n,
                "kernel": all_items[n][0],
                "variant": all_items[n][1],
                "config": all_items[n][3],
                "shape": all_items[n][2],
                "levers": all_items[n][4],
            }
            for n in mine
        ],
    }


def record_line(it, rng: random.Random, scale: float) -> str:
    kernel, variant, shape, config, levers = it
    us = (10 + (hash(config) % 97) / 10) * scale * (1 + rng.random() * 0.01)
    return (
        json.dumps(
            {
                "kernel": kernel,
                "variant": variant,
                "levers": levers,
                "config": config,
                "shape": {"label": shape, "m": int(shape.split("-")[0][1:]), "n": 4096, "k": 4096},
                "status": "pass",
                "note": "",
                "error": {
                    "rel": 1.2e-4,
                    "max_abs": 3.1e-5,
                    "tol_rel": 2e-3,
                    "tol_abs": 1.6e-3,
                    "tol_abs_of_max": 2e-3,
                    "nonfinite": 0,
                    "unwritten": 0,
                    "rechecked": False,
                },
                "timing": {
                    "median_us": us,
                    "p20_us": us * 0.996,
                    "p80_us": us * 1.004,
                    "samples": 200,
                    "noise": 0.004,
                    "stopped_by": "noise",
                },
                "traffic": {"bytes": 9437184, "flops": 33554432},
                "roofline": {"floor_us": us * 0.7, "bound": "memory", "pct_of_floor": 70.0, "copy_gbps": 4100.0},
                "achieved": {"gbps": 2900.0, "tflops": 10.1},
                "reference_lib": None,
                "tensor_cores": "wgmma",
                "tc_dtype": "f16",
                "baseline": False,
                "batch_invariance": None,
                "findings": None,
                "device": "Synthetic H200",
                "plan": PLAN,
                "catalog": CATALOG,
            },
            separators=(",", ":"),
        )
        + "\n"
    )


def write_document(path: Path, all_items, rng, scale) -> None:
    """A bench document as ``bench -o x.json`` lays it out (indent 2)."""
    with open(path, "w") as f:
        f.write('{\n  "schema": "leverctl.bench/1",\n  "engine": "atlas",\n')
        f.write('  "device": {\n    "kind": "gpu",\n    "name": "Synthetic H200"\n  },\n  "results": [\n')
        first = True
        for it in all_items:
            rec = json.loads(record_line(it, rng, scale))
            text = json.dumps(rec, indent=2).replace("\n", "\n    ")
            f.write(("" if first else ",\n") + "    " + text)
            first = False
        f.write("\n  ]\n}\n")


def deal(all_items, shards: int):
    """Each item's shard, as sweep.shard_places deals run groups (kernel,
    variant, shape) out, every N-th group from the first."""
    groups: dict = {}
    for it in all_items:
        g = groups.setdefault((it[0], it[1], it[2]), len(groups))
        yield g % shards + 1, it


def write_sweep(d: Path, all_items, rng, scale, shards: int | None) -> list[Path]:
    if shards is None:
        d.mkdir(parents=True)
        write_plan(d / "plan.json", plan_doc(all_items, range(len(all_items))))
        with open(d / "results.jsonl", "w") as f:
            f.writelines(record_line(it, rng, scale) for it in all_items)
        return [d]
    out = []
    files = {}
    mine: dict[int, list[int]] = {i: [] for i in range(1, shards + 1)}
    for i in range(1, shards + 1):
        (d / str(i)).mkdir(parents=True)
        files[i] = open(d / str(i) / "results.jsonl", "w")
        out.append(d / str(i))
    for n, (i, it) in enumerate(deal(all_items, shards)):
        files[i].write(record_line(it, rng, scale))
        mine[i].append(n)
    for i, f in files.items():
        f.close()
        write_plan(
            d / str(i) / "plan.json", plan_doc(all_items, mine[i], {"index": i, "count": shards, "items": len(mine[i])})
        )
    return out


# Runs a command and writes its rusage (from wait4: the command's, and its
# waited-for children's, peak memory the largest of them) to the file named
# first. A small process of its own: a child's peak RSS starts at its
# parent's when forked (Linux keeps the high-water mark across exec), and
# this script holds the generated data.
LAUNCHER = """
import json, os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump({"exit": os.waitstatus_to_exitcode(status), "maxrss_kb": ru.ru_maxrss,
               "cpu": ru.ru_utime + ru.ru_stime}, f)
"""


def timed(label: str, cmd: list[str], n: int) -> dict:
    """Run ``cmd``; wall time, CPU time and its peak resident memory."""
    with tempfile.TemporaryFile("w+") as err, tempfile.NamedTemporaryFile("r") as use:
        t0 = time.monotonic()
        subprocess.run(
            [sys.executable, "-c", LAUNCHER, use.name, *cmd], stdout=subprocess.DEVNULL, stderr=err, text=True
        )
        wall = time.monotonic() - t0
        err.seek(0)
        said = err.read().strip().splitlines()[-1:] or [""]
        usage = json.load(use)
    peak = usage["maxrss_kb"] / 1024
    print(
        f"{label:14s} {wall:7.1f} s  {peak:7.0f} MB peak  ({wall / n * 1e6:.0f} us, "
        f"{peak * 1024 / n:.2f} KB per record)  exit {usage['exit']}  {said[0][:100]}",
        flush=True,
    )
    return {
        "what": label,
        "seconds": round(wall, 2),
        "cpu_seconds": round(usage["cpu"], 2),
        "peak_mb": round(peak),
        "exit": usage["exit"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--keep", type=Path, default=None, help="write the data here and keep it")
    ap.add_argument("--only", choices=("merge", "show", "compare"), action="append")
    ap.add_argument("--documents", action="store_true", help="bench JSON documents instead of sweep directories")
    args = ap.parse_args()
    if args.documents:
        return documents(args)
    root = args.keep or Path(tempfile.mkdtemp(prefix="leverctl-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        all_items = list(items(args.records))
        n = len(all_items)
        t0 = time.monotonic()
        rng = random.Random(0)
        if not (root / "shards").exists():
            write_sweep(root / "shards", all_items, rng, 1.0, args.shards)
            write_sweep(root / "new", all_items, rng, 1.03, None)
        del all_items
        print(
            f"{n:,} records in {args.shards} shards and a second run, written in {time.monotonic() - t0:.0f} s "
            f"under {root}",
            flush=True,
        )
        leverctl = [sys.executable, "-m", "leverctl"]
        shards = sorted((root / "shards").iterdir(), key=lambda p: int(p.name))
        merged = root / "merged"
        rows = []
        for step in args.only or ("merge", "show", "compare"):
            if step == "merge":
                shutil.rmtree(merged, ignore_errors=True)
                rows.append(
                    timed(
                        "report merge",
                        [*leverctl, "report", "merge", *map(str, shards), "--out", str(merged), "-f", "json"],
                        n,
                    )
                )
            elif step == "show":
                rows.append(timed("report show", [*leverctl, "report", "show", str(merged), "-f", "json"], n))
            else:
                rows.append(timed("compare", [*leverctl, "compare", str(merged), str(root / "new"), "-f", "json"], n))
        print(json.dumps({"records": n, "shards": args.shards, "cpus": os.cpu_count(), "results": rows}))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def documents(args) -> int:
    root = args.keep or Path(tempfile.mkdtemp(prefix="leverctl-scale-docs-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        all_items = list(items(args.records))
        n = len(all_items)
        t0 = time.monotonic()
        base, new = root / "base.json", root / "new.json"
        if not base.exists():
            write_document(base, all_items, random.Random(0), 1.0)
            write_document(new, all_items, random.Random(1), 1.03)
        del all_items
        print(
            f"{n:,} records in two bench documents ({base.stat().st_size / 2**30:.2f} GiB each), written in "
            f"{time.monotonic() - t0:.0f} s under {root}",
            flush=True,
        )
        leverctl = [sys.executable, "-m", "leverctl"]
        rows = []
        for step in args.only or ("show", "compare"):
            if step == "show":
                rows.append(timed("report show", [*leverctl, "report", "show", str(base), "-f", "json"], n))
            elif step == "compare":
                rows.append(timed("compare", [*leverctl, "compare", str(base), str(new), "-f", "json"], n))
        print(json.dumps({"records": n, "documents": True, "cpus": os.cpu_count(), "results": rows}))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
