"""The reader: result files and sweep plans, what it tolerates and what it
refuses, and each record whole again from its line."""

from __future__ import annotations

import json
import math

import pytest
from records_helpers import plan_doc, shard_dir, six_items

from leverctl.bench.records import read as rd
from leverctl.bench.records.columns import Records, Tables
from leverctl.bench.records.merge import merge
from leverctl.bench.records.plans import read_plan, read_plan_counted, write_plan
from leverctl.bench.records.schema import PLAN_FILE, RESULTS_FILE
from leverctl.bench.records.write import record_line
from leverctl.errors import UserError


def _rec(i: int, **kw) -> dict:
    return {
        "kernel": "k",
        "variant": "v",
        "levers": {"x": i},
        "config": f"x={i}",
        "shape": {"label": "s"},
        "status": "pass",
        "note": "",
        "timing": None,
        **kw,
    }


# ── result files ────────────────────────────────────────────────────────────


def test_the_reader_always_gives_columns(tmp_path):
    """A results file, a sweep directory and a bench document alike."""
    (tmp_path / RESULTS_FILE).write_bytes(b"".join(record_line(_rec(i)) for i in range(3)))
    write_plan(tmp_path / PLAN_FILE, plan_doc([]))
    doc = tmp_path / "bench.json"
    doc.write_text(
        json.dumps({"schema": "leverctl.bench/1", "device": {"kind": "sim"}, "results": [_rec(i) for i in range(3)]})
    )
    for path in (tmp_path / RESULTS_FILE, tmp_path, doc):
        got = rd.load_results(path)
        assert isinstance(got.records, Records) and [r["config"] for r in got.records] == ["x=0", "x=1", "x=2"]
    assert isinstance(rd.read_jsonl(tmp_path / RESULTS_FILE).records, Records)


def test_the_records_read_again_from_their_lines_are_the_records_read_whole(tmp_path):
    """``report show -f csv`` holds columns and reads each kept record's line
    again as it writes its row: the records of the standard parser (a
    repeated identity counted once, the later kept in the earlier's place),
    a line the fast path refuses included, and the same CSV."""
    from leverctl.bench.report import records_csv

    recs = [_rec(i % 5, note=math.nan if i == 3 else "", traffic={"bytes": i}) for i in range(8)]
    lines = [json.dumps(r, allow_nan=True) for r in recs]
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(lines) + "\n" + lines[0][:20], "utf-8")  # and a partial last line
    held = rd.load_results(path)
    again = list(rd.whole_records(held, path))
    whole = {}
    for line in lines:
        r = json.loads(line)
        whole[r["config"]] = r
    assert len(again) == 5 and json.dumps(again) == json.dumps(list(whole.values()))
    assert [r["traffic"]["bytes"] for r in again] == [5, 6, 7, 3, 4]
    assert records_csv(again) == records_csv(list(whole.values()))


def test_a_bench_documents_records_read_again_are_its_kept_results(tmp_path):
    results = [_rec(0), _rec(1), _rec(0, note="again", traffic={"bytes": 9}), _rec(2)]
    doc = tmp_path / "bench.json"
    doc.write_text(json.dumps({"schema": "leverctl.bench/1", "device": {"kind": "sim"}, "results": results}, indent=2))
    rs = rd.load_results(doc)
    assert rs.duplicates == ["results[2]"] and rs.notes() == [rd.repeated_note(str(doc), ["results[2]"])]
    assert list(rd.whole_records(rs, doc)) == [results[2], results[1], results[3]]


def test_a_record_lacking_what_reports_need_is_foreign(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"kernel": "a", "config": "b"}\n')
    with pytest.raises(UserError, match="no variant, levers, shape, status"):
        rd.load_results(p)


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"schema": "leverctl.bench/1", "results": [', "truncated"),
        (b'{"something": "else"}', "not a leverctl bench document"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not a leverctl results file"),
        (b"[1, 2, 3]", "not a leverctl bench document"),
    ],
)
def test_foreign_or_truncated_files_are_refused_in_one_line(tmp_path, content, message):
    p = tmp_path / "in.json"
    p.write_bytes(content)
    with pytest.raises(UserError, match=message) as e:
        rd.load_results(p)
    assert "\n" not in e.value.line() and str(p) in e.value.line()


def test_the_later_of_two_records_of_one_identity_is_kept_in_the_earlier_place(tmp_path):
    first, second = _rec(0, note="first"), _rec(1, note="second")
    again = {**first, "note": "run again"}
    path = tmp_path / RESULTS_FILE
    path.write_bytes(b"".join(record_line(r) for r in (first, second, again)))
    got = rd.read_jsonl(path)
    assert got.duplicates == (3,) and [r["config"] for r in got.records] == ["x=0", "x=1"]
    rs = rd.load_results(path)
    assert [r["note"] for r in rd.whole_records(rs, path)] == ["run again", "second"]


def test_a_record_of_another_plan_is_named_by_its_place_among_the_kept(tmp_path):
    recs = [_rec(0, plan="p" * 16), _rec(1), _rec(0, plan="p" * 16), _rec(2, plan="q" * 16)]
    path = tmp_path / RESULTS_FILE
    path.write_bytes(b"".join(record_line(r) for r in recs))
    assert rd.read_jsonl(path).foreign is None  # no plan to hold them to
    assert rd.read_jsonl(path, None, "p" * 16).foreign == (3, "q" * 16)
    write_plan(tmp_path / PLAN_FILE, {**plan_doc([]), "hash": "p" * 16})
    with pytest.raises(UserError, match=f"record 3 belongs to plan {'q' * 16}, not this directory's {'p' * 16}"):
        rd.load_results(tmp_path)


def test_inputs_read_by_a_second_process_are_what_one_process_reads(tmp_path, monkeypatch):
    """load_all hands some inputs to another process when they are large:
    their records come back numbered in the caller's tables, with their
    plans' items, and an input's error stays in its place."""
    items = six_items()
    paths = [
        shard_dir(tmp_path / str(i), items, places, i, 3) for i, places in {1: [4, 1], 2: [0, 3], 3: [2, 5]}.items()
    ]
    one = rd.load_all(paths, Tables(), plan_items=True)
    monkeypatch.setattr(rd, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(rd.os, "cpu_count", lambda: 2)
    tables = Tables()
    two = rd.load_all(paths, tables, plan_items=True)
    assert [list(a.records) for a in one] == [list(b.records) for b in two]
    assert [[it.n for it in a.plan["items"]] for a in one] == [[it.n for it in b.plan["items"]] for b in two]
    assert all(b.records.tables is tables for b in two)
    merged = merge(two)
    assert [r["config"] for r in merged.records] == [f"x={n}" for n in range(6)] and merged.missing == 0
    with open(paths[1] / RESULTS_FILE, "a") as f:
        f.write('{"kernel": "k"}\n')
    got = rd.load_all(paths, Tables(), plan_items=True)
    assert isinstance(got[0], rd.ResultSet) and isinstance(got[2], rd.ResultSet)
    assert isinstance(got[1], UserError) and got[1].where == f"{paths[1] / RESULTS_FILE}:3"


# ── plans ───────────────────────────────────────────────────────────────────


def test_a_plan_item_with_a_bad_place_is_refused_where_the_items_are_read(tmp_path):
    items = six_items()
    items[2]["n"] = "two"
    (tmp_path / PLAN_FILE).write_text(json.dumps(plan_doc(items)))
    with pytest.raises(UserError, match=r"items\[2\] is not an object"):
        read_plan(tmp_path, items=True)
    # A reader of the header alone (resume, show, compare) leaves the items as text.
    assert read_plan(tmp_path)["hash"] == "0123456789abcdef"


def test_the_header_readers_leave_the_items_unbuilt(tmp_path):
    write_plan(tmp_path / PLAN_FILE, plan_doc(six_items()))
    plan, count = read_plan_counted(tmp_path)
    assert count is None and "items" not in plan and plan["total"] == 6
    plan, count = read_plan_counted(tmp_path, items=True)
    assert count == 6 and [it.n for it in plan["items"]] == list(range(6))
    (tmp_path / PLAN_FILE).write_text(json.dumps({**plan_doc([]), "items": {"a": 1}}))
    with pytest.raises(UserError, match="no `items` list"):
        read_plan(tmp_path)


def test_a_plan_that_is_a_directory_is_refused_as_input(tmp_path):
    (tmp_path / PLAN_FILE).mkdir()
    with pytest.raises(UserError, match="is a directory, not a sweep plan"):
        read_plan(tmp_path)
