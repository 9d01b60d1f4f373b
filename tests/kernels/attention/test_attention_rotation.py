"""``attention.rotation`` (Metrale's ``weight_pre_rotated``): the variant
choice for every lever value at every head dim, the Hadamard reference, both
variants against it and against each other (same rotated q, same FP8 K and
V cache up to rounding), the quantisation finding on inputs with outlier
channels, and broken kernels and inputs the checks must reject.

Simulator tests run one tiny head-dim-128 shape (1 token, hidden 8, one q
and one kv head); the lever exists only at head dim 128. The projection
runs on either tensor-core form at a hidden size that ends inside a k16
step, and one that drops a k16 step of each stage fails the check.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from leverctl.bench.check import compare
from leverctl.levers import load_catalog
from leverctl_kernels.attention.rotation import _rotation, naive, spec
from leverctl_kernels.attention.rotation.spec import PATH, PRE_ROTATED_TOL, RUNTIME_TOL
from leverctl_kernels.common.bits import e4m3_to_f32_np
from leverctl_kernels.common.path import Shape
from leverctl_kernels.registry import family_paths
from leverctl_kernels.selection.attention import ROTATION as TABLE

TINY = Shape("tiny t1 hidden8 hq1 hkv1 d128", dict(t=1, hidden=8, hq=1, hkv=1, d=128, outliers=2))


def _shape(d: int) -> Shape:
    return Shape(f"d{d}", dict(t=1, hidden=8, hq=1, hkv=1, d=d, outliers=2))


# ------------------------------------------------------------- selection


def test_the_path_is_declared_for_metrale_alone():
    assert PATH in family_paths("attention") and PATH.engines == ("metrale",)
    assert "weight_pre_rotated" in load_catalog("metrale").fields
    assert "weight_pre_rotated" not in load_catalog("atlas").fields


@pytest.mark.parametrize("on", [False, True])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_select_takes_the_pre_rotated_weights_only_at_head_dim_128(on, d):
    got = PATH.select({"weight_pre_rotated": on}, _shape(d))
    if on and d == 128:
        assert got.variant == "pre_rotated" and got.note == ""
    elif on:
        assert got.variant == "runtime_rotation"
        assert got.note == (
            f"weight_pre_rotated is on but the loader rotates weights only at head dim 128 "
            f"(d = {d}): the KV-cache write rotates at run time"
        )
    else:
        assert got == PATH.select({}, _shape(d)) and got.variant == "runtime_rotation" and got.note == ""


def test_every_smoke_and_model_shape_is_head_dim_128():
    for preset in ("smoke", "model"):
        assert {s["d"] for s in PATH.shapes(preset, None)} == {128}
    model = [s for s in PATH.shapes("model", None)]
    assert [s["t"] for s in model] == [1, 16, 512] and {(s["hq"], s["hkv"], s["hidden"]) for s in model} == {
        (32, 8, 4096)
    }


def test_a_recipe_model_of_another_head_dim_keeps_the_head_dim_128_defaults():
    qwen = {"hidden": 2048, "attention": {"q_heads": 16, "kv_heads": 2, "head_dim": 256}}
    assert {s["d"] for s in PATH.shapes("model", qwen)} == {128}
    llama = {"hidden": 3072, "attention": {"q_heads": 24, "kv_heads": 8, "head_dim": 128}}
    assert {(s["hq"], s["hkv"], s["hidden"]) for s in PATH.shapes("model", llama)} == {(24, 8, 3072)}


def test_the_fast_transform_refuses_a_head_dim_it_cannot_run():
    with pytest.raises(ValueError, match="power of two"):
        _rotation.launcher(_shape(96), pre_rotated=False)


# ------------------------------------------------------------- reference


def test_the_reference_hadamard_is_orthonormal_and_symmetric():
    h = naive.hadamard(128)
    assert np.allclose(h @ h.T, np.eye(128)) and np.array_equal(h, h.T)
    assert set(np.unique(np.abs(h) * np.sqrt(128)).round(12)) == {1.0}


def test_the_reference_quantiser_round_trips_within_one_e4m3_step():
    a = np.random.default_rng(1).standard_normal((4, 128))
    codes, scale = naive.quantise(a)
    back = naive.dequantise(codes, scale)
    assert np.max(np.abs(back - a) / np.max(np.abs(a), axis=-1, keepdims=True)) <= 16 / 448
    assert np.allclose(np.max(np.abs(e4m3_to_f32_np(codes)), axis=-1), 448.0)


# ------------------------------------------------------------- simulator


def _run(launch, shape, inputs):
    from numba import cuda

    from leverctl.bench.check import poison

    bufs = {n: cuda.to_device(np.ascontiguousarray(a)) for n, a in inputs.items()}
    for n, (s, dt) in PATH.outputs(shape).items():
        bufs[n] = cuda.to_device(poison(s, dt))
    launch(bufs)
    cuda.synchronize()
    return bufs, {n: bufs[n].copy_to_host() for n in PATH.outputs(shape)}


def _figures(got, ref, tol):
    return compare(got, ref, tol, spec.DECODE)


@pytest.fixture(scope="module")
def runs():
    """Both variants once on the same tiny inputs."""
    inputs = PATH.make_inputs(TINY, np.random.default_rng(7))
    ref = PATH.reference(TINY, inputs)
    out = {}
    for v in ("runtime_rotation", "pre_rotated"):
        launch = PATH.variants[v].build(TINY)
        bufs, got = _run(launch, TINY, inputs)
        out[v] = (launch, bufs, got)
    return inputs, ref, out


@pytest.mark.sim
def test_both_variants_match_the_float64_reference(runs):
    _, ref, out = runs
    for v, tol in (("runtime_rotation", RUNTIME_TOL), ("pre_rotated", PRE_ROTATED_TOL)):
        fig = _figures(out[v][2], ref, tol)
        assert fig.passed, (v, fig.why())


@pytest.mark.sim
def test_both_variants_give_the_same_rotated_q_and_cache_up_to_rounding(runs):
    _, ref, out = runs
    a, b = out["runtime_rotation"][2], out["pre_rotated"][2]
    q_rel = np.linalg.norm(a["q"] - b["q"]) / np.linalg.norm(a["q"])
    assert 0 < q_rel < 5e-3  # bf16 rounding of W', not a different rotation
    for name in ("k", "v"):
        da = naive.dequantise(a[f"{name}_cache"], a[f"{name}_scale"])
        db = naive.dequantise(b[f"{name}_cache"], b[f"{name}_scale"])
        assert np.linalg.norm(da - db) / np.linalg.norm(da) < 3e-2
        codes_a, codes_b = (e4m3_to_f32_np(x[f"{name}_cache"]) for x in (a, b))
        assert np.mean(codes_a != codes_b) < 0.2  # most codes identical, the rest one step apart
        step = np.abs(codes_a - codes_b) / np.maximum(np.abs(codes_a), 2.0**-6)
        assert np.all(step <= 0.16)


@pytest.mark.sim
def test_the_record_gives_the_fp8_error_with_and_without_the_rotation(runs):
    _, _, out = runs
    launch, bufs, _ = out["runtime_rotation"]
    from numba import cuda

    got = spec.quant_error("runtime_rotation", TINY, launch, bufs, cuda)
    assert got["outlier_channels"] == 2
    for name in ("k", "v"):
        e = got["fp8_e4m3_error"][name]
        # E4M3 keeps ~2^-4 relative precision at every magnitude, so both are
        # a few per cent; with loud channels dominating the norm, the
        # unrotated vectors lose less than the rotated, whose every element
        # sits mid-range after the transform spreads the outliers.
        assert 0.005 < e["unrotated"] < e["rotated"] < 0.06, e


def test_the_outlier_channels_are_what_the_rotation_spreads():
    x = PATH.make_inputs(TINY, np.random.default_rng(3))
    _, k, _ = naive.project(x["x"], x["w_qkv"], 1, 1, 128)
    peak = lambda a: np.max(np.abs(a), -1) / np.sqrt(np.mean(a * a, -1))  # noqa: E731
    assert np.all(peak(k) > 1.5 * peak(naive.rotate(k)))


@pytest.mark.sim
@pytest.mark.parametrize("broken", ["stage", "load"])
def test_the_check_rejects_a_missing_butterfly_and_unrotated_weights(runs, broken):
    inputs, ref, _ = runs
    if broken == "stage":  # the runtime write skips the stride-4 butterflies
        launch, tol = _rotation.launcher(TINY, pre_rotated=False, broken_stage=4), RUNTIME_TOL
    else:  # the loader copies the weights without rotating them
        launch, tol = _rotation.launcher(TINY, pre_rotated=True, skip_load=True), PRE_ROTATED_TOL
    _, got = _run(launch, TINY, inputs)
    fig = _figures(got, ref, tol)
    assert not fig.passed and fig.rel > 0.3, fig.to_json()


# three tokens, hidden 40: the projection's one stage of K ends inside its third k16 step
ODD = Shape("odd t3 hidden40 hq1 hkv1 d128", dict(t=3, hidden=40, hq=1, hkv=1, d=128, outliers=2))


@pytest.mark.sim
@pytest.mark.parametrize("form", ["wgmma", "mma.sync"])
def test_the_projection_runs_on_either_tensor_core_form(form):
    inputs = PATH.make_inputs(ODD, np.random.default_rng(11))
    launch = PATH.variants["runtime_rotation"].build(ODD, form=form)
    assert (launch.tensor_cores, launch.tc_dtype) == (form, "bf16")
    _, got = _run(launch, ODD, inputs)
    fig = _figures(got, PATH.reference(ODD, inputs), RUNTIME_TOL)
    assert fig.passed, fig.why()


@pytest.mark.sim
def test_the_check_rejects_a_projection_that_drops_a_k_step():
    from leverctl_kernels.common.gemm import wgmma_async as G

    inputs = PATH.make_inputs(ODD, np.random.default_rng(11))
    kern = G.make_kernel(**_rotation.TILE, stages=_rotation.STAGES, fault="short_k")  # k 16..31 never reach qkv
    _, got = _run(_rotation.launcher(ODD, pre_rotated=False, kern=kern), ODD, inputs)
    fig = _figures(got, PATH.reference(ODD, inputs), RUNTIME_TOL)
    assert not fig.passed, fig.to_json()


def test_a_hidden_size_off_the_bf16_rows_16_bytes_is_refused():
    with pytest.raises(ValueError, match="hidden 12 is not a positive multiple of 8"):
        _rotation.launcher(Shape("h12", dict(t=1, hidden=12, hq=1, hkv=1, d=128, outliers=0)), pre_rotated=False)


def test_the_check_rejects_a_cache_quantised_without_its_rotation():
    """The same comparison on hand-made outputs: K and V quantised unrotated
    (right q) fail; the reference itself passes."""
    inputs = PATH.make_inputs(TINY, np.random.default_rng(5))
    ref = PATH.reference(TINY, inputs)
    good = {
        "q": ref["q"].astype(np.float32),
        "k_scale": ref["k_scale"].astype(np.float32),
        "v_scale": ref["v_scale"].astype(np.float32),
    }
    _, k, v = naive.project(inputs["x"], inputs["w_qkv"], 1, 1, 128)
    exact = {**good}
    for name, rot in (("k", naive.rotate(k)), ("v", naive.rotate(v))):
        exact[f"{name}_cache"] = naive.quantise(rot)[0]
        good[f"{name}_cache"] = naive.quantise({"k": k, "v": v}[name])[0]
    assert _figures(exact, ref, RUNTIME_TOL).passed
    assert not _figures(good, ref, RUNTIME_TOL).passed


def test_the_table_rows_read_as_explain_words_them():
    cases = TABLE.cases({"weight_pre_rotated": True})
    assert [(c.when, c.variant) for c in cases] == [(("d = 128",), "pre_rotated"), ((), "runtime_rotation")]
    assert "d != 128" in cases[1].note
