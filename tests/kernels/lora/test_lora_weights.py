"""The LoRA projection paths on a model file's base weights
(``WeightUse``): any one attention or dense-FFN projection, at its own
sizes, its decoded values in fp16 (exact from F16, rounded once from
BF16 or another form, which the label says), the adapter drawn and sized
to the tensor; every variant passes the bench's check on them in the
simulator, a reference on other base weights fails it, and a tensor that
does not fit is a one-line ``WeightMismatch``."""

from __future__ import annotations

import numpy as np
import pytest
from weight_forms import bf16, check_against, f16, q4k, run_check, weights

from leverctl_kernels.common.model_weights import WeightMismatch
from leverctl_kernels.registry import get_path

RNG = np.random.default_rng(280)
# n = 13 outputs, k = 37 inputs (K ends mid-warp), as the smoke shape's
Q = f16("blk.2.attn_q.weight", "attn_q", weights(RNG, 13, 37))
O = bf16("blk.2.attn_output.weight", "attn_output", weights(RNG, 11, 45, scale=0.2))
UP = q4k("blk.2.ffn_up.weight", "ffn_up", weights(RNG, 3, 256))
ROLES = {"attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
SIM = [("lora.proj", "per_forward"), ("lora.proj", "merged"), ("lora.proj_pool", "per_forward")]


def _on(name: str, tensors):
    path = get_path(name)
    return path.extra["weights"].apply(path, tensors)


@pytest.mark.parametrize("name", ["lora.proj", "lora.proj_pool"])
def test_each_projection_is_a_group_of_its_own(name):
    groups = get_path(name).extra["weights"].groups
    assert all(len(g) == 1 for g in groups) and {g[0] for g in groups} == ROLES


@pytest.mark.parametrize("t", [Q, O, UP], ids=lambda t: t.stored)
def test_shapes_are_the_tensors_and_say_how_it_was_read(t):
    path = _on("lora.proj", {t.role: t})
    smoke, model = path.shapes("smoke", None), path.shapes("model", {"hidden": 4096})
    assert len(smoke) == 1 and len(model) == 6  # ranks 16, 64 x rows 1, 8, 512
    how = f"{t.stored}: fp16 as stored" if t.stored == "F16" else f"{t.stored}: fp16 re-encoded"
    for s in smoke + model:
        assert (s["n"], s["k"]) == (t.n, t.k) and f"{t.name}[{how}]" in s.label
    assert {(s["m"], s["r"]) for s in model} == {(m, r) for m in (1, 8, 512) for r in (16, 64)}


@pytest.mark.parametrize("t", [Q, O, UP], ids=lambda t: t.stored)
def test_the_base_weights_are_the_tensors_and_the_adapter_follows_them(t):
    path = _on("lora.proj", {t.role: t})
    shape = path.shapes("smoke", None)[0]
    inputs = path.make_inputs(shape, np.random.default_rng(1))
    w = inputs["w"]
    assert w.dtype == np.float16 and w.shape == (t.n, t.k)
    if t.stored == "F16":
        assert np.array_equal(w.astype(np.float32), t.values)  # exactly as stored
    else:
        assert np.array_equal(w, t.values.astype(np.float16))  # rounded once
    # the adapter moves the output by about 30 % of the base projection's size
    x = inputs["x"].astype(np.float64)
    base = x @ w.astype(np.float64).T
    s = shape["alpha"] / shape["r"]
    delta = s * (x @ inputs["a"].astype(np.float64).T) @ inputs["b"].astype(np.float64).T
    assert 0.1 < np.linalg.norm(delta) / np.linalg.norm(base) < 0.9


@pytest.mark.sim
@pytest.mark.parametrize("case", SIM, ids=lambda c: f"{c[0]}-{c[1]}")
def test_every_variant_passes_on_the_tensor_and_fails_on_other_weights(case):
    name, variant = case
    path = _on(name, {"attn_q": Q})
    shape = path.shapes("smoke", None)[0]
    inputs = path.make_inputs(shape, np.random.default_rng(3))
    fig, got, shape = run_check(path, variant, shape, inputs)
    assert fig.passed, fig.why()
    other = {**inputs, "w": weights(np.random.default_rng(4), Q.n, Q.k).astype(np.float16)}
    assert not check_against(path, variant, shape, got, other).passed


@pytest.mark.parametrize(
    "tensors,said",
    [
        ({"attn_q": bf16("bad.q", "attn_q", weights(RNG, 2, 8, 16))}, "bad.q: shape [2, 8, 16] has rank 3"),
        ({"attn_v": bf16("bad.v", "attn_v", np.full((4, 8), 1e6, np.float32))}, "bad.v: holds values fp16 cannot"),
        ({"attn_q": Q, "attn_k": Q}, "runs on one tensor at a time"),
    ],
)
def test_a_tensor_that_does_not_fit_is_a_one_line_mismatch(tensors, said):
    with pytest.raises(WeightMismatch) as e:
        _on("lora.proj", tensors)
    assert said in str(e.value) and "\n" not in str(e.value)
