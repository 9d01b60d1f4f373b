"""``leverctl profile`` end to end: the selected variants' kernels compiled
for sm_90a without a GPU, their figures, the kept machine code, the compile
cache, the memory trace, and bad input as one line and exit 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cli_result import assert_one_line_error, run_cli, run_ok_with_cache  # noqa: E402

from leverctl.profile import machine  # noqa: E402

needs_tools = pytest.mark.skipif(
    not (machine.find_tool("ptxas") and machine.find_tool("nvdisasm")), reason="ptxas or nvdisasm not found"
)


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory):
    return tmp_path_factory.mktemp("xdg")


@pytest.fixture()
def cli(capsys, monkeypatch, cache_home):
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    return lambda *args: run_cli(capsys, *args)


@pytest.fixture(scope="module")
def gemv(tmp_path_factory, cache_home):
    """One profile of w4a16.gemv (both variants), kept, as JSON."""
    keep = tmp_path_factory.mktemp("keep")
    out = tmp_path_factory.mktemp("out") / "p.json"
    args = ["profile", "--no-env", "-k", "w4a16.gemv", "--all-variants", "--keep", keep, "-o", out]
    run_ok_with_cache(cache_home, *args)
    return json.loads(out.read_text()), keep


@needs_tools
def test_every_kernel_of_the_gemv_has_its_machine_code_figures(gemv):
    doc, _ = gemv
    assert doc["schema"] == "leverctl.profile/1" and doc["arch"] == "sm_90a" and doc["shapes"] == "model"
    variants = {r["variant"] for r in doc["rows"]}
    assert variants == {"gemv_sw", "gemv_64t"}
    for r in doc["rows"]:
        res, occ, mix = r["resources"], r["occupancy"], r["mix"]
        assert res["registers"] > 0 and res["spill_stores"] == 0 and res["local"] == 0 and res["stack"] == 0
        assert 0 < occ["fraction"] <= 1 and occ["limiter"] in ("warps", "blocks", "registers", "shared memory")
        assert sum(mix["global_loads"].values()) > 0 and sum(mix["global_stores"].values()) > 0
        assert r["flags"] == [] and r["memory_bound"] is True
    assert {r["threads"] for r in doc["rows"] if r["variant"] == "gemv_64t"} == {64}


@needs_tools
def test_the_kept_machine_code_is_what_the_figures_were_read_from(gemv):
    doc, keep = gemv
    row = next(r for r in doc["rows"] if r["variant"] == "gemv_sw")
    kept = sorted((keep / "w4a16.gemv" / "gemv_sw").iterdir())
    assert kept and all({p.name for p in d.iterdir()} == {"kernel.ptx", "kernel.cubin", "kernel.sass"} for d in kept)
    sass = (kept[0] / "kernel.sass").read_text()
    assert machine.instruction_mix(sass).to_json() == row["mix"]


@needs_tools
def test_the_memory_trace_runs_each_variant_once_at_its_profile_shape(gemv):
    doc, _ = gemv
    mem = {(m["variant"], m["profile_shape"]): m for m in doc["memory"]}
    assert {v for v, _ in mem} == {"gemv_sw", "gemv_64t"}
    for m in mem.values():
        g = m["global"]
        assert 0 < g["sector_efficiency"] <= 1 and g["requested_bytes"] >= g["declared_bytes"] > 0


@needs_tools
def test_a_second_profile_compiles_and_captures_nothing(gemv, cli, cache_home):
    def stamps():
        files = [*Path(cache_home).rglob("result.json"), *Path(cache_home).rglob("captures/*.json")]
        return {p: p.stat().st_mtime_ns for p in files}

    before = stamps()
    assert any(p.parent.name == "captures" for p in before) and any(p.name == "result.json" for p in before)
    r = cli("profile", "--no-env", "-k", "w4a16.gemv", "--all-variants", "--no-memory", "-f", "json")
    assert r.code == 0, r.err
    assert stamps() == before


@needs_tools
def test_a_capture_whose_kernels_left_the_cache_is_captured_again(gemv, cli, cache_home, tmp_path):
    import shutil

    doc, _ = gemv
    cache = Path(cache_home) / "leverctl" / "profile"
    for d in cache.iterdir():
        if (d / "result.json").exists():
            shutil.rmtree(d)
    r = cli("profile", "--no-env", "-k", "w4a16.gemv", "--all-variants", "--no-memory", "-f", "json")
    assert r.code == 0, r.err
    strip = lambda rows: [{k: v for k, v in r.items() if k != "dir"} for r in rows]  # noqa: E731
    assert strip(json.loads(r.out)["rows"]) == strip(doc["rows"])


def test_an_unknown_arch_is_one_line_and_exit_2(cli):
    assert_one_line_error(cli("profile", "--no-env", "--arch", "sm_75"), "--arch 'sm_75'", "sm_90a")


@needs_tools  # without them, that is said first
def test_an_unwritable_keep_is_one_line_and_exit_2(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_one_line_error(cli("profile", "--no-env", "--keep", str(blocker / "sub")), "--keep", "cannot write")


@needs_tools
def test_a_bad_shapes_preset_is_one_line_and_exit_2(cli):
    assert_one_line_error(cli("profile", "--no-env", "--shapes", "huge"), "--shapes 'huge'")


@needs_tools
def test_the_markdown_summary_has_one_row_per_variant_with_its_worst_figures(gemv):
    from leverctl.cli.profile import markdown, variant_summaries

    doc, _ = gemv
    summaries = {v["variant"]: v for v in variant_summaries(doc)}
    assert set(summaries) == {"gemv_sw", "gemv_64t"}
    sw = summaries["gemv_sw"]
    rows = [r for r in doc["rows"] if r["variant"] == "gemv_sw"]
    assert sw["max_registers"] == max(r["resources"]["registers"] for r in rows)
    assert sw["min_occupancy"] == min(r["occupancy"]["fraction"] for r in rows)
    # the limiters are what binds at that occupancy: every equal limit of the kernels there, no other's
    low = [r["occupancy"] for r in rows if r["occupancy"]["fraction"] == sw["min_occupancy"]]
    assert sw["limiters"] == sorted({lim for o in low for lim in o["limiters"]})
    assert sw["spills"] == 0 and 128 in sw["global_load_widths"]  # the weights, 16 bytes a lane
    text = markdown(doc)
    assert text.count("\n| w4a16.gemv |") == 2 and "| ▶ gemv_sw |" in text


def test_missing_tools_are_one_line_naming_the_extra_and_exit_2(cli, monkeypatch):
    monkeypatch.setattr(machine, "find_tool", lambda name: None if name == "ptxas" else "/bin/true")
    r = cli("profile", "--no-env", "-k", "w4a16.gemv")
    assert_one_line_error(r, "profile needs ptxas,", "pip install 'leverctl[profile]'")


@needs_tools
def test_a_selected_variant_the_arch_cannot_run_is_one_line_exit_2_and_writes_nothing(cli, tmp_path):
    out = tmp_path / "p.json"
    r = cli(
        "profile", "--no-env", "-e", "metrale", "-k", "attention.proj_fp8", "--arch", "sm_80", "--no-memory", "-o", out
    )
    assert_one_line_error(r, "--arch sm_80 cannot run attention.proj_fp8 m16", "wgmma (sm_90a) only")
    assert not out.exists() and not list(tmp_path.iterdir())
