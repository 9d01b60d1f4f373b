"""The GPU run (leverctl.bench.campaign), exercised in the simulator: every
recipe in one process, records streamed to JSONL, a SIGTERM midway, a lost
context, and bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_result import use_paths

from leverctl.bench import campaign

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLAS_", "METRALE_"))}
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_recipes_that_set_levers_run_first_and_each_engines_defaults_last():
    names = [p.name for p in campaign.default_recipes()]
    assert names[-2:] == ["atlas-defaults.toml", "metrale-defaults.toml"]
    assert set(names) == {p.name for p in RECIPES.glob("*.toml")}


def test_paths_run_breadth_first_keeping_each_paths_own_order():
    from types import SimpleNamespace as NS

    def it(path, shape, variant):
        return NS(path=NS(name=path), shape=NS(label=shape), variant=variant)

    items = [it("a", "s1", "x"), it("a", "s1", "base"), it("a", "s2", "x"), it("a", "s3", "x")]
    items += [it("b", "t1", "y"), it("b", "t2", "y"), it("c", "u1", "z")]
    got = [(i.path.name, i.shape.label, i.variant) for i in campaign.breadth_first(items)]
    assert got == [
        ("a", "s1", "x"), ("a", "s1", "base"), ("b", "t1", "y"), ("c", "u1", "z"),
        ("a", "s2", "x"), ("b", "t2", "y"), ("a", "s3", "x"),
    ]  # fmt: skip
    assert sorted(map(id, campaign.breadth_first(items))) == sorted(map(id, items))  # nothing lost


@pytest.mark.sim
def test_a_sigterm_midway_leaves_every_finished_record_on_disk(tmp_path):
    out = tmp_path / "gpu"
    recipes = [
        str(RECIPES / f"{n}.toml")
        for n in (
            "qwen3-next-80b-a3b",
            "qwen3-8b",
            "llama-3.1-8b-atlas",
            "qwen3-next-80b-a3b-metrale",
            "atlas-defaults",
        )
    ]
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "leverctl.bench.campaign",
            str(out),
            *recipes,
            "--device",
            "sim",
            "--kernel",
            "w4a16.gemv",
            "--kernel",
            "gdn.decode",
            "--budget",
            "600",
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    records = out / "records.jsonl"
    deadline = time.monotonic() + 120
    while len(_lines(records)) < 3 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.poll() is None, "the run ended before it could be stopped midway"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "leverctl: terminated (SIGTERM)"
    kept = _lines(records)  # every line is whole JSON: each was written at once and fsynced
    assert len(kept) >= 3
    assert all(r["recipe"] and r["run"] in ("main", "against") and r["status"] == "pass" for r in kept)
    assert json.loads((out / "device.json").read_text())["device"]["kind"] == "sim"
    # Each recipe that was started has its document, and together they hold
    # exactly the streamed records; the one in flight says it was stopped.
    in_docs = set()
    stopped = []
    for doc_path in out.glob("bench-*.json"):
        doc = json.loads(doc_path.read_text())
        name = doc_path.stem.removeprefix("bench-")
        for run, recs in (("main", doc["results"]), ("against", (doc["against"] or {}).get("results", []))):
            in_docs |= {(name, run, r["kernel"], r["shape"]["label"], r["config"]) for r in recs}
        if doc["stopped"]:
            stopped.append(doc["stopped"])
    assert in_docs == {(r["recipe"], r["run"], r["kernel"], r["shape"]["label"], r["config"]) for r in kept}
    assert len(stopped) == 1 and stopped[0].startswith("terminated (SIGTERM) after")


@pytest.mark.sim
def test_a_lost_context_stops_the_run_writes_what_it_has_and_lists_the_recipes_left(tmp_path, monkeypatch, capsys):
    import leverctl.bench.run as run_mod

    def faulting(item, device, *a, **k):
        device.lost = f"the CUDA context was lost in {item.kernel} {item.variant} (CUDA_ERROR_ILLEGAL_ADDRESS)"
        return run_mod.empty_record(item, device)

    monkeypatch.setattr(run_mod, "run_item", faulting)
    out, left = tmp_path / "gpu", tmp_path / "left.txt"
    first, *rest = [RECIPES / f"{n}.toml" for n in ("qwen3-8b", "atlas-defaults", "metrale-defaults")]
    code = campaign.main(
        [str(out), str(first), *map(str, rest), "--device", "sim", "--kernel", "w4a16.gemv", "--left", str(left)]
    )
    assert code == 1
    assert len(_lines(out / "records.jsonl")) == 1
    doc = json.loads((out / "bench-qwen3-8b.json").read_text())
    assert "ILLEGAL_ADDRESS" in doc["stopped"] and len(doc["results"]) == 1
    assert left.read_text().splitlines() == [str(p) for p in rest]
    assert not (out / "bench-atlas-defaults.json").exists()
    assert "the CUDA context was lost; not run: atlas-defaults, metrale-defaults" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--budget", "0"], "--budget must be positive, not 0"),
        (["--time-cap", "-1"], "--time-cap must be positive"),
        (["--time-cap", "nan"], "--time-cap must be positive, not nan"),
        (["--budget", "nan"], "--budget must be positive, not nan"),
        (["--against", "llama"], "--against 'llama': choose defaults or none"),
        (["{tmp}/absent.toml"], "{tmp}/absent.toml: no such recipe file"),
        (["--budget", "soon"], "argument --budget: invalid float value: 'soon'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_kernel(tmp_path, args, fragment):
    out = tmp_path / "gpu"
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    p = subprocess.run(
        [sys.executable, "-m", "leverctl.bench.campaign", str(out), *args, "--device", "sim"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and p.stdout == "" and len(lines) == 1, p.stderr
    assert lines[0].startswith("leverctl: ") and fragment.replace("{tmp}", str(tmp_path)) in lines[0]
    assert not out.exists()


@pytest.mark.sim
def test_the_device_figures_are_measured_once_for_every_recipe_and_said_in_one_line(tmp_path, monkeypatch, capsys):
    from test_records_doc import FixedRig

    from leverctl.bench import device as devmod

    asked: list[str] = []

    class CountingRig(FixedRig):
        def fp8_tflops(self):  # an sm_80 part: no FP8 form
            asked.append("fp8_tflops")
            self.why_none = {"fp8_tflops": "the device has no FP8 tensor-core form the burner builds"}

        def bf16_tflops(self):
            asked.append("bf16_tflops")
            return 312.4

    from bench_fakes import saxpy_path

    from leverctl.cli import common

    gpu = devmod.Device(kind="gpu", name="Fixed GPU", compute_capability="8.0", _rig=CountingRig())
    monkeypatch.setattr(devmod, "choose", lambda *a, **k: gpu)
    use_paths(monkeypatch, [saxpy_path()])  # a kernel the simulator runs at once
    out = tmp_path / "gpu"
    recipes = [str(RECIPES / f"{n}.toml") for n in ("qwen3-8b", "metrale-defaults")]
    code = campaign.main([str(out), *recipes, "--shapes", "smoke", "--budget", "600"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert asked == ["bf16_tflops", "fp8_tflops"]  # once, for both recipes
    line = (
        "leverctl campaign: device figures: copy 4000 GB/s, FP32 60.0 TFLOP/s, BF16 tensor cores 312 TFLOP/s, "
        "cuBLAS BF16 GEMM 650 TFLOP/s (fp8_tflops not measured: the device has no FP8 tensor-core form the "
        "burner builds)"
    )
    assert line in err.splitlines()
    gathered = json.loads((out / "device.json").read_text())
    assert (gathered["device"]["bf16_tflops"], gathered["device"]["fp8_tflops"]) == (312.4, None)
    assert gathered["note"] == "fp8_tflops not measured: the device has no FP8 tensor-core form the burner builds"
    for name in ("qwen3-8b", "metrale-defaults"):
        md = (out / f"bench-{name}.md").read_text()
        assert "BF16 tensor cores 312 TFLOP/s, cuBLAS BF16 GEMM 650 TFLOP/s." in md
    recs = _lines(out / "records.jsonl")
    assert recs and all(r["roofline"]["compute_rate"] == "fp32_tflops" for r in recs)


def test_a_sigterm_inside_a_held_section_waits_for_its_end_whichever_thread_it_reaches():
    """The record written to two places: a SIGTERM raised from another
    thread (the simulator runs CUDA threads as threads, which a per-thread
    signal mask does not cover) is raised only once the section is done."""
    import threading

    from leverctl.bench.run import Terminated, signals_held, terminate_as_interrupt

    done = []
    with pytest.raises(Terminated):
        with terminate_as_interrupt():
            with signals_held():
                t = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGTERM))
                t.start()
                t.join()
                for _ in range(100_000):  # bytecode enough for the handler to run, were it not held
                    pass
                done.append("both writes")
            done.append("not reached")
    assert done == ["both writes"]
    with pytest.raises(KeyboardInterrupt):
        with terminate_as_interrupt():
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("second")
    assert done[-1] == "second"
