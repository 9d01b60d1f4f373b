"""Which kernels a variant launches at a shape, with which argument types,
launch configuration and compile-time constants, found without a GPU.

This runs in a child process that compiles for the target architecture
(the CUDA simulator off, ``NUMBA_FORCE_CUDA_CC`` set): the variant's
``build(shape)`` runs at the *model* shape, so its kernel factories choose
the constants the model chooses, and its launch runs once against host
arrays standing in for device memory, with every kernel launch recorded
instead of run. A stand-in allocation is ``np.zeros`` of the asked size,
whose pages are never touched, so a model-sized workspace costs no memory.

Only the arguments' types reach the compiler (dtype, dimensions, layout),
so the launch's input and output buffers come from the path's smallest
smoke shape, which has the same types as the model's and costs nothing to
draw. A launch configuration computed from those buffers' sizes (rather
than from the shape ``build`` saw) is recorded as computed; it does not
change the compiled code, only ``grid``. A variant whose host code decides
a later launch from an earlier kernel's results sees zeros (no kernel ran)
and may launch fewer kernels than it would on a GPU; the record lists the
launches seen.
"""

from __future__ import annotations

import os
import types as _pytypes
from dataclasses import dataclass
from typing import Any

# Compute capability each target compiles at, and the PTX target an
# architecture-specific one is assembled for.
ARCH_CC = {"sm_80": (8, 0), "sm_89": (8, 9), "sm_90": (9, 0), "sm_90a": (9, 0), "sm_100a": (10, 0)}


def cc_of(arch: str) -> tuple[int, int]:
    if arch not in ARCH_CC:
        raise ValueError(f"unknown --arch {arch!r}: one of {', '.join(ARCH_CC)}")
    return ARCH_CC[arch]


@dataclass(frozen=True)
class Launch:
    """One recorded kernel launch."""

    kernel: Any  # the numba dispatcher
    argtypes: tuple
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dynamic_shared: int

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def name(self) -> str:
        return self.kernel.py_func.__name__

    @property
    def site(self) -> str:
        code = self.kernel.py_func.__code__
        return f"{code.co_filename}:{code.co_firstlineno}"


def tma_bytes(kernel) -> int:
    """The bytes a block of ``kernel`` keeps in flight by TMA: the stages
    it copies ahead (``async_stages - 1``) of the boxes a stage brings,
    for a kernel of the GEMM engine whose copies go by TMA (its ``boxes``:
    ``pipeline.tma_boxes``); 0 for any other. The SASS shows a TMA copy
    (``UTMALDG``) but not its size, which is the tensor map's."""
    boxes = getattr(kernel, "boxes", None)
    if getattr(kernel, "copy", None) != "tma" or not boxes:
        return 0
    from leverctl_kernels.common import tma

    dtype, rows, k_elems, _swizzle = boxes
    return (int(kernel.async_stages) - 1) * sum(rows) * k_elems * tma.ESIZE[dtype]


def _dim3(d) -> tuple[int, int, int]:
    if isinstance(d, int):
        return (d, 1, 1)
    d = tuple(int(x) for x in d)
    return d + (1,) * (3 - len(d))


def prepare(arch: str) -> None:
    """Before numba is imported: compile for ``arch``, simulator off."""
    major, minor = cc_of(arch)
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    os.environ["NUMBA_FORCE_CUDA_CC"] = f"{major}.{minor}"


def answer_device_lookups(arch: str) -> None:
    """Compiling to PTX asks for NVRTC's path and the current device's compute
    capability, neither of which it needs; where there is no driver or no
    NVRTC, answer them for ``arch``."""
    import numba.cuda as cuda
    import numba.cuda.cuda_paths as cp
    import numba.cuda.dispatcher as disp

    try:
        cp._get_nvrtc_path()
    except Exception:  # noqa: BLE001 - any failure: NVRTC is not needed to make PTX
        cp._get_nvrtc_path = lambda: ("unavailable", None)
    device = _pytypes.SimpleNamespace(compute_capability=cc_of(arch), name=f"target {arch}")
    disp.get_current_device = lambda: device
    cuda.get_current_device = lambda: device


class HostArray:
    """Marker base; see :func:`_host_array_type`."""


def _host_array_type():
    import numpy as np

    class _HostArray(np.ndarray):
        """A host array that answers the device-array calls kernels' host
        code makes (copies to and from the host, ``is_c_contiguous``...)."""

        def copy_to_host(self, ary=None, stream=0):
            if ary is None:
                return np.array(self)
            ary[...] = self
            return ary

        def copy_to_device(self, ary, stream=0):
            self[...] = np.asarray(ary)

        def is_c_contiguous(self):
            return self.flags.c_contiguous

        def split(self, section, stream=0):
            return [self[i : i + section] for i in range(0, len(self), section)]

        def bind(self, stream=0):
            return self

        @property
        def alloc_size(self):
            return self.nbytes

    return _HostArray


class _Stream:
    handle = _pytypes.SimpleNamespace(value=0)

    def synchronize(self):
        pass

    def auto_synchronize(self):
        import contextlib

        return contextlib.nullcontext(self)


class _Event:
    def record(self, stream=0):
        pass

    def synchronize(self):
        pass

    def wait(self, stream=0):
        pass

    def elapsed_time(self, other):
        return 0.0


class _GraphDriver:
    """The driver calls a stream capture makes, all answering success: the
    CUDA-graph variant's capture then records its step's launches like any
    other (no graph exists to launch)."""

    CUresult = _pytypes.SimpleNamespace(CUDA_SUCCESS=0, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED=901)
    CUstreamCaptureMode = _pytypes.SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)

    def cuStreamBeginCapture(self, stream, mode):
        return (0,)

    def cuStreamEndCapture(self, stream):
        return 0, object()

    def cuGraphInstantiate(self, graph, flags):
        return 0, object()

    def cuGraphDestroy(self, graph):
        return (0,)

    def cuGraphLaunch(self, exe, stream):
        return (0,)

    def cuGraphExecDestroy(self, exe):
        return (0,)


class Recorder:
    """While active, ``numba.cuda``'s allocations return host stand-ins and
    every kernel launch is recorded in :attr:`launches` instead of run."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def _patch(self, obj, name, value) -> None:
        self._saved.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def __enter__(self) -> Recorder:
        import numpy as np
        from numba import cuda, typeof
        from numba.cuda import dispatcher as disp

        host = _host_array_type()

        def empty(shape, dtype=np.float64, strides=None, order="C", stream=0):
            # zeros, not garbage: host code may size a later launch from a
            # buffer no kernel filled (and untouched zero pages cost nothing)
            return np.zeros(shape, dtype, order=order).view(host)

        def like(ary, stream=0):
            return empty(ary.shape, ary.dtype)

        def to_device(obj, stream=0, copy=True, to=None):
            if to is not None:
                to.copy_to_device(obj)
                return to
            return np.ascontiguousarray(obj).copy().view(host)

        launches = self.launches

        class Configured:
            # ``kernel[grid, block(, stream(, sharedmem))]``, taken as given:
            # the stream is a stand-in numba's own configuration would refuse.
            def __init__(self, dispatcher, args):
                if not isinstance(args, tuple) or not 2 <= len(args) <= 4:
                    raise ValueError(f"{dispatcher.py_func.__name__}: a launch needs [grid, block(, stream, shared)]")
                self.dispatcher, self.grid, self.block = dispatcher, args[0], args[1]
                self.shared = int(args[3]) if len(args) > 3 else 0

            def __call__(self, *args):
                argtypes = tuple(_arg_type(a, typeof) for a in args)
                launches.append(Launch(self.dispatcher, argtypes, _dim3(self.grid), _dim3(self.block), self.shared))

        for name, fn in (
            ("device_array", empty),
            ("device_array_like", like),
            ("pinned_array", empty),
            ("mapped_array", empty),
            ("to_device", to_device),
            ("synchronize", lambda: None),
            ("stream", lambda: _Stream()),
            ("default_stream", lambda: _Stream()),
            ("event", lambda timing=True: _Event()),
            ("event_elapsed_time", lambda a, b: 0.0),
        ):
            self._patch(cuda, name, fn)
        self._patch(disp.CUDADispatcher, "__getitem__", lambda dispatcher, args: Configured(dispatcher, args))
        from leverctl_kernels.attention.decode_graph import _cuda_graph
        from leverctl_kernels.common import dynsmem

        self._patch(_cuda_graph, "_driver", _GraphDriver)
        # raising a kernel's dynamic shared memory maximum needs a device:
        # here the launch's own size is what the profile reads
        self._patch(dynsmem, "opt_in", lambda kernel, args, nbytes: dynsmem.check_shared(nbytes, hopper=True))
        # a TMA kernel's tensor maps are encoded by the driver: here a map of
        # zeros (the kernel's argument type is all the compile needs), after
        # the same checks of the box and the rows
        from leverctl_kernels.common import tma

        self._patch(tma, "_driver_encode", lambda *args, **kw: np.zeros(tma.MAP_WORDS, np.uint64))
        return self

    def __exit__(self, *exc) -> None:
        for obj, name, value in reversed(self._saved):
            setattr(obj, name, value)
        self._saved.clear()


def _arg_type(a, typeof):
    """The type numba gives a kernel argument on a GPU: a host stand-in or a
    NumPy array as the C-contiguous device array the bench would pass."""
    import numpy as np
    from numba import types

    if isinstance(a, np.ndarray):
        return types.Array(typeof(a.dtype.type(0)) if a.dtype.fields is None else typeof(a).dtype, a.ndim, "C")
    return typeof(a)


def host_buffers(path, shape, rng) -> dict:
    """Inputs and outputs for one launch at ``shape`` as host stand-ins."""
    import numpy as np

    host = _host_array_type()
    bufs = {k: np.ascontiguousarray(v).view(host) for k, v in path.make_inputs(shape, rng).items()}
    for name, (oshape, dtype) in path.outputs(shape).items():
        bufs[name] = np.zeros(oshape, dtype).view(host)
    return bufs


# A variant whose host code reads its buffers at the model shape's sizes
# (a reshape, a per-sequence index) cannot launch on the small buffers; its
# model-shape buffers are drawn instead where the path reads at most this.
MODEL_BUFFERS_MAX_BYTES = 256 << 20
SMALL_COUNT = 8  # a dimension at most this is a count the host code may loop over


def capture(path, variant: str, shape, types_shape) -> Launches:
    """The launches one call of ``variant`` at ``shape`` makes, its buffers'
    types taken from ``types_shape`` (the path's smallest smoke shape), or
    from ``shape`` itself where the launch needs them at that size and they
    are small enough to draw."""
    import numpy as np

    from leverctl_kernels.common.path import Shape

    # The small buffers; then the same with the model's small counts (layers,
    # experts per token...) that a launch may index by; then the model's own.
    # (A dimension the model shape has and the small one lacks, one a lever
    # binds, is the model's in both.)
    small = Shape(types_shape.label, {**shape.dims, **types_shape.dims})
    mixed = Shape(
        types_shape.label,
        {k: (v if v <= SMALL_COUNT else types_shape.dims.get(k, v)) for k, v in shape.dims.items()},
    )
    for buffers_shape in (small, mixed):
        try:
            return _launches(path, variant, shape, host_buffers(path, buffers_shape, np.random.default_rng(0)))
        except (IndexError, ValueError) as e:
            failure = e
    if path.traffic(shape).bytes > MODEL_BUFFERS_MAX_BYTES:
        raise failure
    return _launches(path, variant, shape, host_buffers(path, shape, np.random.default_rng(0)))


class Launches(list):
    """The recorded launches, and the tensor-core instruction and input type
    the built variant says it runs on (a variant may decide them at build
    time, by the device it compiles for)."""

    tensor_cores: str | None = None
    tc_dtype: str | None = None


def _launches(path, variant: str, shape, bufs: dict) -> Launches:
    from leverctl_kernels.common.path import tensor_cores_of

    with Recorder() as rec:
        launch = path.variants[variant].build(shape)
        launch(bufs)
    out = Launches(rec.launches)
    out.tensor_cores, out.tc_dtype = tensor_cores_of(launch, path.variants[variant])
    return out
