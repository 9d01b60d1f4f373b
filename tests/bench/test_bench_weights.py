"""``leverctl bench --weights FILE.gguf --tensor NAME``: one FFN matrix read
from a GGUF file (written here by the ``gguf`` package's own writer) and
every dense-FFN prefill arm planned and run on it. Bad input is in
``tests/cli/bad_cases_weights.py``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gguf_files
import numpy as np
import pytest


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    return path, gguf_files.write(path)


def test_the_reader_gives_q4k_blocks_as_stored_and_float_tensors_as_written(gguf_file):
    import gguf

    from leverctl.bench import weights
    from leverctl_kernels.common import bits

    path, held = gguf_file
    down = weights.read(path, gguf_files.DOWN)
    assert (down.type, down.n, down.k, down.down) == ("Q4_K", 24, 256, True)
    assert np.array_equal(down.q4k, held["down"])
    assert np.array_equal(down.values, gguf.quants.dequantize(held["down"], gguf.GGMLQuantizationType.Q4_K))
    up = weights.read(path, gguf_files.UP)
    assert (up.type, up.down, up.q4k) == ("F16", False, None)
    assert np.array_equal(up.values, held["up"].astype(np.float32))
    gate = weights.read(path, gguf_files.GATE_BF16)
    assert gate.type == "BF16" and np.array_equal(gate.values, bits.bf16_to_f32_np(held["gate"]))


def _metrale_levers():
    from leverctl.bench.plan import path_levers
    from leverctl.levers import load_catalog, resolve
    from leverctl_kernels.ffn.prefill.spec import PATH as PREFILL

    res = resolve(load_catalog("metrale"))
    return PREFILL, path_levers(PREFILL, res.values(), res.catalog.fields)


def test_every_arm_is_planned_at_the_levers_nearest_the_resolved_ones_that_select_it(gguf_file):
    from leverctl.bench import weights

    path, held = gguf_file
    prefill, levers = _metrale_levers()
    fw = weights.read(path, gguf_files.DOWN)
    fpath, items, skipped = weights.path_and_items(prefill, fw, levers, "smoke", None)
    assert sorted(i.variant for i in items) == sorted(prefill.variants) and not skipped
    for item in items:
        assert item.shape.label == f"{gguf_files.DOWN} down m5 n24 k256"
        assert fpath.select(item.levers, item.shape).variant == item.variant
    by = {i.variant: i for i in items}
    assert by["nvfp4_mmq"].levers == levers and by["nvfp4_mmq"].note.startswith("levers as resolved")
    flips = {v: sum(i.levers[f] != levers[f] for f in levers) for v, i in by.items()}
    assert flips["w4a16"] == 1 and flips["int8_faith2"] == 2, flips
    assert len({i.config for i in items}) == len(items)  # one record identity per arm

    shapes = fpath.shapes("model", {"bench": {"prefill_tokens": [128, 1024]}})
    assert [s["m"] for s in shapes] == [128, 1024] and all((s["n"], s["k"]) == (24, 256) for s in shapes)

    inputs = fpath.make_inputs(items[0].shape, np.random.default_rng(0))
    assert np.array_equal(inputs["w_q4k"], held["down"])  # the Q4_K arm reads the file's blocks

    up = weights.read(path, gguf_files.UP)
    _, items, skipped = weights.path_and_items(prefill, up, levers, "smoke", None)
    assert skipped == [(f"{gguf_files.UP} gate+up m19 n20 k160", "q4k_mmq")]  # k % 256 != 0
    assert "q4k_mmq" not in {i.variant for i in items}


@pytest.mark.sim
def test_bench_runs_the_arms_on_the_files_matrix_and_records_them(gguf_file, monkeypatch, capsys):
    """One arm (the Q4_K one, on the blocks as stored) keeps the simulator's
    time short; the planning of all of them is tested above."""
    from leverctl.cli import common as cli_common
    from leverctl.cli.app import main

    prefill, _ = _metrale_levers()
    one = dataclasses.replace(prefill, variants={"q4k_mmq": prefill.variants["q4k_mmq"]})
    monkeypatch.setattr(cli_common, "registered_paths", lambda: [one])
    path, _ = gguf_file
    with pytest.raises(SystemExit) as e:
        main(
            [
                "bench",
                "--no-env",
                "-e",
                "metrale",
                "--device",
                "sim",
                "--shapes",
                "smoke",
                "--weights",
                str(path),
                "--tensor",
                gguf_files.DOWN,
                "-f",
                "json",
            ]
        )
    out = capsys.readouterr().out
    assert e.value.code == 0
    recs = {r["variant"]: r for r in json.loads(out)["results"]}
    assert set(recs) == {"q4k_mmq"}
    for r in recs.values():
        assert r["status"] == "pass" and r["shape"]["label"] == f"{gguf_files.DOWN} down m5 n24 k256", r
    assert recs["q4k_mmq"]["levers"]["ffn_mmq"] is True and recs["q4k_mmq"]["levers"]["ffn_nvfp4_mmq"] is False
