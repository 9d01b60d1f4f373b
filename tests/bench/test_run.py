"""Running plan items into records (docs/records.md)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bench_fakes import SHAPES, saxpy_path, state_path

from leverctl.bench.device import SIM_NAME, Device
from leverctl.bench.plan import PlanItem, build_plan, items_for
from leverctl.bench.run import document, run_item, run_items, speedups

ROOT = Path(__file__).resolve().parents[2]


def record_example() -> dict:
    """The record example in docs/records.md: the schema the bench writes."""
    text = (ROOT / "docs" / "records.md").read_text()
    block = re.search(r"```json\n(.*?)```", text, re.S).group(1)
    return json.loads(block)


def _item(variant, path=None, shape=SHAPES[0]):
    path = path or saxpy_path()
    return items_for(path, {"gemv_sw": variant}, [shape], catalog="c" * 16)[0]


def test_an_item_that_could_not_be_planned_is_a_fail_record_with_the_documented_fields():
    rec = run_item(PlanItem(saxpy_path(), "", {}, SHAPES[0], "select() raised KeyError", failed=True),
                   Device("sim", SIM_NAME))
    assert set(rec) == set(record_example())
    assert (rec["status"], rec["note"], rec["error"]) == ("fail", "select() raised KeyError", None)


def test_speedup_is_the_against_median_over_this_one_for_the_same_kernel_and_shape():
    def rec(kernel, label, median):
        return {"kernel": kernel, "shape": {"label": label},
                "timing": None if median is None else {"median_us": median}}

    main = [rec("k", "a", 2.0), rec("k", "b", None), rec("k", "c", 4.0)]
    speedups(main, [rec("k", "a", 3.0), rec("k", "b", 1.0)])
    assert [r["speedup_vs_against"] for r in main] == [1.5, None, None]


def test_the_document_has_the_documented_top_level_fields():
    doc = document(engine="atlas", device=Device("sim", SIM_NAME, why_sim="no CUDA devices"),
                   levers={"schema": "leverctl.levers/1"}, results=[])
    assert set(doc) == {"schema", "created", "engine", "device", "versions", "levers", "against", "results"}
    assert doc["schema"] == "leverctl.bench/1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["created"])
    assert doc["device"]["why_sim"] == "no CUDA devices"


@pytest.mark.sim
def test_a_correct_variant_gives_a_passing_record_with_its_figures(device):
    item = _item("good")
    rec = run_item(item, device, rng_seed=1)
    ex = record_example()
    assert set(rec) == set(ex)
    assert rec["status"] == "pass", rec["note"]
    assert (rec["kernel"], rec["variant"], rec["config"], rec["levers"]) == ("fake.saxpy", "good", "gemv_sw=good",
                                                                            {"gemv_sw": "good"})
    assert rec["shape"] == {"label": "n37", "n": 37}
    assert set(rec["error"]) == set(ex["error"])
    assert rec["traffic"] == {"bytes": 12 * 37, "flops": 2 * 37}
    assert rec["catalog"] == "c" * 16
    if device.is_gpu:
        assert set(rec["timing"]) == set(ex["timing"])
        assert set(rec["roofline"]) == set(ex["roofline"]) and set(rec["achieved"]) == set(ex["achieved"])
        assert rec["error"]["rechecked"] is True
    else:
        assert rec["timing"] is rec["roofline"] is rec["achieved"] is rec["reference_lib"] is None
        assert rec["device"] == SIM_NAME
    json.dumps(rec, allow_nan=False)


@pytest.mark.sim
def test_a_wrong_variant_gives_a_failing_record_that_keeps_its_figures(device):
    rec = run_item(_item("unwritten"), device)
    assert rec["status"] == "fail"
    assert rec["error"]["unwritten"] == 1
    assert "never written" in rec["note"]
    assert rec["timing"] is None


@pytest.mark.skipif(not __import__("numba").config.ENABLE_CUDASIM, reason="a GPU does not bounds-check")
@pytest.mark.sim
def test_a_crashing_variant_becomes_a_fail_record_with_the_error_in_the_note(device):
    rec = run_item(_item("oob"), device)
    assert rec["status"] == "fail"
    assert rec["note"].startswith("IndexError") and "\n" not in rec["note"]
    assert rec["error"] is None


@pytest.mark.sim
def test_items_equal_in_what_they_measure_run_once(device, monkeypatch):
    import leverctl.bench.run as run_mod

    calls = []
    real = run_mod.run_item
    monkeypatch.setattr(run_mod, "run_item", lambda *a, **k: calls.append(a[0].key) or real(*a, **k))
    plan = build_plan([state_path()], engine="atlas", catalog_fields=(), values={})
    cache: dict = {}
    first = run_items(plan.items, device, cache=cache, progress=False)
    again = run_items(plan.items, device, cache=cache, progress=False)
    assert len(calls) == len(plan.items) == 2
    assert [r["status"] for r in first] == [r["status"] for r in again] == ["pass", "pass"]
