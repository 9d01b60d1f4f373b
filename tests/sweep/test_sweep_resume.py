"""Resume and the kill test: an interrupted sweep keeps every finished
record, and --resume runs the rest exactly once (the records' own reading
and checks: tests/bench/records)."""

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

from leverctl.bench import sweep as sw
from leverctl.bench.records.plans import check_plan, read_plan
from leverctl.bench.records.read import load_results, read_jsonl
from leverctl.bench.records.rules import identity
from leverctl.bench.records.schema import PLAN_FILE, RESULTS_FILE
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
    path = tmp_path / "out" / RESULTS_FILE
    intact = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"kernel": "fake.gemv", "variant": "sw", "lev')  # killed mid-write
    got = read_jsonl(path)
    assert len(got.records) == 5 and got.tail_bytes > 0 and got.good_bytes == len(intact)
    _, again = start(tmp_path, plan, resume=True)
    assert again.cut_bytes > 0 and path.read_bytes() == intact
    calls.clear()
    out = sw.run(plan.items, again, runner(calls))
    assert len(calls) == plan.total - 5 and out.before == 5 and out.ran == plan.total - 5
    assert [identity(r) for r in read_jsonl(path).records] == [it.key for it in plan.items[:5]] + [
        it.key for it in plan.items[5:]
    ]


def test_a_corrupt_line_in_the_middle_is_refused_and_the_file_left_alone(tmp_path):
    plan = metrale_plan()
    doc, opened = start(tmp_path, plan)
    sw.run(plan.items[:3], opened, runner([]))
    path = tmp_path / "out" / RESULTS_FILE
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"this is not json"
    path.write_bytes(b"\n".join(lines))
    before = path.read_bytes()
    with pytest.raises(UserError, match=r"results.jsonl:2: not a leverctl results file"):
        start(tmp_path, plan, resume=True)
    assert path.read_bytes() == before


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
    by_key = {identity(r): r for r in out.records}
    for it in plan.items:  # every configuration keeps its own levers, config and variant
        r = by_key[it.key]
        assert (r["config"], r["variant"]) == (it.config, it.variant)
        assert r["levers"] == {f: v for f, v in r["levers"].items()}


# ── repeated records, plans ────────────────────────────────────────────────


def test_a_repeated_record_is_counted_once_and_its_line_named(tmp_path):
    plan = metrale_plan()
    doc, opened = start(tmp_path, plan)
    sw.run(plan.items[:3], opened, runner([]))
    path = tmp_path / "out" / RESULTS_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines + [lines[0], lines[2]]))  # lines 4 and 5 repeat 1 and 3
    got = read_jsonl(path)
    assert [identity(r) for r in got.records] == [it.key for it in plan.items[:3]]
    assert got.duplicates == (4, 5)
    loaded = load_results(tmp_path / "out")
    assert len(loaded.records) == 3
    assert loaded.notes() == [
        f"{tmp_path / 'out'}: 2 record(s) repeat an earlier one's kernel, shape and levers "
        "(line 4, line 5); each counted once, the later kept"
    ]
    _, again = start(tmp_path, plan, resume=True)
    assert len(again.done) == 3 and again.duplicates == (4, 5)
    calls: list = []
    sw.run(plan.items, again, runner(calls))
    assert len(calls) == plan.total - 3  # none of the repeated ones ran again


@pytest.mark.parametrize(
    "changes, first",
    [
        ({3: {"plan": "0" * 16}}, 3),  # another plan's record
        ({2: {"config": "nowhere"}}, 2),  # a record of no planned item
        ({1: {"plan": "0" * 16}, 4: {"config": "nowhere"}}, 1),  # the first of either (the kept repeat, in its place)
        ({2: {"plan": "0" * 16}, 4: {"config": "nowhere"}}, 2),
    ],
)
def test_resume_refuses_a_record_that_is_not_part_of_its_plan_and_touches_nothing(tmp_path, changes, first):
    plan = metrale_plan()
    _, opened = start(tmp_path, plan)
    sw.run(plan.items[:4], opened, runner([]))
    path = tmp_path / "out" / RESULTS_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(1, lines[0])  # the first record again: kept in its place, record k is on line k + 1
    for k, change in changes.items():
        lines[k] = json.dumps({**json.loads(lines[k]), **change}).encode() + b"\n"
    path.write_bytes(b"".join(lines))
    before = path.read_bytes()
    with pytest.raises(UserError, match=f"--resume: record {first} is not part of this plan") as e:
        start(tmp_path, plan, resume=True)
    assert e.value.where == str(path) and path.read_bytes() == before


@pytest.mark.parametrize(
    "change, why",
    [
        ({"catalog": None}, "no `catalog.digest`"),
        ({"catalog": {"digest": ""}}, "no `catalog.digest`"),
        ({"items": {"a": 1}}, "no `items` list"),
        ({"items": [{"kernel": "k"}]}, "items[0] is not an object"),
        ({"device": "gpu"}, "`device`"),
        ({"shard": {"index": 1, "count": 2}}, "`shard`"),
        ({"kernels": [{"levers": []}]}, "`kernels`"),
        ({"not_benchmarked": [{"lever": "x"}]}, "`not_benchmarked`"),
    ],
)
def test_a_plan_lacking_what_resume_and_merge_read_is_refused(tmp_path, change, why):
    doc = metrale_plan().plan_json({"kind": "sim", "name": "fake simulator"}, None)
    assert check_plan(dict(doc), "p") == doc
    for k, v in change.items():
        if v is None:
            doc.pop(k)
        else:
            doc[k] = v
    (tmp_path / PLAN_FILE).write_text(json.dumps(doc))
    with pytest.raises(UserError, match="not a complete leverctl sweep plan") as e:
        read_plan(tmp_path, items=True)  # as merge reads it; resume reads the header alone
    assert why in e.value.message and e.value.where == str(tmp_path / PLAN_FILE)


# ── the kill test: a real process, SIGKILL ──────────────────────────────────


def _cli(*args, env_extra=None, **kw):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]), **(env_extra or {})}
    return subprocess.Popen(
        [sys.executable, str(HERE / "sweep_fakes.py"), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,
    )


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
    results = out / RESULTS_FILE
    deadline = time.monotonic() + 60
    while _lines(results) < 10 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert p.returncode == -signal.SIGKILL
    kept = read_jsonl(results)
    assert len(kept.records) >= 10
    plan = json.loads((out / PLAN_FILE).read_text())
    assert len(kept.records) < plan["total"]
    first_bytes = results.read_bytes()[: kept.good_bytes]
    ran_before = log.read_text().splitlines()

    p2 = _cli(*args, "--resume", env_extra={**env, "FAKE_DELAY": "0"})
    stdout, stderr = p2.communicate(timeout=60)
    assert p2.returncode == 1, stderr.decode()  # the fake "gemm" variant fails on purpose
    final = read_jsonl(results)
    assert final.tail_bytes == 0 and results.read_bytes().startswith(first_bytes)
    ids = [identity(r) for r in final.records]
    assert len(ids) == len(set(ids)) == plan["total"]
    assert set(ids) == {(i["kernel"], i["shape"], i["config"]) for i in plan["items"]}
    ran_after = log.read_text().splitlines()[len(ran_before) :]
    # Each missing configuration ran once; none that was on disk ran again
    # (the one in flight when the process died may have been logged, not written).
    on_disk = {" ".join(k) for k in map(identity, kept.records)}
    assert not on_disk & set(ran_after)
    assert len(ran_after) == len(set(ran_after)) == plan["total"] - len(kept.records)
    report = json.loads(stdout)
    assert report["counts"]["records"] == plan["total"] and report["counts"]["fail"] > 0
    assert f"{len(kept.records)} were on disk" in stderr.decode()


def test_ctrl_c_stops_a_real_sweep_with_one_line_saying_how_to_resume(tmp_path):
    out = tmp_path / "sweep"
    args = ["sweep", "-e", "metrale", "--no-env", "--device", "gpu", "--out", str(out)]
    p = _cli(
        *args,
        env_extra={"FAKE_DELAY": "0.05", "FAKE_GPU": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # as a terminal's Ctrl-C
    results = out / RESULTS_FILE
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
    assert len(read_jsonl(results).records) >= 3
