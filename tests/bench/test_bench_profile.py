"""``bench --profile`` and ``bench --ncu``: each record's profile block (the
machine code and simulated memory accesses of its variant; on a GPU, ncu's
counters), ``report show``'s profile view, and ``compare``'s gate on it."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest
from bench_fakes import FixedRig, saxpy_path

from leverctl.cli import common

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cli_result import assert_one_line_error, run_cli, run_ok_with_cache, use_paths  # noqa: E402

from leverctl.profile import machine  # noqa: E402

NCU = Path(__file__).resolve().parents[1] / "profile" / "ncu" / "fake_ncu.py"
needs_tools = pytest.mark.skipif(
    not (machine.find_tool("ptxas") and machine.find_tool("nvdisasm")), reason="ptxas or nvdisasm not found"
)


@pytest.fixture()
def fixed_gpu(monkeypatch):
    """A GPU whose kernels run in the simulator, with fixed timings; the
    registry holds the saxpy path alone."""
    from leverctl.bench import device as devmod

    use_paths(monkeypatch, [dataclasses.replace(saxpy_path())])
    gpu = devmod.Device(kind="gpu", name="Fixed GPU", compute_capability="9.0", driver="fixed", _rig=FixedRig())
    monkeypatch.setattr(devmod, "choose", lambda *a, **k: gpu)


@pytest.fixture()
def ncu_on_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").symlink_to(NCU)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def _bench(capsys, *args):
    return run_cli(capsys, "bench", "--no-env", "--shapes", "smoke", "-f", "json", *args)


@pytest.mark.sim
def test_ncu_on_a_gpu_puts_each_passing_records_counters_in_its_profile(capsys, fixed_gpu, ncu_on_path):
    r = _bench(capsys, "--ncu")
    assert r.code == 0, r.err
    records = json.loads(r.out)["results"]
    assert len(records) == 2
    for rec in records:
        hw = rec["profile"]["hardware"]
        assert [k["name"] for k in hw["kernels"]] == ["saxpy"] and hw["kernels"][0]["dram_pct_of_peak"] == 0.41
    assert "--ncu" not in r.err


@pytest.mark.sim
def test_unreadable_counters_are_one_line_and_the_bench_goes_on(capsys, fixed_gpu, ncu_on_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    r = _bench(capsys, "--ncu")
    assert r.code == 0, r.err
    said = [line for line in r.err_lines if "--ncu" in line]
    assert len(said) == 1 and "ERR_NVGPUCTRPERM" in said[0] and "goes on" in said[0]
    records = json.loads(r.out)["results"]
    assert [rec["status"] for rec in records] == ["pass", "pass"]
    assert records[0]["profile"]["hardware"] is None


@pytest.mark.sim
def test_ncu_missing_from_path_is_one_line_and_the_bench_goes_on(capsys, fixed_gpu, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    r = _bench(capsys, "--ncu")
    assert r.code == 0, r.err
    (said,) = [line for line in r.err_lines if "--ncu" in line]
    assert "ncu (Nsight Compute) is not on PATH" in said
    assert all("profile" not in rec for rec in json.loads(r.out)["results"])


@pytest.mark.sim
def test_ncu_in_the_simulator_is_one_line_and_the_bench_goes_on(capsys, monkeypatch):
    use_paths(monkeypatch, [saxpy_path()])
    r = _bench(capsys, "--device", "sim", "--ncu")
    assert r.code == 0, r.err
    assert [line for line in r.err_lines if "--ncu" in line] == [
        "leverctl bench: --ncu: hardware counters need a GPU; the bench goes on without them"
    ]


def test_arch_without_profile_and_an_unknown_arch_are_bad_input(capsys):
    assert_one_line_error(run_cli(capsys, "bench", "--no-env", "--arch", "sm_90a"), "--arch", "--profile")
    assert_one_line_error(run_cli(capsys, "bench", "--no-env", "--profile", "--arch", "sm_75"), "--arch 'sm_75'")


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """``bench --profile -k w4a16.gemv`` in the simulator, as JSON."""
    out = tmp_path_factory.mktemp("bench") / "base.json"
    xdg = tmp_path_factory.mktemp("xdg")
    run_ok_with_cache(xdg, "bench", "--no-env", "--device", "sim", "-k", "w4a16.gemv", "--profile", "-o", out)
    return out


@pytest.mark.sim
@needs_tools
def test_profile_gives_each_record_its_variants_machine_code_and_memory_figures(profiled):
    (rec,) = json.loads(profiled.read_text())["results"]
    p = rec["profile"]
    assert p["arch"] == "sm_90a" and p["hardware"] is None
    (k,) = p["kernels"]
    assert k["name"] == rec["variant"] == "gemv_sw" and k["registers"] > 0 and k["spill_stores"] == 0
    assert 0 < k["occupancy"] <= 1 and sum(k["global_loads"].values()) > 0
    assert 0 < p["memory"]["sector_efficiency"] <= 1 and p["memory"]["traced_at"].startswith("profile")
    loop = k["stream_loop"]  # the streaming loop: two 16-byte weight loads and two scales a lane
    assert loop["bytes"] == 36 and loop["bytes_per_issue"] == pytest.approx(32 * 36 / loop["instructions"], abs=1e-3)


def _edited(src: Path, dst: Path, edit) -> Path:
    doc = json.loads(src.read_text())
    edit(doc["results"][0]["profile"])
    dst.write_text(json.dumps(doc))
    return dst


@pytest.mark.sim
@needs_tools
@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda p: p["kernels"][0].update(spill_stores=24), "gemv_sw: spills 0 -> 24 bytes"),
        (lambda p: p["kernels"][0].update(local=16), "gemv_sw: local memory 0 -> 16 bytes per thread"),
        (lambda p: p["kernels"][0].update(occupancy=p["kernels"][0]["occupancy"] / 2), "gemv_sw: occupancy"),
        (lambda p: p["memory"].update(sector_efficiency=p["memory"]["sector_efficiency"] - 0.06), "sector efficiency"),
        (lambda p: p["memory"].update(extra_wavefronts=p["memory"]["extra_wavefronts"] + 1), "bank conflicts"),
        (lambda p: p["memory"].update(wide_load_share=p["memory"]["wide_load_share"] - 0.06), "128-bit loads' share"),
        (lambda p: p["kernels"][0]["global_loads"].pop("128"), "gemv_sw: no 128-bit global load (load bits 16/32/128"),
        (lambda p: p["kernels"][0]["in_flight"].update(sm=21 * 1024), "below the 22 KiB Little's law asks"),
    ],
)
def test_compare_fails_on_a_worse_profile_naming_the_kernel_and_figure(capsys, profiled, tmp_path, edit, says):
    new = _edited(profiled, tmp_path / "new.json", edit)
    r = run_cli(capsys, "compare", profiled, new)
    assert r.code == 1, r.out
    assert says in r.out and "1 profile regressions" in r.out
    doc = json.loads(run_cli(capsys, "compare", profiled, new, "-f", "json").out)
    (reg,) = doc["profile"]["regressions"]
    assert reg["kernel"] == "w4a16.gemv" and reg["variant"] == "gemv_sw" and says in reg["what"]


@pytest.mark.sim
@needs_tools
def test_compare_fails_on_a_streaming_loop_fallen_below_what_the_issue_rate_asks(capsys, profiled, tmp_path):
    """From 5.0 bytes an issued instruction (above the 4.6 an H200 asks) to
    4.0 is a regression; from 4.4 to 4.0 (both below) and from 5.0 to 4.8
    (both above) are not."""

    def at(value):
        return lambda p: p["kernels"][0]["stream_loop"].update(bytes_per_issue=value)

    def compared(b, n):
        base = _edited(profiled, tmp_path / f"b{b}.json", at(b))
        return run_cli(capsys, "compare", base, _edited(profiled, tmp_path / f"n{n}.json", at(n)))

    r = compared(5.0, 4.0)
    assert r.code == 1 and "gemv_sw: streaming loop 5.00 -> 4.00 bytes per issued instruction" in r.out, r.out
    assert compared(4.4, 4.0).code == 0 and compared(5.0, 4.8).code == 0


@pytest.mark.sim
@needs_tools
def test_compare_passes_an_equal_or_better_profile_and_a_small_sector_change(capsys, profiled, tmp_path):
    r = run_cli(capsys, "compare", profiled, profiled)
    assert r.code == 0 and "1 profiles compared" in r.out

    def better(p):
        p["kernels"][0]["occupancy"] = 1.0
        p["memory"]["sector_efficiency"] -= 0.04  # within the 5 points
        p["memory"]["extra_wavefronts"] = 0
        p["memory"]["wide_load_share"] -= 0.04
        p["kernels"][0]["in_flight"]["sm"] -= 1024  # still above what Little's law asks

    assert run_cli(capsys, "compare", profiled, _edited(profiled, tmp_path / "n.json", better)).code == 0


@pytest.mark.sim
@needs_tools
def test_compare_does_not_gate_profiles_made_for_different_architectures(capsys, profiled, tmp_path):
    def other(p):
        p["arch"] = "sm_80"
        p["kernels"][0]["spill_stores"] = 64

    r = run_cli(capsys, "compare", profiled, _edited(profiled, tmp_path / "n.json", other))
    assert r.code == 0 and "made for sm_90a in BASE and sm_80 in NEW are not compared" in r.out


@pytest.mark.sim
@needs_tools
def test_report_show_has_a_profile_view(capsys, profiled):
    r = run_cli(capsys, "report", "show", profiled)
    assert r.code == 0 and "Profiles (bench --profile" in r.out and "gemv_sw" in r.out
    md = run_cli(capsys, "report", "show", profiled, "-f", "markdown").out
    assert "**Profiles**" in md and "| w4a16.gemv | gemv_sw |" in md
    (p,) = json.loads(run_cli(capsys, "report", "show", profiled, "-f", "json").out)["profiles"]
    assert p["variant"] == "gemv_sw" and p["records"] == 1 and p["kernels"]["gemv_sw"]["spills"] == 0


@pytest.mark.sim
@needs_tools
def test_a_profile_block_of_the_wrong_types_is_no_figure_not_a_crash(capsys, profiled, tmp_path):
    def garbage(p):
        p["kernels"][0].update(registers="many", occupancy=None, spill_stores=[1])
        p["memory"] = "lost"

    r = run_cli(capsys, "compare", profiled, _edited(profiled, tmp_path / "n.json", garbage))
    assert r.code == 0 and "Traceback" not in r.err


@pytest.mark.sim
@needs_tools
def test_the_profile_block_written_is_the_one_docs_records_md_describes(capsys, profiled, fixed_gpu, ncu_on_path):
    from test_records_doc import key_paths, section

    prof = json.loads(profiled.read_text())["results"][0]["profile"]
    hw = json.loads(_bench(capsys, "--ncu").out)["results"][0]["profile"]["hardware"]
    written = key_paths({**prof, "hardware": hw})
    doc = section("The profile block")
    strip = lambda keys: {k for k in keys if not k.startswith(("kernels.global_", "kernels.tensor_cores."))}  # noqa: E731
    assert strip(written) == strip(doc), strip(written) ^ strip(doc)


@pytest.mark.sim
@needs_tools
def test_the_gate_reads_profiles_from_results_files_too(capsys, profiled, tmp_path):
    """Sweep results (JSON lines, read on the fast path) keep their profiles."""

    def lines(src: Path, name: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        recs = json.loads(src.read_text())["results"]
        (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        return d / "results.jsonl"

    worse = _edited(profiled, tmp_path / "w.json", lambda p: p["kernels"][0].update(spill_loads=8))
    r = run_cli(capsys, "compare", lines(profiled, "base"), lines(worse, "new"))
    assert r.code == 1 and "gemv_sw: spills 0 -> 8 bytes" in r.out
