"""The fast paths of reading results at cluster scale hold to the plain ones:

* a result line decoded by msgspec (``decode.record``) gives a report and a
  comparison exactly what the standard parser and ``check_record`` give,
  and every line the fast path does not take is decided by the standard one;
* a lever's effect, paired on arrays, is its definition: the median over
  every pair of passing records that differ in that lever alone;
* a shard's plan lists its own items by place, and merge puts shards of
  either plan schema back in the unsharded order.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leverctl.bench import columns, decode
from leverctl.bench import rank as rk
from leverctl.bench import results as rs
from leverctl.errors import UserError

# ── records: the fast decoding against the standard one ─────────────────────

figures = st.one_of(st.floats(min_value=1e-3, max_value=1e4), st.integers(1, 10**4), st.none(),
                    st.just(0.0), st.just(-1.0), st.just("12"))
timings = st.one_of(
    st.none(), st.just("absent"),
    st.fixed_dictionaries({"median_us": figures}, optional={"p20_us": figures, "p80_us": figures,
                                                           "noise": figures, "samples": st.integers(0, 9)}))
lever_values = st.one_of(st.booleans(), st.integers(-2, 64), st.none(), st.sampled_from(["a", "é"]),
                         st.fixed_dictionaries({"prefill": st.booleans(), "carry": st.booleans()}))
records = st.fixed_dictionaries(
    {"kernel": st.sampled_from(["w4a16.gemv", "ffn.prefill", "gdn.verify"]),
     "variant": st.sampled_from(["a", "b"]),
     "levers": st.dictionaries(st.sampled_from(["x", "y", "z"]), lever_values, max_size=3),
     "shape": st.fixed_dictionaries({"label": st.sampled_from(["s1", "s2"])}, optional={"m": st.integers(1, 9)}),
     "status": st.sampled_from(["pass", "fail"])},
    optional={"timing": timings, "note": st.one_of(st.text(max_size=5), st.integers()),
              "error": st.one_of(st.none(), st.fixed_dictionaries({"rel": st.floats(0, 1)})),
              "device": st.sampled_from(["H200", rs.SIM_NAME, None]), "baseline": st.booleans(),
              "batch_invariance": st.one_of(st.none(), st.fixed_dictionaries({"ok": st.booleans()})),
              "tensor_cores": st.sampled_from(["wgmma", None]), "tc_dtype": st.sampled_from(["f16", None]),
              "roofline": st.one_of(st.none(), st.fixed_dictionaries({"pct_of_floor": st.floats(0, 100)})),
              "plan": st.sampled_from(["0123456789abcdef", "feedfacefeedface"]),
              "traffic": st.fixed_dictionaries({"bytes": st.integers(0, 2**70)})})


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
        out["timing"] = {k: float(t[k]) for k in rs.TIMING_FIGURES if t.get(k) is not None}
    if "device" in rec:
        out["device"] = rec["device"]
    if rec.get("baseline"):
        out["baseline"] = True
        if "batch_invariance" in rec:
            out["batch_invariance"] = rec["batch_invariance"]
    failing, arm = rec["status"] != "pass", rec["kernel"] in rs.ARM_VIEW_KERNELS
    if failing and "note" in rec:
        out["note"] = rec["note"]
    if (failing or arm) and "error" in rec:
        out["error"] = rec["error"]
    if arm:
        out.update({k: rec[k] for k in ("tensor_cores", "tc_dtype") if k in rec})
        if isinstance(rec.get("roofline"), dict):
            out["roofline"] = {"pct_of_floor": rec["roofline"].get("pct_of_floor")}
    return out


def _plain(path: Path, kind):
    """What the standard path makes of each line: json.loads, check_record
    (a repeated identity counted once, the later kept), the view."""
    out = {}
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        rec = rs.check_record(json.loads(line), f"{path}:{n}", kind)
        out[rs.identity(rec)] = _view(rec)
    return list(out.values())


def _columns(path: Path, kind):
    return list(rs.read_jsonl(path, kind, columns=columns.Builder()).records)


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


def test_the_records_read_again_from_their_lines_are_the_records_read_whole(tmp_path):
    """``report show -f csv`` holds columns and reads each kept record's line
    again as it writes its row: the records of the plain reading, a repeated
    identity and a line the fast path refuses included, and the same CSV."""
    from leverctl.bench.report import records_csv

    lines = [json.dumps({"kernel": "k", "variant": "v", "levers": {"x": i % 5}, "config": f"x={i % 5}",
                         "shape": {"label": "s"}, "status": "pass", "note": math.nan if i == 3 else "",
                         "timing": None, "traffic": {"bytes": i}}, allow_nan=True) for i in range(8)]
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(lines) + "\n" + lines[0][:20], "utf-8")  # and a partial last line
    whole = rs.load_results(path)
    held = rs.load_results(path, columns=True)
    again = list(rs.whole_records(held, path))
    assert len(again) == 5 and json.dumps(again) == json.dumps(whole.records)
    assert records_csv(again) == records_csv(whole.records)


def test_a_piece_of_lines_taken_at_once_gives_the_columns_of_taking_them_one_by_one(tmp_path):
    """The columns' batch path (each field of a piece of lines at once) and
    the one-record path agree, duplicates and the rare fields included."""
    import random

    rng = random.Random(5)
    lines = []
    for i in range(400):
        rec = {"kernel": rng.choice(["w4a16.gemv", "ffn.prefill"]), "variant": rng.choice("ab"),
               "levers": {"x": i % 37, "y": bool(i % 2)}, "config": f"x={i % 37},y={i % 2}",
               "shape": {"label": f"s{i % 5}"}, "status": "pass" if rng.random() < 0.8 else "fail",
               "note": "slow" if i % 7 == 0 else "", "error": {"rel": rng.random()}, "device": "H200",
               "baseline": i % 11 == 0, "batch_invariance": {"ok": True} if i % 11 == 0 else None,
               "timing": {"median_us": rng.uniform(1, 9), "p20_us": 1.0, "p80_us": 2, "noise": 0.01},
               "roofline": {"pct_of_floor": 50.0}, "tensor_cores": "mma.sync", "plan": "p" * 16}
        lines.append(json.dumps(rec))
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    batch = rs.read_jsonl(path, "gpu", "p" * 16, columns=columns.Builder(plan_hash="p" * 16))
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


@pytest.mark.parametrize("line", [
    b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass","note":NaN}',
    b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"fail","error":1e999}',
    b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"fail","error":"\\ud800"}',
    b'{"kernel":"ffn.prefill","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass",'
    b'"roofline":{"pct_of_floor":1e999}}',
    b'{"kernel":"k","variant":"v","levers":{"a":1,"a":2},"config":"","shape":{"label":"s"},"status":"pass"}',
    b'{"kernel":"k","kernel":"k2","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass"}',
    b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass","device":null}',
])
def test_odd_lines_are_read_as_the_standard_parser_reads_them(tmp_path, line):
    path = tmp_path / "results.jsonl"
    path.write_bytes(line + b"\n")
    for kind in (None, "sim"):
        want = _view(rs.check_record(json.loads(line), "here", kind))
        assert _columns(path, kind) == [want]


@pytest.mark.parametrize("line, why", [
    (b'{"kernel":"k","variant":"v","levers":[1],"config":"","shape":{"label":"s"},"status":"pass"}',
     "`levers` is not an object"),
    (b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"skip"}',
     "neither pass nor fail"),
    (b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass",'
     b'"timing":{"median_us":0.0}}', "median_us is 0"),
    (b'{"kernel":"k","variant":"v","levers":{},"config":"","shape":{"label":"s"},"status":"pass"}',
     "has no timing"),
])
def test_a_bad_record_gets_the_standard_words_by_either_path(tmp_path, line, why):
    path = tmp_path / "results.jsonl"
    path.write_bytes(b"\n" + line + b"\n")
    for builder in (None, columns.Builder()):
        with pytest.raises(UserError, match="not a leverctl record|record status|unusable record") as e:
            rs.read_jsonl(path, "gpu", columns=builder)
        assert why in e.value.message and e.value.where == f"{path}:2"


# ── lever effects: the array pairing against the definition ────────────────


def _effects_by_definition(records, plan):
    """Every pair of passing timed records of one kernel and shape that
    differ in one lever alone (presence of the others included), by brute force."""
    out = {}
    info = rk.kernel_info(plan)
    groups = {}
    for r in records:
        if r["status"] == "pass" and rs.median_us(r) is not None and not r.get("baseline"):
            groups.setdefault((r["kernel"], r["shape"]["label"]), []).append(r)
    for (kernel, shape), recs in groups.items():
        k = info.get(kernel) or {}
        for lever in k.get("levers") or rk._varying(recs):
            values = []
            for r in recs:
                if lever in r["levers"] and rk.canon(r["levers"][lever]) not in map(rk.canon, values):
                    values.append(r["levers"][lever])
            if len(values) < 2:
                continue
            recipe = k.get("recipe_levers") or {}
            ref = rk._reference(values, recipe.get(lever), lever in recipe)

            def rest(r):
                return {f: rk.canon(v) for f, v in r["levers"].items() if f != lever}

            for v in values:
                if rk.canon(v) == rk.canon(ref):
                    continue
                last = {}
                for a in recs:  # the last record of a setting wins, as in the report
                    if lever in a["levers"]:
                        last[(json.dumps(rest(a), sort_keys=True), rk.canon(a["levers"][lever]))] = a
                ratios = [rs.median_us(last[(s, rk.canon(ref))]) / rs.median_us(b)
                          for (s, c), b in last.items() if c == rk.canon(v) and (s, rk.canon(ref)) in last]
                if ratios:
                    out[(kernel, shape, lever, rk.canon(v))] = (statistics.median(ratios), len(ratios), rk.canon(ref))
    return out


lever_sets = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]),
                             st.one_of(st.booleans(), st.integers(0, 3), st.none()), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(lever_sets, st.sampled_from(["s1", "s2"]), st.floats(0.5, 50), st.booleans()),
                min_size=1, max_size=40),
       st.booleans())
def test_a_levers_effect_is_the_median_over_every_pair_differing_in_it_alone(rows, with_plan):
    records = [{"kernel": "k", "variant": "v", "levers": lv, "config": json.dumps(lv, sort_keys=True),
                "shape": {"label": shape}, "status": "pass" if ok else "fail", "timing": {"median_us": us}}
               for lv, shape, us, ok in rows]
    plan = {"kernels": [{"kernel": "k", "levers": ["a", "b", "c"], "recipe_levers": {"b": 2}}]} if with_plan else None
    got = {(e.kernel, e.shape, e.lever, rk.canon(e.value)): (e.speedup, e.pairs, rk.canon(e.reference))
           for e in rk.lever_effects(records, plan)}
    want = _effects_by_definition(records, plan)
    assert got.keys() == want.keys()
    for key, (speedup, pairs, ref) in want.items():
        assert got[key][1:] == (pairs, ref) and math.isclose(got[key][0], speedup, rel_tol=1e-12)


def test_effects_pair_records_of_many_levers_without_overflow():
    """Seventy on/off levers make a 2^70 mixed-radix number: the pairing
    labels the settings instead, with the same answer."""
    fields = [f"f{i}" for i in range(70)]
    base = {f: False for f in fields}
    records = [{"kernel": "k", "variant": "v", "levers": base, "config": "base", "shape": {"label": "s"},
                "status": "pass", "timing": {"median_us": 10.0}}]
    for i, f in enumerate(fields):
        records.append({"kernel": "k", "variant": "v", "levers": {**base, f: True}, "config": f,
                        "shape": {"label": "s"}, "status": "pass", "timing": {"median_us": 10.0 / (1 + i)}})
    got = {e.lever: (e.speedup, e.pairs) for e in rk.lever_effects(records)}
    assert got == {f: (pytest.approx(1.0 + i), 1) for i, f in enumerate(fields)}


# ── plans: shards list their own items; merge restores the order ───────────


def _plan(items, shard=None, schema=rs.PLAN_SCHEMA):
    return {"schema": schema, "hash": "0123456789abcdef", "engine": "atlas", "catalog": {"digest": "c" * 64},
            "device": {"kind": "sim", "name": None}, "shard": shard, "kernels": [], "not_benchmarked": [],
            "total": 6, "items": items}


def _items():
    return [{"n": n, "kernel": "k", "variant": "v", "config": f"x={n}", "shape": "s", "levers": {"x": n}}
            for n in range(6)]


def _record(it):
    return json.dumps({"kernel": it["kernel"], "variant": "v", "levers": it["levers"], "config": it["config"],
                       "shape": {"label": it["shape"]}, "status": "pass", "device": rs.SIM_NAME}) + "\n"


@pytest.mark.parametrize("schema", ["leverctl.sweep-plan/1", rs.PLAN_SCHEMA])
def test_merge_puts_the_shards_items_and_records_back_in_plan_order(tmp_path, schema):
    items = _items()
    deal = {1: [4, 1, 5], 2: [0, 3, 2]}  # each shard's places, its records written in another order
    parts = []
    for i, places in deal.items():
        d = tmp_path / str(i)
        d.mkdir()
        mine = sorted(places)
        listed = [{k: v for k, v in it.items() if k != "n"} for it in items] if schema.endswith("/1") \
            else [items[n] for n in mine]  # the first schema: every item in every shard, no place
        rs.write_plan(d / rs.PLAN_FILE, _plan(listed, {"index": i, "count": 2, "items": 3}, schema))
        (d / rs.RESULTS_FILE).write_text("".join(_record(items[n]) for n in places))
        parts.append(rs.load_results(d, plan_items=True))
    tables = columns.Tables()
    sets = [rs.load_results(p.source, plan_items=True, columns=tables) for p in parts]
    merged = rs.merge(sets)
    assert merged.missing == 0 and [it.n for it in merged.plan["items"]] == list(range(6))
    rs.write_result_dir(tmp_path / "m", merged, merged.plan)
    again = rs.load_results(tmp_path / "m", plan_items=True)
    assert [r["config"] for r in again.records] == [f"x={n}" for n in range(6)]
    assert [(it.n, it.config, decode.value(it.levers)) for it in again.plan["items"]] == \
        [(n, f"x={n}", {"x": n}) for n in range(6)]
    text = (tmp_path / "m" / rs.PLAN_FILE).read_text()
    assert json.loads(text)["schema"] == rs.PLAN_SCHEMA
    assert '\n    {"n":0,"kernel":"k"' in text  # an item to a line


def test_inputs_read_by_a_second_process_are_what_one_process_reads(tmp_path, monkeypatch):
    """load_all hands some inputs to another process when they are large:
    their records come back numbered in the caller's tables, with their
    plans' items, and an input's error stays in its place."""
    items = _items()
    paths = []
    for i, places in {1: [4, 1], 2: [0, 3], 3: [2, 5]}.items():
        d = tmp_path / str(i)
        d.mkdir()
        rs.write_plan(d / rs.PLAN_FILE, _plan([items[n] for n in sorted(places)],
                                              {"index": i, "count": 3, "items": 2}))
        (d / rs.RESULTS_FILE).write_text("".join(_record(items[n]) for n in places))
        paths.append(d)
    one = rs.load_all(paths, columns.Tables(), plan_items=True)
    monkeypatch.setattr(rs, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(rs.os, "cpu_count", lambda: 2)
    tables = columns.Tables()
    two = rs.load_all(paths, tables, plan_items=True)
    assert [list(a.records) for a in one] == [list(b.records) for b in two]
    assert [[it.n for it in a.plan["items"]] for a in one] == [[it.n for it in b.plan["items"]] for b in two]
    assert all(b.records.tables is tables for b in two)
    merged = rs.merge(two)
    assert [r["config"] for r in merged.records] == [f"x={n}" for n in range(6)] and merged.missing == 0
    with open(paths[1] / rs.RESULTS_FILE, "a") as f:
        f.write('{"kernel": "k"}\n')
    got = rs.load_all(paths, columns.Tables(), plan_items=True)
    assert isinstance(got[0], rs.ResultSet) and isinstance(got[2], rs.ResultSet)
    assert isinstance(got[1], UserError) and got[1].where == f"{paths[1] / rs.RESULTS_FILE}:3"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.fixed_dictionaries(
    {"n": st.integers(0, 10**7), "kernel": st.sampled_from(["k", "é.k"]), "config": st.text(max_size=4),
     "shape": st.sampled_from(["s", "t"])},
    optional={"variant": st.one_of(st.sampled_from(["a", "b"]), st.none(), st.integers(0, 3)),
              "levers": st.dictionaries(st.sampled_from(["x", "y"]), st.one_of(st.booleans(), st.integers(0, 3)))}),
    max_size=12))
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


def test_a_plan_item_with_a_bad_place_is_refused_where_the_items_are_read(tmp_path):
    items = _items()
    items[2]["n"] = "two"
    (tmp_path / rs.PLAN_FILE).write_text(json.dumps(_plan(items)))
    with pytest.raises(UserError, match=r"items\[2\] is not an object"):
        rs.read_plan(tmp_path, items=True)
    # A reader of the header alone (resume, show, compare) leaves the items as text.
    assert rs.read_plan(tmp_path)["hash"] == "0123456789abcdef"


def test_the_header_readers_leave_the_items_unbuilt(tmp_path):
    rs.write_plan(tmp_path / rs.PLAN_FILE, _plan(_items()))
    plan, count = rs.read_plan_counted(tmp_path)
    assert count is None and "items" not in plan and plan["total"] == 6
    plan, count = rs.read_plan_counted(tmp_path, items=True)
    assert count == 6 and [it.n for it in plan["items"]] == list(range(6))
    (tmp_path / rs.PLAN_FILE).write_text(json.dumps({**_plan([]), "items": {"a": 1}}))
    with pytest.raises(UserError, match="no `items` list"):
        rs.read_plan(tmp_path)


# ── compare: the usual pair's shortcut against the general path ─────────────


def _usual_record(rng) -> dict:
    """Mostly what a GPU sweep writes (a passing record, four float timing
    figures), now and then not (a failure, a figure missing, None, negative
    or an int, no timing, the simulator's name)."""
    def figure():
        roll = rng.random()
        return rng.uniform(0.001, 1e4) if roll < 0.9 else rng.choice([None, -1.0, 7, 0.0])

    timing = {"median_us": figure(), "p20_us": figure(), "p80_us": figure(), "noise": figure()}
    for k in ("p20_us", "p80_us", "noise"):
        if rng.random() < 0.1:
            del timing[k]
    return {"kernel": "k", "variant": rng.choice("ab"), "levers": {}, "config": "", "shape": {"label": "s"},
            "note": "", "status": "pass" if rng.random() < 0.9 else "fail",
            "timing": timing if rng.random() < 0.95 else None,
            "device": "H200" if rng.random() < 0.95 else rs.SIM_NAME}


def test_compares_shortcut_for_two_timed_gpu_records_gives_the_general_verdict():
    import random

    from leverctl.bench import compare as cmp

    rng = random.Random(1)
    shortcut = cmp._gpu_us
    took = 0
    for _ in range(3000):
        b, n = _usual_record(rng), _usual_record(rng)
        kinds = (rng.choice(["gpu", "gpu", "sim", None]), rng.choice(["gpu", "gpu", None]))
        threshold = rng.choice([0.0, 5.0])
        got = cmp._entry(b, n, threshold, kinds)
        took += shortcut(b, kinds[0]) is not None and shortcut(n, kinds[1]) is not None
        try:
            cmp._gpu_us = lambda rec, kind: None
            want = cmp._entry(b, n, threshold, kinds)
        finally:
            cmp._gpu_us = shortcut
        assert got == want, (b, n, kinds)
    assert took > 500  # the shortcut was exercised


def _sweep_dir(d: Path, records: list[dict], kind="gpu", name="NVIDIA H200") -> Path:
    d.mkdir()
    rs.write_plan(d / rs.PLAN_FILE, {**_plan([]), "device": {"kind": kind, "name": name}})
    (d / rs.RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    return d


def _record_by_record(b, n, threshold):
    """The comparison's entries by definition: each matched pair of the
    records as read whole, judged by ``compare._entry``, in display order."""
    from leverctl.bench import compare as cmp

    kinds = (b.device_kind, n.device_kind)
    new = {rs.identity(r): r for r in n.records}
    entries = [cmp._entry(r, new[rs.identity(r)], threshold, kinds) for r in b.records if rs.identity(r) in new]
    return sorted(entries, key=lambda e: (cmp.VERDICTS.index(e.verdict), e.kernel, e.shape, e.config))


@pytest.mark.parametrize("kind, name, mixed", [("gpu", "NVIDIA H200", False), ("gpu", None, False),
                                               ("sim", None, False), (None, None, True), ("gpu", None, True)])
def test_compare_on_columns_gives_each_pair_its_verdict_record_by_record(tmp_path, kind, name, mixed):
    """compare_paths judges the usual pairs on arrays and the rest record by
    record: every entry is the one ``_entry`` gives the pair read whole;
    duplicates, records on one side and failures included."""
    import random

    from leverctl.bench import compare as cmp

    rng = random.Random(3)
    device = "NVIDIA H200" if kind == "gpu" else rs.SIM_NAME

    def side(scale):
        out = []
        for i in range(60):
            us, half = rng.uniform(5, 50) * scale, rng.uniform(0.001, 0.08)
            rec = {"kernel": "k", "variant": rng.choice("ab"), "levers": {"x": i}, "config": f"x={i}",
                   "shape": {"label": f"s{i % 3}"}, "status": "pass" if rng.random() < 0.9 else "fail",
                   "note": "", "device": device,
                   "timing": {"median_us": us, "p20_us": us * (1 - half), "p80_us": us * (1 + half),
                              "noise": 0.01} if kind == "gpu" else None}
            if mixed:  # now and then a figure missing, an int, the simulator's name, no timing...
                rec.update({k: v for k, v in _usual_record(rng).items() if k in ("timing", "device", "status")})
                if rec["timing"] and (rec["timing"]["median_us"] is None or any(
                        v is not None and (v <= 0 if k == "median_us" else v < 0) for k, v in rec["timing"].items())):
                    rec["timing"] = None
                if kind == "gpu" and rec["status"] == "pass" and not rec["timing"]:
                    rec["device"] = rs.SIM_NAME
                if rec["device"] == rs.SIM_NAME:
                    rec["timing"] = None
            out.append(rec)
        return out

    base, new = side(1.0), side(1.04)
    new = new[5:] + [dict(new[7], variant="b")]  # five only in BASE, and one repeated (the later kept)
    new.append(dict(new[0], config="only-new", status="fail"))
    b = _sweep_dir(tmp_path / "b", base, kind, name)
    n = _sweep_dir(tmp_path / "n", new, kind, name)
    got, _b, got_n = cmp.compare_paths(b, n, threshold=5.0)
    whole_b, whole_n = rs.load_results(b), rs.load_results(n)
    want = _record_by_record(whole_b, whole_n, 5.0)
    assert list(got.entries) == want
    assert got.to_json(lazy=False)["entries"] == [e.to_json() for e in want]
    assert got.only_base == [cmp._one(r) for r in whole_b.records
                             if rs.identity(r) not in {rs.identity(x) for x in whole_n.records}]
    assert got_n.notes() == whole_n.notes() and got_n.notes()
    assert got.only_base and got.only_new and got.entries
    assert len({e.verdict for e in want}) >= (3 if kind == "gpu" or mixed else 1)
