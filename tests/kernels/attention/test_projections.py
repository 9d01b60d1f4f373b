"""Attention projections on tensor cores (``attention.proj_bf16_tc``,
``attention.proj_bf16_tc_w4a16``, ``attention.proj_fp8``): variant choice
for every lever combination in both engines, every variant against the
float64 reference of the unquantised activations within its own tolerance
(and the error each one adds, which is what the records report), the two
FP8 tilings agreeing up to accumulation order, the launches and scratch
each variant declares, and broken kernels and inputs the checks reject.

Simulator shapes are tiny and odd (one block per kernel where possible:
m 13 or 21, n 19, k 48, so the K tail of every stage is zero-filled).
"""

from __future__ import annotations

import numpy as np
import pytest

from leverctl.bench.plan import applies
from leverctl.levers import load_catalog
from leverctl_kernels.attention import _proj_prep
from leverctl_kernels.attention.proj_bf16_tc import bf16_tc as proj_bf16_tc
from leverctl_kernels.attention.proj_bf16_tc import fp8_e4m3 as proj_fp8_e4m3
from leverctl_kernels.attention.proj_bf16_tc.spec import PATH as BF16
from leverctl_kernels.attention.proj_bf16_tc_w4a16.spec import PATH as W4
from leverctl_kernels.attention.proj_fp8 import m16 as proj_fp8_m16
from leverctl_kernels.attention.proj_fp8 import m32 as proj_fp8_m32
from leverctl_kernels.attention.proj_fp8.spec import PATH as FP8
from leverctl_kernels.common import wgmma_gemm as P
from leverctl_kernels.common.gemm import mma_sync as MS
from leverctl_kernels.common.gemm import wgmma_async as G
from leverctl_kernels.common.path import Shape, Tolerance
from leverctl_kernels.selection.attention import PROJ_BF16_TC, PROJ_BF16_TC_W4A16, PROJ_FP8

TINY = Shape("tiny m13 n19 k48", {"m": 13, "n": 19, "k": 48})
TINY_M21 = Shape("tiny m21 n19 k48", {"m": 21, "n": 19, "k": 48})


def errors(got, ref) -> tuple[float, float]:
    """(relative L2 error, largest error / largest reference magnitude)."""
    got = np.asarray(got, np.float64)
    if not np.all(np.isfinite(got)):
        return float("inf"), float("inf")
    return (float(np.linalg.norm(got - ref) / np.linalg.norm(ref)), float(np.abs(got - ref).max() / np.abs(ref).max()))


def passes(got, ref, tol: Tolerance) -> bool:
    rel, mx = errors(got, ref)
    return rel <= tol.rel and mx <= tol.abs_of_max


def run(path, variant, shape, inputs=None, launch=None, seed=0):
    """(output, float64 reference) of one call; the output poisoned first."""
    from numba import cuda

    x = inputs or path.make_inputs(shape, np.random.default_rng(seed))
    ref = path.reference(shape, x)["y"]
    bufs = {k: cuda.to_device(np.ascontiguousarray(a)) for k, a in x.items()}
    ((shp, dt),) = path.outputs(shape).values()
    bufs["y"] = cuda.to_device(np.full(shp, np.nan, dt))
    for scratch in getattr(launch, "workspace", {}).values():
        scratch.copy_to_device(
            np.full(scratch.shape, 0xFF, np.uint8).view(scratch.dtype)
            if scratch.dtype.itemsize == 1
            else np.full(scratch.shape, np.nan, scratch.dtype)
        )
    (launch or path.variants[variant].build(shape))(bufs)
    return bufs["y"].copy_to_host(), ref


# ------------------------------------------------------------------ select

ENGINE_PATHS = {"atlas": {BF16.name}, "metrale": {W4.name, FP8.name}}


@pytest.mark.parametrize("engine", ["atlas", "metrale"])
def test_each_path_applies_to_its_engine_alone(engine):
    cat = load_catalog(engine)
    have = {p.name for p in (BF16, W4, FP8) if applies(p, engine, cat.fields)}
    assert have == ENGINE_PATHS[engine]
    for p in (BF16, W4, FP8):
        if p.name in have:
            assert set(p.levers) <= set(cat.fields)
            for lever in p.levers:
                assert p.name in cat.levers[lever].steers, (engine, lever, p.name)


@pytest.mark.parametrize("value", [True, False, None])
def test_bf16_tc_proj_selects_in_both_engines(value):
    for shape in (*BF16.shapes("smoke", None), *BF16.shapes("model", None)):
        got = BF16.select({"bf16_tc_proj": value}, shape)
        assert got.variant == ("bf16_tc" if value else "fp8_e4m3")
        assert ("crushed to FP8 E4M3" in got.note) == (not value)
        got = W4.select({"bf16_tc_proj": value}, shape)
        assert got.variant == ("bf16_n128" if value else "w4a16_f16")
    assert BF16.select == PROJ_BF16_TC.select and W4.select == PROJ_BF16_TC_W4A16.select


@pytest.mark.parametrize("value", [True, False, None])
@pytest.mark.parametrize("rows", [1, 13, 16, 17, 21, 32, 128, 4096])
def test_fp8_attn_m32_selects_by_rows_and_lever(value, rows):
    got = FP8.select({"fp8_attn_m32": value}, Shape("s", {"m": rows, "n": 64, "k": 64}))
    assert got.variant == ("m32" if value and rows > 16 else "m16")
    if value and rows <= 16:
        assert f"{rows} rows, not more than 16" in got.note
    assert FP8.select == PROJ_FP8.select


def test_the_default_shapes_are_qwen3_next_q_k_v_at_prefill():
    dims = [(s["m"], s["n"], s["k"]) for s in BF16.shapes("model", None)]
    assert dims == [(512, 5120, 2048), (4096, 5120, 2048)]
    assert [s["m"] for s in FP8.shapes("model", None)] == [16, 32, 128]
    assert any(s["m"] <= 16 for s in FP8.shapes("smoke", None))
    assert any(s["m"] > 16 for s in FP8.shapes("smoke", None))


def test_declared_tensor_cores():
    assert (BF16.variants["bf16_tc"].tensor_cores, BF16.variants["bf16_tc"].tc_dtype) == ("wgmma", "bf16")
    assert (BF16.variants["fp8_e4m3"].tensor_cores, BF16.variants["fp8_e4m3"].tc_dtype) == ("wgmma", "e4m3")
    assert W4.variants["bf16_n128"].tc_dtype == "bf16"
    assert all(FP8.variants[v].tc_dtype == "e4m3" for v in ("m16", "m32"))


# ------------------------------------------------------ against the reference

CASES = [
    (BF16, "bf16_tc", TINY),
    (BF16, "fp8_e4m3", TINY),
    (W4, "bf16_n128", TINY),
    (W4, "w4a16_f16", TINY),
    (FP8, "m16", TINY),
    (FP8, "m32", TINY_M21),
]
# The error each variant adds against float64 of the unquantised activations
# (largest element error / largest magnitude): at least and at most.
ADDED = {
    "bf16_tc": (0, 1e-6),
    "fp8_e4m3": (1e-2, 8e-2),
    "bf16_n128": (2e-4, 8e-3),
    "w4a16_f16": (1e-5, 2e-3),
    "m16": (0, 1e-6),
    "m32": (0, 1e-6),
}
SEEN: dict = {}


@pytest.mark.sim
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}/{c[1]}")
def test_every_variant_matches_the_reference_within_its_tolerance(case):
    path, variant, shape = case
    launch = path.variants[variant].build(shape)
    got, ref = run(path, variant, shape, launch=launch)
    rel, mx = errors(got, ref)
    SEEN[variant] = mx
    assert passes(got, ref, path.variant_tolerance(variant)), (variant, rel, mx)
    lo, hi = ADDED[variant]
    assert lo <= mx <= hi, (variant, mx)
    assert launch.tensor_cores == path.variants[variant].tensor_cores
    assert launch.tc_dtype == path.variants[variant].tc_dtype


@pytest.mark.sim
def test_the_lever_removes_the_fp8_perturbation():
    """bf16_tc_proj's point: the FP8 crush's error is orders above BF16's."""
    if not {"bf16_tc", "fp8_e4m3"} <= set(SEEN):
        pytest.skip("needs the two variants' runs above")
    assert SEEN["fp8_e4m3"] > 1e4 * max(SEEN["bf16_tc"], 1e-12)


@pytest.mark.sim
def test_the_two_fp8_tilings_agree_up_to_accumulation_order():
    shape = TINY_M21
    x = FP8.make_inputs(shape, np.random.default_rng(3))
    y16, ref = run(FP8, "m16", shape, inputs=x)
    y32, _ = run(FP8, "m32", shape, inputs=x)
    # same K order per element: identical in the simulator; a GPU's
    # accumulation order inside an instruction may move the last bits
    assert np.max(np.abs(y16.astype(np.float64) - y32)) <= 1e-6 * np.abs(ref).max()
    assert np.array_equal(y16.view(np.uint32), y32.view(np.uint32))


@pytest.mark.sim
def test_the_crush_is_per_token_saturating_e4m3():
    from numba import cuda

    from leverctl_kernels.common.bits import bf16_to_f32_np, e4m3_to_f32_np

    x = BF16.make_inputs(TINY, np.random.default_rng(5))["x"]
    xq, xs = cuda.device_array((13, 48), np.uint8), cuda.device_array(13, np.float32)
    _proj_prep.quant_launch(13, 48)(xq, xs, cuda.to_device(x))
    xf = bf16_to_f32_np(x).astype(np.float64)
    scale = np.abs(xf).max(axis=1) / 448.0
    np.testing.assert_allclose(xs.copy_to_host(), scale, rtol=1e-6)
    back = e4m3_to_f32_np(xq.copy_to_host()) * xs.copy_to_host()[:, None]
    assert np.abs(back).max(axis=1) == pytest.approx(np.abs(xf).max(axis=1), rel=1e-6)  # the max is 448 exactly
    assert np.max(np.abs(back - xf) / np.abs(xf).max(axis=1, keepdims=True)) <= 2.0**-4


def _bf16_rows(m, k, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * rng.uniform(0.01, 40.0, (m, 1))).astype(np.float32)
    x[-1] = 0  # an all-zero row: scale 1, codes 0
    return (x.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits


@pytest.mark.sim
@pytest.mark.parametrize("k,unaligned", [(48, False), (1040, False), (48, True), (42, False)])
def test_the_crush_and_the_conversion_write_the_hosts_bits_on_every_kernel(k, unaligned):
    """Rows of whole 16-byte units take the wide kernels (16 bytes a lane;
    a view not on 16 bytes the element loads inside them), k = 42 the
    element kernels: the same bits as the host's float32 arithmetic."""
    from numba import cuda

    from leverctl_kernels.common import vload
    from leverctl_kernels.common.bits import bf16_to_f32_np, f32_to_e4m3_np

    m = 13
    x = _bf16_rows(m, k, seed=k)
    given = x
    if unaligned:  # a device view 2 bytes into its buffer (a host view would be copied to one on 16 bytes)
        flat = np.zeros(m * k + 1, np.uint16)
        flat[1:] = x.reshape(-1)
        given = cuda.to_device(flat)[1:].reshape(m, k)
        assert given.is_c_contiguous() and not vload.aligned16(given)
    xf = bf16_to_f32_np(x)
    amax = np.abs(xf).max(axis=1)
    scale = np.where(amax > 0, amax / np.float32(448.0), np.float32(1.0)).astype(np.float32)
    xq, xs = np.zeros((m, k), np.uint8), np.zeros(m, np.float32)
    _proj_prep.quant_launch(m, k)(xq, xs, given)
    assert np.array_equal(xs.view(np.uint32), scale.view(np.uint32))
    assert np.array_equal(xq, f32_to_e4m3_np(xf / scale[:, None]))
    x16 = np.zeros((m, k), np.float16)
    _proj_prep.convert_launch(m, k)(x16, given)
    assert np.array_equal(x16.view(np.uint16), xf.astype(np.float16).view(np.uint16))


# ------------------------------------------------------ broken kernels, inputs


@pytest.mark.sim
def test_a_wrong_fp4_block_scale_is_caught():
    wrong = P._make_nvfp4_bf16(128, block_shift=5)  # one scale per 32, not 16
    kern = G.make_kernel("bf16", 1, 128, proj_bf16_tc.STAGES, b_kind="nvfp4_bf16", stage_b=wrong)
    got, ref = run(BF16, "bf16_tc", TINY, launch=proj_bf16_tc.build(TINY, kern=kern))
    assert not passes(got, ref, BF16.variant_tolerance("bf16_tc"))


@pytest.mark.sim
def test_a_dropped_k_step_is_caught_even_at_the_fp8_tolerance():
    kern = G.make_kernel("e4m3", 1, 128, proj_fp8_e4m3.STAGES, b_kind="nvfp4_e4m3", fault="short_k")  # k 32..63
    got, ref = run(BF16, "fp8_e4m3", TINY, launch=proj_fp8_e4m3.build(TINY, kern=kern))
    assert not passes(got, ref, BF16.variant_tolerance("fp8_e4m3"))


@pytest.mark.sim
def test_a_crush_that_saturates_is_caught():
    quant = _proj_prep.quant_kernels(np.float32(448.0 * 4))
    got, ref = run(BF16, "fp8_e4m3", TINY, launch=proj_fp8_e4m3.build(TINY, quant=quant))
    assert not passes(got, ref, BF16.variant_tolerance("fp8_e4m3"))


@pytest.mark.sim
def test_an_unswapped_store_of_the_token_tile_is_caught():
    kern = G.kernel("e4m3", 1, 16, 4, swap=False)
    shape = Shape("sq", {"m": 15, "n": 15, "k": 48})  # square, so the wrong store stays in bounds
    got, ref = run(FP8, "m16", shape, launch=proj_fp8_m16.build(shape, kern=kern))
    assert not passes(got, ref, FP8.variant_tolerance("m16"))


def test_a_corrupted_channel_scale_is_caught():
    """The check compares against the inputs as stored: one channel's
    scale doubled after the reference is taken fails the FP8 GEMM."""
    shape = Shape("one", {"m": 3, "n": 5, "k": 16})
    x = FP8.make_inputs(shape, np.random.default_rng(1))
    ref = FP8.reference(shape, x)["y"]
    bad = dict(x, w_scale=x["w_scale"].copy())
    bad["w_scale"][2] *= 2
    assert not passes(FP8.reference(shape, bad)["y"], ref, FP8.variant_tolerance("m32"))


# ---------------------------------------------------- declared launches, scratch


@pytest.mark.sim
@pytest.mark.simulator_only
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}/{c[1]}")
def test_launches_and_scratch_are_declared(case, monkeypatch):
    from numba import cuda
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    path, variant, shape = case
    made = []
    real = cuda.device_array
    monkeypatch.setattr(cuda, "device_array", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    launch = path.variants[variant].build(shape)
    monkeypatch.undo()
    assert len(made) == len(getattr(launch, "workspace", {})), variant
    calls = []
    x = path.make_inputs(shape, np.random.default_rng(0))
    bufs = {k: cuda.to_device(a) for k, a in x.items()}
    ((shp, dt),) = path.outputs(shape).values()
    bufs["y"] = cuda.to_device(np.zeros(shp, dt))
    monkeypatch.setattr(FakeCUDAKernel, "__call__", lambda self, *a, **k: calls.append(self))
    launch(bufs)
    monkeypatch.undo()
    assert len(calls) == path.variant_launches(variant, shape), variant


def test_builds_refuse_a_k_off_the_16_grid():
    with pytest.raises(ValueError, match="multiple of 16"):
        MS.make_launch(8, 8, 40, MS.kernel("bf16", 1, 128, b_kind="nvfp4_bf16"))


def test_without_wgmma_the_fp8_builds_refuse_saying_why(monkeypatch):
    from leverctl_kernels.common import tc

    monkeypatch.setattr(tc, "current", lambda: tc.MMA_SYNC)
    for mod in (proj_fp8_e4m3, proj_fp8_m16, proj_fp8_m32):
        with pytest.raises(ValueError, match="wgmma"):
            mod.build(TINY)
    with pytest.raises(ValueError, match="input type 'e4m3': one of bf16, f16, s8"):
        MS.make_kernel("e4m3", 1, 16, swap=True)


@pytest.mark.sim
def test_the_bf16_variant_on_mma_sync_matches_the_reference():
    """The form a device without wgmma builds: the mma.sync mainloop
    (ldmatrix from the same swizzled stages), the same tolerance. The
    simulator trades every fragment between the warp's lanes, so this runs
    16 columns (two m16n8 slices) rather than the variant's 128 (the same
    code, compiled and read in SASS by the _ptx test), and bf16_n128's
    two-warpgroup form only there."""
    path, variant, mod = BF16, "bf16_tc", proj_bf16_tc
    assert (mod.build(TINY, form="mma.sync").tensor_cores, mod.build(TINY, form="mma.sync").tc_dtype) == (
        "mma.sync",
        "bf16",
    )
    kern = MS.make_kernel("bf16", 1, 16, b_kind="nvfp4_bf16")
    launch = mod.build(TINY, kern=kern)
    assert launch.tensor_cores == "mma.sync"
    got, ref = run(path, variant, TINY, launch=launch)
    assert passes(got, ref, path.variant_tolerance(variant)), errors(got, ref)
