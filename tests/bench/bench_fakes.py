"""Fake kernel paths for the bench's tests: real ``@cuda.jit`` vector kernels
(saxpy, and a state update in place), correct and deliberately broken, so
the bench is tested without depending on the real families.

The root conftest has chosen the simulator (or the GPU) before this module
imports numba. Kernels name ``cuda`` as a module global: the simulator swaps
that global for its own module while a kernel runs.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from leverctl_kernels.common.path import Choice, KernelPath, Shape, Tolerance, Traffic, Variant

SHAPES = [Shape("n37", {"n": 37}), Shape("n64", {"n": 64})]
A = 2.0
THREADS = 32


BROKEN_MODES = ("wrong", "nan", "inf", "unwritten", "oob")
MODES = ("good",) + BROKEN_MODES


@lru_cache(maxsize=None)
def make_saxpy(mode: str):
    """``y = A*x + b``; a broken ``mode`` spoils it on purpose (a fixed index
    or the last element) so the checker has something to catch. The mode is a
    compile-time integer, so the same source compiles for a GPU."""
    MODE = MODES.index(mode)
    WRONG, NAN, INF, UNWRITTEN, OOB = (MODES.index(m) for m in BROKEN_MODES)

    @cuda.jit
    def saxpy(y, x, b):
        i = cuda.grid(1)
        n = y.size
        if i >= n:
            return
        v = float32(A) * x[i] + b[i]
        if MODE == WRONG and i == 3:
            v += float32(1.0)
        if MODE == NAN and i == 0:
            v = float32(math.nan)
        if MODE == INF and i == 1:
            v = float32(math.inf)
        if MODE == UNWRITTEN and i == n - 1:
            return
        if MODE == OOB and i == 0:
            y[n + 1000] = v  # out of bounds: the simulator raises
        y[i] = v

    return saxpy


def saxpy_build(mode: str):
    def build(shape):
        kern = make_saxpy(mode)
        # One warp per block keeps the simulator quick on the small shapes; a
        # GPU at millions of elements needs full blocks to stream (an H200
        # gave 590 GB/s for n = 4M with 32-thread blocks).
        threads = THREADS if shape["n"] < 1 << 16 else 256
        grid = (shape["n"] + threads - 1) // threads

        def launch(bufs):
            kern[grid, threads](bufs["y"], bufs["x"], bufs["b"])

        return launch

    return build


def saxpy_inputs(shape, rng):
    n = shape["n"]
    return {"x": rng.standard_normal(n).astype(np.float32), "b": rng.standard_normal(n).astype(np.float32)}


def saxpy_reference(shape, inputs):
    return {"y": A * inputs["x"].astype(np.float64) + inputs["b"].astype(np.float64)}


def saxpy_traffic(shape):
    n = shape["n"]
    return Traffic(bytes_read=8 * n, bytes_written=4 * n, flops=2 * n)


def _shapes(preset, model):
    return list(SHAPES) if preset == "smoke" else [Shape("n4096", {"n": 4096})]


def saxpy_path(name="fake.saxpy", levers=("gemv_sw",), lever_defaults=None, engines=(), select=None):
    """A path with variants ``good``/``plain`` (correct) and one per
    BROKEN_MODES. Default select: ``good`` when the first lever is on, else
    ``plain``; a string lever value names the variant directly."""
    variants = {
        "good": Variant("good", "correct saxpy", saxpy_build("good")),
        "plain": Variant("plain", "correct saxpy, same kernel", saxpy_build("good")),
    }
    for m in BROKEN_MODES:
        variants[m] = Variant(m, f"broken: {m}", saxpy_build(m))

    def default_select(vals, shape):
        v = vals[levers[0]]
        if isinstance(v, str):
            return Choice(v)
        return Choice("good" if v else "plain")

    return KernelPath(
        name=name,
        family=name.split(".")[0],
        summary="y = 2x + b",
        levers=tuple(levers),
        lever_defaults=dict(lever_defaults or {}),
        variants=variants,
        select=select or default_select,
        shapes=_shapes,
        make_inputs=saxpy_inputs,
        outputs=lambda s: {"y": ((s["n"],), "float32")},
        reference=saxpy_reference,
        traffic=saxpy_traffic,
        tolerance=Tolerance(rel=1e-6, abs=1e-5),
        engines=tuple(engines),
    )


@lru_cache(maxsize=None)
def make_accumulate(UPDATE: bool):
    @cuda.jit
    def accumulate(state, y, x):
        i = cuda.grid(1)
        if i < state.size:
            s = state[i] + x[i]
            if UPDATE:
                state[i] = s
            y[i] = s * 0.5

    return accumulate


def state_path():
    """``state += x`` in place, ``y = state / 2``: variant ``good`` updates the
    state, ``stale`` forgets to (its ``y`` is right, its state is not)."""

    def build_for(update):
        def build(shape):
            kern = make_accumulate(update)
            grid = (shape["n"] + THREADS - 1) // THREADS

            def launch(bufs):
                kern[grid, THREADS](bufs["state"], bufs["y"], bufs["x"])

            return launch

        return build

    def reference(shape, inputs):
        s = inputs["state"].astype(np.float64) + inputs["x"].astype(np.float64)
        inputs["state"][:] = 0  # a reference that mutates must not hurt the check
        return {"state": s, "y": s * 0.5}

    return KernelPath(
        name="fake.state",
        family="fake",
        summary="state += x",
        levers=("fake_update",),
        lever_defaults={"fake_update": True},
        variants={
            "good": Variant("good", "updates", build_for(True)),
            "stale": Variant("stale", "forgets the state", build_for(False)),
        },
        select=lambda v, s: Choice("good" if v["fake_update"] else "stale"),
        shapes=_shapes,
        make_inputs=lambda s, rng: {
            "x": rng.standard_normal(s["n"]).astype(np.float32),
            "state": rng.standard_normal(s["n"]).astype(np.float32),
        },
        outputs=lambda s: {"state": ((s["n"],), "float32"), "y": ((s["n"],), "float32")},
        reference=reference,
        traffic=lambda s: Traffic(8 * s["n"], 8 * s["n"], 2 * s["n"]),
        tolerance=Tolerance(rel=1e-6, abs=1e-5),
        engines=("atlas",),
    )


def current_device():
    """The device the tests run on: the simulator, or the GPU under
    LEVERCTL_TEST_DEVICE=gpu (the root conftest decided which)."""
    from leverctl.bench import device

    return device.choose("auto")


class FixedRig:
    """A GPU timing rig that launches once and reports fixed figures."""

    def time(self, launch, rule=None, *, launches=1, with_host=False):
        from leverctl.bench.timing import Stats

        launch()
        return Stats(
            median_us=4.0,
            p20_us=3.9,
            p80_us=4.2,
            samples=100,
            noise=0.002,
            stopped_by="noise",
            batches=4,
            launches=launches,
            with_host_us=5.0 if with_host else None,
        )

    def launch_us(self):
        return 2.0

    def library_us(self, mnk, rule=None):
        return 3.5

    def copy_gbps(self):
        return 4000.0

    def fp32_tflops(self):
        return 60.0

    def bf16_tflops(self):
        return 700.0

    def fp8_tflops(self):
        return 1400.0

    def cublas_bf16_tflops(self):
        return 650.0
