"""Dynamic shared memory past 48 KiB (``common/dynsmem.py``): the attribute
is set on the kernel compiled for the launch's types, a size past Hopper's
227 KiB is refused before any launch, and (``-m gpu``) a 100 KiB stage
buffer is usable after the opt-in and refused without it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from numba import cuda, float32

from leverctl_kernels.common import dynsmem

BIG = 100 * 1024


@cuda.jit
def touch_all(out):
    """Every float32 of the dynamic shared buffer written, then summed back."""
    s = cuda.shared.array(0, float32)  # a numba type: the simulator refuses a NumPy one here
    t = cuda.threadIdx.x
    n = out.size
    for i in range(t, n, 128):
        s[i] = float32(i % 7)
    cuda.syncthreads()
    for i in range(t, n, 128):
        out[i] = s[n - 1 - i]


def test_the_attribute_is_set_on_the_compiled_kernel_for_its_device():
    calls = []
    attr = SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="MAX_DYN")
    binding = SimpleNamespace(CUfunction_attribute=attr)
    driver = SimpleNamespace(cuKernelSetAttribute=lambda *a: calls.append(a))
    fn = SimpleNamespace(handle="kernel-handle", device=SimpleNamespace(id=3))
    dynsmem.set_max_dynamic_shared(fn, BIG, driver=driver, binding=binding)
    assert calls == [("MAX_DYN", BIG, "kernel-handle", 3)]


def test_more_than_hoppers_227_kib_is_refused_before_any_launch():
    with pytest.raises(ValueError, match="exceed the 232448 .227 KiB. allowed with the Hopper opt-in"):
        dynsmem.opt_in(touch_all, (np.zeros(4, np.float32),), 228 * 1024)


def _run(opt_in: bool) -> np.ndarray:
    n = BIG // 4
    out = cuda.to_device(np.zeros(n, np.float32))
    if opt_in:
        dynsmem.opt_in(touch_all, (out,), BIG)
    touch_all[1, 128, 0, BIG](out)
    return out.copy_to_host()


def test_a_100_kib_stage_buffer_is_usable_after_the_opt_in():
    n = BIG // 4
    np.testing.assert_array_equal(_run(True), (np.arange(n)[::-1] % 7).astype(np.float32))


@pytest.mark.gpu
def test_without_the_opt_in_a_gpu_refuses_the_launch():
    from numba.cuda.cudadrv.driver import CudaAPIError

    try:  # numba-cuda launches through cuda.core, whose error this is (seen on an H200)
        from cuda.core._utils.cuda_utils import CUDAError
    except ImportError:
        CUDAError = CudaAPIError
    fresh = cuda.jit(touch_all.py_func)  # a kernel whose attribute nobody raised
    out = cuda.to_device(np.zeros(BIG // 4, np.float32))
    with pytest.raises((CudaAPIError, CUDAError), match="INVALID_VALUE"):
        fresh[1, 128, 0, BIG](out)
