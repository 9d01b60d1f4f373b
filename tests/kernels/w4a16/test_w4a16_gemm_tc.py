"""The tensor-core kernels of the ``w4a16.gemm`` variants in the CUDA
simulator: ``small_m`` (4 warps splitting K) at each of its row counts and
``default_tiles`` (A staged in shared memory, ``ldmatrix``), built through
the dispatcher (``gemm_tc``) on the mma.sync form, against ``naive.py``'s
float64 reference at tiny odd shapes (m and n not tile multiples, several
K steps, a partial scale group and K tile) with the family's tolerance;
broken kernels (a wrong A fragment mapping, a wrong scale group, a dropped
K step) must fail the same check. The dispatcher's choice between the
forms and the attributes every launch carries are checked without running
anything. The comparator is ``test_w4a16.py``'s.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from test_w4a16 import _check_test_local

from leverctl_kernels.common import int4
from leverctl_kernels.common.path import Shape


def _shape(m, n, k):
    return Shape(f"m{m}-n{n}-k{k}", {"m": m, "n": n, "k": k})


def _inputs(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    qweight, scales = int4.random_w4(rng, n, k)
    return {"a": a, "qweight": qweight, "scales": scales}


def _run(m, n, k, launch_of, seed=0):
    """One call of ``launch_of(shape)`` (a path-style ``launch(bufs)``) on
    fresh inputs and a NaN-poisoned ``c``; returns (got, reference)."""
    from numba import cuda

    from leverctl_kernels.w4a16 import naive

    host = _inputs(m, n, k, seed)
    ref = naive.naive_gemm(host["a"], host["qweight"], host["scales"])
    bufs = {name: cuda.to_device(v) for name, v in host.items()}
    bufs["c"] = cuda.to_device(np.full((m, n), np.nan, dtype=np.float16))  # unwritten -> fails
    launch_of(_shape(m, n, k))(bufs)
    return bufs["c"].copy_to_host(), ref


def _tolerance():
    from leverctl_kernels.w4a16 import family

    return family.TOLERANCE


def _kernel_launch(kern):
    """A path-style launch of one kernel from ``gemm_mma``'s factories."""
    from leverctl_kernels.w4a16.gemm import gemm_mma

    def launch_of(shape):
        run = gemm_mma.variant_launch(kern, shape["m"], shape["n"], shape["k"])
        return lambda bufs: run(bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])

    return launch_of


def _small_tiles(**broken):
    """default_tiles' kernel at 32 x 16 block tiles (2 x 2 warps of one MMA
    each, K tiles of 64): the same code at a quarter of the simulator's
    work per block, so several blocks fit a test."""
    from leverctl_kernels.w4a16.gemm import gemm_mma

    return gemm_mma.make_gemm_tiles(WARPS_M=2, WARPS_N=2, WM=1, WN=1, KT=64, **broken)


# ── against the reference ────────────────────────────────────────────────────

SMALL_M = [
    # m -> WM 1, 2, 4; n: one and two 16-column blocks, partial; k = 160: ten
    # K steps shared unevenly by the four warps and a partial scale group;
    # k = 48: three steps, one warp with none.
    pytest.param(5, 21, 160, 1, id="m5-n21-k160-wm1"),
    pytest.param(29, 11, 96, 2, id="m29-n11-k96-wm2"),
    pytest.param(45, 9, 48, 4, id="m45-n9-k48-wm4"),
    pytest.param(67, 7, 32, 4, id="m67-n7-k32-two-row-blocks"),
]


@pytest.mark.sim
@pytest.mark.parametrize("m,n,k,wm", SMALL_M)
def test_small_m_on_mma_sync_matches_the_float64_reference(m, n, k, wm):
    from leverctl_kernels.w4a16.gemm import gemm_mma, gemm_tc

    assert gemm_mma.small_m_wm(m) == wm
    got, ref = _run(m, n, k, lambda s: gemm_tc.build_small_m(s, form="mma.sync"), seed=m)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert ok, why


@pytest.mark.sim
def test_default_tiles_kernel_over_several_blocks_matches_the_reference():
    """2 x 2 blocks of the reduced tile (m = 37, n = 21: both edges inside
    the second block), K tiles 64, 64, 32."""
    got, ref = _run(37, 21, 160, _kernel_launch(_small_tiles()), seed=5)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert ok, why


@pytest.mark.sim
@pytest.mark.parametrize("form", ["mma.sync", "wgmma"])
@pytest.mark.parametrize("kind", ["small_m", "default"])
def test_both_forms_through_the_dispatcher_match_the_reference(kind, form):
    """What the variants build, on either form, at one block of every real
    tile: m = 37 and n = 45 leave rows and columns of it empty (on mma.sync
    default_tiles: warp 2 half out of range, warp 3 wholly), k = 160 runs
    K tiles of 64, 64 and 32."""
    from leverctl_kernels.w4a16.gemm import gemm_tc

    def launch_of(shape):
        launch = gemm_tc.build(kind, shape, form=form)
        assert (launch.tensor_cores, launch.tc_dtype) == (form, "f16")
        return launch

    got, ref = _run(37, 45, 160, launch_of, seed=37)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert ok, why


# ── broken kernels must fail the check ──────────────────────────────────────


def _small_m_rows_swapped():
    # A fragment mapping wrong: registers a0/a1 (rows g and g + 8) swapped.
    from numba import cuda

    from leverctl_kernels.w4a16.gemm import gemm_mma

    @cuda.jit(device=True, inline="always")
    def a_load(a32, m, r0, k0, lane, i):
        return gemm_mma.a_reg(a32, m, r0, k0, lane, i ^ 2)

    return gemm_mma.make_gemm_small_m(1, a_load=a_load)


def _small_m_wrong_group():
    # Scale group taken as k >> 8: k 128..159 scaled with group 0's scale.
    from leverctl_kernels.w4a16.gemm import gemm_mma

    return gemm_mma.make_gemm_small_m(1, b_load=gemm_mma.make_b_frag(8))


def _small_m_dropped_step():
    # The four warps stride K by five steps: steps 4 and 9 are never done.
    from leverctl_kernels.w4a16.gemm import gemm_mma

    return gemm_mma.make_gemm_small_m(1, k_warps=5)


def _tiles_ldsm_order():
    # ldmatrix's matrices 1 and 2 (rows 8..15 k 0..7, rows 0..7 k 8..15) swapped.
    return _small_tiles(a_order=(0, 2, 1, 3))


def _tiles_wrong_group():
    from leverctl_kernels.w4a16.gemm import gemm_mma

    return _small_tiles(b_load=gemm_mma.make_b_frag(8))


def _tiles_dropped_step():
    # Steps of 32 inside a K tile: every other 16-wide MMA step is skipped.
    return _small_tiles(k_step=32)


BROKEN = [
    pytest.param(_small_m_rows_swapped, id="small_m-a-rows-swapped"),
    pytest.param(_small_m_wrong_group, id="small_m-wrong-scale-group"),
    pytest.param(_small_m_dropped_step, id="small_m-dropped-k-step"),
    pytest.param(_tiles_ldsm_order, id="tiles-ldmatrix-registers-swapped"),
    pytest.param(_tiles_wrong_group, id="tiles-wrong-scale-group"),
    pytest.param(_tiles_dropped_step, id="tiles-dropped-k-step"),
]


@pytest.mark.sim
@pytest.mark.parametrize("make", BROKEN)
def test_a_broken_tensor_core_gemm_fails_the_check(make):
    got, ref = _run(13, 11, 160, _kernel_launch(make()), seed=3)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert not ok, f"the broken kernel passed: {why}"


# ── the dispatcher (nothing runs) ────────────────────────────────────────────


def _fake_wgmma(monkeypatch, why=""):
    """Stand in for ``gemm_wgmma`` with its interface; records the builds."""
    import leverctl_kernels.w4a16.gemm as package

    built = []
    fake = types.ModuleType("leverctl_kernels.w4a16.gemm.gemm_wgmma")
    fake.supports = lambda m, n, k: why
    fake.build_small_m = lambda shape: built.append(("small_m", shape)) or (lambda bufs: None)
    fake.build_default = lambda shape: built.append(("default", shape)) or (lambda bufs: None)
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setattr(package, "gemm_wgmma", fake, raising=False)
    return built


@pytest.mark.parametrize("kind", ["small_m", "default"])
def test_the_mma_sync_form_builds_the_mma_sync_kernels_and_says_so(kind, monkeypatch):
    from leverctl_kernels.w4a16.gemm import gemm_tc

    built = _fake_wgmma(monkeypatch)
    launch = gemm_tc.build(kind, _shape(5, 37, 160), form="mma.sync")
    assert (launch.tensor_cores, launch.tc_dtype, launch.fallback) == ("mma.sync", "f16", "")
    assert built == []


@pytest.mark.parametrize("kind", ["small_m", "default"])
def test_the_wgmma_form_builds_through_gemm_wgmma_where_it_supports_the_shape(kind, monkeypatch):
    from leverctl_kernels.w4a16.gemm import gemm_tc

    built = _fake_wgmma(monkeypatch)
    launch = gemm_tc.build(kind, _shape(5, 37, 160), form="wgmma")
    assert (launch.tensor_cores, launch.tc_dtype) == ("wgmma", "f16")
    assert [b[0] for b in built] == [kind]


def test_where_wgmma_refuses_the_shape_mma_sync_runs_and_the_launch_says_why(monkeypatch):
    from leverctl_kernels.w4a16.gemm import gemm_tc

    built = _fake_wgmma(monkeypatch, why="m=5 is not a multiple of 64")
    launch = gemm_tc.build_default(_shape(5, 37, 160), form="wgmma")
    assert launch.tensor_cores == "mma.sync" and "m=5 is not a multiple of 64" in launch.fallback
    assert built == []


def test_the_form_defaults_to_the_process_form(monkeypatch):
    from leverctl_kernels.common import tc
    from leverctl_kernels.w4a16.gemm import gemm_tc

    _fake_wgmma(monkeypatch)
    assert tc.current() == "wgmma"  # the simulator's form
    assert gemm_tc.build_small_m(_shape(5, 37, 160)).tensor_cores == "wgmma"
    with pytest.raises(ValueError, match="one of wgmma, mma.sync"):
        gemm_tc.build_small_m(_shape(5, 37, 160), form="hmma")


def test_k_not_multiple_of_16_is_refused_on_tensor_cores(monkeypatch):
    from leverctl_kernels.w4a16.gemm import gemm_tc

    _fake_wgmma(monkeypatch, why="k=136 is not a multiple of 64")
    for form in ("mma.sync", "wgmma"):
        with pytest.raises(ValueError, match="multiple of 16"):
            gemm_tc.build_default(_shape(5, 37, 136), form=form)


def test_the_variants_declare_the_process_form_and_fma_tiles_none():
    from leverctl_kernels.common import tc
    from leverctl_kernels.registry import get_path

    v = get_path("w4a16.gemm").variants
    assert v["small_m"].tensor_cores == v["default_tiles"].tensor_cores == tc.current()
    assert v["small_m"].tc_dtype == v["default_tiles"].tc_dtype == "f16"
    assert (v["fma_tiles"].tensor_cores, v["fma_tiles"].tc_dtype) == (None, None)
