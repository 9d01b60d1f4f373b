"""The tensor-core W4A16 GEMM (``w4a16/gemm_mma.py``) in the CUDA simulator,
against ``naive.py``'s float64 reference at tiny odd shapes, with the
family's tolerance (the one the FMA GEMM is held to); broken variants (a
wrong scale group, a dropped K step) must fail the same check. The
comparator is ``test_w4a16.py``'s."""

from __future__ import annotations

import numpy as np
import pytest
from test_w4a16 import _check_test_local

from leverctl_kernels.common import int4


def _case(m, n, k, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    qweight, scales = int4.random_w4(rng, n, k)
    return a, qweight, scales


def _run(m, n, k, seed=0, kern=None, n_mmas=1):
    from numba import cuda

    from leverctl_kernels.w4a16 import naive
    from leverctl_kernels.w4a16.gemm import gemm_mma

    a, qweight, scales = _case(m, n, k, seed)
    ref = naive.naive_gemm(a, qweight, scales)
    c = cuda.to_device(np.full((m, n), np.nan, dtype=np.float16))  # unwritten -> fails
    gemm_mma.make_launch(m, n, k, n_mmas, kern=kern)(
        c, cuda.to_device(a), cuda.to_device(qweight), cuda.to_device(scales)
    )
    return c.copy_to_host(), ref


def _tolerance():
    from leverctl_kernels.w4a16 import family

    return family.TOLERANCE


@pytest.mark.sim
@pytest.mark.parametrize("n_mmas", [1, 2], ids=["16x8", "16x16"])
@pytest.mark.parametrize("m,n,k", [(5, 11, 128), (17, 24, 256)], ids=["m5-n11-k128", "m17-n24-k256"])
def test_gemm_mma_matches_the_float64_reference(m, n, k, n_mmas):
    got, ref = _run(m, n, k, seed=m, n_mmas=n_mmas)
    ok, why = _check_test_local(got, ref, _tolerance())
    assert ok, why


def test_gemm_mma_refuses_k_not_multiple_of_16():
    from leverctl_kernels.w4a16.gemm import gemm_mma

    with pytest.raises(ValueError, match="multiple of 16"):
        gemm_mma.make_launch(5, 11, 136)
    assert gemm_mma.supports(5, 11, 256) == ""
    with pytest.raises(ValueError, match="n_mmas=3"):
        gemm_mma.make_gemm_mma(n_mmas=3)


def _wrong_group():
    # Scale group taken as k >> 8 (groups of 256): the second group of k = 256
    # is scaled with the first group's scale.
    from leverctl_kernels.w4a16.gemm import gemm_mma

    return gemm_mma.make_gemm_mma(b_pair=gemm_mma.make_b_pair(8))


def _dropped_k_step():
    # Steps of 32 over k: every other 16-wide MMA step is skipped.
    from leverctl_kernels.w4a16.gemm import gemm_mma

    return gemm_mma.make_gemm_mma(k_step=32)


def _second_mma_on_the_first_columns():
    # 16 x 16 tiles whose second MMA reads the first 8 columns' weights.
    from leverctl_kernels.w4a16.gemm import gemm_mma

    real = gemm_mma._b_pair

    from numba import cuda

    @cuda.jit(device=True, inline="always")
    def b_pair(qweight, scales, n, n0, k0, lane, i):
        return real(qweight, scales, n, n0 - n0 % 16, k0, lane, i)

    return gemm_mma.make_gemm_mma(b_pair=b_pair, n_mmas=2)


@pytest.mark.sim
@pytest.mark.parametrize(
    "make",
    [_wrong_group, _dropped_k_step, _second_mma_on_the_first_columns],
    ids=["wrong-scale-group", "dropped-k-step", "16x16-second-mma-wrong-columns"],
)
def test_a_broken_gemm_mma_fails_the_check(make):
    got, ref = _run(5, 11, 256, seed=3, kern=make())
    ok, why = _check_test_local(got, ref, _tolerance())
    assert not ok, f"the broken variant passed: {why}"
