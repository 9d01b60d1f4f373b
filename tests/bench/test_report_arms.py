"""``leverctl report show``'s arm view for ffn.prefill records: the arms
ranked by time with their error beside it, or by error where the records
have no timings (the simulator), saying so."""

from __future__ import annotations

import json

import pytest

from leverctl.bench.arms import arm_rankings

SHAPE = "down m512 n4096 k12288"


def _rec(variant, us=None, rel=1e-3, status="pass", cores=(None, None), config=None, pct=None, kernel="ffn.prefill"):
    return {
        "kernel": kernel,
        "variant": variant,
        "levers": {},
        "config": config or f"arm={variant}",
        "shape": {"label": SHAPE, "m": 512, "n": 4096, "k": 12288, "down": 1},
        "status": status,
        "note": "",
        "error": {
            "rel": rel,
            "max_abs": 10 * rel,
            "tol_rel": 0.5,
            "tol_abs": 1.0,
            "nonfinite": 0,
            "unwritten": 0,
            "rechecked": us is not None,
        },
        "timing": {"median_us": us, "p20_us": us, "p80_us": us, "samples": 100, "noise": 0.01, "stopped_by": "noise"}
        if us is not None
        else None,
        "roofline": {"floor_us": 1.0, "bound": "compute", "pct_of_floor": pct} if us is not None else None,
        "tensor_cores": cores[0],
        "tc_dtype": cores[1],
        "device": "NVIDIA H200" if us else "Numba CUDA simulator",
        "plan": "p" * 16,
        "catalog": "c" * 16,
    }


GPU = [
    _rec("w4a16", us=900.0, rel=1e-4, pct=40.0),
    _rec("nvfp4_mmq", us=300.0, rel=0.1, cores=("mma.sync", "s8"), pct=70.0),
    _rec("nvfp4_mmq", us=350.0, rel=0.1, cores=("mma.sync", "s8"), config="other levers"),  # slower twin
    _rec("bf16_v2", us=450.0, rel=3e-3, cores=("wgmma", "bf16"), pct=60.0),
    _rec("fp8_m64", us=200.0, rel=0.5, status="fail", cores=("wgmma", "e4m3")),
    _rec("gemv_sw", us=1.0, kernel="w4a16.gemv"),
]


def test_arms_are_ranked_fastest_first_one_row_per_arm_with_failing_ones_last():
    (r,) = arm_rankings(GPU)
    assert r.timed and [a.variant for a in r.arms] == ["nvfp4_mmq", "bf16_v2", "w4a16", "fp8_m64"]
    assert r.arms[0].us == 300.0 and r.arms[0].pct_of_floor == 70.0 and r.arms[0].cores == "mma.sync s8"
    assert r.arms[-1].status == "fail" and r.arms[2].cores == "FP32"


def test_without_timings_the_arms_are_ranked_by_error():
    sim = [_rec("w4a16", rel=1e-4), _rec("nvfp4_mmq", rel=0.1), _rec("bf16_v2", rel=3e-3)]
    (r,) = arm_rankings(sim)
    assert not r.timed and [a.variant for a in r.arms] == ["w4a16", "bf16_v2", "nvfp4_mmq"]


def _doc(records, gpu=True):
    return {
        "schema": "leverctl.bench/1",
        "created": "2026-12-03T12:00:00Z",
        "engine": "metrale",
        "device": {"kind": "gpu" if gpu else "sim", "name": "NVIDIA H200" if gpu else "Numba CUDA simulator"},
        "versions": {},
        "levers": {},
        "against": None,
        "results": records,
    }


@pytest.mark.parametrize("gpu", [True, False], ids=["timed", "simulator"])
def test_report_show_prints_the_arm_view_in_every_format(tmp_path, capsys, gpu):
    from leverctl.cli.app import main

    records = GPU if gpu else [_rec("w4a16", rel=1e-4), _rec("nvfp4_mmq", rel=0.1)]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_doc(records, gpu)))

    def run(*fmt):
        with pytest.raises(SystemExit) as e:
            main(["report", "show", str(path), *fmt])
        assert e.value.code in (0, None)
        return capsys.readouterr().out

    table = run()
    view = table.split("arms at", 1)[1]
    if gpu:
        assert f"ffn.prefill arms at {SHAPE}, fastest first:" in table
        first = next(line for line in view.splitlines() if "nvfp4_mmq" in line)
        assert "300" in first and "70.0" in first and "1.00e-01" in first and "mma.sync s8" in first, first
        assert view.index("nvfp4_mmq") < view.index("bf16_v2") < view.index("w4a16") < view.index("fp8_m64")
    else:
        assert "ranked by error" in table and view.index("w4a16") < view.index("nvfp4_mmq")
    assert "gemv_sw" not in view  # only ffn.prefill has the view
    md = run("-f", "markdown")
    assert "| # | arm | µs | % of floor | rel error | max error | tensor cores | check |" in md
    (arms,) = json.loads(run("-f", "json"))["arms"]
    assert arms["ranked_by"] == ("time" if gpu else "error")
    assert arms["arms"][0]["variant"] == ("nvfp4_mmq" if gpu else "w4a16")
