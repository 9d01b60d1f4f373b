"""A bench document cut into its records a piece at a time
(``records/stream.py``): the same records json.loads finds, wherever the
pieces split (inside a string, an escape, a key), the rest of the document
kept with an empty list, and a refusal (None: the standard path decides)
for anything unexpected."""

from __future__ import annotations

import json

import pytest

from leverctl.bench.records.stream import split

TRICKY = [
    {"kernel": "a", "note": 'braces } ] { [ and "quotes" inside', "x": [1, {"y": [2, 3]}]},
    {"kernel": "b\\", "note": 'a backslash and a quote: \\"', "levers": {}},
    {"kernel": "c", "note": "", "shape": {"label": "m1-n37-k264 @ k=520"}},
]


def _doc(records, **more) -> bytes:
    doc = {"schema": "leverctl.bench/1", "device": {"kind": "sim"}, "against": {"results": [{"k": 1}]}, **more}
    doc["results"] = records
    doc["after"] = {"results_not": [5]}
    return json.dumps(doc, indent=2).encode()


def _pieces(data: bytes, size: int):
    for i in range(0, len(data), size):
        yield data[i : i + size]
    yield b""


def _run(data: bytes, size: int, batch: int = 2):
    got, heads = [], []
    rest = split(_pieces(data, size), lambda texts: got.extend(texts) or True, lambda h: heads.append(h) or True, batch)
    return rest, [json.loads(t) for t in got], heads


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64, 1 << 20])
def test_the_records_are_json_loads_own_wherever_the_pieces_split(size):
    data = _doc(TRICKY)
    rest, got, heads = _run(data, size)
    assert got == json.loads(data)["results"]
    whole = json.loads(rest)
    assert whole["results"] == [] and whole["against"] == {"results": [{"k": 1}]} and whole["after"]["results_not"]
    (head,) = heads
    assert json.loads(head)["device"] == {"kind": "sim"}  # what precedes the list, closed so it decodes


def test_an_empty_list_and_compact_text_are_read_too():
    rest, got, _ = _run(_doc([]), 3)
    assert got == [] and json.loads(rest)["results"] == []
    compact = json.dumps({"schema": "s", "results": TRICKY}, separators=(",", ":")).encode()
    rest, got, _ = _run(compact, 4)
    assert got == TRICKY and json.loads(rest) == {"schema": "s", "results": []}


@pytest.mark.parametrize(
    "text",
    [
        b'{"results": [1, {"a": 1}]}',  # a value that is not an object
        b'{"results": [{"a": 1},, {"b": 2}]}',  # a stray comma
        b'{"results": [{"a": 1}, ]}',  # a trailing comma
        b'{"results": [[{"a": 1}]]}',  # a list where a record belongs
        b'{"results": [{"a": 1}], "results": [{"b": 2}]}',  # two lists: the last wins in json.loads
        b'{"results": [{"a": 1}, {"b": ',  # truncated inside a record
        b'{"results": [{"a": 1}',  # truncated inside the list
        b'{"x": 1}',  # no results list
        b'{"results": [{"a": "unterminated}]}',
    ],
)
def test_what_it_does_not_expect_is_left_to_the_standard_path(text):
    for size in (1, 4, 1 << 20):
        assert _run(text, size)[0] is None, (text, size)


def test_a_refusing_decoder_or_head_stops_the_walk():
    data = _doc(TRICKY)
    assert split(_pieces(data, 8), lambda texts: False, batch=1) is None
    assert split(_pieces(data, 8), lambda texts: True, lambda head: False) is None


def test_a_document_reads_the_same_streamed_as_by_the_standard_parser(tmp_path):
    """The columns of a bench document read streamed equal those of its
    records read by the standard path (gather of the parsed list)."""
    from leverctl.bench.records import read as R
    from leverctl.bench.records.columns import Tables, gather

    recs = []
    for i in range(40):
        recs.append(
            {
                "kernel": f"k{i % 3}",
                "variant": "v",
                "levers": {"a": bool(i % 2)},
                "config": f"a={i % 2}",
                "shape": {"label": f"s{i}"},
                "status": "pass" if i % 7 else "fail",
                "note": "",
                "error": {"rel": 0.5} if i % 7 == 0 else None,
                "timing": None,
                "tensor_cores": "mma.sync" if i % 3 == 0 else None,
                "tc_dtype": "f16" if i % 3 == 0 else None,
                "device": "Numba CUDA simulator",
            }
        )
    recs.append(dict(recs[5]))  # a repeated identity: counted once, the later kept
    doc = {"schema": "leverctl.bench/1", "device": {"kind": "sim", "name": "Numba CUDA simulator"}, "results": recs}
    p = tmp_path / "b.json"
    p.write_text(json.dumps(doc, indent=2))
    (streamed, dups, _), _ = R._bench_streamed(p, Tables())
    standard, sdups, _ = gather(recs, Tables())
    assert len(streamed) == len(standard) == 40 and list(dups) == list(sdups) == [41]
    assert [streamed.record(i) for i in range(40)] == [standard.record(i) for i in range(40)]
    rs = R.load_results(p)
    assert len(rs.records) == 40 and rs.device_kind == "sim" and rs.duplicates == ["results[40]"]


def _run_indented(data: bytes, size: int):
    from leverctl.bench.records.stream import split_indented

    got, heads = [], []
    rest = split_indented(
        _pieces(data, size), lambda texts: got.extend(texts) or True, lambda h: heads.append(h) or True
    )
    return rest, [json.loads(t) for t in got] if got else got, heads


@pytest.mark.parametrize("size", [1, 3, 7, 64, 1 << 20])
def test_bench_layout_is_cut_at_its_lines_into_the_same_records(size):
    data = _doc(TRICKY)  # indented by two, as bench -o writes
    rest, got, heads = _run_indented(data, size)
    assert got == json.loads(data)["results"]
    whole = json.loads(rest)
    assert whole["results"] == [] and whole["after"]["results_not"] == [5]
    assert json.loads(heads[0])["device"] == {"kind": "sim"}


def test_another_layout_is_said_to_be_so_and_a_broken_one_refused():
    from leverctl.bench.records.stream import NOT_INDENTED

    compact = json.dumps({"schema": "s", "results": TRICKY}, separators=(",", ":")).encode()
    assert _run_indented(compact, 5)[0] == NOT_INDENTED
    assert _run_indented(_doc([]), 5)[0] == NOT_INDENTED  # an empty list: the byte walk reads it
    truncated = _doc(TRICKY)[:300]  # inside the records
    assert _run_indented(truncated, 7)[0] is None


def test_a_stray_value_between_records_reaches_the_decoder_which_refuses_it():
    text = _doc([{"a": 1}, {"b": 2}]).replace(b"},\n    {", b"},\n    5,\n    {")
    got = []
    from leverctl.bench.records.stream import split_indented

    def take(texts):
        for t in texts:
            try:
                got.append(json.loads(t))
            except json.JSONDecodeError:
                return False
        return True

    assert split_indented(_pieces(text, 4), take) is None
