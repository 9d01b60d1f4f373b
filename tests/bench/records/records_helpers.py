"""Small sweep plans and their records, for the records' tests."""

from __future__ import annotations

import json
from pathlib import Path

from leverctl.bench.records.plans import write_plan
from leverctl.bench.records.schema import PLAN_FILE, PLAN_SCHEMA, RESULTS_FILE, SIM_NAME


def plan_doc(items, shard=None, schema=PLAN_SCHEMA):
    """A sweep plan of six items on the simulator, listing ``items``."""
    return {
        "schema": schema,
        "hash": "0123456789abcdef",
        "engine": "atlas",
        "catalog": {"digest": "c" * 64},
        "device": {"kind": "sim", "name": None},
        "shard": shard,
        "kernels": [],
        "not_benchmarked": [],
        "total": 6,
        "items": items,
    }


def six_items():
    return [
        {"n": n, "kernel": "k", "variant": "v", "config": f"x={n}", "shape": "s", "levers": {"x": n}} for n in range(6)
    ]


def record_line(it) -> str:
    """The line of a passing simulator record of plan item ``it``."""
    return (
        json.dumps(
            {
                "kernel": it["kernel"],
                "variant": "v",
                "levers": it["levers"],
                "config": it["config"],
                "shape": {"label": it["shape"]},
                "status": "pass",
                "device": SIM_NAME,
            }
        )
        + "\n"
    )


def shard_dir(d: Path, items, places, index: int, count: int, schema=PLAN_SCHEMA) -> Path:
    """Shard ``index`` of ``count``: the plan of its places (every item, without
    places, in a plan of the first schema) and their records in the order of ``places``."""
    d.mkdir()
    listed = (
        [{k: v for k, v in it.items() if k != "n"} for it in items]
        if schema.endswith("/1")
        else [items[n] for n in sorted(places)]
    )
    write_plan(d / PLAN_FILE, plan_doc(listed, {"index": index, "count": count, "items": len(places)}, schema))
    (d / RESULTS_FILE).write_text("".join(record_line(items[n]) for n in places))
    return d
