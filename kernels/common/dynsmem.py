"""Dynamic shared memory beyond 48 KiB.

A kernel may declare at most 48 KiB of shared memory statically, and
launch with at most 48 KiB of dynamic shared memory unless its maximum is
raised first (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``): up to
227 KiB per block on Hopper, 163 KiB on A100, 99 KiB on Ada. A multi-stage
GEMM keeps its stages there (``kernel[grid, block, stream, nbytes]``, the
array taken with ``cuda.shared.array(0, dtype)``).

numba-cuda launches through the driver's library kernels (``CUkernel``,
``cuKernelSetAttribute``, as its own ``set_shared_memory_carveout`` does)
and exposes no setter for this attribute; :func:`opt_in` sets it on the
kernel compiled for the launch's argument types, before the launch. In
the simulator, which has no such limit, it does nothing.
"""

from __future__ import annotations

from typing import Any, Sequence

from numba import config

from .launch import STATIC_SMEM_BYTES, check_shared


def opt_in(kernel: Any, args: Sequence[Any], nbytes: int) -> None:
    """Let ``kernel`` (a ``cuda.jit`` dispatcher), compiled for the types of
    ``args``, launch with ``nbytes`` of dynamic shared memory. A size over
    Hopper's 227 KiB is a ValueError here, not a launch failure later."""
    nbytes = check_shared(nbytes, hopper=True)
    if config.ENABLE_CUDASIM or nbytes <= STATIC_SMEM_BYTES:
        return
    compiled = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
    set_max_dynamic_shared(compiled._codelibrary.get_cufunc(), nbytes)


def set_max_dynamic_shared(cufunc: Any, nbytes: int, driver: Any = None, binding: Any = None) -> None:
    """``cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes, kernel,
    device)`` on a numba-cuda ``CudaPythonFunction`` (``driver``/``binding``:
    stand-ins in tests)."""
    if driver is None or binding is None:
        from numba.cuda.cudadrv import driver as drv

        driver, binding = drv.driver, drv.binding
    attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    driver.cuKernelSetAttribute(attr, int(nbytes), cufunc.handle, cufunc.device.id)
