"""Which tensor-core instruction a kernel family builds its matrix products
on: Hopper's warpgroup MMA (``wgmma``, :mod:`.wgmma`) or the warp MMA every
GPU since sm_80 has (``mma.sync``, :mod:`.mma`). The choice is made once per
process, from the device the kernels are compiled for, and every variant
built on tensor cores asks here rather than deciding for itself.

* compute capability 9.x (Hopper: H100, H200): ``wgmma``. numba-cuda
  compiles for the architecture-specific target ``sm_90a`` on such a device,
  and only that target has the instruction; it is also the only way to the
  FP8 tensor cores and to Hopper's full BF16 rate (``mma.sync`` runs there
  at a fraction of it, and FP8 only through FP16).
* 8.x, and 10.x or later: ``mma.sync``. ``wgmma`` belongs to sm_90a alone;
  Blackwell's own warpgroup instructions are not built here.
* below 8.0: no tensor-core form is built; :func:`instruction_for` says so.

The CUDA simulator has no architecture of its own (it reports 5.2): there
the choice is :data:`SIMULATED`, the Hopper form, so that a run without a
GPU checks the kernel an H100/H200 would run. Both forms have exact
simulator twins, and the tests run each form explicitly.
"""

from __future__ import annotations

from functools import lru_cache

WGMMA = "wgmma"
MMA_SYNC = "mma.sync"
FORMS = (WGMMA, MMA_SYNC)
SIMULATED = WGMMA


def instruction_for(cc: tuple) -> str:
    """The tensor-core form for compute capability ``cc`` (``(major, minor)``,
    a suffix ignored)."""
    major, minor = int(cc[0]), int(cc[1])
    if major == 9:
        return WGMMA
    if major >= 8:
        return MMA_SYNC
    raise ValueError(f"compute capability {major}.{minor} has no mma.sync (tensor-core paths need sm_80 or later)")


@lru_cache(maxsize=None)
def current() -> str:
    """The form for the device this process compiles for (decided once)."""
    from numba import config, cuda

    if config.ENABLE_CUDASIM:
        return SIMULATED
    return instruction_for(cuda.get_current_device().compute_capability)


def check_form(form: str) -> str:
    if form not in FORMS:
        raise ValueError(f"tensor-core form {form!r}: one of {', '.join(FORMS)}")
    return form
