"""compare: verdicts at the edges of the noise, status changes, devices and
the exit codes CI gates on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_fakes import cli

from leverctl.bench.compare import compare, verdict
from leverctl.bench.records.columns import Tables, of_dicts
from leverctl.bench.records.plans import write_plan
from leverctl.bench.records.read import ResultSet, load_results, repeated_note, whole_records
from leverctl.bench.records.rules import identity
from leverctl.bench.records.schema import PLAN_FILE, PLAN_SCHEMA, RESULTS_FILE, SIM_NAME
from leverctl.errors import UserError


def rec(
    us=None,
    *,
    spread=0.02,
    status="pass",
    kernel="w4a16.gemv",
    variant="gemv_sw",
    config="gemv_sw=1",
    shape="m1-n37-k264",
    device="NVIDIA H200",
    noise_only=False,
):
    timing = None
    if us is not None:
        half = us * spread / 2
        timing = {"median_us": us, "samples": 100, "noise": spread, "stopped_by": "noise"}
        if not noise_only:
            timing.update(p20_us=us - half, p80_us=us + half)
    return {
        "kernel": kernel,
        "variant": variant,
        "levers": {"gemv_sw": True},
        "config": config,
        "shape": {"label": shape},
        "status": status,
        "note": "",
        "timing": timing,
        "device": device,
    }


def run(*records, kind="gpu", name="NVIDIA H200", source="base.json"):
    return ResultSet(source, of_dicts(records, dedup=True), None, {"kind": kind, "name": name})


def one(base, new, threshold=5.0):
    c = compare(run(base), run(new, source="new.json"), threshold=threshold)
    (e,) = c.entries
    return e.verdict, c.exit_code


# ── the rule, at its edges ───────────────────────────────────────────────────


@pytest.mark.parametrize(
    "base, new, b_spread, n_spread, want",
    [
        (100.0, 104.99, 0.02, 0.02, "SAME"),  # below the threshold
        (100.0, 105.0, 0.02, 0.02, "SAME"),  # exactly at the threshold: not beyond it
        (100.0, 105.5, 0.02, 0.02, "SLOWER"),  # beyond threshold and noise
        (100.0, 94.0, 0.02, 0.02, "FASTER"),
        (100.0, 108.0, 0.08, 0.02, "SAME"),  # exactly at the noise: inside it
        (100.0, 108.0, 0.02, 0.08, "SAME"),  # either side's noise counts
        (100.0, 108.5, 0.08, 0.02, "SLOWER"),  # beyond the noise (8 % <= 2 x threshold)
        (100.0, 110.0, 0.10, 0.10, "SAME"),  # at 2 x threshold the noise still hides it
        (100.0, 115.0, 0.12, 0.02, "NOISY"),  # spread above 2 x threshold: cannot tell
        (100.0, 80.0, 0.12, 0.12, "NOISY"),
        (100.0, 100.0, 0.50, 0.50, "SAME"),
    ],
)
def test_the_noise_rule(base, new, b_spread, n_spread, want):
    got, _change = verdict(base, new, b_spread, n_spread, 5.0)
    assert got == want


def test_a_difference_inside_the_noise_is_same_not_a_regression():
    assert one(rec(100.0, spread=0.09), rec(108.9, spread=0.09)) == ("SAME", 0)


def test_a_difference_beyond_threshold_and_noise_is_a_regression_exit_1():
    assert one(rec(100.0), rec(106.0)) == ("SLOWER", 1)


def test_noisy_and_faster_do_not_gate():
    assert one(rec(100.0, spread=0.2), rec(130.0, spread=0.2)) == ("NOISY", 0)
    assert one(rec(100.0), rec(50.0)) == ("FASTER", 0)


def test_a_change_beyond_twice_even_a_large_noise_is_slower_not_noisy():
    assert one(rec(100.0, spread=0.2), rec(141.0, spread=0.2)) == ("SLOWER", 1)


@pytest.mark.parametrize("spread", [0.01, 0.3, 0.9])
def test_one_kernel_three_times_slower_fails_the_gate_however_noisy(spread):
    base = run(rec(100.0, spread=spread), rec(40.0, config="gemv_sw=0", variant="gemv_64t", spread=spread))
    new = run(
        rec(300.0, spread=spread), rec(40.0, config="gemv_sw=0", variant="gemv_64t", spread=spread), source="new.json"
    )
    c = compare(base, new)
    assert [(e.config, e.verdict) for e in c.entries] == [("gemv_sw=1", "SLOWER"), ("gemv_sw=0", "SAME")]
    assert c.exit_code == 1


def test_the_recorded_noise_stands_in_when_percentiles_are_absent():
    assert one(rec(100.0, spread=0.09, noise_only=True), rec(108.0, spread=0.01, noise_only=True))[0] == "SAME"


def test_the_threshold_option_moves_the_edge():
    assert one(rec(100.0), rec(106.0), threshold=10.0) == ("SAME", 0)
    assert one(rec(100.0), rec(103.0), threshold=1.0) == ("SLOWER", 1)
    with pytest.raises(UserError, match="--threshold"):
        compare(run(rec(1.0)), run(rec(1.0)), threshold=-1)


# ── statuses first, one-sided entries, simulator runs ────────────────────────


def test_status_changes_come_first_and_a_new_failure_gates():
    base = run(
        rec(100.0),
        rec(100.0, config="gemv_sw=0", variant="gemv_64t"),
        rec(None, status="fail", config="x=1"),
        rec(None, status="fail", config="x=0"),
    )
    new = run(
        rec(130.0),
        rec(None, status="fail", config="gemv_sw=0", variant="gemv_64t"),
        rec(100.0, config="x=1"),
        rec(None, status="fail", config="x=0"),
        source="new.json",
    )
    c = compare(base, new)
    assert [e.verdict for e in c.entries] == ["NEW FAIL", "SLOWER", "STILL FAILS", "FIXED"]
    assert c.exit_code == 1


def test_a_fix_alone_does_not_gate_and_entries_on_one_side_are_listed():
    base = run(rec(None, status="fail"), rec(5.0, config="gone=1"))
    new = run(rec(100.0), rec(5.0, config="new=1"), rec(None, status="fail", config="newfail=1"), source="n")
    c = compare(base, new)
    assert [e.verdict for e in c.entries] == ["FIXED"]
    assert [o.config for o in c.only_base] == ["gone=1"]
    assert sorted(o.config for o in c.only_new) == ["new=1", "newfail=1"]
    assert c.exit_code == 1  # a configuration that is new and failing is a new failure
    c2 = compare(base, run(rec(100.0), rec(5.0, config="new=1"), source="n"), allow_missing=True)
    assert c2.exit_code == 0


def test_simulator_runs_compare_statuses_only_and_say_so():
    sim = dict(kind="sim", name="Numba CUDA simulator")
    c = compare(
        run(rec(None), rec(None, config="b=1"), **sim), run(rec(None), rec(None, config="b=1", status="fail"), **sim)
    )
    assert not c.timed and any("statuses compared only" in n for n in c.notes)
    assert [e.verdict for e in c.entries] == ["NEW FAIL", "PASS"] and c.exit_code == 1


def test_different_devices_are_refused_unless_allowed_and_the_reason_given():
    h100 = run(rec(100.0, device="NVIDIA H100"), name="NVIDIA H100")
    with pytest.raises(UserError, match="BASE ran on NVIDIA H100, NEW on NVIDIA H200.*--allow-different-device"):
        compare(h100, run(rec(100.0)))
    c = compare(h100, run(rec(100.0)), allow_different_device=True)
    assert c.notes and "H100" in c.notes[0]
    with pytest.raises(UserError, match="simulator run has no timings"):
        compare(run(rec(None), kind="sim", name="Numba CUDA simulator"), run(rec(100.0)))


# ── the command ──────────────────────────────────────────────────────────────


def bench_doc(*records, name="NVIDIA H200", kind="gpu"):
    return {
        "schema": "leverctl.bench/1",
        "engine": "atlas",
        "device": {"kind": kind, "name": name},
        "results": list(records),
    }


def write(tmp_path: Path, name: str, doc) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def test_compare_exit_codes_0_1_2(tmp_path, capsys):
    base = write(tmp_path, "base.json", bench_doc(rec(100.0)))
    same = write(tmp_path, "same.json", bench_doc(rec(101.0)))
    slow = write(tmp_path, "slow.json", bench_doc(rec(120.0)))
    code, out, _ = cli(["compare", base, same], capsys)
    assert code == 0 and "SAME" in out and "no regression" in out
    code, out, _ = cli(["compare", base, slow], capsys)
    assert code == 1 and "SLOWER" in out and "REGRESSED" in out
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "leverctl.bench/1", "results": [')
    code, out, err = cli(["compare", base, str(bad)], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "truncated" in err
    other = write(tmp_path, "other.json", bench_doc(rec(100.0, device="NVIDIA H100"), name="NVIDIA H100"))
    code, _, err = cli(["compare", base, other], capsys)
    assert code == 2 and "--allow-different-device" in err
    code, _, _ = cli(["compare", base, other, "--allow-different-device"], capsys)
    assert code == 0


def test_compare_json_and_markdown_say_the_same(tmp_path, capsys):
    base = write(tmp_path, "base.json", bench_doc(rec(100.0), rec(50.0, config="gemv_sw=0")))
    new = write(tmp_path, "new.json", bench_doc(rec(120.0), rec(None, status="fail", config="gemv_sw=0")))
    code, out, _ = cli(["compare", base, new, "--format", "json", "--threshold", "3"], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["regressed"] and doc["threshold_pct"] == 3.0
    assert [e["verdict"] for e in doc["entries"]] == ["NEW FAIL", "SLOWER"]
    assert doc["entries"][1]["change_pct"] == 20.0
    code, out, _ = cli(["compare", base, new, "--format", "markdown"], capsys)
    assert code == 1 and out.startswith("### ❌ leverctl compare: REGRESSED")
    assert "| **NEW FAIL** |" in out and "| **SLOWER** |" in out and "+20.0 %" in out


# ── the gate: what vanished, what cannot be timed, nothing in common ────────


def test_a_base_record_missing_from_new_fails_the_gate_unless_allowed():
    base = run(rec(100.0), rec(50.0, config="gemv_sw=0", variant="gemv_64t"))
    new = run(rec(100.0), source="new.json")
    c = compare(base, new)
    assert [o.config for o in c.only_base] == ["gemv_sw=0"] and c.exit_code == 1
    assert c.gate_reasons() == ["1 missing from NEW"]
    assert compare(base, new, allow_missing=True).exit_code == 0


def test_runs_with_nothing_in_common_fail_even_with_allow_missing():
    base = run(rec(100.0, kernel="gdn.decode"))
    new = run(rec(100.0, kernel="w4a16.gemv"), source="new.json")
    c = compare(base, new, allow_missing=True)
    assert c.entries == [] and c.exit_code == 1 and "nothing in common" in c.gate_reasons()
    assert compare(run(), run(source="new.json")).exit_code == 1  # two empty runs compare nothing


@pytest.mark.parametrize("side", ["base", "new"])
@pytest.mark.parametrize(
    "timing, why",
    [
        (None, "no timing"),
        ({"median_us": float("nan")}, "median_us is NaN"),
        ({"median_us": float("inf")}, "median_us is infinite"),
        ({"median_us": -4.0}, "median_us is negative"),
        ({"median_us": 4.0, "p80_us": float("nan")}, "p80_us is NaN"),
    ],
)
def test_a_pair_whose_timing_is_unusable_on_either_side_is_a_failure_not_a_status_only_pass(side, timing, why):
    bad = rec(100.0)
    bad["timing"] = timing
    good = rec(100.0)
    base, new = (bad, good) if side == "base" else (good, bad)
    c = compare(run(base, rec(7.0, config="b=1")), run(new, rec(7.0, config="b=1"), source="new.json"))
    verdicts = {e.config: e for e in c.entries}
    assert verdicts["gemv_sw=1"].verdict == "UNTIMED" and why in verdicts["gemv_sw=1"].note
    assert side.upper() in verdicts["gemv_sw=1"].note
    assert verdicts["b=1"].verdict == "SAME" and c.timed and c.exit_code == 1


def test_a_simulator_run_against_a_gpu_run_is_untimed_even_when_different_devices_are_allowed():
    sim = run(rec(None, device="Numba CUDA simulator"), kind="sim", name="Numba CUDA simulator")
    c = compare(sim, run(rec(100.0), source="new.json"), allow_different_device=True)
    (e,) = c.entries
    assert e.verdict == "UNTIMED" and "BASE: no timing (a simulator record)" in e.note and c.exit_code == 1


def test_the_summary_says_what_was_matched_and_what_was_not():
    from leverctl.bench.compare import summary_line

    base = run(rec(100.0), rec(9.0, config="gone=1"))
    new = run(rec(300.0), rec(9.0, config="new=1"), source="new.json")
    line = summary_line(compare(base, new))
    assert line.startswith("REGRESSED: 1 matched (1 SLOWER); 1 only in BASE (missing from NEW); 1 only in NEW")
    assert line.endswith("[fails on: 1 SLOWER, 1 missing from NEW]")
    line = summary_line(compare(run(rec(100.0), rec(9.0, config="gone=1")), run(rec(100.0), source="n")))
    assert line.startswith("FAILED: 1 matched (1 SAME); 1 only in BASE (missing from NEW)")
    none = summary_line(compare(run(rec(1.0, kernel="a")), run(rec(1.0, kernel="b"), source="n"), allow_missing=True))
    assert none == (
        "FAILED: 0 matched; 1 only in BASE (missing from NEW, allowed by --allow-missing); "
        "1 only in NEW [fails on: nothing in common]"
    )
    ok = summary_line(compare(run(rec(100.0)), run(rec(100.0), source="n")))
    assert ok.startswith("no regression: 1 matched (1 SAME); 0 only in BASE; 0 only in NEW") and "fails on" not in ok


def test_compare_cli_lists_the_missing_and_fails_until_allow_missing(tmp_path, capsys):
    base = write(tmp_path, "base.json", bench_doc(rec(100.0), rec(50.0, config="gemv_sw=0", variant="gemv_64t")))
    new = write(tmp_path, "new.json", bench_doc(rec(100.0)))
    code, out, _ = cli(["compare", base, new], capsys)
    assert code == 1 and "Only in BASE (missing from NEW):" in out and "gemv_sw=0" in out
    code, out, _ = cli(["compare", base, new, "--allow-missing"], capsys)
    assert code == 0 and "allowed by --allow-missing" in out
    code, out, _ = cli(["compare", base, new, "--format", "json"], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["matched"] == 1 and doc["gate"] == ["1 missing from NEW"]
    assert [o["config"] for o in doc["only_base"]] == ["gemv_sw=0"]


def test_compare_cli_counts_a_repeated_record_once_and_warns(tmp_path, capsys):
    base = write(tmp_path, "base.json", bench_doc(rec(100.0), rec(100.0)))
    new = write(tmp_path, "new.json", bench_doc(rec(100.0)))
    code, out, err = cli(["compare", base, new, "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["matched"] == 1
    assert "base.json: 1 record(s) repeat an earlier one's kernel, shape and levers (results[1])" in err


def test_a_large_comparison_lists_what_needs_a_look_and_counts_the_same_ones(tmp_path, capsys):
    """Past 100 pairs the table and Markdown list every pair that is not SAME
    (all of them) and say how many SAME ones they leave out; --all lists
    them too, and JSON always holds every entry."""
    base_recs = [rec(100.0, config=f"c{i}") for i in range(150)]
    new_recs = [rec(130.0 if i in (7, 99) else 100.5, config=f"c{i}") for i in range(150)]
    base = write(tmp_path, "base.json", bench_doc(*base_recs))
    new = write(tmp_path, "new.json", bench_doc(*new_recs))
    code, out, _ = cli(["compare", base, new], capsys)
    assert code == 1 and out.count("SLOWER") >= 2 and " c7 " in out and " c99 " in out and " c8 " not in out
    assert "148 matched pairs not listed (148 SAME): --all lists them" in out
    code, out, _ = cli(["compare", base, new, "--all"], capsys)
    assert " c8 " in out and "not listed" not in out
    code, md, _ = cli(["compare", base, new, "-f", "markdown"], capsys)
    assert "`c8`" not in md and "| c8 |" not in md and "148 matched pairs not listed" in md and "c99" in md
    code, js, _ = cli(["compare", base, new, "-f", "json"], capsys)
    assert len(json.loads(js)["entries"]) == 150


# ── the usual pair, judged on arrays, against the general path ────────────


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
    return {
        "kernel": "k",
        "variant": rng.choice("ab"),
        "levers": {},
        "config": "",
        "shape": {"label": "s"},
        "note": "",
        "status": "pass" if rng.random() < 0.9 else "fail",
        "timing": timing if rng.random() < 0.95 else None,
        "device": "H200" if rng.random() < 0.95 else SIM_NAME,
    }


def test_compares_arrays_for_two_timed_gpu_records_give_the_general_verdict():
    """``Entries.of_pairs`` judges the usual pair (both passed, timed, on a
    GPU) on arrays and every other pair by ``_entry``: each verdict is the
    one ``_entry`` gives the two records."""
    import random

    import numpy as np

    from leverctl.bench import compare as cmp

    rng = random.Random(1)
    at = np.zeros(1, np.int64)
    took = 0
    for _ in range(3000):
        b, n = _usual_record(rng), _usual_record(rng)
        kinds = (rng.choice(["gpu", "gpu", "sim", None]), rng.choice(["gpu", "gpu", None]))
        threshold = rng.choice([0.0, 5.0])
        tables = Tables()
        B, N = of_dicts([b], tables), of_dicts([n], tables)
        (got,) = cmp.Entries.of_pairs(B, N, at, at, threshold, kinds)
        took += bool(
            B.passed[0]
            and N.passed[0]
            and B.timed[0]
            and N.timed[0]
            and B.ran_on_gpu(at, kinds[0])[0]
            and N.ran_on_gpu(at, kinds[1])[0]
        )
        assert got == cmp._entry(b, n, threshold, kinds), (b, n, kinds)
    assert took > 500  # the arrays judged many


def _sweep_dir(d: Path, records: list[dict], kind="gpu", name="NVIDIA H200") -> Path:
    d.mkdir()
    write_plan(
        d / PLAN_FILE,
        {
            "schema": PLAN_SCHEMA,
            "hash": "0123456789abcdef",
            "engine": "atlas",
            "catalog": {"digest": "c" * 64},
            "device": {"kind": kind, "name": name},
            "shard": None,
            "kernels": [],
            "not_benchmarked": [],
            "total": 6,
            "items": [],
        },
    )
    (d / RESULTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    return d


def _record_by_record(b, n, threshold):
    """The comparison's entries by definition: each matched pair of the
    records as read whole, judged by ``compare._entry``, in display order."""
    from leverctl.bench import compare as cmp

    kinds = (b.device_kind, n.device_kind)
    new = {identity(r): r for r in whole_records(n, n.source)}
    entries = [
        cmp._entry(r, new[identity(r)], threshold, kinds) for r in whole_records(b, b.source) if identity(r) in new
    ]
    return sorted(entries, key=lambda e: (cmp.VERDICTS.index(e.verdict), e.kernel, e.shape, e.config))


@pytest.mark.parametrize(
    "kind, name, mixed",
    [
        ("gpu", "NVIDIA H200", False),
        ("gpu", None, False),
        ("sim", None, False),
        (None, None, True),
        ("gpu", None, True),
    ],
)
def test_compare_on_columns_gives_each_pair_its_verdict_record_by_record(tmp_path, kind, name, mixed):
    """compare_paths judges the usual pairs on arrays and the rest record by
    record: every entry is the one ``_entry`` gives the pair read whole;
    duplicates, records on one side and failures included."""
    import random

    from leverctl.bench import compare as cmp

    rng = random.Random(3)
    device = "NVIDIA H200" if kind == "gpu" else SIM_NAME

    def side(scale):
        out = []
        for i in range(60):
            us, half = rng.uniform(5, 50) * scale, rng.uniform(0.001, 0.08)
            rec = {
                "kernel": "k",
                "variant": rng.choice("ab"),
                "levers": {"x": i},
                "config": f"x={i}",
                "shape": {"label": f"s{i % 3}"},
                "status": "pass" if rng.random() < 0.9 else "fail",
                "note": "",
                "device": device,
                "timing": {"median_us": us, "p20_us": us * (1 - half), "p80_us": us * (1 + half), "noise": 0.01}
                if kind == "gpu"
                else None,
            }
            if mixed:  # now and then a figure missing, an int, the simulator's name, no timing...
                rec.update({k: v for k, v in _usual_record(rng).items() if k in ("timing", "device", "status")})
                if rec["timing"] and (
                    rec["timing"]["median_us"] is None
                    or any(v is not None and (v <= 0 if k == "median_us" else v < 0) for k, v in rec["timing"].items())
                ):
                    rec["timing"] = None
                if kind == "gpu" and rec["status"] == "pass" and not rec["timing"]:
                    rec["device"] = SIM_NAME
                if rec["device"] == SIM_NAME:
                    rec["timing"] = None
            out.append(rec)
        return out

    base, new = side(1.0), side(1.04)
    new = new[5:] + [dict(new[7], variant="b")]  # five only in BASE, and one repeated (the later kept)
    new.append(dict(new[0], config="only-new", status="fail"))
    b = _sweep_dir(tmp_path / "b", base, kind, name)
    n = _sweep_dir(tmp_path / "n", new, kind, name)
    got, _b, got_n = cmp.compare_paths(b, n, threshold=5.0)
    rb, rn = load_results(b), load_results(n)
    want = _record_by_record(rb, rn, 5.0)
    assert list(got.entries) == want
    assert got.to_json(lazy=False)["entries"] == [e.to_json() for e in want]
    in_new = {identity(x) for x in whole_records(rn, n)}
    assert got.only_base == [cmp._one(r) for r in whole_records(rb, b) if identity(r) not in in_new]
    assert got_n.notes() == [repeated_note(str(n), ["line 56"])]
    assert got.only_base and got.only_new and got.entries
    assert len({e.verdict for e in want}) >= (3 if kind == "gpu" or mixed else 1)


# ── lever A/B: pairs by kernel path and shape ────────────────────────────────


def _ab(kind="gpu"):
    """BASE with the default levers, NEW with one set: at two of the three
    shapes the path's variant changed with its lever set; at the third only
    the lever set did (the variant the table picks there is the same)."""
    dev = "NVIDIA H200" if kind == "gpu" else SIM_NAME
    t = (lambda us: us) if kind == "gpu" else (lambda us: None)
    base = [
        rec(t(100.0), kernel="gdn.verify", variant="wy17", config="gdn_wy17=1", shape="t17 a", device=dev),
        rec(t(100.0), kernel="gdn.verify", variant="wy17", config="gdn_wy17=1", shape="t17 b", device=dev),
        rec(t(50.0), kernel="gdn.verify", variant="wyn", config="gdn_wy17=1", shape="t5", device=dev),
    ]
    new = [
        rec(t(130.0), kernel="gdn.verify", variant="wyn", config="gdn_wy17=0", shape="t17 a", device=dev),
        rec(t(100.0), kernel="gdn.verify", variant="wyn", config="gdn_wy17=0", shape="t17 b", device=dev),
        rec(t(50.0), kernel="gdn.verify", variant="wyn", config="gdn_wy17=0", shape="t5", device=dev),
    ]
    return base, new


def test_a_lever_ab_pairs_every_record_by_path_and_shows_both_sides():
    base, new = _ab()
    c = compare(run(*base), run(*new, source="new.json"))
    assert c.matched_by == "path" and not c.only_base and not c.only_new
    got = {e.shape: e for e in c.entries}
    assert (got["t17 a"].verdict, got["t17 a"].base_variant, got["t17 a"].variant) == ("SLOWER", "wy17", "wyn")
    assert got["t17 a"].base_config == "gdn_wy17=1" and got["t17 a"].config == "gdn_wy17=0"
    assert got["t17 b"].verdict == "SAME" and got["t5"].verdict == "SAME"
    assert c.exit_code == 1 and any("matched by kernel path and shape" in n for n in c.notes)
    doc = c.to_json()
    assert doc["matched_by"] == "path"
    e = next(x for x in doc["entries"] if x["shape"] == "t17 a")
    assert (e["base_variant"], e["base_config"], e["config"]) == ("wy17", "gdn_wy17=1", "gdn_wy17=0")
    # By variant (the old rule) the lever sets never meet: nothing in common.
    v = compare(run(*base), run(*new, source="new.json"), by="variant")
    assert v.matched_by == "variant" and not v.entries and "nothing in common" in v.gate_reasons()


def test_a_simulator_lever_ab_passes_when_no_status_got_worse_and_fails_when_one_did():
    base, new = _ab("sim")
    sim = dict(kind="sim", name=SIM_NAME)
    c = compare(run(*base, **sim), run(*new, source="new.json", **sim))
    assert c.matched_by == "path" and c.counts() == {"PASS": 3} and c.exit_code == 0
    new[0]["status"] = "fail"
    c = compare(run(*base, **sim), run(*new, source="new.json", **sim))
    assert c.counts() == {"NEW FAIL": 1, "PASS": 2} and c.exit_code == 1


def test_runs_with_several_records_a_path_and_shape_match_by_variant_and_path_is_refused():
    """A sweep or --all-variants holds several variants of one path and shape:
    auto pairs them by variant; --by path cannot pair them and says so."""
    base = run(rec(100.0), rec(50.0, config="gemv_sw=0", variant="gemv_64t"))
    new = run(rec(100.0), rec(50.0, config="gemv_sw=0", variant="gemv_64t"), source="new.json")
    c = compare(base, new)
    assert c.matched_by == "variant" and len(c.entries) == 2 and c.exit_code == 0
    with pytest.raises(UserError, match="several records of one kernel path and shape"):
        compare(base, new, by="path")
    with pytest.raises(UserError, match="--by must be one of"):
        compare(base, new, by="kernel")


def test_same_levers_on_both_sides_match_by_variant_as_before():
    c = compare(run(rec(100.0)), run(rec(100.0), source="new.json"))
    assert c.matched_by == "variant" and not any("matched by kernel path" in n for n in c.notes)


def test_compare_cli_pairs_a_lever_ab_and_shows_both_sides(tmp_path, capsys):
    base, new = _ab()
    b = write(tmp_path, "base.json", bench_doc(*base))
    n = write(tmp_path, "new.json", bench_doc(*new))
    code, out, _ = cli(["compare", b, n], capsys)
    assert code == 1 and "wy17 → wyn" in out and "gdn_wy17=1 → gdn_wy17=0" in out
    assert "matched by kernel path and shape" in out and "3 matched" in out
    code, out, _ = cli(["compare", b, n, "--by", "variant"], capsys)
    assert code == 1 and "0 matched" in out
    code, out, err = cli(["compare", b, n, "--by", "nope"], capsys)
    assert code == 2 and out == "" and err.strip().count("\n") == 0 and "--by must be one of" in err
