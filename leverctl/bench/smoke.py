"""The first kernel of every GPU run: one thread writes one integer.

It runs before anything else, so a toolkit the driver cannot load fails
here, in one line that says why and what to pin, rather than as a FAIL on
every record. It also gathers the versions a GPU record is read against
(``versions`` in docs/records.md): the CUDA version the driver supports, the
CUDA runtime numba-cuda found, libNVVM's version, and the PTX ISA and target
the kernels compile to.

The pure parts (reading a PTX header, the advice) are tested without a GPU;
``smoke`` takes the ``cuda`` module so tests can hand it a fake.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import UserError

# PTX ISA version -> the first CUDA release (driver, nvJitLink) that loads it,
# from the PTX ISA release history (8.6 came with CUDA 12.7).
PTX_CUDA: dict[str, tuple[int, int]] = {
    "7.8": (11, 8),
    "8.0": (12, 0),
    "8.1": (12, 1),
    "8.2": (12, 2),
    "8.3": (12, 3),
    "8.4": (12, 4),
    "8.5": (12, 5),
    "8.6": (12, 7),
    "8.7": (12, 8),
    "8.8": (12, 9),
    "9.0": (13, 0),
    "9.1": (13, 1),
}
# The wheels of scripts/gpu-wheels.txt whose CUDA version must suit the driver.
TOOLKIT_WHEELS = (
    "nvidia-cuda-nvcc-cu12",
    "nvidia-nvjitlink-cu12",
    "nvidia-cuda-nvrtc-cu12",
    "nvidia-cuda-runtime-cu12",
    "cuda-bindings",
    "cuda-toolkit",
)
# Words in an error that mean the compiled code did not load.
_LOAD_WORDS = (
    "PTX",
    "UNSUPPORTED_PTX_VERSION",
    "INVALID_IMAGE",
    "NO_BINARY_FOR_GPU",
    "JIT_COMPILER",
    "INVALID_SOURCE",
    "nvJitLink",
    "NVJITLINK",
    "LinkerError",
)


class SmokeFailed(UserError):
    """The one-thread kernel did not run: nothing else will."""


def _version(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def ptx_isa(ptx: str) -> str | None:
    """The ``.version`` of a PTX module ("8.8")."""
    m = re.search(r"^\s*\.version\s+(\d+\.\d+)", ptx, re.M)
    return m.group(1) if m else None


def ptx_target(ptx: str) -> str | None:
    """The ``.target`` of a PTX module ("sm_90a")."""
    m = re.search(r"^\s*\.target\s+(\w+)", ptx, re.M)
    return m.group(1) if m else None


def pin_advice(cuda_driver: str | None, ptx: str | None, error: str = "") -> str:
    """What to pin when compiled code does not load ('' when ``error`` is
    about something else, or the versions fit).

    The driver loads code of its own CUDA version or older: the toolkit that
    compiled the kernels (libNVVM, nvJitLink) must not be newer."""
    drv = _version(cuda_driver)
    need = PTX_CUDA.get(ptx or "")
    pins = ", ".join(f"{w}=={drv[0]}.{drv[1]}.*" for w in TOOLKIT_WHEELS[:4]) if drv else ""
    about_loading = not error or any(w in error for w in _LOAD_WORDS)
    if not about_loading:
        return ""
    if drv and need and need > drv:
        return (
            f"the driver supports CUDA {drv[0]}.{drv[1]} but the kernels compile to PTX ISA {ptx}, which "
            f"needs CUDA {need[0]}.{need[1]}: pin the CUDA wheels in scripts/gpu-wheels.txt to "
            f"{drv[0]}.{drv[1]} ({pins}) and run make wheels again, or update the driver"
        )
    if error:
        if drv:
            return (
                f"the compiled kernel did not load: pin the CUDA wheels in scripts/gpu-wheels.txt to the "
                f"driver's CUDA {drv[0]}.{drv[1]} ({pins}) and run make wheels again"
            )
        return (
            "the compiled kernel did not load: pin the CUDA wheels in scripts/gpu-wheels.txt to the driver's "
            "CUDA version"
        )
    return ""


def _one(out):
    out[0] = 1


def toolkit_versions(cuda: Any) -> dict[str, str | None]:
    """The CUDA runtime numba-cuda found and libNVVM's version; None where
    they cannot be read (the run still tries its kernel)."""
    got: dict[str, str | None] = {"cuda_runtime": None, "nvvm": None}
    try:
        from numba.cuda.cudadrv import runtime

        got["cuda_runtime"] = "%d.%d" % tuple(runtime.get_version())
    except Exception:  # noqa: BLE001 - a version we cannot read is recorded as null
        pass
    try:
        from numba.cuda.cudadrv.nvvm import NVVM

        got["nvvm"] = "%d.%d" % tuple(NVVM().get_version())
    except Exception:  # noqa: BLE001
        pass
    return got


def smoke(device, cuda: Any = None) -> dict[str, Any]:
    """Compile and launch the one-thread kernel on ``device``; fill
    ``device.cuda`` with the versions found and return it. Raises
    :class:`SmokeFailed` (exit 2, one line) when the kernel does not run."""
    import numpy as np

    if cuda is None:
        from numba import cuda
    found: dict[str, Any] = {
        "cuda_driver": device.cuda_driver,
        **toolkit_versions(cuda),
        "ptx_isa": None,
        "ptx_target": None,
    }
    device.cuda = found
    step = "compiling"
    try:
        ptx, _ = cuda.compile_ptx_for_current_device(_one, "void(int32[:])")
        found["ptx_isa"], found["ptx_target"] = ptx_isa(ptx), ptx_target(ptx)
        step = "loading and launching"
        out = cuda.to_device(np.zeros(1, dtype=np.int32))
        cuda.jit(_one)[1, 1](out)
        cuda.synchronize()
        value = int(out.copy_to_host()[0])
    except Exception as e:  # noqa: BLE001 - said in one line, with what to pin
        text = f"{type(e).__name__}: {' '.join(str(e).split())}"
        advice = pin_advice(device.cuda_driver, found["ptx_isa"], text)
        raise SmokeFailed(
            f"the first kernel (one thread) failed {step} on the {device.name}: {text[:300]}"
            + (f"; {advice}" if advice else ""),
            "--device gpu",
        ) from None
    if value != 1:
        raise SmokeFailed(
            f"the first kernel (one thread) ran on the {device.name} but wrote {value}, not 1", "--device gpu"
        )
    return found
