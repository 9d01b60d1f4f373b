"""Results files, resume and the kill test: an interrupted sweep keeps every
finished record, and --resume runs the rest exactly once."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sweep_fakes as fk
from leverctl.bench import results as rs
from leverctl.bench import sweep as sw
from leverctl.errors import UserError
from leverctl.levers import load_catalog, resolve

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ATLAS = load_catalog("atlas")
METRALE = load_catalog("metrale")


def metrale_plan(**kw):
    return sw.build_sweep(resolve(METRALE, env={}), fk.all_paths(), **kw)


def start(tmp_path, plan, shard=None, resume=False):
    doc = plan.plan_json({"kind": "sim", "name": "fake simulator"}, shard)
    return doc, sw.open_results(tmp_path / "out", doc, resume=resume)


def runner(calls):
    def run(item):
        calls.append(item.key)
        return fk.fake_record(item)
    return run


# ── the JSONL file ───────────────────────────────────────────────────────────


def test_a_partial_last_line_is_ignored_on_read_and_cut_on_resume(tmp_path):
    plan = metrale_plan()
    doc, opened = start(tmp_path, plan)
    calls: list = []
    sw.run(plan.items[:5], opened, runner(calls))
    path = tmp_path / "out" / rs.RESULTS_FILE
    intact = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"kernel": "fake.gemv", "variant": "sw", "lev')  # killed mid-write
    got = rs.read_jsonl(path)
    assert len(got.records) == 5 and got.tail_bytes > 0 and got.good_bytes == len(intact)
    _, again = start(tmp_path, plan, resume=True)
    assert again.cut_bytes > 0 and path.read_bytes() == intact
    calls.clear()
    out = sw.run(plan.items, again, runner(calls))
    assert len(calls) == plan.total - 5 and out.before == 5 and out.ran == plan.total - 5
    assert [rs.identity(r) for r in rs.read_jsonl(path).records] == \
        [it.key for it in plan.items[:5]] + [it.key for it in plan.items[5:]]


def test_a_corrupt_line_in_the_middle_is_refused_and_the_file_left_alone(tmp_path):
    plan = metrale_plan()
    doc, opened = start(tmp_path, plan)
    sw.run(plan.items[:3], opened, runner([]))
    path = tmp_path / "out" / rs.RESULTS_FILE
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"this is not json"
    path.write_bytes(b"\n".join(lines))
    before = path.read_bytes()
    with pytest.raises(UserError, match=r"results.jsonl:2: not a leverctl results file"):
        start(tmp_path, plan, resume=True)
    assert path.read_bytes() == before


def test_a_record_lacking_what_reports_need_is_foreign(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"kernel": "a", "config": "b"}\n')
    with pytest.raises(UserError, match="no variant, levers, shape, status"):
        rs.load_results(p)


@pytest.mark.parametrize("content, message", [
    (b'{"schema": "leverctl.bench/1", "results": [', "truncated"),
    (b'{"something": "else"}', "not a leverctl bench document"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "not a leverctl results file"),
    (b"[1, 2, 3]", "not a leverctl bench document"),
])
def test_foreign_or_truncated_files_are_refused_in_one_line(tmp_path, content, message):
    p = tmp_path / "in.json"
    p.write_bytes(content)
    with pytest.raises(UserError, match=message) as e:
        rs.load_results(p)
    assert "\n" not in e.value.line() and str(p) in e.value.line()


# ── resume refusals touch nothing ────────────────────────────────────────────


def test_an_existing_sweep_is_not_overwritten_without_resume(tmp_path):
    plan = metrale_plan()
    start(tmp_path, plan)
    snapshot = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    with pytest.raises(UserError, match="already holds a sweep; pass --resume"):
        start(tmp_path, plan)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == snapshot


def test_resume_refuses_a_different_plan_or_shard_and_touches_nothing(tmp_path):
    plan = metrale_plan()
    _, opened = start(tmp_path, plan)
    sw.run(plan.items[:4], opened, runner([]))
    snapshot = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    other = metrale_plan(only_levers=["gemv_sw"])
    with pytest.raises(UserError, match=f"this sweep's plan is {other.hash}, the directory's is {plan.hash}"):
        start(tmp_path, other, resume=True)
    with pytest.raises(UserError, match="holds shard .none: the whole plan., not 1/2"):
        start(tmp_path, plan, shard=(1, 2), resume=True)
    with pytest.raises(UserError, match="nothing to resume"):
        sw.open_results(tmp_path / "elsewhere", plan.plan_json({"kind": "sim"}, None), resume=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == snapshot


def test_resume_refuses_a_changed_catalog(tmp_path):
    src = (ROOT / "leverctl" / "catalogs" / "atlas.toml").read_text()
    (tmp_path / "cat.toml").write_text(src + "\n# edited\n")
    from leverctl.levers import load_catalog as lc

    edited = lc(path=tmp_path / "cat.toml")
    a = sw.build_sweep(resolve(ATLAS, env={}), fk.all_paths())
    b = sw.build_sweep(resolve(edited, env={}), fk.all_paths())
    start(tmp_path, a)
    with pytest.raises(UserError, match="lever catalog has changed"):
        start(tmp_path, b, resume=True)


def test_an_interrupt_keeps_what_finished_and_resume_runs_the_rest_once(tmp_path):
    plan = metrale_plan()
    _, opened = start(tmp_path, plan)
    calls: list = []

    def flaky(item):
        if len(calls) == 7:
            raise KeyboardInterrupt
        calls.append(item.key)
        return fk.fake_record(item)

    out = sw.run(plan.items, opened, flaky)
    assert out.interrupted and out.ran == 7 and out.missing == plan.total - 7
    _, again = start(tmp_path, plan, resume=True)
    calls2: list = []
    out2 = sw.run(plan.items, again, runner(calls2))
    assert not out2.interrupted and out2.missing == 0
    assert sorted(calls + calls2) == sorted(it.key for it in plan.items)


def test_the_simulator_shares_one_run_between_configurations_choosing_the_same_variant(tmp_path):
    plan = metrale_plan()
    _, opened = start(tmp_path, plan)
    calls: list = []
    out = sw.run(plan.items, opened, runner(calls), share_runs=True)
    assert len(out.records) == plan.total
    assert out.runs == len(calls) == sw.distinct_runs(plan.items) < plan.total
    by_key = {rs.identity(r): r for r in out.records}
    for it in plan.items:  # every configuration keeps its own levers, config and variant
        r = by_key[it.key]
        assert (r["config"], r["variant"]) == (it.config, it.variant)
        assert r["levers"] == {f: v for f, v in r["levers"].items()}


# ── repeated records, what a record's timing must be, plans ────────────────


def test_a_repeated_record_is_counted_once_and_its_line_named(tmp_path):
    plan = metrale_plan()
    doc, opened = start(tmp_path, plan)
    sw.run(plan.items[:3], opened, runner([]))
    path = tmp_path / "out" / rs.RESULTS_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines + [lines[0], lines[2]]))  # lines 4 and 5 repeat 1 and 3
    got = rs.read_jsonl(path)
    assert [rs.identity(r) for r in got.records] == [it.key for it in plan.items[:3]]
    assert got.duplicates == (4, 5)
    loaded = rs.load_results(tmp_path / "out")
    assert len(loaded.records) == 3
    assert loaded.notes() == [f"{tmp_path / 'out'}: 2 record(s) repeat an earlier one's kernel, shape and levers "
                              "(line 4, line 5); each counted once, the later kept"]
    _, again = start(tmp_path, plan, resume=True)
    assert len(again.done) == 3 and again.duplicates == (4, 5)
    calls: list = []
    sw.run(plan.items, again, runner(calls))
    assert len(calls) == plan.total - 3  # none of the repeated ones ran again


def test_the_later_of_two_records_of_one_identity_is_kept_in_the_earlier_place(tmp_path):
    plan = metrale_plan()
    first, second = (fk.fake_record(it) for it in plan.items[:2])
    again = {**first, "note": "run again"}
    path = tmp_path / rs.RESULTS_FILE
    path.write_bytes(b"".join(rs.record_line(r) for r in (first, second, again)))
    assert [r.get("note") for r in rs.read_jsonl(path).records] == ["run again", second["note"]]


def _gpu(us=5.0, status="pass", device="Fake GPU"):
    return {"kernel": "k", "variant": "v", "levers": {}, "config": "c", "shape": {"label": "s"},
            "status": status, "device": device,
            "timing": None if us is None else {"median_us": us, "p20_us": us * 0.9, "p80_us": us * 1.1}}


@pytest.mark.parametrize("record, kind", [
    (_gpu(), "gpu"),
    (_gpu(None, status="fail"), "gpu"),  # a failing record may lack a timing
    (_gpu(None, device="Numba CUDA simulator"), None),
    (_gpu(None, device="fake simulator"), "sim"),
    (_gpu(None), None),  # a results.jsonl without its plan: untimed is taken for the simulator
])
def test_records_whose_timing_is_usable_or_rightly_absent_are_read(record, kind):
    assert rs.check_record(record, "here", kind) is record


@pytest.mark.parametrize("record, kind, why", [
    (_gpu(None), "gpu", "passed on a GPU (Fake GPU) but has no timing"),
    (_gpu(float("nan")), "gpu", "median_us is NaN"),
    (_gpu(float("nan"), status="fail"), "gpu", "median_us is NaN"),  # wherever a timing is, it is sound
    (_gpu(float("-inf")), None, "median_us is infinite"),
    (_gpu(-2.0), "gpu", "median_us is negative (-2)"),
    (_gpu(0.0), "gpu", "median_us is 0"),
    ({**_gpu(), "timing": {"p20_us": 1.0}}, "gpu", "timing has no median_us"),
    ({**_gpu(), "timing": [5.0]}, "gpu", "`timing` is a JSON list"),
    ({**_gpu(), "timing": {"median_us": 5.0, "noise": -0.1}}, "gpu", "noise is negative"),
    (_gpu(5.0, device="Numba CUDA simulator"), "gpu", "a simulator record with a timing"),
    (_gpu(5.0), "sim", "a simulator record with a timing"),
])
def test_records_with_unusable_timings_are_refused_where_they_are(record, kind, why):
    with pytest.raises(UserError, match="unusable record: .*" + re.escape(why)) as e:
        rs.check_record(record, "f.jsonl:7", kind)
    assert e.value.where == "f.jsonl:7"


def test_the_simulators_name_is_the_devices():
    from leverctl.bench.device import SIM_NAME

    assert rs.SIM_NAME == SIM_NAME


@pytest.mark.parametrize("change, why", [
    ({"catalog": None}, "no `catalog.digest`"),
    ({"catalog": {"digest": ""}}, "no `catalog.digest`"),
    ({"items": {"a": 1}}, "no `items` list"),
    ({"items": [{"kernel": "k"}]}, "items[0] is not an object"),
    ({"device": "gpu"}, "`device`"),
    ({"shard": {"index": 1, "count": 2}}, "`shard`"),
    ({"kernels": [{"levers": []}]}, "`kernels`"),
    ({"not_benchmarked": [{"lever": "x"}]}, "`not_benchmarked`"),
])
def test_a_plan_lacking_what_resume_and_merge_read_is_refused(tmp_path, change, why):
    doc = metrale_plan().plan_json({"kind": "sim", "name": "fake simulator"}, None)
    assert rs.check_plan(dict(doc), "p") == doc
    for k, v in change.items():
        if v is None:
            doc.pop(k)
        else:
            doc[k] = v
    (tmp_path / rs.PLAN_FILE).write_text(json.dumps(doc))
    with pytest.raises(UserError, match="not a complete leverctl sweep plan") as e:
        rs.read_plan(tmp_path, items=True)  # as merge reads it; resume reads the header alone
    assert why in e.value.message and e.value.where == str(tmp_path / rs.PLAN_FILE)


def test_a_plan_that_is_a_directory_is_refused_as_input(tmp_path):
    (tmp_path / rs.PLAN_FILE).mkdir()
    with pytest.raises(UserError, match="is a directory, not a sweep plan"):
        rs.read_plan(tmp_path)


# ── the kill test: a real process, SIGKILL ──────────────────────────────────


def _cli(*args, env_extra=None, **kw):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]), **(env_extra or {})}
    return subprocess.Popen([sys.executable, str(HERE / "sweep_fakes.py"), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_a_killed_sweep_keeps_its_file_intact_and_resume_runs_each_missing_one_once(tmp_path):
    out = tmp_path / "sweep"
    log = tmp_path / "runs.log"
    args = ["sweep", "-e", "metrale", "--no-env", "--device", "gpu", "--out", str(out), "--format", "json"]
    env = {"FAKE_DELAY": "0.05", "FAKE_RUN_LOG": str(log), "FAKE_GPU": "1"}  # a GPU shares no runs
    p = _cli(*args, env_extra=env)
    results = out / rs.RESULTS_FILE
    deadline = time.monotonic() + 60
    while _lines(results) < 10 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL
    kept = rs.read_jsonl(results)
    assert len(kept.records) >= 10
    plan = json.loads((out / rs.PLAN_FILE).read_text())
    assert len(kept.records) < plan["total"]
    first_bytes = results.read_bytes()[: kept.good_bytes]
    ran_before = log.read_text().splitlines()

    p2 = _cli(*args, "--resume", env_extra={**env, "FAKE_DELAY": "0"})
    stdout, stderr = p2.communicate(timeout=60)
    assert p2.returncode == 1, stderr.decode()  # the fake "gemm" variant fails on purpose
    final = rs.read_jsonl(results)
    assert final.tail_bytes == 0 and results.read_bytes().startswith(first_bytes)
    ids = [rs.identity(r) for r in final.records]
    assert len(ids) == len(set(ids)) == plan["total"]
    assert set(ids) == {(i["kernel"], i["shape"], i["config"]) for i in plan["items"]}
    ran_after = log.read_text().splitlines()[len(ran_before):]
    # Each missing configuration ran once; none that was on disk ran again
    # (the one in flight when the process died may have been logged, not written).
    on_disk = {" ".join(k) for k in map(rs.identity, kept.records)}
    assert not on_disk & set(ran_after)
    assert len(ran_after) == len(set(ran_after)) == plan["total"] - len(kept.records)
    report = json.loads(stdout)
    assert report["counts"]["records"] == plan["total"] and report["counts"]["fail"] > 0
    assert f"{len(kept.records)} were on disk" in stderr.decode()


def test_ctrl_c_stops_a_real_sweep_with_one_line_saying_how_to_resume(tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", "-e", "metrale", "--no-env", "--device", "gpu", "--out", str(out)]
    p = _cli(*args, env_extra={"FAKE_DELAY": "0.05", "FAKE_GPU": "1"},
             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's Ctrl-C
    results = out / rs.RESULTS_FILE
    deadline = time.monotonic() + 60
    while _lines(results) < 3 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    err = stderr.decode().splitlines()
    assert p.returncode == 130, stderr.decode()
    assert stdout == b""
    said = [line for line in err if "interrupted" in line]
    assert len(said) == 1 and said[0].startswith("leverctl sweep: interrupted with "), err
    assert said[0].endswith("the same command with --resume runs the rest")
    assert len(rs.read_jsonl(results).records) >= 3
