"""Nsight Compute's counters (``bench --ncu``): its CSV read into our
figures, and the runner against a stand-in ``ncu`` (tests/profile/ncu/)
that checks the arguments it is given and prints recorded output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from leverctl.profile import ncu

HERE = Path(__file__).resolve().parent / "ncu"
GMMA = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
SHAPE = {"label": "n37", "dims": {"n": 37}}


@pytest.fixture()
def fake_ncu(tmp_path, monkeypatch):
    """``ncu`` on PATH is the stand-in; its calls are logged."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").symlink_to(HERE / "fake_ncu.py")
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("FAKE_NCU_CALLS", str(calls))
    return lambda: [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def test_the_raw_page_is_read_into_one_figure_set_per_launch():
    (k,) = ncu.parse_csv((HERE / "raw.csv").read_text())
    assert k["name"] == "saxpy" and k["ncu_name"].startswith("cudapy::tests::bench")
    assert k["dram_pct_of_peak"] == pytest.approx(0.41)
    assert k["duration_us"] == pytest.approx(2.144)  # "2,144" nanoseconds
    assert k["shared_bank_conflicts"] == 0 and k["sectors_per_request"] == pytest.approx(2.0)
    assert k["achieved_occupancy"] == pytest.approx(6.12) and k["sector_efficiency"] == pytest.approx(100.0)
    assert k["tensor_pipe_pct"] == 0


def test_real_output_from_an_h200_is_read():
    """ncu's own output, not a stand-in's: the same figures the bench wrote
    into that run's record."""
    (k,) = ncu.parse_csv((HERE / "h200_gemv_sw.csv").read_text())
    assert k["name"] == "gemv_sw" and k["ncu_name"].startswith("gemv_sw[")
    assert k["dram_pct_of_peak"] == pytest.approx(1.3) and k["duration_us"] == pytest.approx(8.928)
    assert k["sector_efficiency"] == pytest.approx(90.28) and k["sectors_per_request"] == pytest.approx(2.25)
    assert k["achieved_occupancy"] == pytest.approx(6.11) and k["shared_bank_conflicts"] == 24576
    assert k["tensor_pipe_pct"] == 0


def test_the_details_page_reads_the_same():
    rows = ['"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"']
    values = {
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": "0.41",
        "gpu__time_duration.sum": "2,144",
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "8",
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "4",
    }
    rows += [f'"0","saxpy$241(float)","Command line profiler metrics","{m}","","{v}"' for m, v in values.items()]
    (k,) = ncu.parse_csv("\n".join(rows))
    assert k["name"] == "saxpy" and k["duration_us"] == pytest.approx(2.144)
    assert k["sectors_per_request"] == pytest.approx(2.0) and k["achieved_occupancy"] is None


def test_kernel_names_are_shortened_to_the_kernels_own():
    assert ncu.short_name("cudapy::a::b::$3clocals$3e::gemv_sw$241(Array<float, 1, C>, int)") == "gemv_sw"
    assert ncu.short_name("leverctl_kernels::x::<locals>::attn_split[abi:v1,cw5](Array<float, 1>)") == "attn_split"


def test_the_runner_measures_a_variant_through_ncu(fake_ncu):
    r = ncu.Runner(ncu.find_ncu())
    hw = r.measure("fake.saxpy", "good", SHAPE, [0])
    assert hw["tool"] == "ncu" and [k["name"] for k in hw["kernels"]] == ["saxpy"] and hw["metrics_missing"] == []
    (args,) = fake_ncu()
    assert set(args[args.index("--metrics") + 1].split(",")) == set(ncu.ALL_METRICS)


def test_counters_that_cannot_be_read_are_said_once_and_never_asked_again(fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    r = ncu.Runner(ncu.find_ncu())
    with pytest.raises(ncu.NcuUnusable, match="ERR_NVGPUCTRPERM"):
        r.measure("fake.saxpy", "good", SHAPE, [0])
    with pytest.raises(ncu.NcuUnusable):
        r.measure("fake.saxpy", "good", SHAPE, [0])
    assert len(fake_ncu()) == 1


def test_a_metric_this_ncu_does_not_know_is_left_out_and_the_rest_measured(fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "unknown-metric")
    r = ncu.Runner(ncu.find_ncu())
    hw = r.measure("fake.saxpy", "good", SHAPE, [0])
    assert hw["metrics_missing"] == [GMMA] and hw["kernels"]
    first, second = fake_ncu()
    assert GMMA in first[first.index("--metrics") + 1] and GMMA not in second[second.index("--metrics") + 1]
    r.measure("fake.saxpy", "good", SHAPE, [0])  # the next variant is not asked for it again
    assert GMMA not in fake_ncu()[-1][fake_ncu()[-1].index("--metrics") + 1]


def test_the_stand_in_refuses_arguments_bench_would_not_give(tmp_path):
    req = tmp_path / "r.json"
    req.write_text(json.dumps({"path": "p", "variant": "v", "shape": SHAPE, "seed": [0]}))
    good = ncu.command(str(HERE / "fake_ncu.py"), ncu.ALL_METRICS, tmp_path / "log.csv", req)
    assert subprocess.run(good, capture_output=True).returncode == 0
    for bad in (
        [a for a in good if a != "--csv"],
        [("details" if a == "raw" else a) for a in good],
        [("on" if a == "off" else a) for a in good],
        [(a.replace("leverctl.profile.ncu", "other") if a == ncu.CHILD else a) for a in good],
    ):
        r = subprocess.run(bad, capture_output=True, text=True)
        assert r.returncode == 3 and "fake ncu:" in r.stderr


def test_a_run_without_any_kernel_is_an_error_for_that_variant(tmp_path, monkeypatch):
    silent = tmp_path / "ncu"
    silent.write_text("#!/bin/sh\necho '==ERROR== The application returned an error code (1).'\nexit 1\n")
    silent.chmod(0o755)
    with pytest.raises(RuntimeError, match="application returned an error"):
        ncu.Runner(str(silent)).measure("fake.saxpy", "good", SHAPE, [0])


def test_the_measured_child_is_importable_without_a_gpu():
    r = subprocess.run([sys.executable, "-c", "import leverctl.profile.ncu"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
