"""``leverctl bench`` and ``leverctl kernels`` end to end, through the real
entry point (its error table included), on fake kernel paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from bench_fakes import saxpy_path, state_path
from cli_result import use_paths

from leverctl.bench.device import probe_gpu
from leverctl.cli import common as cli_common
from leverctl.errors import UserError

HAS_GPU = probe_gpu().ok
no_gpu_here = pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU")


def run_cli(capsys, *args) -> tuple[int, str, str]:
    from leverctl.cli.app import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


@pytest.fixture
def fake_paths(monkeypatch):
    """The registry seen by the commands: a correct saxpy chosen by
    gemv_sw, and an in-place state path (Atlas only)."""
    paths = [saxpy_path(), state_path()]
    use_paths(monkeypatch, paths)
    return paths


@pytest.fixture
def broken_paths(monkeypatch):
    paths = [
        saxpy_path(
            name="fake.broken", levers=("fake_variant",), lever_defaults={"fake_variant": "wrong"}, engines=("atlas",)
        )
    ]
    use_paths(monkeypatch, paths)
    return paths


# -- bad input: exit 2, one line on stderr, before any kernel runs -----------


@no_gpu_here
def test_device_gpu_without_a_gpu_exits_2_with_one_line_saying_why():
    # A fresh process: the choice must happen before numba.cuda is loaded.
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    p = subprocess.run(
        [sys.executable, "-m", "leverctl", "bench", "--device", "gpu", "--no-env"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.splitlines() == [f"leverctl: --device gpu: {probe_gpu().reason}"]


def test_an_unknown_kernel_exits_2_with_a_suggestion(capsys, fake_paths):
    code, out, err = run_cli(capsys, "bench", "--no-env", "--device", "sim", "--kernel", "fake.saxpi")
    assert code == 2 and out == ""
    assert "--kernel fake.saxpi: no such kernel path (did you mean fake.saxpy?)" in err
    assert len(err.strip().splitlines()) == 1


def test_model_shapes_in_the_simulator_are_refused_without_force(capsys, fake_paths):
    code, _, err = run_cli(capsys, "bench", "--no-env", "--device", "sim", "--shapes", "model")
    assert code == 2 and "would take hours" in err and "--force" in err


@pytest.mark.parametrize(
    "args, msg",
    [
        (("--format", "yaml"), "--format 'yaml'"),
        (("--shapes", "huge"), "--shapes 'huge'"),
        (("--device", "tpu"), "--device 'tpu'"),
        (("--set", "ATLAS_NO_GEMV_SWW=1"), "unknown"),
    ],
)
def test_bad_options_exit_2(capsys, fake_paths, args, msg):
    code, out, err = run_cli(capsys, "bench", "--no-env", *args)
    assert code == 2 and out == "" and msg in err


# -- runs in the simulator ---------------------------------------------------


@pytest.mark.sim
@no_gpu_here
def test_auto_without_a_gpu_says_once_that_it_only_checks_correctness(capsys, fake_paths):
    code, out, err = run_cli(capsys, "bench", "--no-env", "--kernel", "fake.saxpy")
    assert code == 0
    assert err.count("without timings") == 1 and probe_gpu().reason in err
    assert "fake.saxpy" in out and "PASS" in out


@pytest.mark.sim
def test_json_is_the_documented_document(capsys, fake_paths):
    code, out, err = run_cli(
        capsys, "bench", "--no-env", "--device", "sim", "--format", "json", "--set", "ATLAS_NO_GEMV_SW=1"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "leverctl.bench/1" and doc["engine"] == "atlas"
    assert doc["device"]["kind"] == "sim" and doc["against"] is None
    assert doc["levers"]["levers"]["gemv_sw"]["value"] is False
    by_kernel = {(r["kernel"], r["shape"]["label"]): r for r in doc["results"]}
    assert set(by_kernel) == {
        ("fake.saxpy", "n37"),
        ("fake.saxpy", "n64"),
        ("fake.state", "n37"),
        ("fake.state", "n64"),
    }
    saxpy = by_kernel[("fake.saxpy", "n37")]
    assert (saxpy["variant"], saxpy["config"], saxpy["status"]) == ("plain", "gemv_sw=0", "pass")
    assert all(r["timing"] is None for r in doc["results"])


@pytest.mark.sim
def test_markdown_and_a_file_written_atomically(capsys, fake_paths, tmp_path):
    out_file = tmp_path / "sub" / "bench.md"
    code, out, err = run_cli(
        capsys,
        "bench",
        "--no-env",
        "--device",
        "sim",
        "--format",
        "markdown",
        "--kernel",
        "fake",
        "--out",
        str(out_file),
    )
    assert code == 0 and out == ""
    text = out_file.read_text()
    assert text.startswith("# leverctl bench: atlas") and "| fake.state | good |" in text
    assert sorted(p.name for p in out_file.parent.iterdir()) == ["bench.md"]  # no temp file left


@pytest.mark.sim
def test_a_failing_kernel_makes_the_exit_code_1(capsys, broken_paths):
    code, out, err = run_cli(capsys, "bench", "--no-env", "--device", "sim")
    assert code == 1
    assert "FAIL" in out and "rel error" in out


@pytest.mark.sim
def test_against_defaults_runs_both_lever_sets_with_a_null_speedup_in_the_simulator(capsys, fake_paths):
    code, out, err = run_cli(
        capsys,
        "bench",
        "--no-env",
        "--device",
        "sim",
        "--kernel",
        "fake.saxpy",
        "--set",
        "ATLAS_NO_GEMV_SW=1",
        "--against",
        "defaults",
        "--format",
        "json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["against"]["name"] == "defaults"
    assert [r["variant"] for r in doc["results"]] == ["plain", "plain"]
    assert [r["variant"] for r in doc["against"]["results"]] == ["good", "good"]
    assert [r["speedup_vs_against"] for r in doc["results"]] == [None, None]


@pytest.mark.sim
def test_a_metrale_run_skips_atlas_only_paths(capsys, fake_paths):
    code, out, err = run_cli(capsys, "bench", "--no-env", "--device", "sim", "--engine", "metrale", "--format", "json")
    assert code == 0, err
    assert {r["kernel"] for r in json.loads(out)["results"]} == {"fake.saxpy"}


# -- leverctl kernels -----------------------------------------------------------


def test_kernels_lists_variants_the_levers_that_choose_them_and_the_selection(capsys, fake_paths):
    code, out, err = run_cli(capsys, "kernels", "--no-env", "--set", "ATLAS_NO_GEMV_SW=1", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    saxpy = next(p for p in doc["paths"] if p["name"] == "fake.saxpy")
    assert saxpy["applies"] and saxpy["levers"] == {"gemv_sw": {"value": False, "from": "catalog"}}
    assert {s["variant"] for s in saxpy["selected"]} == {"plain"}
    chosen = {v["name"]: v["chosen_by"] for v in saxpy["variants"]}
    assert chosen["good"] == ["gemv_sw=1"] and chosen["plain"] == ["gemv_sw=0"] and chosen["nan"] == []
    state = next(p for p in doc["paths"] if p["name"] == "fake.state")
    assert state["levers"] == {"fake_update": {"value": True, "from": "path default"}}


def test_kernels_table_marks_the_selected_variant(capsys, fake_paths):
    code, out, err = run_cli(capsys, "kernels", "--no-env", "--engine", "metrale")
    assert code == 0, err
    assert "▶ good" in out and "(not in this engine)" in out


# -- interruptions and lost contexts keep what is finished -------------------


def _stop_at_third_launch(monkeypatch, exc):
    """The real run_item, until the third call raises ``exc``."""
    import leverctl.bench.run as run_mod

    real = run_mod.run_item
    calls = []

    def run_item(*a, **k):
        calls.append(a[0].key)
        if len(calls) == 3:
            raise exc
        return real(*a, **k)

    monkeypatch.setattr(run_mod, "run_item", run_item)


@pytest.mark.sim
def test_ctrl_c_keeps_the_records_finished_so_far_in_the_output_file(capsys, fake_paths, monkeypatch, tmp_path):
    _stop_at_third_launch(monkeypatch, KeyboardInterrupt())
    out_file = tmp_path / "bench.json"
    code, out, err = run_cli(capsys, "bench", "--no-env", "--device", "sim", "--format", "json", "-o", str(out_file))
    assert code == 130 and out == ""
    assert err.strip().splitlines()[-1] == f"leverctl: interrupted; the 2 records finished so far are in {out_file}"
    doc = json.loads(out_file.read_text())
    assert [r["status"] for r in doc["results"]] == ["pass", "pass"]
    assert doc["stopped"] == "interrupted after 2 records"


@pytest.mark.sim
def test_sigterm_keeps_the_records_finished_so_far_too(capsys, fake_paths, monkeypatch, tmp_path):
    from leverctl.bench.run import Terminated

    _stop_at_third_launch(monkeypatch, Terminated())
    out_file = tmp_path / "bench.md"
    code, _, err = run_cli(capsys, "bench", "--no-env", "--device", "sim", "--format", "markdown", "-o", str(out_file))
    assert code == 130 and "terminated (SIGTERM); the 2 records finished so far" in err
    assert "Stopped before the plan ended: terminated (SIGTERM) after 2 records." in out_file.read_text()


@pytest.mark.sim
def test_a_lost_context_stops_the_bench_with_exit_1_and_says_why(capsys, fake_paths, monkeypatch):
    import leverctl.bench.run as run_mod

    real = run_mod.run_item

    def faulting(item, device, *a, **k):
        rec = real(item, device, *a, **k)
        device.lost = f"the CUDA context was lost in {item.kernel} {item.variant} (CUDA_ERROR_ILLEGAL_ADDRESS)"
        return {**rec, "status": "fail"}

    monkeypatch.setattr(run_mod, "run_item", faulting)
    code, out, err = run_cli(capsys, "bench", "--no-env", "--device", "sim", "--format", "json")
    assert code == 1
    doc = json.loads(out)
    assert len(doc["results"]) == 1
    assert doc["stopped"].endswith("3 of 4 planned items not run") and "ILLEGAL_ADDRESS" in doc["stopped"]
    assert "leverctl bench: stopped: the CUDA context was lost" in err


@pytest.mark.sim
def test_a_dense_recipe_plans_no_gdn_path_and_says_so(capsys, monkeypatch):
    from dataclasses import replace

    paths = [saxpy_path(), replace(saxpy_path(name="fake.gdn"), extra={"model_sections": ("gdn",)})]
    use_paths(monkeypatch, paths)
    code, out, err = run_cli(capsys, "bench", "--no-env", "--device", "sim", "--recipe", "qwen3-8b", "--format", "json")
    assert code == 0, err
    assert {r["kernel"] for r in json.loads(out)["results"]} == {"fake.saxpy"}
    assert "leverctl bench: fake.gdn not planned: the model Qwen3-8B has no [model.gdn]" in err


@pytest.mark.parametrize("engine, absent", [("atlas", "gdn.fused_conv"), ("metrale", "gdn.decode")])
def test_a_family_named_with_kernel_stands_for_the_paths_its_engine_has(engine, absent):
    from leverctl.cli.common import registered_paths, select_paths, setup

    res = setup(engine=engine, no_env=True).resolve(quiet=True)
    chosen = [p.name for p in select_paths(registered_paths(), ["gdn"], res)]
    assert "gdn.prefill" in chosen and absent not in chosen
    with pytest.raises(UserError, match=f"--kernel {absent}: {engine} has no such path"):
        select_paths(registered_paths(), [absent], res)


def test_the_tables_give_each_path_what_kernel_selection_reads_of_its_declaration():
    """``--kernel`` is checked against the decision tables before the
    kernels load, then chosen among the declarations: both must agree."""
    from leverctl.cli.common import TablePath, registered_paths, table_paths

    assert table_paths() == [TablePath.of(p) for p in registered_paths()]


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
def test_kernels_describes_every_real_path_in_both_engines_without_an_error(capsys, engine):
    """A path the engine does not have is listed without lever values (its
    catalog may lack the levers: Atlas has no ``ffn_nvfp4_mmq``), never as
    an error; a path it has shows every lever it is steered by."""
    code, out, err = run_cli(capsys, "kernels", "--no-env", "--engine", engine, "--format", "json")
    assert code == 0, err
    paths = json.loads(out)["paths"]
    from leverctl_kernels.selection import TABLES

    # every decision table's path, once (33 with gdn.prefill_multi_stream)
    assert [p["name"] for p in paths] == list(TABLES) and len(paths) >= 33
    assert [p["name"] for p in paths if "error" in p] == []
    assert {p["name"]: p["levers"] for p in paths if not p["applies"]} == {
        p["name"]: {} for p in paths if not p["applies"]
    }
    assert all(p["levers"] for p in paths if p["applies"])
