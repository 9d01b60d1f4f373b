"""The correctness check: poisoned outputs, float64 reference, tolerances."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np
import pytest
from bench_fakes import BROKEN_MODES, SHAPES, saxpy_path, state_path
from numba import cuda, float32

from leverctl.bench import check as chk
from leverctl_kernels.common.path import Tolerance, Variant

TOL = Tolerance(rel=1e-3, abs=1e-2)


def _ref(n=16):
    return {"y": np.linspace(-1, 1, n)}


def test_an_exact_answer_passes_with_zero_error():
    ref = _ref()
    fig = chk.compare({"y": ref["y"].astype(np.float32)}, ref, TOL)
    assert fig.passed and fig.rel < 1e-7 and fig.unwritten == fig.nonfinite == 0


def test_a_wrong_value_fails_on_relative_and_absolute_error():
    ref = _ref()
    y = ref["y"].astype(np.float32)
    y[3] += 0.5
    fig = chk.compare({"y": y}, ref, TOL)
    assert not fig.passed
    assert fig.max_abs == pytest.approx(0.5, rel=1e-6)
    assert "rel error" in fig.why() and "max abs error" in fig.why()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "uint16"])
def test_an_element_left_poisoned_counts_as_unwritten(dtype):
    ref = {"y": np.arange(8, dtype=np.float64)}
    y = chk.poison((8,), dtype)
    y[:7] = np.arange(7)
    fig = chk.compare({"y": y}, ref, TOL)
    assert (fig.unwritten, fig.nonfinite, fig.passed) == (1, 0, False)
    assert "never written" in fig.why()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_never_pass_and_are_not_mistaken_for_unwritten(bad):
    ref = _ref()
    y = ref["y"].astype(np.float32)
    y[0] = bad
    fig = chk.compare({"y": y}, ref, Tolerance(rel=1e9, abs=1e9))
    assert (fig.nonfinite, fig.unwritten, fig.passed) == (1, 0, False)
    # the figures stay numbers (JSON has no NaN)
    assert np.isfinite(fig.rel) and np.isfinite(fig.max_abs)


def test_the_worst_output_is_named_and_both_are_checked():
    ref = {"a": np.ones(4), "b": np.ones(4)}
    fig = chk.compare({"a": np.ones(4, np.float32), "b": np.full(4, 2, np.float32)}, ref, TOL)
    assert not fig.passed and fig.worst == "b"


def test_an_all_zero_reference_uses_the_plain_norm():
    fig = chk.compare({"y": np.full(4, 1e-4, np.float32)}, {"y": np.zeros(4)}, TOL)
    assert fig.rel == pytest.approx(2e-4, rel=1e-3)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_the_absolute_bound_follows_each_outputs_scale(scale):
    tol = Tolerance(rel=1.0, abs_of_max=1e-3)
    ref = {"y": scale * np.linspace(-1, 1, 101)}
    close = {"y": ref["y"] * (1 + 5e-4)}  # every element within 5e-4 of the largest
    assert chk.compare(close, ref, tol).passed
    off = {"y": ref["y"].copy()}
    off["y"][50] += 2e-3 * scale  # one element: a fifth of a percent of the largest
    fig = chk.compare(off, ref, tol)
    assert not fig.passed and fig.tol_abs == pytest.approx(1e-3 * scale)
    assert "max abs error" in fig.why()


def test_a_small_output_is_held_to_its_own_scale_not_a_larger_ones():
    tol = Tolerance(rel=1.0, abs_of_max=1e-3)
    ref = {"big": np.full(4, 1000.0), "small": np.full(4, 1e-3)}
    got = {"big": ref["big"].copy(), "small": ref["small"] + 1e-4}  # 10 % off, far under big's bound
    fig = chk.compare(got, ref, tol)
    assert not fig.passed and fig.worst == "small"
    assert (fig.max_abs, fig.tol_abs) == (pytest.approx(1e-4), pytest.approx(1e-6))
    assert fig.to_json()["tol_abs_of_max"] == 1e-3


def test_a_declared_decoder_reads_encoded_outputs():
    bf16_bits = np.array([0x3F80, 0x4000], dtype=np.uint16)  # 1.0, 2.0 as bf16

    def decode(a):
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)

    fig = chk.compare({"y": bf16_bits}, {"y": np.array([1.0, 2.0])}, TOL, {"y": decode})
    assert fig.passed


def test_the_error_object_has_the_record_fields():
    fig = chk.compare({"y": np.ones(3, np.float32)}, {"y": np.ones(3)}, TOL)
    assert set(fig.to_json()) == {
        "rel",
        "max_abs",
        "tol_rel",
        "tol_abs",
        "tol_abs_of_max",
        "nonfinite",
        "unwritten",
        "rechecked",
    }


# -- real kernels (simulator, or the GPU under LEVERCTL_TEST_DEVICE=gpu) -----


def _check(path, variant, shape=SHAPES[0], seed=0):
    from numba import cuda

    inputs = path.make_inputs(shape, np.random.default_rng(seed))
    launch = path.variants[variant].build(shape)
    return chk.check(path, variant, shape, launch, inputs, cuda)[1]


@pytest.mark.sim
def test_a_correct_kernel_passes():
    fig = _check(saxpy_path(), "good")
    assert fig.passed, fig.why()


@pytest.mark.sim
@pytest.mark.parametrize("mode", [m for m in BROKEN_MODES if m != "oob"])
def test_each_deliberately_broken_kernel_fails(mode):
    fig = _check(saxpy_path(), mode)
    assert not fig.passed
    expected = {
        "wrong": ("rel error", 0, 0),
        "nan": ("NaN/Inf", 1, 0),
        "inf": ("NaN/Inf", 1, 0),
        "unwritten": ("never written", 0, 1),
    }[mode]
    assert expected[0] in fig.why()
    if mode != "wrong":
        assert (fig.nonfinite, fig.unwritten) == expected[1:]


@pytest.mark.sim
def test_an_in_place_state_is_checked_after_the_run():
    path = state_path()
    assert _check(path, "good").passed
    stale = _check(path, "stale")
    assert not stale.passed and stale.worst == "state"


# -- device scratch is poisoned like the outputs --------------------------------


@lru_cache(maxsize=None)
def make_two_stage(skip_last: bool):
    """``tmp = 2x`` then ``y = tmp + b``: saxpy through device scratch. With
    ``skip_last`` the first kernel forgets the last element of ``tmp``."""

    @cuda.jit
    def double(tmp, x):
        i = cuda.grid(1)
        if i < x.size and not (skip_last and i == x.size - 1):
            tmp[i] = float32(2.0) * x[i]

    @cuda.jit
    def add(y, tmp, b):
        i = cuda.grid(1)
        if i < y.size:
            y[i] = tmp[i] + b[i]

    return double, add


def two_stage_build(skip_last: bool):
    def build(shape):
        double, add = make_two_stage(skip_last)
        n = shape["n"]
        tmp = cuda.device_array(n, np.float32)
        grid = (n + 31) // 32

        def launch(bufs):
            double[grid, 32](tmp, bufs["x"])
            add[grid, 32](bufs["y"], tmp, bufs["b"])

        launch.workspace = {"tmp": tmp}
        return launch

    return build


def stale_scratch_check(skip_last: bool, declared: bool = True):
    """Check a two-stage variant whose scratch still holds the right values
    from an earlier call on the same inputs (as after the timing loop);
    ``declared=False`` hides the scratch from the check."""
    shape = SHAPES[0]
    path = replace(saxpy_path(), variants={"v": Variant("v", "two stage", two_stage_build(skip_last))})
    inputs = path.make_inputs(shape, np.random.default_rng(0))
    launch = path.variants["v"].build(shape)
    launch.workspace["tmp"].copy_to_device(2 * inputs["x"])
    if not declared:
        del launch.workspace
    return chk.check(path, "v", shape, launch, inputs, cuda)[1]


@pytest.mark.sim
def test_a_kernel_that_reads_scratch_nobody_wrote_this_call_fails():
    fig = stale_scratch_check(skip_last=True)
    # The poison flows into y[n-1]: NaN on a GPU; the simulator's NumPy
    # arithmetic keeps the payload, so there it reads as never written.
    assert not fig.passed and fig.nonfinite + fig.unwritten == 1 and fig.worst == "y"
    assert stale_scratch_check(skip_last=False).passed


@pytest.mark.sim
def test_undeclared_scratch_lets_last_calls_leftovers_hide_the_same_bug():
    # What poisoning the workspace buys: unpoisoned, the broken kernel passes.
    assert stale_scratch_check(skip_last=True, declared=False).passed
