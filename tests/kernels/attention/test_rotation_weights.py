"""``attention.rotation`` on a model file's q, k and v projections
(``WeightUse``): the heads are counted at head dim 128, the weights are
the file's in bf16 (a BF16 file's bits as stored), no outliers are added
(the file's are the model's), both variants pass the bench's check on
them and fail against another layer's, and tensors that do not fit are a
one-line ``WeightMismatch``."""

from __future__ import annotations

import numpy as np
import pytest
from weight_forms import bf16, check_against, f16, run_check, weights

from leverctl_kernels.common import bits
from leverctl_kernels.common.model_weights import WeightMismatch
from leverctl_kernels.registry import get_path

HIDDEN = 40
RNG = np.random.default_rng(2031)


def _layer(layer: int, rng, form=bf16, nq: int = 128, nk: int = 128, hidden: int = HIDDEN) -> dict:
    return {
        r: form(f"blk.{layer}.{r}.weight", r, weights(rng, n, hidden, scale=0.15), layer)
        for r, n in (("attn_q", nq), ("attn_k", nk), ("attn_v", nk))
    }


def _on(tensors):
    path = get_path("attention.rotation")
    return path.extra["weights"].apply(path, tensors)


def test_the_group_is_a_layers_q_k_and_v():
    assert get_path("attention.rotation").extra["weights"].groups == (("attn_q", "attn_k", "attn_v"),)


@pytest.mark.parametrize("form", [bf16, f16], ids=["BF16", "F16"])
def test_shapes_count_heads_at_128_and_inputs_are_the_files_weights(form):
    t = _layer(0, RNG, form, nq=256)
    path = _on(t)
    for preset in ("smoke", "model"):
        for s in path.shapes(preset, {"attention": {"q_heads": 32, "kv_heads": 8, "head_dim": 128}}):
            assert (s["hq"], s["hkv"], s["d"], s["hidden"], s["outliers"]) == (2, 1, 128, HIDDEN, 0)
            how = "as stored" if form is bf16 else "re-encoded"
            assert all(f"{x.name}[{x.stored}: BF16 {how}]" in s.label for x in t.values())
    x = path.make_inputs(path.shapes("smoke", None)[0], np.random.default_rng(1))
    w = bits.bf16_to_f32_np(x["w_qkv"])
    stacked = np.concatenate([t[r].values for r in ("attn_q", "attn_k", "attn_v")])
    if form is bf16:
        assert np.array_equal(w, stacked)
    else:
        assert np.abs(w - stacked).max() <= np.abs(stacked).max() * 2.0**-8


@pytest.mark.parametrize(
    "nq, nk, hidden_k, match",
    [(96, 128, HIDDEN, "n=96 is not a multiple of 128"), (128, 128, 48, "project the same hidden state")],
)
def test_tensors_that_do_not_fit_are_a_mismatch(nq, nk, hidden_k, match):
    t = _layer(0, RNG, nq=nq, nk=nk)
    if hidden_k != HIDDEN:
        t["attn_k"] = bf16("blk.0.attn_k.weight", "attn_k", weights(RNG, nk, hidden_k))
    with pytest.raises(WeightMismatch, match=match):
        _on(t)


@pytest.mark.sim
@pytest.mark.parametrize("variant", ["runtime_rotation", "pre_rotated"])
def test_both_variants_pass_on_the_files_weights_and_fail_on_another_layers(variant):
    path = _on(_layer(0, RNG))
    shape = path.shapes("smoke", None)[0]
    inputs = path.make_inputs(shape, np.random.default_rng(3))
    fig, got, shape = run_check(path, variant, shape, inputs)
    assert fig.passed, fig.why()
    other = _on(_layer(1, np.random.default_rng(4))).make_inputs(shape, np.random.default_rng(3))
    assert np.array_equal(other["x"], inputs["x"])
    assert not check_against(path, variant, shape, got, {**inputs, "w_qkv": other["w_qkv"]}).passed
