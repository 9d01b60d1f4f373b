"""Merge: the shards of one sweep back in one directory, in plan order."""

from __future__ import annotations

import json

import pytest
from records_helpers import shard_dir, six_items

from leverctl.bench.records import decode
from leverctl.bench.records.columns import Tables
from leverctl.bench.records.merge import merge, write_result_dir
from leverctl.bench.records.read import load_results
from leverctl.bench.records.schema import PLAN_FILE, PLAN_SCHEMA, RESULTS_FILE


@pytest.mark.parametrize("schema", ["leverctl.sweep-plan/1", PLAN_SCHEMA])
def test_merge_puts_the_shards_items_and_records_back_in_plan_order(tmp_path, schema):
    items = six_items()
    deal = {1: [4, 1, 5], 2: [0, 3, 2]}  # each shard's places, its records written in another order
    parts = [shard_dir(tmp_path / str(i), items, places, i, 2, schema) for i, places in deal.items()]
    tables = Tables()
    sets = [load_results(p, plan_items=True, tables=tables) for p in parts]
    merged = merge(sets)
    assert merged.missing == 0 and [it.n for it in merged.plan["items"]] == list(range(6))
    write_result_dir(tmp_path / "m", merged, merged.plan)
    again = load_results(tmp_path / "m", plan_items=True)
    assert [r["config"] for r in again.records] == [f"x={n}" for n in range(6)]
    assert [(it.n, it.config, decode.value(it.levers)) for it in again.plan["items"]] == [
        (n, f"x={n}", {"x": n}) for n in range(6)
    ]
    text = (tmp_path / "m" / PLAN_FILE).read_text()
    assert json.loads(text)["schema"] == PLAN_SCHEMA
    assert '\n    {"n":0,"kernel":"k"' in text  # an item to a line
    written = {json.loads(line)["config"]: line for d in parts for line in (d / RESULTS_FILE).open()}
    assert (tmp_path / "m" / RESULTS_FILE).read_text() == "".join(written[f"x={n}"] for n in range(6))


def test_a_record_in_two_parts_is_the_last_parts_and_a_record_outside_the_plan_is_refused(tmp_path):
    items = six_items()
    a = shard_dir(tmp_path / "a", items, [0, 1, 2], 1, 2)
    b = shard_dir(tmp_path / "b", items, [3, 4, 5], 2, 2)
    with open(a / RESULTS_FILE, "a") as f:  # a resumed piece ran item 4 too, differently
        f.write(
            json.dumps(
                {
                    "kernel": "k",
                    "variant": "w",
                    "levers": {"x": 4},
                    "config": "x=4",
                    "shape": {"label": "s"},
                    "status": "fail",
                    "note": "first",
                }
            )
            + "\n"
        )
    tables = Tables()
    merged = merge([load_results(p, plan_items=True, tables=tables) for p in (a, b)])
    assert merged.duplicates == 1 and merged.records[4]["status"] == "pass"
    merged = merge([load_results(p, plan_items=True, tables=tables) for p in (b, a)])
    assert merged.duplicates == 1 and merged.records[4]["note"] == "first"
    with open(b / RESULTS_FILE, "a") as f:
        f.write(
            json.dumps(
                {
                    "kernel": "k",
                    "variant": "v",
                    "levers": {"x": 9},
                    "config": "x=9",
                    "shape": {"label": "s"},
                    "status": "pass",
                }
            )
            + "\n"
        )
    from leverctl.errors import UserError

    with pytest.raises(UserError, match=r"holds 1 record\(s\) outside its plan \(first: k x=9 at s\)"):
        merge([load_results(p, plan_items=True, tables=tables) for p in (a, b)])
