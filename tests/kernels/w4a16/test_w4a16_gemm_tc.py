"""The tensor-core builds of the ``w4a16.gemm`` variants (``gemm_tc``):
``small_m`` and ``default_tiles`` on each form (wgmma, mma.sync) in the
CUDA simulator, built as the path builds them, against ``naive.py``'s
float64 reference at one block of every real tile with rows and columns of
it empty and a K that ends mid-stage, with the family's tolerance. Which
kernel each (variant, form) builds, the attributes every launch carries,
the default form and the shapes refused are checked without running
anything. The kernels' own tests, odd shapes and broken variants, are
``test_w4a16_mma.py`` (mma.sync) and ``test_w4a16_wgmma.py`` (wgmma); the
comparator is ``test_w4a16.py``'s.
"""

from __future__ import annotations

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


# ── against the reference ────────────────────────────────────────────────────


@pytest.mark.sim
@pytest.mark.parametrize("form", ["mma.sync", "wgmma"])
@pytest.mark.parametrize("kind", ["small_m", "default"])
def test_both_forms_through_the_builds_match_the_reference(kind, form):
    """What the variants build, on either form, at one block of every real
    tile: m = 37 and n = 45 leave rows and columns of it empty (on
    mma.sync: warp 2 of the 64 rows half out of range, warp 3 wholly),
    k = 160 runs K stages of 64, 64 and 32."""
    from leverctl_kernels.w4a16.gemm import gemm_tc

    def launch_of(shape):
        launch = gemm_tc.build(kind, shape, form=form)
        assert (launch.tensor_cores, launch.tc_dtype, launch.fallback) == (form, "f16", "")
        return launch

    got, ref = _run(37, 45, 160, launch_of, seed=37)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert ok, why


# ── the builds (nothing runs) ────────────────────────────────────────────────


def _record_kernels(monkeypatch):
    """Record the ``(bn, form)`` of every kernel the builds ask for."""
    from leverctl_kernels.w4a16.gemm import gemm_tc

    asked = []
    real = gemm_tc.kernel

    def kernel(bn, form):
        asked.append((bn, form))
        return real(bn, form)

    monkeypatch.setattr(gemm_tc, "kernel", kernel)
    return asked


@pytest.mark.parametrize("form", ["mma.sync", "wgmma"])
@pytest.mark.parametrize("kind,bn", [("small_m", 64), ("default", 128)])
def test_each_variant_builds_its_tile_on_the_form_asked_and_says_so(kind, bn, form, monkeypatch):
    from leverctl_kernels.w4a16.gemm import gemm_tc

    asked = _record_kernels(monkeypatch)
    launch = gemm_tc.build(kind, _shape(5, 37, 160), form=form)
    assert (launch.tensor_cores, launch.tc_dtype, launch.fallback) == (form, "f16", "")
    assert asked == [(bn, form)] and gemm_tc.TILE_N[kind] == bn  # one tile table for both forms
    kern = gemm_tc.kernel(bn, form)
    assert kern.form == form and kern.geometry == ("f16", 2, bn, gemm_tc.STAGES[form], False)
    assert (kern.a_rows, kern.wn, kern.threads) == (64, 2, 256)  # 64-row tiles, two warpgroups on the columns


def test_the_form_defaults_to_the_process_form(monkeypatch):
    from leverctl_kernels.common import tc
    from leverctl_kernels.w4a16.gemm import gemm_tc

    asked = _record_kernels(monkeypatch)
    assert tc.current() == "wgmma"  # the simulator's form
    assert gemm_tc.build_small_m(_shape(5, 37, 160)).tensor_cores == "wgmma"
    assert gemm_tc.build_default(_shape(5, 37, 160)).tensor_cores == "wgmma"
    assert asked == [(64, "wgmma"), (128, "wgmma")]
    with pytest.raises(ValueError, match="one of wgmma, mma.sync"):
        gemm_tc.build_small_m(_shape(5, 37, 160), form="hmma")
    with pytest.raises(ValueError, match="kind 'tiles'"):
        gemm_tc.build("tiles", _shape(5, 37, 160))


def test_k_not_multiple_of_16_is_refused_on_both_forms():
    """Neither form takes a K the other refuses, so neither falls back to the
    other: the decision table sends such k to ``fma_tiles``."""
    from leverctl_kernels.w4a16.gemm import gemm_tc

    for form in ("mma.sync", "wgmma"):
        for build in (gemm_tc.build_small_m, gemm_tc.build_default):
            with pytest.raises(ValueError, match="multiple of 16"):
                build(_shape(5, 37, 136), form=form)


def test_the_variants_declare_the_process_form_and_fma_tiles_none():
    from leverctl_kernels.common import tc
    from leverctl_kernels.registry import get_path

    v = get_path("w4a16.gemm").variants
    assert v["small_m"].tensor_cores == v["default_tiles"].tensor_cores == tc.current()
    assert v["small_m"].tc_dtype == v["default_tiles"].tc_dtype == "f16"
    assert (v["fma_tiles"].tensor_cores, v["fma_tiles"].tc_dtype) == (None, None)
    assert v["small_m"].build.forms == v["default_tiles"].build.forms == tc.FORMS
