"""Timing on a GPU: the sampling rule, the statistics, the roofline, and the
rig that produces samples.

What one sample is (``GpuRig.measure``)::

    [delay kernel: spins until the host has queued the whole batch]
    flush L2 | event | launch(bufs) | event      <- sample 1
    flush L2 | event | launch(bufs) | event      <- sample 2
    ...

* Inputs are on the device before the first sample; compilation and warm-up
  happen before (the correctness check runs the kernel first).
* The L2 is flushed before each sample by *reading* a buffer twice its size:
  a read leaves clean lines, so the timed kernel pays no write-backs for the
  flush. Each sample therefore reads its inputs from device memory, as a
  decode step that follows other layers would.
* Numba's launch overhead (tens of microseconds) is larger than a decode
  GEMV. Events around a launch queued on an idle stream would time the host,
  not the kernel. So each batch starts with a kernel that spins on the GPU's
  global timer until the host has finished queueing the batch; then the
  samples run back to back. The spin is lengthened, and the batch retried,
  whenever the host took longer than it to queue.

* The GPU's clocks idle low between kernels and take tens of milliseconds
  to ramp up. Before the first measurement, and again after the GPU sat idle
  (compiling, checking on the host), the rig keeps every SM busy with FMAs
  for a while (``warm``), so the first samples do not run at idle clocks.

Stopping rule (``sample_until_stable``): samples come in batches of
``batch`` (one ``measure`` call each). After ``min_samples`` *and* at least
``min_batches`` (2) batches, stop as soon as the *noise* -- the relative
standard error of the median, estimated robustly from the interquartile
range -- is at most ``max_noise`` (0.5 %), else at ``max_seconds`` of wall
time (``stopped_by`` says which). A single batch never decides: its samples
ran back to back at one clock and one cache state, so their spread says
little about the next batch's.

Host launch cost. The gated samples exclude it by construction
(``host_launch: "excluded"`` in the record). Where a path's levers change
the number of launches per call (one batched launch against one per
sequence, two kernels against four), that cost is part of what the lever
decides, so the record also carries ``with_host_us``: the median time of a
call issued onto an idle stream, the host's launch overhead included
(``measure_with_host``).

Roofline (``roofline``): the floor is ``launches * launch_us`` -- the
GPU-side cost of a launch, measured as the gated time of an empty kernel --
plus the larger of moving the bytes at the copy bandwidth and doing the
FLOPs at the rate of the instruction the variant ran on (``compute_rate``):
the FP32 FMA rate on CUDA cores, the dense BF16 tensor-core peak for f16 and
bf16 inputs (and E4M3 through mma.sync, which runs on the FP16 datapath),
the FP8 peak for e4m3 (and for s8, which has no peak of its own here:
Hopper's dense INT8 and FP8 rates are equal). Without the
launch term a microsecond decode kernel would be reported at a few percent
of a floor no kernel reaches; against the FP32 rate a tensor-core GEMM would
be reported far above 100 %.

Ceilings (``GpuRig``), each measured once per run: copy bandwidth, the FP32
rate (``fma_burn``), the BF16 and FP8 tensor-core peaks (the short
tensor-core-bound kernels of ``leverctl_kernels.common.peak``, imported on
first use; null where the device has no such form), and, as a library
reference only, cuBLAS's dense BF16 GEMM rate through torch at one large
square shape (null without torch).

The statistics and the roofline are pure functions, so they are tested on
synthetic samples without a GPU.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any, Callable, Sequence

# sigma of a normal sample = IQR / 1.349; standard error of the median
# = 1.2533 * sigma / sqrt(n) (asymptotic, normal samples).
_IQR_TO_SIGMA = 1.0 / 1.349
_MEDIAN_SE = 1.2533


@dataclass(frozen=True)
class StopRule:
    max_noise: float = 0.005
    min_samples: int = 10
    max_seconds: float = 2.0
    max_samples: int = 20_000
    batch: int = 25  # samples queued behind one delay kernel
    min_batches: int = 2  # the noise rule never stops inside the first batch


@dataclass(frozen=True)
class Stats:
    median_us: float
    p20_us: float
    p80_us: float
    samples: int
    noise: float
    stopped_by: str  # "noise" | "time" | "samples"
    batches: int = 1
    launches: int = 1  # kernel launches per call of the timed function
    # Median per call issued onto an idle stream, host launch cost included;
    # measured only where a path's levers change the number of launches.
    with_host_us: float | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("median_us", "p20_us", "p80_us", "with_host_us"):
            d[k] = sig(d[k])
        d["noise"] = sig(d["noise"], 3)
        d["host_launch"] = "excluded"  # from median_us/p20_us/p80_us: the samples are gated
        return d


def sig(x: float | None, digits: int = 4) -> float | None:
    """``x`` rounded to ``digits`` significant digits (None stays None)."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def percentile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_xs:
        raise ValueError("no samples")
    pos = (len(sorted_xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def relative_noise(samples: Sequence[float]) -> float:
    """Relative standard error of the median: how far the reported median
    is likely to be from the true one, as a fraction of it."""
    xs = sorted(samples)
    n = len(xs)
    if n < 2:
        return math.inf
    med = percentile(xs, 50)
    if med <= 0:
        return math.inf
    iqr = percentile(xs, 75) - percentile(xs, 25)
    return _MEDIAN_SE * iqr * _IQR_TO_SIGMA / math.sqrt(n) / med


def summarize(samples: Sequence[float], stopped_by: str, batches: int = 1) -> Stats:
    xs = sorted(samples)
    return Stats(
        median_us=percentile(xs, 50),
        p20_us=percentile(xs, 20),
        p80_us=percentile(xs, 80),
        samples=len(xs),
        noise=relative_noise(xs),
        stopped_by=stopped_by,
        batches=batches,
    )


def sample_until_stable(
    measure: Callable[[int], Sequence[float]],
    rule: StopRule = StopRule(),
    clock: Callable[[], float] = time.perf_counter,
) -> Stats:
    """Call ``measure(n)`` (-> about ``n`` samples in microseconds, one
    batch) until the rule says stop. The noise rule waits for
    ``min_batches`` batches; the time and sample caps only for
    ``min_samples``."""
    samples: list[float] = []
    batches = 0
    start = clock()
    while True:
        n = len(samples)
        want = max(min(rule.batch, rule.max_samples - n), rule.min_samples - n, 1)
        got = list(measure(want))
        if not got:
            raise RuntimeError("the timer returned no samples")
        samples.extend(got)
        batches += 1
        n = len(samples)
        if n >= rule.min_samples:
            if batches >= rule.min_batches and relative_noise(samples) <= rule.max_noise:
                return summarize(samples, "noise", batches)
            if n >= rule.max_samples:
                return summarize(samples, "samples", batches)
            if clock() - start >= rule.max_seconds:
                return summarize(samples, "time", batches)


# The device figure a record's compute floor is drawn at, by the input type
# of the tensor cores its variant ran on. s8 takes the FP8 figure: no INT8
# peak is measured, and on Hopper the dense INT8 and FP8 rates are equal.
# E4M3 through mma.sync runs on the FP16 datapath ("e4m3-via-f16"): the
# BF16/FP16 figure.
FP32_RATE = "fp32_tflops"
RATE_BY_TC_DTYPE = {
    "f16": "bf16_tflops",
    "bf16": "bf16_tflops",
    "e4m3-via-f16": "bf16_tflops",
    "e4m3": "fp8_tflops",
    "s8": "fp8_tflops",
}


def compute_rate(tensor_cores: str | None, tc_dtype: str | None) -> tuple[str | None, str | None]:
    """(the device figure the compute floor uses, why there is none).

    FP32 CUDA cores (``tensor_cores`` None) -> ``fp32_tflops``; tensor cores
    by their input type (``RATE_BY_TC_DTYPE``). A tensor-core variant that
    does not say its input type gets no compute floor rather than a guess."""
    if tensor_cores is None:
        return FP32_RATE, None
    if tc_dtype in RATE_BY_TC_DTYPE:
        return RATE_BY_TC_DTYPE[tc_dtype], None
    if tc_dtype is None:
        return None, f"runs on {tensor_cores} without a declared tc_dtype: the floor has no compute term"
    return None, f"no measured peak for {tensor_cores} on {tc_dtype}: the floor has no compute term"


def roofline(
    nbytes: int,
    flops: int,
    median_us: float,
    copy_gbps: float,
    compute_tflops: float | None,
    *,
    compute_rate: str | None = FP32_RATE,
    launch_us: float = 0.0,
    launches: int = 1,
    tc_flops: int | None = None,
    fp32_tflops: float | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The record's ``roofline`` and ``achieved`` objects.

    The floor is ``launches * launch_us`` (the GPU-side cost of each kernel
    launch, measured as an empty kernel's gated time) plus the larger of
    moving ``nbytes`` at the measured copy bandwidth and doing ``flops`` at
    ``compute_tflops``, the measured rate named ``compute_rate`` (see
    :func:`compute_rate`; None: no compute term). ``pct_of_floor`` is
    floor / measured (100 % = at the ceiling). ``bound`` names the largest
    term: ``"launch"`` when the launches alone outweigh the work.

    A tensor-core variant that runs only ``tc_flops`` of its ``flops`` on
    the tensor cores (the GDN chunk: two of its nine products) pays the rest
    at ``fp32_tflops``: the compute term is the sum of the two parts."""
    t_mem = nbytes / (copy_gbps * 1e9) if copy_gbps > 0 else 0.0
    t_cmp = flops / (compute_tflops * 1e12) if compute_tflops and compute_tflops > 0 else 0.0
    split = tc_flops is not None and compute_rate not in (None, FP32_RATE)
    if split and t_cmp:
        rest = max(flops - tc_flops, 0)
        t_cmp = tc_flops / (compute_tflops * 1e12) + (rest / (fp32_tflops * 1e12) if fp32_tflops else 0.0)
    t_launch = launches * max(launch_us, 0.0) * 1e-6
    floor_us = (t_launch + max(t_mem, t_cmp)) * 1e6
    secs = median_us * 1e-6
    bound = "memory" if t_mem >= t_cmp else "compute"
    if t_launch > max(t_mem, t_cmp):
        bound = "launch"
    roof = {
        "floor_us": sig(floor_us),
        "bound": bound,
        "copy_gbps": sig(copy_gbps),
        "compute_rate": compute_rate,
        "compute_tflops": sig(compute_tflops),
        "tc_flops": int(tc_flops) if split else None,
        "launch_us": sig(launch_us),
        "launches": int(launches),
        "pct_of_floor": sig(100.0 * floor_us / median_us) if median_us > 0 else None,
    }
    achieved = {
        "gbps": sig(nbytes / secs / 1e9) if secs > 0 else None,
        "tflops": sig(flops / secs / 1e12) if secs > 0 else None,
    }
    return roof, achieved


# ---------------------------------------------------------------------------
# The GPU side. Nothing below runs in the simulator, and numba is imported
# only when a rig is built (after the device was chosen).

MiB = 1 << 20
_FALLBACK_L2 = 64 * MiB  # when the driver did not say
_THREADS = 256
MIN_DELAY_NS = 100_000
MAX_DELAY_NS = 200_000_000
# Clock warm-up: every SM busy with FMAs for WARM_S before the first
# measurement, and for REWARM_S when the GPU sat idle for IDLE_S or more
# (GPU boost clocks ramp within tens of milliseconds and drop when idle).
WARM_S = 0.2
REWARM_S = 0.1
IDLE_S = 0.5
WARM_ITERS = 256  # one warm-up kernel: ~2 ms on an H200
# Tensor-core peaks: the burner's iteration count doubles (at least) from
# PEAK_START_ITERS until one launch takes PEAK_LAUNCH_US, long enough that
# back-to-back launches keep the stream busy and need no gate.
PEAK_START_ITERS = 16
PEAK_MAX_ITERS = 1 << 24
PEAK_LAUNCH_US = 2000.0
# The measured figure each burner kind gives (leverctl_kernels.common.peak).
PEAK_KINDS = {"bf16_tflops": "bf16", "fp8_tflops": "e4m3"}
_NO_FORM = {
    "bf16": "the device has no BF16 tensor-core form the burner builds",
    "e4m3": "the device has no FP8 tensor-core form the burner builds (FP8 needs sm_90a's wgmma)",
}


@lru_cache(maxsize=None)
def _kernels():
    """The rig's kernels: (delay, fill, flush, fma_burn)."""
    from llvmlite import ir
    from numba import cuda, float32, int32, types, uint64
    from numba.cuda.extending import intrinsic

    @intrinsic
    def globaltimer(typingctx):
        # %globaltimer: nanoseconds; side_effect keeps every read in the loop.
        def codegen(context, builder, sig_, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(64), []), "mov.u64 $0, %globaltimer;", "=l", side_effect=True)
            return builder.call(asm, [])

        return types.uint64(), codegen

    @cuda.jit
    def delay(ns, sink):
        """One thread spins for ``ns`` nanoseconds."""
        t0 = globaltimer()
        t = t0
        while t - t0 < ns:
            t = globaltimer()
        if t == uint64(0):  # never; keeps the loop
            sink[0] = 1

    @cuda.jit
    def fill(buf):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i < buf.size:
            buf[i] = i
            i += step

    @cuda.jit
    def flush(buf, sink):
        """Read every word of ``buf`` (> L2): evicts what the L2 held."""
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        acc = int32(0)
        while i < buf.size:
            acc ^= buf[i]
            i += step
        if acc == int32(0x5EED5EED):  # practically never; keeps the loads
            sink[0] = acc

    @cuda.jit
    def fma_burn(out, iters, b):
        """32 independent-chain FMAs per iteration per thread: 64 FLOPs."""
        i = cuda.grid(1)
        x0 = float32(i) * float32(1e-9)
        x1 = x0 + float32(0.1)
        x2 = x0 + float32(0.2)
        x3 = x0 + float32(0.3)
        x4 = x0 + float32(0.4)
        x5 = x0 + float32(0.5)
        x6 = x0 + float32(0.6)
        x7 = x0 + float32(0.7)
        c = float32(1e-7)
        for _ in range(iters):
            for _r in range(4):
                x0 = cuda.fma(x0, b, c)
                x1 = cuda.fma(x1, b, c)
                x2 = cuda.fma(x2, b, c)
                x3 = cuda.fma(x3, b, c)
                x4 = cuda.fma(x4, b, c)
                x5 = cuda.fma(x5, b, c)
                x6 = cuda.fma(x6, b, c)
                x7 = cuda.fma(x7, b, c)
        s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7
        if s == float32(-1.0):  # never; keeps the chains
            out[0] = s

    return delay, fill, flush, fma_burn


class GpuRig:
    """Per-run GPU timing state: the L2 flush buffer, an event pool, the
    delay length, and the measured ceilings (cached for the run)."""

    def __init__(
        self,
        l2_bytes: int | None = None,
        sm_count: int | None = None,
        *,
        cuda=None,
        kernels=None,
        clock: Callable[[], float] = time.perf_counter,
        burner: Callable | None = None,
    ):
        """``cuda``, ``kernels``, the host ``clock`` and the tensor-core
        ``burner`` (``(kind, sm_count) -> (burn, flops) | None``) default to
        numba's, the rig's own, perf_counter and
        ``leverctl_kernels.common.peak.burner`` (tests pass stand-ins to
        exercise the control flow without a GPU)."""
        import numpy as np

        if cuda is None:
            from numba import cuda
        self.np = np
        self.cuda = cuda
        self.clock = clock
        self.delay, fill, self._flush_kernel, self._fma = kernels or _kernels()
        self.sm_count = sm_count or cuda.get_current_device().MULTIPROCESSOR_COUNT
        self.l2_bytes = l2_bytes or _FALLBACK_L2
        words = max(2 * self.l2_bytes, 8 * MiB) // 4
        self._flush_buf = cuda.device_array(words, dtype=np.int32)
        self._sink = cuda.device_array(1, dtype=np.int32)
        self._flush_grid = self.sm_count * 8
        fill[self._flush_grid, _THREADS](self._flush_buf)
        self.delay_ns = 1_000_000
        self._events: list[tuple[Any, Any]] = []
        self._copy_gbps: float | None = None
        self._fp32_tflops: float | None = None
        self._burner = burner
        self._peaks: dict[str, float | None] = {}  # by figure name, None included
        # Why a figure is None (no such tensor-core form, no torch...), by name.
        self.why_none: dict[str, str] = {}
        self._library: dict[tuple[int, int, int], float | None] = {}
        self._launch_us: float | None = None
        self._warm_out = cuda.device_array(1, dtype=np.float32)
        self._idle_since: float | None = None  # host clock; None: never warmed
        self.warmed_s = 0.0  # total warm-up time (seconds), for the tests and the curious
        # Compile the rig's kernels now, outside every measurement (and
        # outside the warm-up's clock: a compile is no warm-up).
        self.delay[1, 1](np.uint64(1000), self._sink)
        self.flush()
        self._burn(1)

    def _burn(self, iters: int) -> None:
        """Every SM busy with FMAs for ``iters`` iterations, synchronized."""
        self._fma[self.sm_count * 16, _THREADS](self._warm_out, iters, self.np.float32(0.9999999))
        self.cuda.synchronize()

    def warm(self, seconds: float | None = None) -> float:
        """Keep every SM busy with FMAs for ``seconds`` (by the host clock,
        synchronizing after each kernel). By default: ``WARM_S`` the first
        time, ``REWARM_S`` after ``IDLE_S`` idle, else nothing. Returns the
        seconds spent."""
        now = self.clock()
        if seconds is None:
            if self._idle_since is None:
                seconds = WARM_S
            elif now - self._idle_since >= IDLE_S:
                seconds = REWARM_S
            else:
                return 0.0
        t0 = now
        while True:
            self._burn(WARM_ITERS)
            if self.clock() - t0 >= seconds:
                break
        spent = self.clock() - t0
        self.warmed_s += spent
        self._idle_since = self.clock()
        return spent

    def flush(self) -> None:
        self._flush_kernel[self._flush_grid, _THREADS](self._flush_buf, self._sink)

    def _pairs(self, n: int):
        while len(self._events) < n:
            self._events.append((self.cuda.event(timing=True), self.cuda.event(timing=True)))
        return self._events[:n]

    def measure(self, launch: Callable[[], None], n: int, *, flush: bool = True, gate: bool = True) -> list[float]:
        """``n`` samples (microseconds) of ``launch()``, queued behind one
        delay kernel (``gate``) so host launch overhead never shows up
        between the events. Work of a millisecond or more needs no gate."""
        pairs = self._pairs(n)
        for _attempt in range(4):
            t0 = self.clock()
            if gate:
                self.delay[1, 1](self.np.uint64(self.delay_ns), self._sink)
            for start, end in pairs:
                if flush:
                    self.flush()
                start.record()
                launch()
                end.record()
            queued_ns = (self.clock() - t0) * 1e9
            pairs[-1][1].synchronize()
            if not gate:
                break
            ok = queued_ns <= 0.8 * self.delay_ns
            # Twice the last queueing time: long enough with margin, and no
            # longer (the spin is dead time). Too short: redo the batch.
            self.delay_ns = int(min(max(2 * queued_ns, MIN_DELAY_NS), MAX_DELAY_NS))
            if ok:
                break
        self._idle_since = self.clock()
        return [self.cuda.event_elapsed_time(s, e) * 1e3 for s, e in pairs]

    def measure_with_host(self, launch: Callable[[], None], n: int) -> list[float]:
        """``n`` samples (microseconds) of ``launch()`` issued onto an idle
        stream: the L2 flushed and the GPU drained first, so the events
        enclose the host's launch overhead of every kernel of the call."""
        pairs = self._pairs(n)
        for start, end in pairs:
            self.flush()
            self.cuda.synchronize()
            start.record()
            launch()
            end.record()
            end.synchronize()
        self._idle_since = self.clock()
        return [self.cuda.event_elapsed_time(s, e) * 1e3 for s, e in pairs]

    def time(
        self, launch: Callable[[], None], rule: StopRule = StopRule(), *, launches: int = 1, with_host: bool = False
    ) -> Stats:
        """Gated samples of ``launch()`` (``launches`` kernels per call)
        until ``rule`` stops; with ``with_host``, also the median of calls
        on an idle stream, host launch cost included (same rule, half the
        time cap)."""
        self.warm()
        stats = sample_until_stable(lambda n: self.measure(launch, n), rule)
        with_host_us = None
        if with_host:
            host_rule = StopRule(
                max_noise=rule.max_noise,
                min_samples=rule.min_samples,
                max_seconds=rule.max_seconds / 2,
                max_samples=rule.max_samples,
                batch=rule.batch,
                min_batches=rule.min_batches,
            )
            with_host_us = sample_until_stable(lambda n: self.measure_with_host(launch, n), host_rule).median_us
        return replace(stats, launches=int(launches), with_host_us=with_host_us)

    def launch_us(self) -> float:
        """The GPU-side cost of one kernel launch: the gated median of an
        (almost) empty kernel, the delay kernel asked to spin for 0 ns.
        Measured once per run; the roofline's launch term."""
        if self._launch_us is None:
            self.warm()
            sink, zero = self._sink, self.np.uint64(0)
            stats = sample_until_stable(
                lambda n: self.measure(lambda: self.delay[1, 1](zero, sink), n, flush=False), StopRule(max_seconds=0.5)
            )
            self._launch_us = stats.median_us
        return self._launch_us

    def library_us(self, mnk: tuple[int, int, int], rule: StopRule = StopRule()) -> float | None:
        """:func:`cublas_fp16_us` at ``mnk``, once per shape per run."""
        if mnk not in self._library:
            self._library[mnk] = cublas_fp16_us(*mnk, self.l2_bytes, rule)
        return self._library[mnk]

    def copy_gbps(self) -> float:
        """Device-to-device copy bandwidth, bytes read plus written."""
        if self._copy_gbps is None:
            cuda, np = self.cuda, self.np
            free, _total = cuda.current_context().get_memory_info()
            nbytes = int(min(1024 * MiB, free // 8)) // MiB * MiB
            src = cuda.device_array(nbytes, dtype=np.uint8)
            dst = cuda.device_array(nbytes, dtype=np.uint8)
            dst.copy_to_device(src)  # warm-up
            self.warm()
            stats = sample_until_stable(
                lambda n: self.measure(lambda: dst.copy_to_device(src), n, flush=False, gate=False),
                StopRule(max_seconds=1.0),
            )
            self._copy_gbps = 2 * nbytes / (stats.median_us * 1e-6) / 1e9
            del src, dst
        return self._copy_gbps

    def fp32_tflops(self) -> float:
        """FP32 FMA rate of a kernel with 8 independent chains per thread."""
        if self._fp32_tflops is None:
            np = self.np
            out = self.cuda.device_array(1, dtype=np.float32)
            blocks, iters = self.sm_count * 16, 2048
            b = np.float32(0.9999999)
            flops = blocks * _THREADS * iters * 64

            def burn():
                self._fma[blocks, _THREADS](out, iters, b)

            burn()  # compile + warm-up
            self.warm()
            stats = sample_until_stable(
                lambda n: self.measure(burn, n, flush=False, gate=False), StopRule(max_seconds=1.0)
            )
            self._fp32_tflops = flops / (stats.median_us * 1e-6) / 1e12
        return self._fp32_tflops

    def bf16_tflops(self) -> float | None:
        """The dense BF16 tensor-core peak (FP16's is the same), or None
        where the device has no form the burner builds."""
        return self._peak("bf16_tflops")

    def fp8_tflops(self) -> float | None:
        """The dense FP8 (e4m3) tensor-core peak, or None where the device
        has no form the burner builds (FP8 needs sm_90a's wgmma)."""
        return self._peak("fp8_tflops")

    def cublas_bf16_tflops(self) -> float | None:
        """cuBLAS's dense BF16 GEMM rate (:func:`cublas_bf16_rate`), a
        library reference beside the peaks; None without torch."""
        if "cublas_bf16_tflops" not in self._peaks:
            rate = cublas_bf16_rate()  # warms the clocks with its own GEMMs
            if rate is None:
                self.why_none["cublas_bf16_tflops"] = "torch with CUDA is not importable"
            self._idle_since = self.clock()
            self._peaks["cublas_bf16_tflops"] = rate
        return self._peaks["cublas_bf16_tflops"]

    def _burner_for(self, kind: str):
        """((burn, flops) or None, why there is none)."""
        if self._burner is None:
            try:
                from leverctl_kernels.common.peak import burner
            except ModuleNotFoundError as e:
                if e.name != "leverctl_kernels.common.peak":
                    raise
                return None, "this checkout has no tensor-core burner (leverctl_kernels.common.peak)"
            self._burner = burner
        return self._burner(kind, self.sm_count), _NO_FORM[kind]

    def _peak(self, name: str) -> float | None:
        """A tensor-core peak, measured once per run: one burner launch sized
        to take about PEAK_LAUNCH_US, launched back to back until the median
        is stable; its FLOPs over that median."""
        if name in self._peaks:
            return self._peaks[name]
        made, why = self._burner_for(PEAK_KINDS[name])
        if made is None:
            self.why_none[name] = why
            self._peaks[name] = None
            return None
        burn, flops = made
        burn(1)  # compiles, outside every measurement
        self.cuda.synchronize()
        self.warm()
        iters = PEAK_START_ITERS
        while iters < PEAK_MAX_ITERS:
            one = min(self.measure(lambda: burn(iters), 2, flush=False, gate=False))
            if one >= PEAK_LAUNCH_US:
                break
            # Launch overhead makes short launches look slow: this undershoots, never overshoots.
            iters = min(PEAK_MAX_ITERS, iters * max(2, math.ceil(PEAK_LAUNCH_US / max(one, 1.0))))
        stats = sample_until_stable(
            lambda n: self.measure(lambda: burn(iters), n, flush=False, gate=False), StopRule(max_seconds=1.0)
        )
        self._peaks[name] = flops(iters) / (stats.median_us * 1e-6) / 1e12
        return self._peaks[name]


# ---------------------------------------------------------------------------
# Optional library reference: cuBLAS through PyTorch, when it is importable.
# A path opts in by declaring ``extra["gemm_mnk"] = fn(shape) -> (m, n, k)``:
# the fp16 product [m, k] @ [k, n] doing the same work (a decode GEMV is
# (1, n, k)). Never a dependency: without torch the field stays null.

REFERENCE_LIB = "cublas-fp16"


def cublas_fp16_us(m: int, n: int, k: int, l2_bytes: int | None, rule: StopRule = StopRule()) -> float | None:
    """Median microseconds of torch's fp16 matmul at (m, n, k), timed like
    the paths (L2 flushed, queued behind a spin); None without torch/CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    scratch = torch.empty(max(2 * (l2_bytes or _FALLBACK_L2), 8 * MiB) // 4, dtype=torch.int32, device="cuda")
    sleep = getattr(torch.cuda, "_sleep", None)
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()

    def measure(count: int) -> list[float]:
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]
        if sleep is not None:
            sleep(2_000_000)  # cycles: ~1 ms for the host to queue the batch
        for start, end in pairs:
            scratch.sum()  # reads past the L2, like GpuRig.flush
            start.record()
            torch.matmul(a, b)
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in pairs]

    return sample_until_stable(measure, rule).median_us


CUBLAS_PEAK_N = 8192  # one square GEMM: 1.1 TFLOP, about 1.5 ms on an H200


def cublas_bf16_rate(n: int = CUBLAS_PEAK_N, rule: StopRule = StopRule(max_seconds=1.0)) -> float | None:
    """TFLOP/s of torch's dense BF16 matmul (cuBLAS) at ``n x n x n``,
    launched back to back (each takes milliseconds: no gate, no flush);
    None without torch/CUDA. A library reference for the tensor-core peaks,
    never a ceiling the roofline uses."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < WARM_S:  # cuBLAS's first calls, and the clocks' ramp
        for _ in range(8):
            torch.matmul(a, b)
        torch.cuda.synchronize()

    def measure(count: int) -> list[float]:
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]
        for start, end in pairs:
            start.record()
            torch.matmul(a, b)
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in pairs]

    median_us = sample_until_stable(measure, rule).median_us
    a = b = None  # their device memory, now
    return 2.0 * n**3 / (median_us * 1e-6) / 1e12
