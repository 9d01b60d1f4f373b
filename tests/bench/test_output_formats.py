"""The format follows the output file (``-o results.csv`` writes CSV) unless
--format says otherwise; CSV is the records, one row each."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from cli_result import use_paths
from test_report import _doc

from leverctl.bench.report import CSV_COLUMNS, render
from leverctl.cli import common
from leverctl.errors import UserError


@pytest.mark.parametrize(
    "name, fmt",
    [
        ("results.json", "json"),
        ("report.md", "markdown"),
        ("REPORT.MARKDOWN", "markdown"),
        ("results.csv", "csv"),
        ("bench.txt", "table"),
    ],
)
def test_the_out_files_suffix_chooses_the_format(name, fmt):
    assert common.output_format(None, Path(name), common.RECORD_FORMATS) == fmt


def test_format_wins_over_the_suffix_and_no_out_or_no_suffix_means_the_default():
    assert common.output_format("json", Path("results.csv"), common.RECORD_FORMATS) == "json"
    assert common.output_format(None, None, common.RECORD_FORMATS) == "table"
    assert common.output_format(None, Path("results/bench"), common.RECORD_FORMATS) == "table"


@pytest.mark.parametrize("name", ["results.xlsx", "results.csv.bak", "notes.TOML"])
def test_a_suffix_that_names_no_format_is_bad_input(name):
    with pytest.raises(UserError, match="no format is known"):
        common.output_format(None, Path(name), common.RECORD_FORMATS)


def test_a_suffix_naming_a_format_the_command_lacks_is_bad_input():
    with pytest.raises(UserError, match=r"\.json \(json\)"):
        common.output_format(None, Path("results.csv"), common.FORMATS)


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_csv_has_one_row_per_record_with_plain_numbers():
    rows = _rows(render(_doc(gpu=True), "csv"))
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert [r["variant"] for r in rows] == ["gemv_sw", "gemv_64t"]
    assert rows[0]["median_us"] == "4.1" and rows[0]["status"] == "pass"
    assert rows[1]["median_us"] == "" and rows[1]["note"] == "2 element(s) never written"


def test_csv_of_an_against_run_tells_the_two_runs_apart():
    rows = _rows(render(_doc(gpu=True, against=True), "csv"))
    assert [(r["run"], r["variant"]) for r in rows] == [
        ("this run", "gemv_sw"),
        ("this run", "gemv_64t"),
        ("against defaults", "gemv_64t"),
    ]
    assert rows[0]["speedup_vs_against"] == "1.25"


def _cli(capsys, *args) -> tuple[int, str, str]:
    from leverctl.cli.app import main

    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    cap = capsys.readouterr()
    return e.value.code, cap.out, cap.err


def test_report_show_writes_the_records_as_csv(capsys, tmp_path):
    doc = tmp_path / "bench.json"
    doc.write_text(json.dumps(_doc(gpu=False)))
    code, out, err = _cli(capsys, "report", "show", doc, "-f", "csv")
    assert code == 0, err
    assert [row["variant"] for row in _rows(out)] == ["gemv_sw", "gemv_64t"]


@pytest.mark.sim
def test_bench_writes_csv_to_an_out_file_named_csv(capsys, tmp_path, monkeypatch):
    from bench_fakes import saxpy_path

    use_paths(monkeypatch, [saxpy_path()])
    out = tmp_path / "results.csv"
    code, _out, err = _cli(capsys, "bench", "--no-env", "--device", "sim", "--kernel", "fake.saxpy", "-o", out)
    assert code == 0, err
    rows = _rows(out.read_text())
    assert {r["kernel"] for r in rows} == {"fake.saxpy"} and len(rows) == 2  # two smoke shapes
