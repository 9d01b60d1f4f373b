"""The warpgroup-MMA W4A16 GEMM (``w4a16/gemm_wgmma.py``) in the CUDA
simulator, against ``naive.py``'s float64 reference at tiny odd shapes
(m and n not tile multiples, a K that ends mid-stage), with the family's
tolerance; broken variants (a wrong scale group, a dropped K sub-step, the
A stage read for the wrong rows) must fail the same check. The twin reads
the staged tiles through the same descriptors the tensor cores would."""

from __future__ import annotations

import numpy as np
import pytest
from test_w4a16 import _check_test_local
from test_w4a16_mma import _case, _tolerance


def _run(m, n, k, bn, seed=0, kern=None):
    from numba import cuda

    from leverctl_kernels.w4a16 import naive
    from leverctl_kernels.w4a16.gemm import gemm_wgmma

    a, qweight, scales = _case(m, n, k, seed)
    ref = naive.naive_gemm(a, qweight, scales)
    c = cuda.to_device(np.full((m, n), np.nan, dtype=np.float16))  # unwritten -> fails
    gemm_wgmma.make_launch(m, n, k, bn, kern=kern)(
        c, cuda.to_device(a), cuda.to_device(qweight), cuda.to_device(scales)
    )
    return c.copy_to_host(), ref


@pytest.mark.sim
@pytest.mark.parametrize(
    "m,n,k,bn",
    [(5, 37, 160, 64), (67, 40, 96, 64), (3, 136, 48, 128)],
    ids=["m5-n37-k160-bn64", "m67-n40-k96-bn64", "m3-n136-k48-bn128"],
)
def test_gemm_wgmma_matches_the_float64_reference(m, n, k, bn):
    got, ref = _run(m, n, k, bn, seed=m + n)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert ok, why


def test_gemm_wgmma_refuses_k_not_multiple_of_16_and_fits_static_shared_memory():
    from leverctl_kernels.w4a16.gemm import gemm_wgmma

    with pytest.raises(ValueError, match="multiple of 16"):
        gemm_wgmma.make_launch(5, 11, 136, 64)
    assert gemm_wgmma.supports(5, 11, 256) == ""
    assert gemm_wgmma.shared_bytes(128) == 48 * 1024  # two stages of A and B, the static limit
    with pytest.raises(ValueError, match="multiple of 8 from 8 to 256"):
        gemm_wgmma.make_gemm_wgmma(100)


def _wrong_group():
    # groups of 256: k 128..255 scaled with the first group's scale
    from leverctl_kernels.w4a16.gemm import gemm_wgmma

    return gemm_wgmma.make_gemm_wgmma(64, load_b=gemm_wgmma.make_load_b(8))


def _dropped_k_substep():
    # three of the four wgmma per stage: k 48..63 of every stage never reach D
    from leverctl_kernels.w4a16.gemm import gemm_wgmma

    return gemm_wgmma.make_gemm_wgmma(64, ksub=3)


@pytest.mark.sim
@pytest.mark.parametrize("make", [_wrong_group, _dropped_k_substep], ids=["wrong-scale-group", "dropped-k-substep"])
def test_a_broken_gemm_wgmma_fails_the_check(make):
    got, ref = _run(5, 11, 256, 64, seed=3, kern=make())
    ok, why = _check_test_local(got, ref, _tolerance())
    assert not ok, f"the broken variant passed: {why}"
