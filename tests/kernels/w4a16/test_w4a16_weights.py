"""The W4A16 paths on a model file's dense-FFN tensors (``WeightUse``):
each path takes the tensors' own sizes and makes its int4 weights from
their decoded values (a BF16, F16, FP8 or Q4_K tensor re-encoded, which
the label says); every variant passes the bench's check on them in the
simulator; a reference on other weights fails it; a tensor that does not
fit is a one-line ``WeightMismatch``."""

from __future__ import annotations

import numpy as np
import pytest
from weight_forms import bf16, check_against, f16, fp8, q4k, run_check, weights

from leverctl_kernels.common.int4 import dequantize_w4, quantize_w4, unpack_int4
from leverctl_kernels.common.model_weights import WeightMismatch
from leverctl_kernels.registry import get_path

RNG = np.random.default_rng(28)
# gate/up [i, h], down [h, i]: i = 24, h = 40 (k ends inside a 128-input
# scale group and is no multiple of the tensor cores' 16); one Q4_K matrix
# for the GEMV (Q4_K needs k a multiple of 256).
GATE = bf16("blk.3.ffn_gate.weight", "ffn_gate", weights(RNG, 24, 40))
UP = f16("blk.3.ffn_up.weight", "ffn_up", weights(RNG, 24, 40))
DOWN = fp8("blk.3.ffn_down.weight", "ffn_down", weights(RNG, 40, 24))
# The GEMM's: k a multiple of 16, which its tensor-core variants step by.
DOWN48 = fp8("blk.5.ffn_down.weight", "ffn_down", weights(RNG, 21, 48), kind="channel")
Q4K = q4k("blk.3.ffn_up.weight", "ffn_up", weights(RNG, 5, 256))

# path -> (the group's tensors, the inputs holding weights: (qweight, scales, role))
CASES = {
    "w4a16.gemv": ({"ffn_up": Q4K}, [("qweight", "scales", "ffn_up")]),
    "w4a16.gemv_dual": (
        {"ffn_gate": GATE, "ffn_up": UP},
        [("qw_gate", "s_gate", "ffn_gate"), ("qw_up", "s_up", "ffn_up")],
    ),
    "w4a16.ffn_decode": (
        {"ffn_gate": GATE, "ffn_up": UP, "ffn_down": DOWN},
        [("qw_gate", "s_gate", "ffn_gate"), ("qw_up", "s_up", "ffn_up"), ("qw_down", "s_down", "ffn_down")],
    ),
    "w4a16.gemm": ({"ffn_down": DOWN48}, [("qweight", "scales", "ffn_down")]),
}


def _on(name: str, tensors=None):
    path = get_path(name)
    return path.extra["weights"].apply(path, tensors if tensors is not None else CASES[name][0])


def test_the_groups_are_the_dense_ffn_roles():
    ones = (("ffn_gate",), ("ffn_up",), ("ffn_down",))
    assert get_path("w4a16.gemv").extra["weights"].groups == ones
    assert get_path("w4a16.gemm").extra["weights"].groups == ones
    assert get_path("w4a16.gemv_dual").extra["weights"].groups == (("ffn_gate", "ffn_up"),)
    assert get_path("w4a16.ffn_decode").extra["weights"].groups == (("ffn_gate", "ffn_up", "ffn_down"),)


@pytest.mark.parametrize("name", sorted(CASES))
def test_shapes_are_the_tensors_and_say_so(name):
    tensors = CASES[name][0]
    path = _on(name)
    model = {"bench": {"gemm_rows": [7, 300]}}
    for preset in ("smoke", "model"):
        shapes = path.shapes(preset, model)
        assert shapes
        for s in shapes:
            for t in tensors.values():
                assert f"{t.name}[{t.stored}: int4 re-encoded]" in s.label
            if name == "w4a16.ffn_decode":
                assert (s["hidden"], s["inter"]) == (40, 24)
            else:
                t = next(iter(tensors.values()))
                assert (s["n"], s["k"]) == (t.n, t.k)
    if name == "w4a16.gemm":
        assert [s["m"] for s in path.shapes("model", model)] == [7, 300]
        assert [s["m"] for s in path.shapes("smoke", None)] == [5, 67]
    else:
        assert {s["m"] for s in path.shapes("model", model)} == {1}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_inputs_hold_the_tensors_int4_weights(name):
    tensors, held = CASES[name]
    path = _on(name)
    shape = path.shapes("smoke", None)[0]
    inputs = path.make_inputs(shape, np.random.default_rng(1))
    for qname, sname, role in held:
        v = tensors[role].values
        w = dequantize_w4(inputs[qname], inputs[sname])
        step = np.repeat(inputs[sname].astype(np.float32), 128, axis=1)[:, : v.shape[1]]
        # each int4 value is the nearest grid point of the tensor's value
        assert np.all(np.abs(w - v) <= step / 2 * (1 + 1e-3) + 1e-7)
        assert np.abs(unpack_int4(inputs[qname])).max() >= 7  # the grid spans each group's largest value
    # drawn inputs (x) follow the rng; the weights do not
    again = path.make_inputs(shape, np.random.default_rng(2))
    for qname, sname, _ in held:
        assert np.array_equal(again[qname], inputs[qname]) and np.array_equal(again[sname], inputs[sname])


SIM = [(name, v) for name in CASES for v in get_path(name).variants]


@pytest.mark.sim
@pytest.mark.parametrize("case", SIM, ids=lambda c: f"{c[0]}-{c[1]}")
def test_every_variant_passes_on_the_tensors_and_fails_on_other_weights(case):
    name, variant = case
    path = _on(name)
    shape = path.shapes("smoke", None)[0]
    inputs = path.make_inputs(shape, np.random.default_rng(3))
    fig, got, shape = run_check(path, variant, shape, inputs)
    assert fig.passed, fig.why()
    # The same outputs against a reference whose first matrix is another
    # matrix of the same size: the check must fail.
    qname, sname, role = CASES[name][1][0]
    t = CASES[name][0][role]
    other = dict(inputs)
    other[qname], other[sname] = quantize_w4(weights(np.random.default_rng(4), t.n, t.k))
    assert not check_against(path, variant, shape, got, other).passed


@pytest.mark.parametrize(
    "name,tensors,said",
    [
        (
            "w4a16.gemv",
            {"ffn_up": bf16("bad.up", "ffn_up", weights(RNG, 8, 36))},
            "bad.up: k=36 is not a multiple of 8",
        ),
        (
            "w4a16.gemm",
            {"ffn_up": bf16("bad.up3", "ffn_up", weights(RNG, 2, 8, 16))},
            "bad.up3: shape [2, 8, 16] has rank 3",
        ),
        (
            "w4a16.gemv_dual",
            {"ffn_gate": GATE, "ffn_up": bf16("bad.up", "ffn_up", weights(RNG, 16, 40))},
            "bad.up: n=16 but blk.3.ffn_gate.weight has n=24",
        ),
        (
            "w4a16.ffn_decode",
            {"ffn_gate": GATE, "ffn_up": UP, "ffn_down": bf16("bad.down", "ffn_down", weights(RNG, 40, 32))},
            "bad.down: k=32 but blk.3.ffn_gate.weight has n (intermediate)=24",
        ),
        ("w4a16.ffn_decode", {"ffn_gate": GATE, "ffn_up": UP}, "no ffn_down tensor"),
    ],
)
def test_a_tensor_that_does_not_fit_is_a_one_line_mismatch(name, tensors, said):
    with pytest.raises(WeightMismatch) as e:
        _on(name, tensors)
    assert said in str(e.value) and "\n" not in str(e.value)
