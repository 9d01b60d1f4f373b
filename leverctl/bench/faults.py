"""Which CUDA errors end a run.

Most errors a kernel can cause are its own: too many resources for the
launch, a bad launch configuration, code that does not compile, a wrong
result. They fail that record and the run goes on. A few are *sticky*: an
illegal address, a trap or a device-side assert, an illegal instruction, a
launch that ran past the watchdog. After one of these the CUDA context is
unusable for the rest of the process, so every later kernel, copy or even
query would fail too; the run stops and keeps what it has, and nothing
touches the context again (not even to describe the device).

Numba raises driver errors as ``CudaAPIError`` with the ``CUresult`` in
``code`` (an int, or an enum from cuda-bindings); the name in the message
is the fallback.
"""

from __future__ import annotations

import re

# CUresult values (cuda.h) after which the context cannot be used again.
STICKY: dict[int, str] = {
    3: "CUDA_ERROR_NOT_INITIALIZED",
    4: "CUDA_ERROR_DEINITIALIZED",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
    201: "CUDA_ERROR_INVALID_CONTEXT",
    214: "CUDA_ERROR_ECC_UNCORRECTABLE",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT",
    709: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    710: "CUDA_ERROR_ASSERT",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    718: "CUDA_ERROR_INVALID_PC",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    999: "CUDA_ERROR_UNKNOWN",
}
_STICKY_NAMES = set(STICKY.values())
_NAME = re.compile(r"CUDA_ERROR_[A-Z_]+")


def cuda_code(e: BaseException) -> int | None:
    """The CUresult a CUDA exception (CudaAPIError, ...) carries, if any."""
    code = getattr(e, "code", None)
    if code is None or "cuda" not in type(e).__name__.lower():
        return None
    try:
        return int(getattr(code, "value", code))
    except (TypeError, ValueError):
        return None


def context_lost(e: BaseException) -> bool:
    """True when ``e`` (or an exception it was raised from) is a sticky CUDA
    error: the context is gone and the run must stop."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        code = cuda_code(e)
        if code is not None and code in STICKY:
            return True
        if any(name in _STICKY_NAMES for name in _NAME.findall(str(e))):
            return True
        e = e.__cause__ or e.__context__
    return False
