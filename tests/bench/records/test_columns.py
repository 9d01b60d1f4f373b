"""The fast path of reading records holds to the plain one:

* a result line decoded by msgspec (``decode.record``) gives a report and a
  comparison exactly what the standard parser and ``check_record`` give,
  and every line the fast path does not take is decided by the standard one;
* a piece of lines taken at once gives the columns of taking them one by one;
* the rules the columns apply on arrays are the rules of one record;
* a plan's items held as columns are written as msgspec writes each.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leverctl.bench.records import columns, decode, rules, schema
from leverctl.bench.records.read import read_jsonl
from leverctl.errors import UserError

# ── records: the fast decoding against the standard one ─────────────────────

figures = st.one_of(
    st.floats(min_value=1e-3, max_value=1e4),
    st.integers(1, 10**4),
    st.none(),
    st.just(0.0),
    st.just(-1.0),
    st.just("12"),
)
timings = st.one_of(
    st.none(),
    st.just("absent"),
    st.fixed_dictionaries(
        {"median_us": figures},
        optional={"p20_us": figures, "p80_us": figures, "noise": figures, "samples": st.integers(0, 9)},
    ),
)
lever_values = st.one_of(
    st.booleans(),
    st.integers(-2, 64),
    st.none(),
    st.sampled_from(["a", "é"]),
    st.fixed_dictionaries({"prefill": st.booleans(), "carry": st.booleans()}),
)
records = st.fixed_dictionaries(
    {
        "kernel": st.sampled_from(["w4a16.gemv", "ffn.prefill", "gdn.verify"]),
        "variant": st.sampled_from(["a", "b"]),
        "levers": st.dictionaries(st.sampled_from(["x", "y", "z"]), lever_values, max_size=3),
        "shape": st.fixed_dictionaries({"label": st.sampled_from(["s1", "s2"])}, optional={"m": st.integers(1, 9)}),
        "status": st.sampled_from(["pass", "fail"]),
    },
    optional={
        "timing": timings,
        "note": st.one_of(st.text(max_size=5), st.integers()),
        "error": st.one_of(st.none(), st.fixed_dictionaries({"rel": st.floats(0, 1)})),
        "device": st.sampled_from(["H200", schema.SIM_NAME, None]),
        "baseline": st.booleans(),
        "batch_invariance": st.one_of(st.none(), st.fixed_dictionaries({"ok": st.booleans()})),
        "tensor_cores": st.sampled_from(["wgmma", None]),
        "tc_dtype": st.sampled_from(["f16", None]),
        "roofline": st.one_of(st.none(), st.fixed_dictionaries({"pct_of_floor": st.floats(0, 100)})),
        "plan": st.sampled_from(["0123456789abcdef", "feedfacefeedface"]),
        "traffic": st.fixed_dictionaries({"bytes": st.integers(0, 2**70)}),
    },
)


def _line(rec: dict) -> str:
    rec = dict(rec)
    if rec.get("timing") == "absent":
        del rec["timing"]
    rec["config"] = ",".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in rec["levers"].items())
    return json.dumps(rec)


def _view(rec: dict) -> dict:
    """What the reports read of a checked record, as ``columns.Records``
    gives it back: identity, variant, status, levers, timing figures (as
    floats), device, a baseline's batch invariance, a failure's note and
    error, and the arm view's fields for its kernels."""
    out = {k: rec[k] for k in ("kernel", "variant", "config", "status", "levers")}
    out["shape"] = {"label": rec["shape"]["label"]}
    t = rec.get("timing")
    if isinstance(t, dict):
        out["timing"] = {k: float(t[k]) for k in schema.TIMING_FIGURES if t.get(k) is not None}
    if "device" in rec:
        out["device"] = rec["device"]
    if rec.get("baseline"):
        out["baseline"] = True
        if "batch_invariance" in rec:
            out["batch_invariance"] = rec["batch_invariance"]
    failing, arm = rec["status"] != "pass", rec["kernel"] in schema.ARM_VIEW_KERNELS
    if failing and "note" in rec:
        out["note"] = rec["note"]
    if (failing or arm) and "error" in rec:
        out["error"] = rec["error"]
    if arm:
        out.update({k: rec[k] for k in ("tensor_cores", "tc_dtype") if k in rec})
        if isinstance(rec.get("roofline"), dict):
            out["roofline"] = {"pct_of_floor": rec["roofline"].get("pct_of_floor")}
    return out


def _plain(path, kind):
    """What the standard path makes of each line: json.loads, check_record
    (a repeated identity counted once, the later kept), the view."""
    out = {}
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        rec = rules.check_record(json.loads(line), f"{path}:{n}", kind)
        out[rules.identity(rec)] = _view(rec)
    return list(out.values())


def _columns(path, kind):
    return list(read_jsonl(path, kind).records)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(recs=st.lists(records, min_size=1, max_size=6), kind=st.sampled_from(["gpu", "sim", None]))
def test_the_columns_hold_what_the_standard_parser_gives_the_reports(tmp_path, recs, kind):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(_line(r) + "\n" for r in recs), "utf-8")
    try:
        want = _plain(path, kind)
    except UserError as e:
        with pytest.raises(UserError) as got:
            _columns(path, kind)
        assert got.value.message == e.message and got.value.where == e.where
        return
    assert _columns(path, kind) == want


def test_a_piece_of_lines_taken_at_once_gives_the_columns_of_taking_them_one_by_one(tmp_path):
    """The columns' batch path (each field of a piece of lines at once) and
    the one-record path agree, duplicates and the rare fields included."""
    import random

    rng = random.Random(5)
    lines = []
    for i in range(400):
        rec = {
            "kernel": rng.choice(["w4a16.gemv", "ffn.prefill"]),
            "variant": rng.choice("ab"),
            "levers": {"x": i % 37, "y": bool(i % 2)},
            "config": f"x={i % 37},y={i % 2}",
            "shape": {"label": f"s{i % 5}"},
            "status": "pass" if rng.random() < 0.8 else "fail",
            "note": "slow" if i % 7 == 0 else "",
            "error": {"rel": rng.random()},
            "device": "H200",
            "baseline": i % 11 == 0,
            "batch_invariance": {"ok": True} if i % 11 == 0 else None,
            "timing": {"median_us": rng.uniform(1, 9), "p20_us": 1.0, "p80_us": 2, "noise": 0.01},
            "roofline": {"pct_of_floor": 50.0},
            "tensor_cores": "mma.sync",
            "plan": "p" * 16,
        }
        lines.append(json.dumps(rec))
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    batch = read_jsonl(path, "gpu", "p" * 16)
    builder = columns.Builder(plan_hash="p" * 16)
    offset = 0
    for n, line in enumerate(lines, 1):
        builder.one(decode.record(line.encode()), n, offset, len(line) + 1)
        offset += len(line) + 1
    one, dups, foreign = builder.finish()
    assert list(batch.records) == list(one) == _plain(path, "gpu")
    assert list(batch.duplicates) == dups and len(dups) > 10 and foreign is None
    for k in ("offset", "length", "line"):
        assert (batch.records.cols[k] == one.cols[k]).all(), k


@pytest.mark.parametrize(
    "line",
    [
        b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass","note":NaN}',
        b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"fail","error":1e999}',
        b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"fail","error":"\\ud800"}',
        b'{"kernel":"ffn.prefill","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass",'
        b'"roofline":{"pct_of_floor":1e999}}',
        b'{"kernel":"k","variant":"v","levers":{"a":1,"a":2},"config":"","shape":{"label":"s"},"status":"pass"}',
        b'{"kernel":"k","kernel":"k2","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass"}',
        b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass","device":null}',
    ],
)
def test_odd_lines_are_read_as_the_standard_parser_reads_them(tmp_path, line):
    path = tmp_path / "results.jsonl"
    path.write_bytes(line + b"\n")
    for kind in (None, "sim"):
        want = _view(rules.check_record(json.loads(line), "here", kind))
        assert _columns(path, kind) == [want]


@pytest.mark.parametrize(
    "line, why",
    [
        (
            b'{"kernel":"k","variant":"v","levers":[1],"config":"","shape":{"label":"s"},"status":"pass"}',
            "`levers` is not an object",
        ),
        (
            b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"skip"}',
            "neither pass nor fail",
        ),
        (
            b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass",'
            b'"timing":{"median_us":0.0}}',
            "median_us is 0",
        ),
        (
            b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass"}',
            "has no timing",
        ),
    ],
)
def test_a_bad_record_gets_the_standard_words_by_either_path(tmp_path, line, why):
    """A line alone on its line (the batch refused: the first line is empty)
    and the same line among good ones (the batch taken, then refused by the
    columns) get the standard path's words and line number."""
    good = b'{"kernel":"k","variant":"v","levers":{},"config":"%d","shape":{"label":"s"},"status":"fail"}'
    for text, n in ((b"\n" + line + b"\n", 2), (b"".join(good % i + b"\n" for i in range(3)) + line + b"\n", 4)):
        path = tmp_path / "results.jsonl"
        path.write_bytes(text)
        with pytest.raises(UserError, match="not a leverctl record|record status|unusable record") as e:
            read_jsonl(path, "gpu")
        assert why in e.value.message and e.value.where == f"{path}:{n}"


# ── the rules on arrays against the rules of one record ─────────────────────


def _usual_record(rng) -> dict:
    """Mostly what a GPU sweep writes (a passing record, four float timing
    figures), now and then not (a failure, a figure missing, None, negative
    or an int, no timing, the simulator's name, a device that is no name)."""

    def figure():
        roll = rng.random()
        return rng.uniform(0.001, 1e4) if roll < 0.9 else rng.choice([None, -1.0, 7, 0.0])

    timing = {"median_us": figure(), "p20_us": figure(), "p80_us": figure(), "noise": figure()}
    for k in ("p20_us", "p80_us", "noise"):
        if rng.random() < 0.1:
            del timing[k]
    return {
        "kernel": "k",
        "variant": rng.choice("ab"),
        "levers": {},
        "config": str(rng.random()),
        "shape": {"label": "s"},
        "note": "",
        "status": "pass" if rng.random() < 0.9 else "fail",
        "timing": timing if rng.random() < 0.95 else None,
        "device": rng.choice(["H200"] * 18 + [schema.SIM_NAME, 3]),
    }


def test_the_columns_rules_on_arrays_are_the_rules_of_each_record():
    """``Records.ran_on_gpu`` (of timed records) and ``Records.spreads`` give
    what ``rules.ran_on_gpu`` and ``rules.spread`` give each record."""
    import random

    rng = random.Random(7)
    recs = [_usual_record(rng) for _ in range(3000)]
    usable = [r for r in recs if rules.figures(r["timing"]) is not None]
    held = columns.of_dicts(usable)
    assert len(held) == len(usable) > 2000
    idx = np.arange(len(held))
    timed = np.flatnonzero(held.timed)
    assert 0 < len(timed) < len(held)
    for kind in ("gpu", "sim", None):
        got = held.ran_on_gpu(timed, kind)
        assert got.tolist() == [rules.ran_on_gpu(usable[i], kind) for i in timed.tolist()]
        assert 0 < got.sum() < len(timed) or kind == "sim"
    assert held.spreads(idx).tolist() == [rules.spread(r) for r in usable]


def test_a_records_timing_figures_are_those_the_check_accepts():
    """``rules.figures`` (what the columns hold of a timing) refuses exactly
    the timings whose figures ``rules.figure_problem`` names."""
    import random

    rng = random.Random(11)
    for _ in range(2000):
        t = _usual_record(rng)["timing"]
        got = rules.figures(t)
        if t is None:
            assert got == (None,) * len(schema.TIMING)
        elif rules.figure_problem(t):
            assert got is None
        else:
            assert got == tuple(None if t.get(f.name) is None else float(t[f.name]) for f in schema.TIMING)


# ── a plan's items ──────────────────────────────────────────────────────────


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "n": st.integers(0, 10**7),
                "kernel": st.sampled_from(["k", "é.k"]),
                "config": st.text(max_size=4),
                "shape": st.sampled_from(["s", "t"]),
            },
            optional={
                "variant": st.one_of(st.sampled_from(["a", "b"]), st.none(), st.integers(0, 3)),
                "levers": st.dictionaries(st.sampled_from(["x", "y"]), st.one_of(st.booleans(), st.integers(0, 3))),
            },
        ),
        max_size=12,
    )
)
def test_items_held_as_columns_are_written_as_msgspec_writes_each_item(items):
    """A merged plan's items are spelled from the names the columns hold:
    the same text as encoding each ``decode.Item``, and the same items back."""
    import msgspec

    decoded = [decode.item_of(it) for it in items]
    held = columns.Items.of(decoded, columns.Tables())
    assert [x for lines in held.lines(size=5) for x in lines] == [msgspec.json.encode(it) for it in decoded]
    assert [msgspec.json.encode(it) for it in held] == [msgspec.json.encode(it) for it in decoded]
    picked = held.take(np.arange(len(decoded))[::-1])
    assert [x for lines in picked.lines() for x in lines] == [msgspec.json.encode(it) for it in decoded[::-1]]
