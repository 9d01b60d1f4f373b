"""Bad results files and sweep plans: a record whose timing is NaN,
infinite, negative or missing (where its device says it must have one) is
refused by compare, report and merge with its file and line, never rendered
or ranked; a plan.json that lacks what resume and merge need (its catalog)
is refused before any work. Nothing is written."""

import json
from pathlib import Path

from bad_input import Case

GPU = "NVIDIA H200"
NAN, INF = float("nan"), float("inf")


def rec(config: str, us=12.5, status="pass", device=GPU, **timing) -> dict:
    t = None if us is None else {"median_us": us, "p20_us": 12.0, "p80_us": 13.0, "noise": 0.01, **timing}
    return {
        "kernel": "w4a16.gemv",
        "variant": "gemv_sw",
        "levers": {"gemv_sw": True},
        "config": config,
        "shape": {"label": "m1-n37-k264"},
        "status": status,
        "note": "",
        "timing": t,
        "device": device,
    }


def line(r: dict) -> str:
    return json.dumps(r)  # NaN and Infinity as Python's json writes them, and reads them back


def bench_doc(records: list[dict], kind="gpu", name=GPU) -> str:
    """One record a line: results[i] is on line 4 + i."""
    head = json.dumps({"schema": "leverctl.bench/1", "engine": "atlas", "device": {"kind": kind, "name": name}})
    return head[:-1] + ',\n\n "results": [\n' + ",\n".join("  " + line(r) for r in records) + "\n ]}\n"


def plan(kind="gpu", **drop_or_set) -> dict:
    doc = {
        "schema": "leverctl.sweep-plan/1",
        "hash": "0123456789abcdef",
        "engine": "atlas",
        "catalog": {"source": "atlas", "digest": "c" * 64},
        "shapes": "model",
        "device": {"kind": kind, "name": GPU},
        "shard": None,
        "kernels": [],
        "not_benchmarked": [],
        "items": [
            {"kernel": "w4a16.gemv", "variant": "gemv_sw", "config": c, "shape": "m1-n37-k264", "levers": {}}
            for c in ("a=1", "b=1", "c=1")
        ],
    }
    for k, v in drop_or_set.items():
        if v is None:
            doc.pop(k)
        else:
            doc[k] = v
    return doc


def sweep_dir(d: Path, records: list[dict], the_plan: dict | None = None) -> None:
    d.mkdir()
    (d / "plan.json").write_text(json.dumps(the_plan or plan()))
    (d / "results.jsonl").write_text("".join(line(r) + "\n" for r in records))


def good_base(tmp: Path) -> None:
    sweep_dir(tmp / "base", [rec("a=1"), rec("b=1"), rec("c=1")])
    (tmp / "base.json").write_text(bench_doc([rec("a=1"), rec("b=1"), rec("c=1")]))


def new_dir(*records):
    def make(tmp: Path) -> None:
        good_base(tmp)
        sweep_dir(tmp / "new", list(records))

    return make


def new_doc(*records, **kw):
    def make(tmp: Path) -> None:
        good_base(tmp)
        (tmp / "new.json").write_text(bench_doc(list(records), **kw))

    return make


def plan_dir(**drop_or_set):
    def make(tmp: Path) -> None:
        sweep_dir(tmp / "d", [rec("a=1")], plan(**drop_or_set))

    return make


NAN_AT_2 = new_dir(rec("a=1"), rec("b=1", us=NAN), rec("c=1"))
NEGATIVE_AT_3 = new_dir(rec("a=1"), rec("b=1"), rec("c=1", us=-3.0))
INF_P80_AT_1 = new_dir(rec("a=1", p80_us=INF), rec("b=1"), rec("c=1"))
UNTOUCHED = ("{tmp}/new/results.jsonl", "{tmp}/out", "{tmp}/chart.svg")

CASES = [
    # compare
    Case(
        "compare-nan-median-in-results-jsonl",
        ("compare", "{tmp}/base", "{tmp}/new"),
        ("{tmp}/new/results.jsonl:2", "median_us is NaN"),
        files=NAN_AT_2,
        untouched=UNTOUCHED,
    ),
    Case(
        "compare-negative-median-in-results-jsonl",
        ("compare", "{tmp}/base", "{tmp}/new/results.jsonl"),
        ("{tmp}/new/results.jsonl:3", "median_us is negative (-3)"),
        files=NEGATIVE_AT_3,
    ),
    Case(
        "compare-infinite-p80-in-results-jsonl",
        ("compare", "{tmp}/new", "{tmp}/base"),
        ("{tmp}/new/results.jsonl:1", "p80_us is infinite"),
        files=INF_P80_AT_1,
    ),
    Case(
        "compare-infinite-median-in-a-bench-document",
        ("compare", "{tmp}/base.json", "{tmp}/new.json"),
        ("{tmp}/new.json:5: results[1]", "median_us is infinite"),
        files=new_doc(rec("a=1"), rec("b=1", us=INF), rec("c=1")),
    ),
    Case(
        "compare-gpu-record-that-passed-without-timing",
        ("compare", "{tmp}/base.json", "{tmp}/new.json"),
        ("{tmp}/new.json:6: results[2]", "passed on a GPU (NVIDIA H200) but has no timing"),
        files=new_doc(rec("a=1"), rec("b=1"), rec("c=1", us=None)),
    ),
    Case(
        "compare-gpu-record-that-passed-without-timing-in-a-sweep",
        ("compare", "{tmp}/base", "{tmp}/new"),
        ("{tmp}/new/results.jsonl:1", "has no timing"),
        files=new_dir(rec("a=1", us=None)),
    ),
    Case(
        "compare-simulator-record-with-a-timing",
        ("compare", "{tmp}/new.json", "{tmp}/new.json"),
        ("{tmp}/new.json:4: results[0]", "a simulator record with a timing"),
        files=new_doc(rec("a=1", device="Numba CUDA simulator"), kind="sim", name="Numba CUDA simulator"),
    ),
    Case(
        "compare-timing-median-not-a-number",
        ("compare", "{tmp}/base.json", "{tmp}/new.json"),
        ("{tmp}/new.json:4: results[0]", "median_us is not a number ('fast')"),
        files=new_doc(rec("a=1", us="fast")),
    ),
    # report show, merge, plot
    Case(
        "report-show-nan-median",
        ("report", "show", "{tmp}/new"),
        ("{tmp}/new/results.jsonl:2", "median_us is NaN"),
        files=NAN_AT_2,
    ),
    Case(
        "report-show-negative-median-in-a-bench-document",
        ("report", "show", "{tmp}/new.json", "-o", "{tmp}/out"),
        ("{tmp}/new.json:4: results[0]", "negative"),
        files=new_doc(rec("a=1", us=-1.0)),
        untouched=UNTOUCHED,
    ),
    Case(
        "report-merge-negative-median",
        ("report", "merge", "{tmp}/base", "{tmp}/new", "--out", "{tmp}/out"),
        ("{tmp}/new/results.jsonl:3", "median_us is negative"),
        files=NEGATIVE_AT_3,
        untouched=UNTOUCHED,
    ),
    Case(
        "report-plot-infinite-p80",
        ("report", "plot", "{tmp}/new", "-o", "{tmp}/chart.svg"),
        ("{tmp}/new/results.jsonl:1", "p80_us is infinite"),
        files=INF_P80_AT_1,
        untouched=UNTOUCHED,
    ),
    # sweep plans
    Case(
        "sweep-resume-plan-without-its-catalog",
        ("sweep", "--out", "{tmp}/d", "--resume"),
        ("{tmp}/d/plan.json", "no `catalog.digest`"),
        files=plan_dir(catalog=None),
        untouched=("{tmp}/d/plan.json", "{tmp}/d/results.jsonl", "{tmp}/d/.sweep.lock"),
    ),
    Case(
        "sweep-resume-plan-whose-catalog-has-no-digest",
        ("sweep", "--out", "{tmp}/d", "--resume"),
        ("{tmp}/d/plan.json", "no `catalog.digest`"),
        files=plan_dir(catalog={"source": "atlas"}),
    ),
    Case(
        "sweep-resume-plan-without-items",
        ("sweep", "--out", "{tmp}/d", "--resume"),
        ("{tmp}/d/plan.json", "no `items` list"),
        files=plan_dir(items=None),
    ),
    Case(
        "sweep-resume-nan-median-on-disk",
        ("sweep", "--out", "{tmp}/new", "--resume"),
        ("{tmp}/new/results.jsonl:2", "median_us is NaN"),
        files=NAN_AT_2,
        untouched=UNTOUCHED,
    ),
    Case(
        "sweep-into-a-directory-holding-a-sweep-without-resume",
        ("sweep", "--out", "{tmp}/d"),
        ("{tmp}/d", "already holds a sweep; pass --resume"),
        files=plan_dir(),
        untouched=("{tmp}/d/plan.json", "{tmp}/d/results.jsonl"),
    ),
    Case(
        "sweep-resume-with-nothing-to-resume",
        ("sweep", "--out", "{tmp}/absent", "--resume"),
        ("{tmp}/absent", "nothing to resume here"),
        untouched=("{tmp}/absent",),
    ),
    Case(
        "report-merge-plan-without-its-catalog",
        ("report", "merge", "{tmp}/d", "--out", "{tmp}/out"),
        ("{tmp}/d/plan.json", "no `catalog.digest`"),
        files=plan_dir(catalog=None),
        untouched=UNTOUCHED,
    ),
    Case(
        "compare-plan-with-a-bad-shard",
        ("compare", "{tmp}/d", "{tmp}/d"),
        ("{tmp}/d/plan.json", "`shard`"),
        files=plan_dir(shard={"index": "1"}),
    ),
]
