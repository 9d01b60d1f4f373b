"""Every path that reads model weights runs on a model's files: one small
model written as GGUF and as safetensors by each library's own writer
(``model_files``), read by the bench's readers as ``--weights FILE --layer
N`` reads them. Every weight-bearing path finds a group of its roles in
both files and takes the tensors' sizes; in the simulator each runs its
first variant on one of the two files (alternating, to keep the suite's
time) and passes the bench's check."""

from __future__ import annotations

import model_files as mf
import numpy as np
import pytest
from weight_forms import run_check

from leverctl.bench import checkpoint
from leverctl_kernels.common.path import Shape
from leverctl_kernels.registry import all_paths

WEIGHTED = [p for p in all_paths() if "weights" in p.extra]
FORMATS = ("gguf", "safetensors")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("model")
    out = {"gguf": d / "model.gguf", "safetensors": d / "model.safetensors"}
    mf.write_gguf(out["gguf"])
    mf.write_safetensors(out["safetensors"])
    return out


def _layers(file) -> dict[int, dict]:
    """layer -> role -> ModelTensor, as ``--layer N`` reads every role."""
    from leverctl_kernels.common.model_weights import ROLES

    ck = checkpoint.open_file(file)
    used = {r: frozenset({r}) for r in ROLES}
    return {layer: dict(checkpoint.select(ck, None, layer, used).tensors) for layer in sorted(set(mf.LAYERS.values()))}


@pytest.fixture(scope="module")
def read(files):
    return {fmt: _layers(files[fmt]) for fmt in FORMATS}


def _on(path, layers):
    """The path on the first of its groups a layer of the file fills."""
    use = path.extra["weights"]
    for group in use.groups:
        for tensors in layers.values():
            if set(group) <= set(tensors):
                return use.apply(path, {r: tensors[r] for r in group}), group
    raise AssertionError(f"no layer of the file fills a group of {path.name}: {use.groups}")


def test_the_files_hold_every_role_a_path_reads_and_every_path_has_one():
    from leverctl_kernels.common.model_weights import ROLES

    assert set(mf.SHAPES) == set(ROLES) - {"attn_qkv"}  # a fused qkv is another layout of q, k, v
    # every path whose operands are model weight matrices (the README's table)
    assert {p.name for p in WEIGHTED} == {
        *("w4a16.gemv", "w4a16.gemv_dual", "w4a16.ffn_decode", "w4a16.gemm", "gdn.proj_gemv_batch"),
        *("attention.rotation", "attention.proj_bf16_tc", "attention.proj_bf16_tc_w4a16", "attention.proj_fp8"),
        *("ffn.prefill", "lora.proj", "lora.proj_pool", "mamba2.prefill_proj", "moe.router", "moe.gateup_fp4"),
        *("moe.down_fp4", "moe.decode_fp8_grouped", "moe.decode_multi_seq", "moe.decode_via_prefill"),
        *("moe.prefill_grouped", "moe.prefill_sorted", "moe.shared_expert"),
    }


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_readers_give_every_role_its_shape_and_stored_form(read, fmt):
    got = {r: t for layer in read[fmt].values() for r, t in layer.items()}
    assert set(got) == set(mf.SHAPES)
    for role, (layer, *shape) in mf.SHAPES.items():
        assert got[role].layer == layer and list(got[role].values.shape) == shape, role
    if fmt == "safetensors":
        assert got["ffn_gate_exps"].stored == "NVFP4" and got["attn_k"].stored == "F8_E4M3"
        assert got["ffn_gate_exps"].nvfp4 is not None and got["attn_k"].fp8_scale_kind == "channel"
        # ModelOpt's weight_scale_2 per expert: the stack keeps one global scale an expert
        assert np.asarray(got["ffn_gate_exps"].nvfp4_global).shape == (mf.E,)
    else:
        assert {got[r].stored for r in got} == {"F16", "BF16", "F32"}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("path", WEIGHTED, ids=lambda p: p.name)
def test_every_weight_bearing_path_takes_the_files_tensors(read, fmt, path):
    on, group = _on(path, read[fmt])
    tensors = {r: t for layer in read[fmt].values() for r, t in layer.items() if r in group}
    for preset in ("smoke", "model"):
        shapes = on.shapes(preset, None)
        assert shapes, (path.name, preset)
        for s in shapes:
            assert all(t.name.split(".experts.")[0] in s.label for t in tensors.values()), s.label
    s = on.shapes("smoke", None)[0]
    x = on.make_inputs(s, np.random.default_rng(1))
    assert set(on.outputs(s)) and all(np.asarray(v).size for v in x.values() if hasattr(v, "size"))


def _few(shape: Shape) -> Shape:
    """The smoke shape with few rows: the simulator's time goes by them."""
    fewer = {k: min(v, 2) for k, v in shape.dims.items() if k in ("t", "m", "rows") and isinstance(v, int)}
    if "top_k" in shape.dims and "experts" in shape.dims:
        fewer["top_k"] = 1
    return Shape(shape.label, {**shape.dims, **fewer})


@pytest.mark.sim
@pytest.mark.parametrize("i, path", list(enumerate(WEIGHTED)), ids=lambda x: x.name if hasattr(x, "name") else "")
def test_every_weight_bearing_path_passes_its_check_on_a_files_weights(read, i, path):
    fmt = FORMATS[i % 2]
    on, _ = _on(path, read[fmt])
    shape = _few(on.shapes("smoke", None)[0])
    # the first variant, or on the safetensors file's NVFP4 experts the arm
    # that reads them as stored (int4 is then the re-encoded arm, charged the
    # cross-format budget: these weights' outliers cost int4's 128-input
    # groups more than it, which the record then says)
    variant = "nvfp4" if fmt == "safetensors" and "nvfp4" in on.variants else next(iter(on.variants))
    inputs = on.make_inputs(shape, np.random.default_rng(2))
    fig, _, _ = run_check(on, variant, shape, inputs)
    assert fig.passed, f"{path.name} {variant} on {fmt}: {fig.why()}"
