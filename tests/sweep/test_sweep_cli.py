"""The sweep and report commands end to end, on the fake paths: dry run,
shards merged equal to one run, refusals, reports, the chart and --suggest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import sweep_fakes as fk
from sweep_fakes import cli

from leverctl.bench.records.read import load_results, read_jsonl
from leverctl.bench.records.rules import identity
from leverctl.bench.records.schema import RESULTS_FILE
from leverctl.levers import load_catalog, load_recipe, resolve
from leverctl.levers.resolve import value_json

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake(monkeypatch):
    return fk.install(monkeypatch)


@pytest.fixture
def fake_gpu(monkeypatch):
    return fk.install(monkeypatch, gpu=True)


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())} if d.exists() else {}


# ── dry run ──────────────────────────────────────────────────────────────────


def test_dry_run_json_has_kernels_levers_configurations_total_and_naive_total(fake, capsys, tmp_path):
    code, out, _ = cli(
        ["sweep", "-e", "metrale", "--no-env", "--dry-run", "--format", "json", "--out", tmp_path / "x"], capsys
    )
    doc = json.loads(out)
    assert code == 0 and not (tmp_path / "x").exists()
    assert [(k["kernel"], k["levers"], k["configurations"]) for k in doc["kernels"]] == [
        ("fake.gemv", ["gemv_sw"], 2),
        ("fake.ffn", ["decode_ffn_via_gemm", "decode_split_silu", "gemv_sw"], 8),
        ("fake.grouped", ["moe_prefill_exact_tiles", "moe_prefill_max_load_factor"], 9),
        ("fake.verify", ["gdn_wy17", "gdn_wyn"], 4),
    ]
    assert doc["total"] == 46 and doc["naive_total"] > 10**20
    assert list(doc)[-3:] == ["total", "naive_total", "not_benchmarked"]
    assert fake["runs"] == 0


def test_dry_run_table_and_markdown_name_the_totals_and_idle_levers(fake, capsys):
    code, out, _ = cli(["sweep", "--no-env", "--dry-run", "--shard", "2/3"], capsys)
    assert code == 0 and "total: 20 runs" in out and "this shard: 7" in out
    assert "not benchmarked, diagnostic: steers no kernel" in out and "kv_poison" in out
    code, out, _ = cli(["sweep", "--no-env", "--dry-run", "-f", "markdown", "--kernel", "fake.gemv"], capsys)
    assert code == 0 and "| fake.gemv | `gemv_sw` (on, off) | 2 | 2 | 4 |" in out
    assert "its kernel paths are not in this sweep (--kernel)" in out
    # The naive product names what it scales with: the shapes -k keeps, over every lever.
    assert "every combination of all 20 levers at each of these 2 kernel shapes would be" in out


# ── shards + merge == one run ────────────────────────────────────────────────


def records_set(d: Path):
    return sorted(
        (identity(r), r["variant"], r["status"], json.dumps(r["levers"], sort_keys=True))
        for r in load_results(d).records
    )


def test_shards_merged_give_the_same_set_as_an_unsharded_run(fake, capsys, tmp_path):
    base = ["sweep", "-e", "metrale", "--no-env", "--device", "sim"]
    code, _, _ = cli([*base, "--out", tmp_path / "full"], capsys)
    assert code == 1  # the fake gemm variant fails on purpose
    for i in (1, 2, 3):
        code, _, err = cli([*base, "--shard", f"{i}/3", "--out", tmp_path / f"s{i}"], capsys)
        assert code in (0, 1), err
    code, out, err = cli(
        [
            "report",
            "merge",
            tmp_path / "s1",
            tmp_path / "s2",
            tmp_path / "s3",
            "--out",
            tmp_path / "merged",
            "-f",
            "json",
        ],
        capsys,
    )
    assert code == 1 and "46 of 46 planned records" in err
    assert records_set(tmp_path / "merged") == records_set(tmp_path / "full")
    merged_plan = json.loads((tmp_path / "merged" / "plan.json").read_text())
    assert merged_plan["hash"] == json.loads((tmp_path / "full" / "plan.json").read_text())["hash"]
    assert merged_plan["shard"] is None
    assert json.loads(out)["counts"]["records"] == 46
    # A shard merged with an unrelated plan is refused, and nothing is written.
    code, _, _ = cli([*base, "--levers", "gemv_sw", "--out", tmp_path / "other"], capsys)
    code, _, err = cli(["report", "merge", tmp_path / "s1", tmp_path / "other", "--out", tmp_path / "m2"], capsys)
    assert code == 2 and "different sweep plan" in err and not (tmp_path / "m2").exists()
    # Into a directory that already holds results: refused, untouched.
    before = snapshot(tmp_path / "merged")
    code, _, err = cli(["report", "merge", tmp_path / "s1", "--out", tmp_path / "merged"], capsys)
    assert code == 2 and "already holds" in err and snapshot(tmp_path / "merged") == before


def test_merge_refuses_results_of_another_catalog(fake, capsys, tmp_path):
    cat = tmp_path / "atlas-edited.toml"
    cat.write_text((ROOT / "leverctl" / "catalogs" / "atlas.toml").read_text() + "\n# edited\n")
    cli(["sweep", "--no-env", "--device", "sim", "--kernel", "fake.gemv", "--out", tmp_path / "a"], capsys)
    cli(
        ["sweep", "--no-env", "--catalog", cat, "--device", "sim", "--kernel", "fake.gemv", "--out", tmp_path / "b"],
        capsys,
    )
    code, _, err = cli(["report", "merge", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "m"], capsys)
    assert code == 2 and "different lever catalog" in err and len(err.strip().splitlines()) == 1


def test_merge_refuses_a_bench_document(fake, capsys, tmp_path):
    doc = tmp_path / "bench.json"
    doc.write_text(json.dumps({"schema": "leverctl.bench/1", "device": {"kind": "sim"}, "results": []}))
    code, _, err = cli(["report", "merge", doc, "--out", tmp_path / "m"], capsys)
    assert code == 2 and "has no plan.json" in err


# ── bad input: one line, exit 2, nothing touched ────────────────────────────


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shard", "3/2"], "I must be between 1 and N"),
        (["--shard", "x"], "write I/N"),
        (["--levers", "nope"], "no such lever field"),
        (["--format", "yaml"], "--format"),
        (["--kernel", "fake.nothing"], "no such kernel path"),
    ],
)
def test_bad_sweep_input_is_one_line_exit_2(fake, capsys, tmp_path, args, message):
    code, out, err = cli(["sweep", "--no-env", "--device", "sim", "--out", tmp_path / "o", *args], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists() and fake["runs"] == 0


def test_resume_with_another_plan_is_refused_and_the_directory_untouched(fake, capsys, tmp_path):
    out = tmp_path / "o"
    cli(["sweep", "--no-env", "--device", "sim", "--kernel", "fake.gemv", "--out", out], capsys)
    before = snapshot(out)
    code, _, err = cli(["sweep", "--no-env", "--device", "sim", "--out", out, "--resume"], capsys)
    assert code == 2 and "this sweep's plan is" in err and snapshot(out) == before
    code, _, err = cli(["sweep", "--no-env", "--device", "sim", "--kernel", "fake.gemv", "--out", out], capsys)
    assert code == 2 and "pass --resume" in err and snapshot(out) == before
    runs = fake["runs"]
    code, _, err = cli(
        ["sweep", "--no-env", "--device", "sim", "--kernel", "fake.gemv", "--out", out, "--resume"], capsys
    )
    assert code == 0 and fake["runs"] == runs and "4 on disk, 0 to run" in err


# ── reports ──────────────────────────────────────────────────────────────────


def test_a_simulator_sweep_reports_pass_and_fail_and_exits_1_on_a_failure(fake, capsys, tmp_path):
    code, out, err = cli(["sweep", "-e", "metrale", "--no-env", "--device", "sim", "--out", tmp_path / "o"], capsys)
    assert code == 1
    assert "fake simulator (correctness only, no timings): 38 pass, 8 fail of 46 planned" in out
    assert "Failing configurations (never ranked):" in out and "gemm" in out
    assert "simulated runs: configurations choosing the same variant share one" in err
    code, out, _ = cli(
        ["sweep", "--no-env", "--device", "sim", "--kernel", "fake.verify", "--out", tmp_path / "ok"], capsys
    )
    assert code == 0 and "8 pass, 0 fail" in out


def test_a_gpu_sweep_ranks_and_charts_the_lever_effects(fake_gpu, capsys, tmp_path):
    code, out, _ = cli(["sweep", "--no-env", "--shapes", "smoke", "--out", tmp_path / "o"], capsys)
    assert code == 1  # gemm fails
    assert "fastest correct" in out and "Lever effects" in out and "gemv_sw on" in out and "█" in out
    code, md, _ = cli(["report", "show", tmp_path / "o", "-f", "markdown"], capsys)
    assert code == 0 and md.startswith("### leverctl: atlas on Fake GPU")
    assert "| fake.gemv | n37 | the recipe's own | sw |" in md and "**Failing configurations**" in md
    code, js, _ = cli(["report", "show", tmp_path / "o" / "results.jsonl", "-f", "json"], capsys)
    doc = json.loads(js)
    assert doc["timed"] and doc["counts"] == {"records": 20, "pass": 16, "fail": 4, "planned": 20}
    best = {(r["kernel"], r["shape"]): r["best"]["config"] for r in doc["rankings"]}
    assert best[("fake.ffn", "n37")] == "decode_ffn_via_gemm=0,decode_split_silu=0,gemv_sw=1"
    # The chart: well-formed SVG with a bar per lever effect.
    code, _, err = cli(["report", "plot", tmp_path / "o", "--out", tmp_path / "effects.svg"], capsys)
    assert code == 0
    svg = ET.parse(tmp_path / "effects.svg").getroot()
    bars = [
        e
        for e in svg.iter("{http://www.w3.org/2000/svg}rect")
        if e.find("{http://www.w3.org/2000/svg}title") is not None
    ]
    assert len(bars) == len(doc["effects"]) > 0
    assert "gemv_sw on" in (tmp_path / "effects.svg").read_text()


def test_plot_refuses_png_and_untimed_results_in_one_line(fake, capsys, tmp_path):
    cli(["sweep", "--no-env", "--device", "sim", "--kernel", "fake.gemv", "--out", tmp_path / "o"], capsys)
    code, _, err = cli(["report", "plot", tmp_path / "o", "--out", tmp_path / "c.png"], capsys)
    assert code == 2 and "rasterizer" in err and not (tmp_path / "c.png").exists()
    code, _, err = cli(["report", "plot", tmp_path / "o", "--out", tmp_path / "c.svg"], capsys)
    assert code == 2 and "no lever effects to plot" in err and not (tmp_path / "c.svg").exists()


# ── --suggest ────────────────────────────────────────────────────────────────


def test_suggest_writes_a_recipe_extending_the_swept_one_that_resolves_to_the_winners(fake_gpu, capsys, tmp_path):
    parent = tmp_path / "slow.toml"
    parent.write_text(
        f'extends = "{ROOT / "recipes" / "atlas-defaults.toml"}"\n'
        '[levers]\nATLAS_NO_GEMV_SW = "1"\nATLAS_GDN_WY17 = "0"\n'
    )
    out = tmp_path / "tuned" / "fast.toml"
    out.parent.mkdir()
    code, _, err = cli(["sweep", "--no-env", "--recipe", parent, "--out", tmp_path / "o", "--suggest", out], capsys)
    assert code == 1 and f"wrote {out}" in err  # the failing gemm is reported, the winners still written
    text = out.read_text()
    assert 'extends = "../slow.toml"' in text and "ATLAS_GDN_WY17" in text
    got = resolve(load_catalog("atlas"), recipe=load_recipe(out), env={}).values()
    assert got["gemv_sw"] is True and got["gdn_wy17"] is True and got["decode_ffn_via_gemm"] is False
    assert value_json(got["gdn_wyn"]) is True


def test_suggest_is_refused_up_front_in_the_simulator_and_never_overwrites(fake, capsys, tmp_path):
    code, _, err = cli(
        ["sweep", "--no-env", "--device", "sim", "--out", tmp_path / "o", "--suggest", tmp_path / "s.toml"], capsys
    )
    assert code == 2 and "simulator has none" in err and not (tmp_path / "o").exists()
    (tmp_path / "s.toml").write_text("# mine\n")
    code, _, err = cli(["sweep", "--no-env", "--out", tmp_path / "o", "--suggest", tmp_path / "s.toml"], capsys)
    assert code == 2 and "exists" in err and (tmp_path / "s.toml").read_text() == "# mine\n"


# ── interruptions ────────────────────────────────────────────────────────────


def test_ctrl_c_exits_130_keeps_what_finished_and_says_how_to_resume(monkeypatch, capsys, tmp_path):
    import leverctl.bench.run as runmod

    calls = fk.install(monkeypatch)
    real = runmod.run_item

    def interrupted_after_three(item, device, rng_seed=0, *, stop=None):
        if calls["runs"] == 3:
            raise KeyboardInterrupt
        return real(item, device, rng_seed, stop=stop)

    monkeypatch.setattr(runmod, "run_item", interrupted_after_three)
    out = tmp_path / "o"
    code, stdout, err = cli(["sweep", "--no-env", "--device", "sim", "--out", out], capsys)
    assert code == 130 and stdout == ""
    assert "records on disk" in err and "the same command with --resume runs the rest" in err
    kept = len(read_jsonl(out / RESULTS_FILE).records)
    assert kept >= 3
    monkeypatch.setattr(runmod, "run_item", real)
    code, stdout, err = cli(["sweep", "--no-env", "--device", "sim", "--out", out, "--resume"], capsys)
    assert code == 1 and f"{kept} on disk" in err  # resumed; the fake gemm fails
    assert len(read_jsonl(out / RESULTS_FILE).records) == 20


def test_a_lost_gpu_context_stops_the_sweep_instead_of_failing_every_later_item(monkeypatch, capsys, tmp_path):
    import leverctl.bench.run as runmod

    calls = fk.install(monkeypatch, gpu=True)
    real = runmod.run_item

    def faulting(item, device, rng_seed=0, *, stop=None):
        rec = real(item, device, rng_seed, stop=stop)
        if calls["runs"] == 2:
            device.lost = "the CUDA context was lost in fake.gemv t64 (CudaAPIError)"
            rec["status"] = "fail"
        return rec

    monkeypatch.setattr(runmod, "run_item", faulting)
    code, _, err = cli(["sweep", "--no-env", "--shapes", "smoke", "--out", tmp_path / "o"], capsys)
    assert code == 1 and "stopped with 2 of 20 records on disk" in err and "CUDA context was lost" in err
    assert len(read_jsonl(tmp_path / "o" / RESULTS_FILE).records) == 2


def test_report_show_reads_a_bench_document(capsys, tmp_path):
    doc = {
        "schema": "leverctl.bench/1",
        "engine": "atlas",
        "device": {"kind": "sim", "name": "sim"},
        "results": [
            {
                "kernel": "w4a16.gemv",
                "variant": "gemv_sw",
                "levers": {"gemv_sw": True},
                "config": "gemv_sw=1",
                "shape": {"label": "m1"},
                "status": "pass",
                "timing": None,
            }
        ],
    }
    (tmp_path / "b.json").write_text(json.dumps(doc))
    code, out, _ = cli(["report", "show", tmp_path / "b.json"], capsys)
    assert code == 0 and "1 pass, 0 fail" in out and "w4a16.gemv" in out


def _rec(kernel, variant, shape, tc=None, dtype=None, us=None):
    r = {
        "kernel": kernel,
        "variant": variant,
        "levers": {"x": True},
        "config": "x=1",
        "shape": {"label": shape},
        "status": "pass",
        "timing": None if us is None else {"median_us": us, "samples": 10},
        "device": "NVIDIA H200" if us else "sim",
    }
    if tc:
        r.update(tensor_cores=tc, tc_dtype=dtype)
    return r


@pytest.mark.parametrize("timed", [False, True], ids=["simulator-run", "timed-run"])
def test_report_show_has_the_cores_column_bench_has_and_keeps_kernel_names_whole_at_80(capsys, tmp_path, timed):
    kind = "gpu" if timed else "sim"
    us = (lambda x: x) if timed else (lambda x: None)
    doc = {
        "schema": "leverctl.bench/1",
        "engine": "atlas",
        "device": {"kind": kind, "name": "NVIDIA H200" if kind == "gpu" else "sim"},
        "results": [
            _rec("w4a16.gemv_dual", "gemv_dual_sw", "m1-n37-k264", us=us(5.0)),
            _rec("gdn.verify", "wy17", "smoke t17 hk2 hv4 d12", "mma.sync", "f16", us=us(7.0)),
        ],
    }
    (tmp_path / "b.json").write_text(json.dumps(doc))
    code, md, _ = cli(["report", "show", tmp_path / "b.json", "-f", "markdown"], capsys)
    head = next(line for line in md.splitlines() if line.startswith("| kernel"))
    assert code == 0 and "| cores |" in head
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ") and "." in line}
    assert "mma.sync f16" in rows["gdn.verify"] and "FP32" in rows["w4a16.gemv_dual"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLAS_", "METRALE_"))}
    env["COLUMNS"] = "80"
    p = subprocess.run(
        [sys.executable, "-m", "leverctl", "report", "show", str(tmp_path / "b.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "w4a16.gemv_dual" in p.stdout and "cores" in p.stdout, p.stdout  # the name whole, not split at "_"
    assert max(map(len, p.stdout.splitlines())) <= 80


# ── repeated records, report show -o ─────────────────────────────────────────


def test_repeated_records_are_counted_once_with_a_warning_by_report_merge_and_resume(fake_gpu, capsys, tmp_path):
    out = tmp_path / "o"
    cli(["sweep", "--no-env", "--shapes", "smoke", "--kernel", "fake.gemv", "--out", out], capsys)
    results = out / RESULTS_FILE
    lines = results.read_bytes().splitlines(keepends=True)
    results.write_bytes(b"".join(lines + lines[:2]))
    n = len(lines)
    warning = (
        f"leverctl: warning: {out}: 2 record(s) repeat an earlier one's kernel, shape and levers "
        f"(line {n + 1}, line {n + 2}); each counted once, the later kept"
    )
    code, js, err = cli(["report", "show", out, "-f", "json"], capsys)
    assert code == 0 and json.loads(js)["counts"]["records"] == n and warning in err.splitlines()
    code, _, err = cli(["report", "merge", out, "--out", tmp_path / "m"], capsys)
    assert code == 0 and warning in err.splitlines()
    assert len(read_jsonl(tmp_path / "m" / RESULTS_FILE).records) == n
    assert (tmp_path / "m" / RESULTS_FILE).read_bytes().count(b"\n") == n  # merged: each once
    code, _, err = cli(
        ["sweep", "--no-env", "--shapes", "smoke", "--kernel", "fake.gemv", "--out", out, "--resume"], capsys
    )
    assert code == 0 and f"{n} on disk, 0 to run" in err and "record(s) repeat an earlier one's" in err


def test_report_show_writes_its_report_to_a_file_with_out(fake_gpu, capsys, tmp_path):
    cli(["sweep", "--no-env", "--shapes", "smoke", "--kernel", "fake.gemv", "--out", tmp_path / "o"], capsys)
    code, stdout, err = cli(["report", "show", tmp_path / "o", "-f", "json", "-o", tmp_path / "r.json"], capsys)
    assert code == 0 and stdout == "" and f"wrote {tmp_path / 'r.json'}" in err
    assert json.loads((tmp_path / "r.json").read_text())["counts"]["records"] == 4
