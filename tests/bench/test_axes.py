"""Shapes from the command line (``--axis NAME=V1,V2``): parsing, refining a
path's preset shapes (the product over the axes given, duplicates made
once, dependent dimensions derived), and the checks made before any kernel
runs."""

from __future__ import annotations

import json

import pytest

from leverctl.bench.axes import check_axes, parse_axes, refine
from leverctl.errors import UserError
from leverctl_kernels.common.path import Shape


class _Path:
    extra: dict = {}


@pytest.fixture
def cli_run(capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from cli_result import run_cli

    return lambda *args: run_cli(capsys, *args)


def test_parse_reads_repeated_axes_and_keeps_each_value_once():
    assert parse_axes(["m=1,16,64,16", "k=4096"]) == (("m", (1, 16, 64)), ("k", (4096,)))
    assert parse_axes(None) == () and parse_axes([]) == ()


@pytest.mark.parametrize(
    "text, why",
    [
        ("m", "needs the form NAME=V1,V2"),
        ("=1", "needs the form NAME=V1,V2"),
        ("m=1,x", "'x' is not an integer"),
        ("m=", "'' is not an integer"),
        ("m=-3", "-3 is negative"),
        ("m=1.5", "'1.5' is not an integer"),
    ],
)
def test_a_malformed_axis_is_bad_input(text, why):
    with pytest.raises(UserError, match=why):
        parse_axes([text])


def test_an_axis_given_twice_is_bad_input():
    with pytest.raises(UserError, match="given twice"):
        parse_axes(["m=1", "m=2"])


def test_refine_makes_the_product_once_and_leaves_paths_without_the_axis_alone():
    shapes = [Shape("a", {"m": 1, "k": 64}), Shape("b", {"m": 4, "k": 64})]
    got = refine(_Path(), shapes, parse_axes(["m=2,3", "k=128"]))
    assert [(s.label, dict(s.dims)) for s in got] == [
        ("a @ m=2,k=128", {"m": 2, "k": 128}),
        ("a @ m=3,k=128", {"m": 3, "k": 128}),
    ]  # "b" refines to the same two shapes: made once
    other = [Shape("c", {"t": 5})]
    assert refine(_Path(), other, parse_axes(["m=2"])) == other


def test_a_path_derives_what_follows_from_the_axis():
    from leverctl_kernels.gdn.family import derive_slots

    class P:
        extra = {"derive": derive_slots}

    (s,) = refine(P(), [Shape("d", {"n": 1, "slots": 3})], parse_axes(["n=8"]))
    assert dict(s.dims) == {"n": 8, "slots": 17}
    (s,) = refine(P(), [Shape("d", {"n": 1, "slots": 3})], parse_axes(["n=8", "slots=9"]))
    assert dict(s.dims) == {"n": 8, "slots": 9}  # given: kept


def test_check_names_the_dimensions_of_the_run_and_refuses_a_zero_size():
    shapes = {"w4a16.gemv": [Shape("a", {"m": 1, "n": 8, "k": 64})], "ffn.prefill": [Shape("b", {"down": 0})]}
    with pytest.raises(
        UserError, match=r"--axis q: no kernel path of this run has that dimension; theirs: down, k, m, n"
    ):
        check_axes(parse_axes(["q=1"]), shapes)
    with pytest.raises(UserError, match=r"did you mean down\?"):
        check_axes(parse_axes(["downn=1"]), shapes)
    with pytest.raises(UserError, match="0 is no size for w4a16.gemv"):
        check_axes(parse_axes(["m=0"]), shapes)
    check_axes(parse_axes(["down=0,1", "m=2"]), shapes)  # a dimension that holds 0 may take it


@pytest.mark.sim
def test_bench_refines_the_smoke_shapes_and_every_record_says_its_values(cli_run, tmp_path):
    r = cli_run(
        "bench", "--no-env", "-k", "w4a16.gemv", "--axis", "k=264,520", "--axis", "m=2", "-o", tmp_path / "r.json"
    )
    assert r.code == 0, r.err
    doc = json.loads((tmp_path / "r.json").read_text())
    got = sorted((x["shape"]["label"], x["shape"]["m"], x["shape"]["k"], x["status"]) for x in doc["results"])
    assert got == [("m1-n37-k264 @ k=264,m=2", 2, 264, "pass"), ("m1-n37-k264 @ k=520,m=2", 2, 520, "pass")]


def test_sweep_dry_run_plans_the_refined_shapes_and_refuses_an_unknown_axis(cli_run):
    r = cli_run(
        "sweep", "--no-env", "--dry-run", "-f", "json", "--device", "sim", "-k", "w4a16.gemv", "--axis", "k=264,520,776"
    )
    assert r.code == 0, r.err
    (k,) = json.loads(r.out)["kernels"]
    assert len(k["shapes"]) == 3 and all("@ k=" in s for s in k["shapes"])
    r = cli_run("sweep", "--no-env", "--dry-run", "--device", "sim", "-k", "w4a16.gemv", "--axis", "t=5")
    assert r.code == 2 and r.out == "" and "--axis t: no kernel path of this run has that dimension" in r.err


def test_kernels_lists_a_paths_dimensions(cli_run):
    r = cli_run("kernels", "--no-env", "-k", "gdn.verify", "-f", "json")
    (p,) = json.loads(r.out)["paths"]
    assert r.code == 0 and p["axes"]["t"] == [17, 5] and p["axes"]["dk"] == [128]
    r = cli_run("kernels", "--no-env", "-k", "gdn.verify")
    assert "gdn.verify shape dimensions (model shapes; --axis NAME=...): t=17,5 hk=16 hv=32 dk=128 dv=128" in r.out
