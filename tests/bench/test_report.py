"""Rendering a bench document: table, JSON, Markdown."""

from __future__ import annotations

import json

import pytest

from leverctl.bench.report import FIGURE_WORDS, counts, describe_figures, floor_text, render


def _rec(variant, status="pass", timing=True, note="", rel=1.2e-4):
    return {
        "kernel": "w4a16.gemv",
        "variant": variant,
        "levers": {"gemv_sw": variant == "gemv_sw"},
        "config": f"gemv_sw={int(variant == 'gemv_sw')}",
        "shape": {"label": "m1-n37-k264", "m": 1},
        "status": status,
        "note": note,
        "error": {
            "rel": rel,
            "max_abs": 3e-3,
            "tol_rel": 2e-3,
            "tol_abs": 5e-2,
            "nonfinite": 0,
            "unwritten": 0,
            "rechecked": timing,
        },
        "timing": {
            "median_us": 4.1,
            "p20_us": 4.0,
            "p80_us": 4.3,
            "samples": 240,
            "noise": 0.004,
            "stopped_by": "noise",
        }
        if timing
        else None,
        "traffic": {"bytes": 123456, "flops": 19536},
        "roofline": {
            "floor_us": 2.9,
            "bound": "memory",
            "copy_gbps": 4100.0,
            "compute_rate": "fp32_tflops",
            "compute_tflops": 60.0,
            "pct_of_floor": 70.7,
        }
        if timing
        else None,
        "achieved": {"gbps": 3000.1, "tflops": 0.01} if timing else None,
        "reference_lib": {"name": "cublas-fp16", "median_us": 3.8, "ratio": 1.08} if timing else None,
        "device": "NVIDIA H200" if timing else "Numba CUDA simulator",
        "plan": "p" * 16,
        "catalog": "c" * 16,
    }


def _doc(gpu=True, against=False):
    doc = {
        "schema": "leverctl.bench/1",
        "created": "2026-12-02T12:00:00Z",
        "engine": "atlas",
        "device": {
            "kind": "gpu" if gpu else "sim",
            "name": "NVIDIA H200" if gpu else "Numba CUDA simulator",
            "compute_capability": "9.0" if gpu else None,
            "driver": "580.159.04 (CUDA 13.0)" if gpu else None,
            "copy_gbps": 4100.0 if gpu else None,
            "fp32_tflops": 60.0 if gpu else None,
            "bf16_tflops": 702.5 if gpu else None,
            "fp8_tflops": None,
            "cublas_bf16_tflops": 655.0 if gpu else None,
            "why_sim": None if gpu else "no NVIDIA driver (libcuda.so.1 not found)",
        },
        "versions": {
            "leverctl": "0.1.0",
            "python": "3.11.7",
            "numba": "0.68.1",
            "numba_cuda": "0.30.4",
            "numpy": "2.4.6",
        },
        "levers": {},
        "against": None,
        "results": [
            _rec("gemv_sw", timing=gpu),
            _rec("gemv_64t", "fail", timing=False, note="2 element(s) never written", rel=0.5),
        ],
    }
    if against:
        doc["results"][0]["speedup_vs_against"] = 1.25
        doc["results"][1]["speedup_vs_against"] = None
        doc["against"] = {"name": "defaults", "levers": {}, "results": [_rec("gemv_64t", timing=gpu)]}
    return doc


def test_counts_include_the_against_run():
    assert counts(_doc()) == (1, 1)
    assert counts(_doc(against=True)) == (2, 1)


def test_json_is_the_document_itself():
    doc = _doc()
    assert json.loads(render(doc, "json")) == doc


def test_the_gpu_table_shows_check_timing_spread_bandwidth_and_floor():
    text = render(_doc(), "table")
    for cell in (
        "w4a16.gemv",
        "gemv_sw=1",
        "m1-n37-k264",
        "PASS 1.2e-04",
        "FAIL 5.0e-01",
        "4.1",
        "4–4.3",
        "3000",
        "71",
        "1.08×",
        "never written",
    ):
        assert cell in text, cell
    assert "\x1b[" not in text  # plain text unless asked for color


def test_the_simulator_table_has_no_timing_columns_and_says_why():
    text = render(_doc(gpu=False), "table")
    assert "median" not in text and "correctness only" in text


def test_markdown_has_one_table_row_per_record_and_the_notes():
    md = render(_doc(), "markdown")
    rows = [ln for ln in md.splitlines() if ln.startswith("| w4a16.gemv")]
    assert len(rows) == 2
    assert "| kernel | variant | levers | shape | check | median µs |" in md
    assert "- w4a16.gemv gemv_64t m1-n37-k264: 2 element(s) never written" in md
    assert "580.159.04" in md


def test_against_adds_a_speedup_column_and_the_second_run():
    md = render(_doc(against=True), "markdown")
    assert "speedup" in md and "1.25×" in md and "## atlas (against defaults) on NVIDIA H200: 1 pass, 0 fail" in md
    sim = render(_doc(gpu=False, against=True), "table")
    assert "speedup" not in sim and "(against defaults)" in sim


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError):
        render(_doc(), "yaml")


def test_the_device_figures_head_the_markdown_and_the_table_and_a_missing_one_is_left_out():
    figures = "copy 4100 GB/s, FP32 60.0 TFLOP/s, BF16 tensor cores 702 TFLOP/s, cuBLAS BF16 GEMM 655 TFLOP/s"
    assert describe_figures(_doc()["device"]) == figures  # no FP8 peak on this device: not said
    assert f"; {figures}." in render(_doc(), "markdown")
    assert f"Device: {figures}" in render(_doc(), "table", width=240)
    assert describe_figures(_doc(gpu=False)["device"]) == ""
    assert "Device:" not in render(_doc(gpu=False), "table")


def test_the_reports_word_every_figure_the_device_measures():
    from leverctl.bench.device import FIGURES

    assert tuple(FIGURE_WORDS) == FIGURES


def test_the_floor_cell_names_the_rate_a_compute_floor_was_drawn_at():
    def rec(bound, rate="fp32_tflops", tc_dtype=None):
        return {"roofline": {"bound": bound, "compute_rate": rate, "pct_of_floor": 78.4}, "tc_dtype": tc_dtype}

    assert [floor_text(rec("memory")), floor_text(rec("launch")), floor_text(rec("compute"))] == ["78", "78", "78 FP32"]
    assert floor_text(rec("compute", "bf16_tflops", "f16")) == "78 BF16"
    assert floor_text(rec("compute", "fp8_tflops", "s8")) == "78 FP8 s8"  # s8 at the FP8 rate, said so
    older = {"roofline": {"bound": "compute", "fp32_tflops": 60.0, "pct_of_floor": 50.0}}  # before compute_rate
    assert floor_text(older) == "50 FP32"
    doc = _doc()
    doc["results"][0]["roofline"].update(bound="compute", compute_rate="bf16_tflops", pct_of_floor=64.0)
    assert "| 64 BF16 |" in render(doc, "markdown")


def test_a_cores_column_says_which_instruction_each_record_ran_on_when_any_used_tensor_cores():
    doc = _doc()
    assert "| cores |" not in render(doc, "markdown")  # no tensor cores anywhere: no column
    doc["results"][0].update(tensor_cores="wgmma", tc_dtype="f16")
    md = render(doc, "markdown")
    assert "| kernel | variant | levers | shape | check | cores | median µs |" in md
    rows = [ln for ln in md.splitlines() if ln.startswith("| w4a16.gemv")]
    assert "| wgmma f16 |" in rows[0] and "| FP32 |" in rows[1]
    assert "wgmma f16" in render(doc, "table")
