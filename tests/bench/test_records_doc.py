"""docs/records.md describes exactly the records, bench documents and sweep
plan files that leverctl writes today.

Mechanical both ways: the JSON examples in the document are parsed into key
paths (``error.rel``, ``device.copy_gbps``, ``items[].shape``); a bench (with
``--against``) and a sweep are run through the real commands on a fake GPU
whose timing rig returns fixed figures, so every optional block of a record
is filled; then every key written must be documented, and every documented
key must be written. A field added to a record, to the bench document or to
plan.json without a line in docs/records.md fails here; and a record's
fields, as documented and as written, are the fields of the one schema
(``leverctl.bench.records.schema``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from bench_fakes import FixedRig, saxpy_path
from cli_result import use_paths

from leverctl.bench.records import schema
from leverctl.cli import common

DOC = Path(__file__).resolve().parents[2] / "docs" / "records.md"

# Values whose keys are data, not schema: a lever map, the show document, a
# list of records (checked as records), a kernel summary (sweep --dry-run).
OPAQUE = {"levers", "results", "against.levers", "against.results", "kernels[]"}
# A record's shape is its label and the kernel path's own dimensions
# (m, n, k for a GEMV): only the label is schema.
SHAPE_DIMENSION = re.compile(r"shape\.(?!label$)")


def key_paths(value, prefix: str = "") -> set[str]:
    """Every key path in a JSON value; list items share the path ``key[]``."""
    paths: set[str] = set()
    if prefix in OPAQUE:
        return paths
    if isinstance(value, dict):
        for k, v in value.items():
            p = f"{prefix}.{k}" if prefix else k
            paths.add(p)
            paths |= key_paths(v, p)
    elif isinstance(value, list):
        for v in value:
            paths |= key_paths(v, f"{prefix}[]")
    return paths


def documented() -> dict[str, set[str]]:
    """Key paths of each JSON example of docs/records.md, by the heading above it."""
    out: dict[str, set[str]] = {}
    heading = None
    for block in re.split(r"^(## .*)$", DOC.read_text("utf-8"), flags=re.M):
        if block.startswith("## "):
            heading = block[3:].strip()
            continue
        for example in re.findall(r"```json\n(.*?)```", block, re.S):
            out[heading] = key_paths(json.loads(example))
    return out


def section(name: str) -> set[str]:
    found = [keys for heading, keys in documented().items() if heading.startswith(name)]
    assert found, f"docs/records.md has no JSON example under a heading '{name}...'"
    return found[0]


@pytest.fixture
def fixed_gpu(monkeypatch):
    """The commands see one saxpy path (with a library reference) on a GPU
    whose kernels run in the simulator and whose timings are fixed."""
    from leverctl.bench import device as devmod

    path = dataclasses.replace(saxpy_path(), extra={"gemm_mnk": lambda s: (1, s["n"], 1)})
    use_paths(monkeypatch, [path])

    def gpu(*a, **k):
        return devmod.Device(kind="gpu", name="Fixed GPU", compute_capability="9.0", driver="fixed", _rig=FixedRig())

    monkeypatch.setattr(devmod, "choose", gpu)


def _cli(capsys, *args) -> str:
    from leverctl.cli.app import main

    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert e.value.code == 0, err
    return out


def _compare(written: set[str], doc: set[str], what: str) -> None:
    assert not written - doc, f"{what}: written but not in docs/records.md: {sorted(written - doc)}"
    assert not doc - written, f"{what}: in docs/records.md but never written: {sorted(doc - written)}"


@pytest.mark.sim
def test_records_and_documents_written_are_exactly_those_docs_records_md_describes(fixed_gpu, capsys, tmp_path):
    bench = json.loads(_cli(capsys, "bench", "--no-env", "--against", "defaults", "-f", "json", "--shapes", "smoke"))
    sweep_dir = tmp_path / "sweep"
    _cli(capsys, "sweep", "--no-env", "--shapes", "smoke", "--shard", "1/1", "--out", sweep_dir, "-f", "json")
    lines = (sweep_dir / "results.jsonl").read_text("utf-8").splitlines()
    records = [*bench["results"], *bench["against"]["results"], *map(json.loads, lines)]

    # speedup_vs_against: with --against (profile, with --profile: tests/bench/test_bench_profile.py)
    assert all(tuple(r) == (*schema.WRITTEN, "speedup_vs_against") for r in bench["results"])
    assert all(tuple(r) == schema.WRITTEN for r in [*bench["against"]["results"], *map(json.loads, lines)])
    record_keys = set().union(*(key_paths(r) for r in records)) | {"levers"}
    dims = lambda keys: {k for k in keys if not SHAPE_DIMENSION.match(k)}  # noqa: E731
    # speedup_vs_against is documented in prose: it exists only in a run with --against
    _compare(dims(record_keys) - {"speedup_vs_against"}, dims(section("One record")), "a record")
    assert all("speedup_vs_against" in r for r in bench["results"])
    _compare(
        key_paths(bench) | {"levers", "results", "against.levers", "against.results"},
        section("The bench document"),
        "the bench document",
    )
    plan = json.loads((sweep_dir / "plan.json").read_text("utf-8"))
    _compare(key_paths(plan) | {"kernels"}, section("The sweep results file"), "plan.json")


def test_the_documented_record_has_the_schemas_fields_and_timing_figures():
    documented = section("One record")
    assert {k for k in documented if "." not in k} == set(schema.WRITTEN)
    assert {f"timing.{f}" for f in schema.TIMING_FIGURES} <= documented
    assert {f.name for f in schema.FIELDS if not f.always} == {"speedup_vs_against", "profile", "weights"}
    assert "## The profile block" in DOC.read_text("utf-8")  # documented in a section of its own
    assert "## The weights block" in DOC.read_text("utf-8")  # written as tests/bench/test_weights_paths.py checks
    assert "`speedup_vs_against`" in DOC.read_text("utf-8")  # documented in prose: only with --against


def test_the_check_fails_on_a_key_written_but_not_documented():
    with pytest.raises(AssertionError, match="written but not in docs/records.md: \\['elapsed_s'\\]"):
        _compare(section("One record") | {"elapsed_s"}, section("One record"), "a record")
    with pytest.raises(AssertionError, match="never written: \\['timing.median_us'\\]"):
        _compare(section("One record") - {"timing.median_us"}, section("One record"), "a record")


def test_key_paths_name_nested_keys_and_list_items_and_skip_opaque_values():
    assert key_paths({"a": {"b": 1}, "items": [{"c": 2}], "levers": {"x": 1}}) == {
        "a",
        "a.b",
        "items",
        "items[].c",
        "levers",
    }
