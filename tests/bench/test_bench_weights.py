"""``leverctl bench --weights FILE``, ``ffn.prefill``'s arms: one FFN matrix
read from a GGUF file (written here by the ``gguf`` package's own writer),
every arm planned on it at its nearest lever setting and run, a layer's
gate, up and down each planned, and a file's NVFP4 given to the NVFP4 arms
as stored. Bad input is in ``tests/cli/bad_cases_weights.py``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gguf_files
import numpy as np
import pytest
from cli_result import use_paths


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    return path, gguf_files.write(path)


def _read(path, name):
    from leverctl.bench import checkpoint

    sel = checkpoint.select(checkpoint.open_file(path), name, None, {})
    (t,) = sel.tensors.values()
    return t


def test_the_reader_gives_q4k_blocks_as_stored_and_float_tensors_as_written(gguf_file):
    import gguf

    from leverctl_kernels.common import bits

    path, held = gguf_file
    down = _read(path, gguf_files.DOWN)
    assert (down.stored, down.n, down.k, down.role) == ("Q4_K", 24, 256, "ffn_down")
    assert np.array_equal(down.q4k, held["down"])
    assert np.array_equal(down.values, gguf.quants.dequantize(held["down"], gguf.GGMLQuantizationType.Q4_K))
    up = _read(path, gguf_files.UP)
    assert (up.stored, up.role, up.q4k) == ("F16", "ffn_up", None)
    assert np.array_equal(up.values, held["up"].astype(np.float32))
    gate = _read(path, gguf_files.GATE_BF16)
    assert gate.stored == "BF16" and np.array_equal(gate.values, bits.bf16_to_f32_np(held["gate"]))


def _metrale_levers():
    from leverctl.bench.plan import path_levers
    from leverctl.levers import load_catalog, resolve
    from leverctl_kernels.ffn.prefill.spec import PATH as PREFILL

    res = resolve(load_catalog("metrale"))
    return PREFILL, path_levers(PREFILL, res.values(), res.catalog.fields)


def _on(prefill, levers, tensor):
    from leverctl.bench import weights

    fpath = prefill.extra["weights"].apply(prefill, {tensor.role: tensor})
    items, skipped = weights.path_items(fpath, levers, "smoke", None)
    return fpath, items, skipped


def test_every_arm_is_planned_at_the_levers_nearest_the_resolved_ones_that_select_it(gguf_file):
    path, held = gguf_file
    prefill, levers = _metrale_levers()
    fpath, items, skipped = _on(prefill, levers, _read(path, gguf_files.DOWN))
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

    _, items, skipped = _on(prefill, levers, _read(path, gguf_files.UP))
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
    use_paths(monkeypatch, [one])
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
    assert recs["q4k_mmq"]["weights"] == {
        "file": str(path),
        "tensors": [gguf_files.DOWN],
        "layer": 0,
        "roles": ["ffn_down"],
        "stored": ["Q4_K"],
    }


def test_the_nvfp4_arms_read_a_files_nvfp4_as_stored_and_the_rest_is_made_from_it():
    from leverctl_kernels.common import bits
    from leverctl_kernels.common.model_weights import ModelTensor

    prefill, levers = _metrale_levers()
    rng = np.random.default_rng(1)
    packed, scales, ts = bits.nvfp4_encode_np(rng.standard_normal((6, 64)).astype(np.float32) * 0.02)
    values = bits.nvfp4_decode_np(packed, scales, ts).astype(np.float32)
    t = ModelTensor(
        "f",
        "blk.0.ffn_up.weight",
        "ffn_up",
        0,
        "NVFP4",
        values,
        nvfp4=packed,
        nvfp4_scale=scales,
        nvfp4_global=float(ts),
    )
    fpath, items, _ = _on(prefill, levers, t)
    inputs = fpath.make_inputs(items[0].shape, np.random.default_rng(0))
    assert np.array_equal(inputs["w_fp4"], packed) and np.array_equal(inputs["w_fp4_scales"], scales)
    assert inputs["w_fp4_ts"][0] == np.float32(ts)
    drawn = fpath.make_inputs(items[0].shape, np.random.default_rng(0))
    assert np.array_equal(drawn["w"], inputs["w"])  # the reference's weights: the file's, int4-quantised


def test_a_matrix_whose_k_is_no_nvfp4_block_does_not_fit_the_arms():
    from leverctl_kernels.common.model_weights import ModelTensor, WeightMismatch

    prefill, _ = _metrale_levers()
    t = ModelTensor("f", "blk.0.ffn_up.weight", "ffn_up", 0, "F32", np.ones((4, 40), np.float32))
    with pytest.raises(WeightMismatch, match="k=40"):
        prefill.extra["weights"].apply(prefill, {"ffn_up": t})


def test_layer_plans_each_ffn_matrix_of_the_layer(gguf_file):
    from leverctl.bench import checkpoint, weights
    from leverctl.levers import load_catalog, resolve

    path, _ = gguf_file
    prefill, _ = _metrale_levers()
    res = resolve(load_catalog("metrale"))
    ck = checkpoint.open_file(path)
    sel = checkpoint.select(ck, None, 0, weights.used_roles([prefill]))
    assert set(sel.tensors) == {"ffn_gate", "ffn_up", "ffn_down"}
    plan = weights.plan_on(sel, [prefill], res, "smoke", None)
    assert {tuple(i.weights["tensors"]) for i in plan.items} == {
        (gguf_files.DOWN,),
        (gguf_files.UP,),
        (gguf_files.GATE_BF16,),
    }
    assert all(i.weights["layer"] == 0 for i in plan.items)
    focused = checkpoint.select(ck, "ffn_up", 0, weights.used_roles([prefill]))
    assert set(focused.tensors) == {"ffn_up"}
