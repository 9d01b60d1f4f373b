"""``gdn.proj_gemv_batch`` on a model file's linear-attention projections
(``WeightUse``: ``ssm_in``, ``ssm_out``): the tensor's own sizes at the
decode batches, int4 weights made from its decoded values (the label says
so); every variant passes the bench's check on them in the simulator, a
reference on other weights fails it, and a tensor that does not fit is a
one-line ``WeightMismatch``."""

from __future__ import annotations

import numpy as np
import pytest
from weight_forms import bf16, check_against, nvfp4, q4k, run_check, weights

from leverctl_kernels.common.int4 import dequantize_w4, quantize_w4
from leverctl_kernels.common.model_weights import WeightMismatch
from leverctl_kernels.registry import get_path

RNG = np.random.default_rng(281)
# in_proj: 9 outputs of k = 264 (two scale groups and a partial third)
SSM_IN = bf16("blk.0.ssm_in.weight", "ssm_in", weights(RNG, 9, 264))
SSM_OUT = q4k("blk.0.ssm_out.weight", "ssm_out", weights(RNG, 7, 512))
SSM_IN_FP4 = nvfp4("blk.1.ssm_in.weight", "ssm_in", weights(RNG, 5, 48))
PATH = get_path("gdn.proj_gemv_batch")


def _on(tensors):
    return PATH.extra["weights"].apply(PATH, tensors)


def test_the_groups_are_the_linear_attention_projections():
    assert PATH.extra["weights"].groups == (("ssm_in",), ("ssm_out",))


@pytest.mark.parametrize("t", [SSM_IN, SSM_OUT, SSM_IN_FP4], ids=lambda t: t.stored)
def test_shapes_and_inputs_are_the_tensors(t):
    path = _on({t.role: t})
    assert [s["m"] for s in path.shapes("smoke", None)] == [3]
    assert [s["m"] for s in path.shapes("model", None)] == [1, 4, 16]
    for s in path.shapes("smoke", None) + path.shapes("model", None):
        assert (s["n"], s["k"], s["gemv_tier_loaded"]) == (t.n, t.k, 1)
        assert f"{t.name}[{t.stored}: int4 re-encoded]" in s.label
    shape = path.shapes("smoke", None)[0]
    inputs = path.make_inputs(shape, np.random.default_rng(1))
    q, s = quantize_w4(t.values)
    assert np.array_equal(inputs["qweight"], q) and np.array_equal(inputs["scales"], s)
    step = np.repeat(s.astype(np.float32), 128, axis=1)[:, : t.k]
    assert np.all(np.abs(dequantize_w4(q, s) - t.values) <= step / 2 * (1 + 1e-3) + 1e-7)
    assert inputs["x"].shape == (3, t.k)


@pytest.mark.sim
@pytest.mark.parametrize("variant", list(PATH.variants))
def test_every_variant_passes_on_the_tensor_and_fails_on_other_weights(variant):
    path = _on({"ssm_in": SSM_IN})
    shape = path.shapes("smoke", None)[0]
    inputs = path.make_inputs(shape, np.random.default_rng(3))
    fig, got, shape = run_check(path, variant, shape, inputs)
    assert fig.passed, fig.why()
    other = dict(inputs)
    other["qweight"], other["scales"] = quantize_w4(weights(np.random.default_rng(4), SSM_IN.n, SSM_IN.k))
    assert not check_against(path, variant, shape, got, other).passed


@pytest.mark.parametrize(
    "tensors,said",
    [
        ({"ssm_in": bf16("bad.in", "ssm_in", weights(RNG, 4, 44))}, "bad.in: k=44 is not a multiple of 8"),
        ({"ssm_out": bf16("bad.out", "ssm_out", weights(RNG, 48))}, "bad.out: shape [48] has rank 1"),
    ],
)
def test_a_tensor_that_does_not_fit_is_a_one_line_mismatch(tensors, said):
    with pytest.raises(WeightMismatch) as e:
        _on(tensors)
    assert said in str(e.value) and "\n" not in str(e.value)
