"""Where the bench runs: a real GPU, or Numba's CUDA simulator.

Numba decides between the two once, when ``numba.cuda`` is first imported, by
reading ``NUMBA_ENABLE_CUDASIM``. So the choice is made here, before anything
imports it: ``auto`` probes for a GPU through the driver library with ctypes
(no numba import), and only then is ``numba.cuda`` loaded in the chosen mode.
The bench is the one place allowed to set that variable; kernels never read
the environment.

The probe also reads what the report needs about the device (name, compute
capability, driver, L2 size, multiprocessor count) so a GPU run does not have
to ask numba for driver attributes.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable

from ..errors import UserError

CHOICES = ("auto", "gpu", "sim")
SIM_VAR = "NUMBA_ENABLE_CUDASIM"
SIM_NAME = "Numba CUDA simulator"

# CUdevice_attribute values (cuda.h).
_ATTR_SM_COUNT = 16
_ATTR_L2_CACHE_SIZE = 38
_ATTR_CC_MAJOR = 75
_ATTR_CC_MINOR = 76


@dataclass(frozen=True)
class Probe:
    """What the driver said. ``reason`` says why there is no usable GPU."""

    ok: bool
    reason: str = ""
    name: str | None = None
    compute_capability: str | None = None
    driver: str | None = None
    l2_bytes: int | None = None
    sm_count: int | None = None
    cuda_driver: str | None = None  # the newest CUDA the driver supports ("12.4")


def _error_name(lib, code: int) -> str:
    name = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return name.value.decode()
    except (AttributeError, OSError):
        pass
    return f"error {code}"


def _kernel_module_version() -> str | None:
    """The NVIDIA kernel module's version (``580.159.04``), if Linux says."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
            words = f.readline().split()
    except OSError:
        return None
    for w in words:
        if w[:1].isdigit() and w.count(".") >= 1:
            return w
    return None


def probe_gpu(load: Callable[[str], Any] = ctypes.CDLL) -> Probe:
    """Ask the CUDA driver, through ctypes, whether device 0 is usable.

    ``load`` opens the driver library (a fake in tests)."""
    try:
        lib = load("libcuda.so.1")
    except OSError:
        return Probe(False, "no NVIDIA driver (libcuda.so.1 not found)")
    rc = lib.cuInit(0)
    if rc != 0:
        return Probe(False, f"cuInit failed: {_error_name(lib, rc)}")
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0:
        return Probe(False, f"cuDeviceGetCount failed: {_error_name(lib, rc)}")
    if count.value < 1:
        return Probe(False, "no CUDA devices")

    dev = ctypes.c_int(0)
    if lib.cuDeviceGet(ctypes.byref(dev), 0) != 0:
        return Probe(False, "cuDeviceGet(0) failed")

    def attr(which: int) -> int | None:
        v = ctypes.c_int(0)
        return v.value if lib.cuDeviceGetAttribute(ctypes.byref(v), which, dev) == 0 else None

    buf = ctypes.create_string_buffer(256)
    name = buf.value.decode(errors="replace") if lib.cuDeviceGetName(buf, 256, dev) == 0 else None
    major, minor = attr(_ATTR_CC_MAJOR), attr(_ATTR_CC_MINOR)
    ver = ctypes.c_int(0)
    cuda_num = None
    if lib.cuDriverGetVersion(ctypes.byref(ver)) == 0 and ver.value:
        cuda_num = f"{ver.value // 1000}.{ver.value % 1000 // 10}"
    cuda_ver = f"CUDA {cuda_num}" if cuda_num else None
    module = _kernel_module_version()
    driver = f"{module} ({cuda_ver})" if module and cuda_ver else (module or cuda_ver)
    return Probe(
        True,
        name=name,
        compute_capability=f"{major}.{minor}" if major is not None else None,
        driver=driver,
        l2_bytes=attr(_ATTR_L2_CACHE_SIZE),
        sm_count=attr(_ATTR_SM_COUNT),
        cuda_driver=cuda_num,
    )


# The CUDA versions a GPU run records (docs/records.md), null in the simulator.
CUDA_VERSION_KEYS = ("cuda_driver", "cuda_runtime", "nvvm", "ptx_isa", "ptx_target")


def versions(device: "Device | None" = None) -> dict[str, str | None]:
    """Library versions, from package metadata (imports nothing), and the
    CUDA versions ``device`` found when its first kernel ran (``smoke``)."""

    def dist(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    from .. import __version__

    return {
        "leverctl": __version__,
        "python": platform.python_version(),
        "numba": dist("numba"),
        "numba_cuda": dist("numba-cuda"),
        "numpy": dist("numpy"),
        **{k: (device.cuda if device is not None else {}).get(k) for k in CUDA_VERSION_KEYS},
    }


# The device figures a GPU run measures once (``GpuRig`` methods of these
# names). The first two are ceilings every record's roofline needs: failing
# to measure them fails the record. The tensor-core peaks may be null (no
# such form on the device) and a failure to measure one only leaves it null,
# with the reason in ``Device.ceiling_notes``; the cuBLAS rate is a library
# reference, never a ceiling.
CEILINGS = ("copy_gbps", "fp32_tflops")
OPTIONAL_FIGURES = ("bf16_tflops", "fp8_tflops", "cublas_bf16_tflops")
FIGURES = CEILINGS + OPTIONAL_FIGURES


@dataclass
class Device:
    """The device of one run. On a GPU it also holds the run's measured
    figures (copy bandwidth, FP32 rate, tensor-core peaks, cuBLAS's rate),
    each measured once on first use, the timing rig (L2 flush buffer,
    events), and the CUDA versions its first kernel found (``cuda``, see
    :mod:`.smoke`).

    Describing the device (``to_json``) only reads what was gathered: after
    a kernel has lost the CUDA context, nothing may touch it again."""

    kind: str  # "gpu" | "sim"
    name: str
    compute_capability: str | None = None
    driver: str | None = None
    why_sim: str | None = None
    l2_bytes: int | None = None
    sm_count: int | None = None
    # Set when a kernel fault has left the CUDA context unusable: later items
    # fail at once with this note instead of each reporting the same fault.
    lost: str | None = None
    cuda_driver: str | None = None
    cuda: dict[str, Any] = field(default_factory=dict)
    _rig: Any = field(default=None, repr=False)
    _ceilings: dict[str, float | None] = field(default_factory=dict, repr=False)
    # Why an optional figure is null, by name (no such form, no torch, an error).
    ceiling_notes: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    def rig(self):
        """The GPU timing rig (built on first use)."""
        if not self.is_gpu:
            raise RuntimeError("the simulator has no timing rig")
        if self._rig is None:
            from .timing import GpuRig

            self._rig = GpuRig(l2_bytes=self.l2_bytes, sm_count=self.sm_count)
        return self._rig

    def _ceiling(self, name: str) -> float | None:
        if not self.is_gpu:
            return None
        if name not in self._ceilings:
            if name in CEILINGS:
                self._ceilings[name] = getattr(self.rig(), name)()
            else:
                self._ceilings[name] = self._optional(name)
        return self._ceilings[name]

    def _optional(self, name: str) -> float | None:
        """An optional figure, or None with the reason in ``ceiling_notes``:
        its failure must not fail a record (a lost context still stops the
        run, through ``lost``)."""
        from .faults import context_lost

        try:
            rig = self.rig()
            value = getattr(rig, name)()
        except Exception as e:  # noqa: BLE001 - said in ceiling_notes and the device file
            self.ceiling_notes[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
            if context_lost(e):
                self.lost = f"the CUDA context was lost measuring {name} ({type(e).__name__})"
            return None
        if value is None:
            self.ceiling_notes[name] = (getattr(rig, "why_none", None) or {}).get(name, "not measured")
        return value

    def figure(self, name: str) -> float | None:
        """The measured figure ``name`` (one of ``FIGURES``), measured on
        first use; None in the simulator."""
        if name not in FIGURES:
            raise KeyError(f"no device figure {name!r}: one of {', '.join(FIGURES)}")
        return self._ceiling(name)

    def measure_figures(self) -> dict[str, float | None]:
        """Every figure, measured now where not yet (once per run); stops at
        a lost context. Nothing in the simulator."""
        for name in FIGURES:
            if self.lost:
                break
            self._ceiling(name)
        return {name: self._ceilings.get(name) for name in FIGURES}

    @property
    def copy_gbps(self) -> float | None:
        """Measured on first use (a GPU run measures it before any kernel)."""
        return self._ceiling("copy_gbps")

    @property
    def fp32_tflops(self) -> float | None:
        return self._ceiling("fp32_tflops")

    @property
    def bf16_tflops(self) -> float | None:
        """The dense BF16 (and FP16) tensor-core peak; None where the device
        has no such form or it could not be measured (``ceiling_notes``)."""
        return self._ceiling("bf16_tflops")

    @property
    def fp8_tflops(self) -> float | None:
        return self._ceiling("fp8_tflops")

    @property
    def cublas_bf16_tflops(self) -> float | None:
        """A library reference beside the peaks, never a ceiling."""
        return self._ceiling("cublas_bf16_tflops")

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "compute_capability": self.compute_capability,
            "driver": self.driver,
            **{name: _round(self._ceilings.get(name)) for name in FIGURES},
            "why_sim": self.why_sim,
        }


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else float(f"{x:.{digits}g}")


def _loaded_mode() -> str | None:
    """ "sim" or "gpu" if numba.cuda is already imported in this process."""
    if "numba.cuda" not in sys.modules:
        return None
    try:  # numba-cuda keeps its own copy of the setting
        from numba.cuda.core import config
    except ImportError:
        from numba import config
    return "sim" if config.ENABLE_CUDASIM else "gpu"


def _install_warp_emulation() -> None:
    """The simulator lacks warp intrinsics; the kernels' emulation adds them."""
    try:
        from leverctl_kernels.common import simwarp
    except ModuleNotFoundError as e:  # the package is older than the emulation
        if e.name != "leverctl_kernels.common.simwarp":
            raise
        return
    simwarp.install()


def choose(choice: str = "auto", *, probe: Callable[[], Probe] = probe_gpu) -> Device:
    """Decide GPU or simulator and load ``numba.cuda`` accordingly.

    ``gpu`` without a usable GPU is a :class:`UserError` saying why. ``auto``
    falls back to the simulator and records why in ``Device.why_sim``.
    """
    if choice not in CHOICES:
        raise UserError(f"--device {choice!r}: choose one of {', '.join(CHOICES)}")
    loaded = _loaded_mode()
    if choice == "sim":
        return _simulator(None, loaded)
    p = probe()
    if choice == "gpu":
        if not p.ok:
            raise UserError(f"--device gpu: {p.reason}")
        if loaded == "sim":
            raise UserError(
                f"--device gpu: numba.cuda is already loaded in simulator mode in this process ({SIM_VAR}=1)"
            )
        return _gpu(p)
    # auto
    if not p.ok:
        return _simulator(p.reason, loaded)
    if loaded == "sim" or (loaded is None and os.environ.get(SIM_VAR, "") not in ("", "0")):
        return _simulator(f"{SIM_VAR}={os.environ.get(SIM_VAR, '1')} is set", loaded)
    return _gpu(p)


def _simulator(why: str | None, loaded: str | None) -> Device:
    if loaded == "gpu":
        raise UserError("cannot switch to the CUDA simulator: numba.cuda is already loaded for the GPU in this process")
    if loaded is None:
        os.environ[SIM_VAR] = "1"
    import numba.cuda  # noqa: F401 - loads the simulator

    _install_warp_emulation()
    return Device(kind="sim", name=SIM_NAME, why_sim=why)


def _gpu(p: Probe) -> Device:
    if os.environ.get(SIM_VAR, "") not in ("", "0"):
        os.environ[SIM_VAR] = "0"
    from numba import cuda

    if not cuda.is_available():  # the probe saw a device numba cannot use
        raise UserError(f"--device gpu: numba.cuda cannot use the {p.name or 'GPU'} the driver reports")
    dev = Device(
        kind="gpu",
        name=p.name or "CUDA GPU",
        compute_capability=p.compute_capability,
        driver=p.driver,
        l2_bytes=p.l2_bytes,
        sm_count=p.sm_count,
        cuda_driver=p.cuda_driver,
    )
    from .smoke import smoke

    smoke(dev)  # one thread, before anything else: a toolkit the driver cannot load says so here
    return dev
