"""Running plan items into records (docs/records.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bench_fakes import SHAPES, saxpy_path, state_path

from leverctl.bench.device import SIM_NAME, Device
from leverctl.bench.plan import PlanItem, build_plan, items_for
from leverctl.bench.run import HostCache, Progress, document, run_item, run_items, speedups, why_stopped

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
    rec = run_item(
        PlanItem(saxpy_path(), "", {}, SHAPES[0], "select() raised KeyError", failed=True), Device("sim", SIM_NAME)
    )
    assert set(rec) == set(record_example())
    assert (rec["status"], rec["note"], rec["error"]) == ("fail", "select() raised KeyError", None)


def test_speedup_is_the_against_median_over_this_one_for_the_same_kernel_and_shape():
    def rec(kernel, label, median):
        return {
            "kernel": kernel,
            "shape": {"label": label},
            "timing": None if median is None else {"median_us": median},
        }

    main = [rec("k", "a", 2.0), rec("k", "b", None), rec("k", "c", 4.0)]
    speedups(main, [rec("k", "a", 3.0), rec("k", "b", 1.0)])
    assert [r["speedup_vs_against"] for r in main] == [1.5, None, None]


def test_the_document_has_the_documented_top_level_fields():
    doc = document(
        engine="atlas",
        device=Device("sim", SIM_NAME, why_sim="no CUDA devices"),
        levers={"schema": "leverctl.levers/1"},
        results=[],
    )
    assert set(doc) == {"schema", "created", "engine", "device", "versions", "levers", "against", "stopped", "results"}
    assert doc["stopped"] is None
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
    assert (rec["kernel"], rec["variant"], rec["config"], rec["levers"]) == (
        "fake.saxpy",
        "good",
        "gemv_sw=good",
        {"gemv_sw": "good"},
    )
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


# -- the loop: streamed records, faults, deadlines, host work, progress -------


class CudaAPIError(Exception):
    """An injected driver error, shaped like numba's (the CUresult in ``code``)."""

    def __init__(self, code, msg):
        super().__init__(f"[{code}] {msg}")
        self.code = code


def _raising(code, name):
    def build(shape):
        def launch(bufs):
            raise CudaAPIError(code, f"Call to cuLaunchKernel results in {name}")

        return launch

    return build


def _faulty_path():
    from dataclasses import replace as dc_replace

    from leverctl_kernels.common.path import Variant

    base = saxpy_path()
    variants = {
        **base.variants,
        "e701": Variant("e701", "too many resources", _raising(701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")),
        "e700": Variant("e700", "illegal address", _raising(700, "CUDA_ERROR_ILLEGAL_ADDRESS")),
    }
    return dc_replace(base, variants=variants)


@pytest.mark.sim
def test_an_error_of_one_kernel_fails_its_record_and_a_lost_context_stops_the_run(device):
    path = _faulty_path()
    items = [_item(v, path) for v in ("good", "e701", "plain", "e700", "good")]
    items[4] = _item("good", path, SHAPES[1])  # not the cached record of the first
    streamed = []
    records = run_items(items, device, progress=False, on_record=streamed.append)
    assert streamed == records
    assert [(r["variant"], r["status"]) for r in records] == [
        ("good", "pass"),
        ("e701", "fail"),
        ("plain", "pass"),
        ("e700", "fail"),
    ]
    assert "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" in records[1]["note"]
    assert device.lost and "fake.saxpy e700" in device.lost
    assert why_stopped(len(items), len(records), device) == f"{device.lost}; 1 of 5 planned items not run"


@pytest.mark.sim
def test_a_passed_deadline_stops_before_the_next_item(device, monkeypatch):
    import leverctl.bench.run as run_mod

    now = [100.0]
    monkeypatch.setattr(run_mod.time, "monotonic", lambda: now[0])
    real = run_mod.run_item

    def slow(*a, **k):
        now[0] += 10.0
        return real(*a, **k)

    monkeypatch.setattr(run_mod, "run_item", slow)
    items = [_item("good", shape=s) for s in SHAPES] + [_item("plain", shape=s) for s in SHAPES]
    records = run_items(items, device, progress=False, deadline=115.0)
    assert len(records) == 2
    assert why_stopped(4, 2, device, budget_s=15) == "its time budget of 15 s was spent; 2 of 4 planned items not run"
    assert why_stopped(4, 4, device) is None


@pytest.mark.sim
def test_inputs_and_references_are_made_once_per_shape_for_every_variant(device):
    from dataclasses import replace as dc_replace

    base = saxpy_path()
    made = {"inputs": 0, "reference": 0}

    def count(what, fn):
        def wrapped(*a):
            made[what] += 1
            return fn(*a)

        return wrapped

    path = dc_replace(base, make_inputs=count("inputs", base.make_inputs), reference=count("reference", base.reference))
    items = [_item(v, path, s) for v in ("good", "plain") for s in SHAPES]
    host = HostCache()
    records = run_items(items, device, progress=False, host=host)
    assert [r["status"] for r in records] == ["pass"] * 4
    draws = 2 if device.is_gpu else 1  # a GPU rechecks on a second, fresh draw
    assert made == {"inputs": 2 * draws, "reference": 2 * draws}
    assert host.hits == 4 * draws  # the second variant found both the inputs and the reference


def test_a_full_host_cache_drops_the_least_recently_used_draw():
    import numpy as np

    host = HostCache(max_bytes=2 * 800)
    for key in "abc":
        host.get((key,), lambda: {"x": np.zeros(100)})  # 800 bytes each
    made = []
    host.get(("a",), lambda: made.append("a") or {"x": np.zeros(100)})
    host.get(("c",), lambda: made.append("c") or {"x": np.zeros(100)})
    assert made == ["a"]


def test_the_progress_bar_names_kernel_configuration_and_shape_on_a_terminal():
    import io

    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    item = _item("good")
    with Progress(1, console=console) as bar:
        bar.start(item)
        assert "fake.saxpy [gemv_sw=good] n37" in bar.bar.tasks[0].description.replace("\\[", "[")
        bar.done()
    shown = buf.getvalue()
    assert "fake.saxpy" in shown and "gemv_sw=good" in shown and "n37" in shown and "1/1" in shown


def test_no_progress_bar_when_stderr_is_not_a_terminal():
    import io

    from rich.console import Console

    buf = io.StringIO()
    with Progress(3, console=Console(file=buf, force_terminal=False)) as bar:
        bar.start(_item("good"))
        bar.done()
    assert bar.bar is None and buf.getvalue() == ""


def test_every_record_says_which_tensor_core_instruction_its_variant_ran_on(device):
    import dataclasses

    path = saxpy_path()
    mma = dataclasses.replace(
        path, variants={**path.variants, "good": dataclasses.replace(path.variants["good"], tensor_cores="mma.sync")}
    )
    assert run_item(_item("plain", mma), device, rng_seed=1)["tensor_cores"] is None
    assert run_item(_item("good", mma), device, rng_seed=1)["tensor_cores"] == "mma.sync"


def _tc_path(**declared):
    """saxpy whose ``good`` variant declares ``declared`` and whose ``plain``
    variant's built launch carries wgmma on bf16 (chosen at build time)."""
    import dataclasses

    path = saxpy_path()
    plain = path.variants["plain"]

    def build(shape):
        launch = plain.build(shape)
        launch.tensor_cores, launch.tc_dtype = "wgmma", "bf16"
        return launch

    return dataclasses.replace(
        path,
        variants={
            **path.variants,
            "good": dataclasses.replace(path.variants["good"], **declared),
            "plain": dataclasses.replace(plain, build=build, tensor_cores="mma.sync", tc_dtype="f16"),
        },
    )


@pytest.mark.sim
def test_every_record_says_the_tensor_cores_input_type_next_to_the_instruction(device):
    path = _tc_path(tensor_cores="mma.sync", tc_dtype="s8")
    rec = run_item(_item("good", path), device, rng_seed=1)
    assert (rec["tensor_cores"], rec["tc_dtype"]) == ("mma.sync", "s8")
    assert list(rec).index("tc_dtype") == list(rec).index("tensor_cores") + 1


@pytest.mark.sim
def test_a_built_launch_that_carries_its_instruction_overrides_the_variants_declaration(device):
    rec = run_item(_item("plain", _tc_path()), device, rng_seed=1)
    assert (rec["tensor_cores"], rec["tc_dtype"]) == ("wgmma", "bf16")


def test_an_item_that_fails_before_its_build_keeps_the_variants_declaration():
    path = _tc_path()
    rec = run_item(PlanItem(path, "plain", {}, SHAPES[0], "select() raised", failed=True), Device("sim", SIM_NAME))
    assert (rec["tensor_cores"], rec["tc_dtype"]) == ("mma.sync", "f16")


def test_a_variant_refuses_a_tensor_core_instruction_or_input_type_it_cannot_name():
    from leverctl_kernels.common.path import Variant

    with pytest.raises(ValueError, match="tc_dtype 'fp16'"):
        Variant("v", "s", lambda shape: None, tensor_cores="wgmma", tc_dtype="fp16")
    with pytest.raises(ValueError, match="tensor_cores 'hmma'"):
        Variant("v", "s", lambda shape: None, tensor_cores="hmma")
    assert Variant("v", "s", lambda shape: None, tc_dtype="e4m3").tensor_cores is None  # chosen at build time
