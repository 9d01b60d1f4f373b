"""The GPU rig's control flow against a model of a GPU stream: the host pays
an overhead per launch, the GPU runs queued work in order, events read the
GPU's clock. Shows why each batch is gated behind a delay kernel, and that
the ceilings come out of the bytes and FLOPs the rig counts. (The real thing
is checked by test_gpu_timing.py on a GPU.)"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from bench_fakes import FixedRig

from leverctl.bench import timing

HOST_LAUNCH_S = 30e-6  # what a numba launch costs the host
HOST_EVENT_S = 2e-6


class Stream:
    """In-order GPU work against a host clock (seconds).

    ``launch_s``: what each kernel costs the GPU besides its work. With
    ``ramp``, clocks model a real GPU's: kernels run at half speed until the
    GPU has been busy for ``RAMP_S``, and drop back after ``IDLE_DROP_S``
    without work."""

    RAMP_S = 0.1
    IDLE_DROP_S = 0.3

    def __init__(self, ramp: bool = False, launch_s: float = 0.0):
        self.host = 0.0
        self.gpu = 0.0
        self.ramp, self.launch_s = ramp, launch_s
        self.busy = 0.0  # continuous busy time, for the clock ramp
        self.log: list[tuple[str, float]] = []  # (kernel, GPU end time)

    def run(self, seconds: float, name: str = "", kernel: bool = False) -> float:
        start = max(self.gpu, self.host)  # the GPU cannot start what is not queued yet
        if self.ramp:
            if start - self.gpu >= self.IDLE_DROP_S:
                self.busy = 0.0
            if self.busy < self.RAMP_S:
                seconds *= 2.0
        if kernel:
            seconds += self.launch_s
        self.busy += seconds
        self.gpu = start + seconds
        if name:
            self.log.append((name, self.gpu))
        return self.gpu

    def perf_counter(self) -> float:
        return self.host


class Kernel:
    def __init__(self, stream: Stream, seconds, name: str = "kernel"):
        self.stream, self.seconds, self.name = stream, seconds, name

    def __getitem__(self, config):
        def launch(*args):
            self.stream.host += HOST_LAUNCH_S
            self.stream.run(self.seconds(*args), self.name, kernel=True)

        return launch


class Event:
    def __init__(self, stream: Stream):
        self.stream, self.t = stream, None

    def record(self):
        self.stream.host += HOST_EVENT_S
        self.t = self.stream.run(0.0)

    def synchronize(self):
        self.stream.host = max(self.stream.host, self.t)


class FakeCuda:
    def __init__(self, stream: Stream):
        self.stream = stream

    def device_array(self, n, dtype):
        return np.zeros(n, dtype=dtype)

    def event(self, timing=True):
        return Event(self.stream)

    @staticmethod
    def event_elapsed_time(start, end):
        return (end.t - start.t) * 1e3

    def synchronize(self):
        self.stream.host = max(self.stream.host, self.stream.gpu)

    def current_context(self):
        class Ctx:
            @staticmethod
            def get_memory_info():
                return (80 << 30, 80 << 30)

        return Ctx()


def make_rig(stream: Stream, burner=None) -> timing.GpuRig:
    kernels = (
        Kernel(stream, lambda ns, sink: int(ns) * 1e-9, "delay"),
        Kernel(stream, lambda buf: 0.0, "fill"),
        Kernel(stream, lambda buf, sink: buf.nbytes / 4e12, "flush"),  # a read at 4 TB/s
        Kernel(stream, lambda out, iters, b: 132 * 16 * 256 * iters * 64 / 60e12, "fma"),  # 60 TFLOP/s
    )
    r = timing.GpuRig(
        l2_bytes=4 << 20, sm_count=132, cuda=FakeCuda(stream), kernels=kernels, clock=stream.perf_counter, burner=burner
    )
    r.stream = stream
    return r


@pytest.fixture
def rig():
    return make_rig(Stream())


def test_without_the_gate_a_short_kernel_is_timed_as_the_hosts_launch_overhead(rig):
    k = Kernel(rig.stream, lambda: 3e-6)[1, 1]
    times = rig.measure(k, 10, flush=False, gate=False)
    assert min(times) > 25  # microseconds: the host, not the 3 us kernel


def test_gated_batches_time_the_kernel_itself_and_the_gate_adapts(rig):
    k = Kernel(rig.stream, lambda: 3e-6)[1, 1]
    rig.delay_ns = timing.MIN_DELAY_NS  # too short for a batch of 25: retried longer
    times = rig.measure(k, 25)
    assert times == pytest.approx([3.0] * 25)
    # 25 x (flush + 2 events + launch) queued: about 25 x 64 us of host time
    assert 2 * 25 * 60e3 < rig.delay_ns < 2 * 25 * 70e3


def test_the_flush_runs_outside_the_events(rig):
    k = Kernel(rig.stream, lambda: 5e-6)[1, 1]
    assert rig.measure(k, 10) == pytest.approx([5.0] * 10)


def test_sampling_a_steady_kernel_stops_on_noise_after_two_batches(rig):
    k = Kernel(rig.stream, lambda: 7e-6)[1, 1]
    stats = rig.time(k)
    assert (stats.stopped_by, stats.median_us, stats.samples, stats.batches) == ("noise", pytest.approx(7.0), 50, 2)


def test_the_clocks_are_warmed_before_the_first_measured_kernel():
    rig = make_rig(Stream(ramp=True))
    k = Kernel(rig.stream, lambda: 7e-6, "timed")[1, 1]
    stats = rig.time(k)
    first = next(i for i, (name, _) in enumerate(rig.stream.log) if name == "timed")
    warm = [end for name, end in rig.stream.log[:first] if name == "fma"]
    assert warm and warm[-1] - rig.stream.log[0][1] >= timing.WARM_S
    assert stats.median_us == pytest.approx(7.0) and stats.p80_us == pytest.approx(7.0)


def test_without_the_warm_up_the_first_samples_run_at_idle_clocks(monkeypatch):
    rig = make_rig(Stream(ramp=True))
    monkeypatch.setattr(rig, "warm", lambda seconds=None: 0.0)
    k = Kernel(rig.stream, lambda: 7e-6, "timed")[1, 1]
    assert max(rig.measure(k, 25)) == pytest.approx(14.0)  # what the warm-up prevents


def test_a_rig_warms_again_after_sitting_idle_and_not_while_busy():
    rig = make_rig(Stream(ramp=True))
    k = Kernel(rig.stream, lambda: 7e-6, "timed")[1, 1]
    rig.time(k)
    first = rig.warmed_s
    assert first >= timing.WARM_S
    rig.time(k)
    assert rig.warmed_s == first  # just measured: still warm
    rig.stream.host += 2 * timing.IDLE_S  # compiling, checking on the host ...
    stats = rig.time(k)
    assert rig.warmed_s >= first + timing.REWARM_S
    assert stats.median_us == pytest.approx(7.0) and max(rig.measure(k, 25)) == pytest.approx(7.0)


def test_a_call_of_several_launches_is_also_timed_with_the_hosts_launch_cost(rig):
    one = Kernel(rig.stream, lambda: 3e-6)[1, 1]

    def per_sequence():  # eight launches, one per sequence
        for _ in range(8):
            one()

    stats = rig.time(per_sequence, launches=8, with_host=True)
    assert stats.median_us == pytest.approx(24.0)  # the GPU's time: host cost excluded
    assert stats.with_host_us >= 8 * HOST_LAUNCH_S * 1e6  # the host's eight launches included
    d = stats.to_json()
    assert (d["host_launch"], d["launches"]) == ("excluded", 8)
    assert rig.time(per_sequence).with_host_us is None  # only when asked


def test_the_launch_latency_is_the_gated_time_of_an_empty_kernel():
    rig = make_rig(Stream(launch_s=2.5e-6))
    assert rig.launch_us() == pytest.approx(2.5)
    rig.stream.launch_s = 9e-6
    assert rig.launch_us() == pytest.approx(2.5)  # measured once per run


def test_the_ceilings_come_from_bytes_read_plus_written_and_64_flops_per_iteration(rig, monkeypatch):
    stream = rig.stream

    class DevBuf:
        def __init__(self, n, dtype=None):
            self.nbytes = n

        def copy_to_device(self, src):
            stream.host += HOST_LAUNCH_S
            stream.run(2 * src.nbytes / 4.2e12)  # read + write at 4.2 TB/s

    monkeypatch.setattr(rig.cuda, "device_array", DevBuf, raising=False)
    assert rig.copy_gbps() == pytest.approx(4200, rel=1e-6)
    assert rig.fp32_tflops() == pytest.approx(60, rel=1e-6)
    # measured once per run
    monkeypatch.setattr(rig.cuda, "device_array", None, raising=False)
    assert rig.copy_gbps() == pytest.approx(4200, rel=1e-6)


# -- the tensor-core peaks, from a fake burner on the modelled stream

BF16_RATE = 700e12  # what the fake tensor cores do, FLOP/s
BURN_FLOPS_PER_ITER = 132 * 4 * 2 * 64 * 8 * 16  # 132 SMs x 4 warpgroups x one m64n8k16 per iteration


def fake_burner(stream: Stream, made: list):
    """``burner(kind, sm_count)``: a BF16 burn kernel on the modelled GPU,
    no FP8 form (an sm_80 part)."""

    def burner(kind, sm_count):
        made.append((kind, sm_count))
        if kind != "bf16":
            return None
        flops = lambda iters: BURN_FLOPS_PER_ITER * iters  # noqa: E731
        kernel = Kernel(stream, lambda iters: flops(iters) / BF16_RATE, "burn")[sm_count, 128]
        return kernel, flops

    return burner


def test_a_tensor_core_peak_is_the_burners_flops_over_its_stable_time_measured_once():
    stream = Stream()
    made: list = []
    rig = make_rig(stream, fake_burner(stream, made))
    assert rig.bf16_tflops() == pytest.approx(700, rel=0.02)
    burns = [end for name, end in stream.log if name == "burn"]
    assert rig.bf16_tflops() == pytest.approx(700, rel=0.02)
    assert made == [("bf16", 132)]  # the burner asked once, with the device's SM count
    assert len([name for name, _ in stream.log if name == "burn"]) == len(burns)  # nothing launched again
    # The launch was grown until it takes PEAK_LAUNCH_US: the host's launch cost is lost in it.
    assert burns[-1] - burns[-2] >= timing.PEAK_LAUNCH_US * 1e-6 * 0.99


def test_launched_at_the_burners_first_size_the_peak_would_read_as_the_hosts_launch_rate(monkeypatch):
    stream = Stream()
    rig = make_rig(stream, fake_burner(stream, []))
    monkeypatch.setattr(timing, "PEAK_LAUNCH_US", 0.0)  # no growing: 16 iterations per launch
    assert rig.bf16_tflops() < 0.2 * 700  # what growing the launch prevents


def test_a_tensor_core_form_the_device_lacks_is_none_with_the_reason():
    stream = Stream()
    rig = make_rig(stream, fake_burner(stream, []))
    assert rig.fp8_tflops() is None
    assert "FP8" in rig.why_none["fp8_tflops"] and "sm_90a" in rig.why_none["fp8_tflops"]


def test_without_the_burner_module_the_peaks_are_none_and_say_so(rig, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "leverctl_kernels.common.peak", None)  # import fails: not there
    assert rig.bf16_tflops() is None
    assert rig.why_none["bf16_tflops"] == "this checkout has no tensor-core burner (leverctl_kernels.common.peak)"


def test_the_cublas_rate_is_a_reference_measured_once_and_none_without_torch(rig, monkeypatch):
    calls = []
    monkeypatch.setattr(timing, "cublas_bf16_rate", lambda: calls.append(1) or 650.0)
    assert rig.cublas_bf16_tflops() == rig.cublas_bf16_tflops() == 650.0 and calls == [1]
    other = make_rig(Stream())
    monkeypatch.setattr(timing, "cublas_bf16_rate", lambda: None)
    assert other.cublas_bf16_tflops() is None
    assert other.why_none["cublas_bf16_tflops"] == "torch with CUDA is not importable"


def test_without_torch_there_is_no_cublas_rate():
    try:
        import torch  # noqa: F401
    except ImportError:
        assert timing.cublas_bf16_rate(64) is None
    else:
        pytest.skip("torch is installed here")


def test_the_library_reference_is_timed_once_per_shape(rig, monkeypatch):
    calls = []
    monkeypatch.setattr(timing, "cublas_fp16_us", lambda m, n, k, l2, rule: calls.append((m, n, k)) or 3.0)
    assert rig.library_us((1, 4096, 2048)) == rig.library_us((1, 4096, 2048)) == 3.0
    assert rig.library_us((16, 4096, 2048)) == 3.0
    assert calls == [(1, 4096, 2048), (16, 4096, 2048)]


def test_without_torch_there_is_no_library_reference():
    try:
        import torch  # noqa: F401
    except ImportError:
        assert timing.cublas_fp16_us(1, 64, 64, None) is None
    else:
        pytest.skip("torch is installed here")


# -- what a GPU record takes from the rig (the kernel itself runs in the simulator)


class StubRig(FixedRig):
    """Answers the bench's questions to a rig with fixed figures (those of
    ``bench_fakes.FixedRig``), and remembers how ``time`` was asked."""

    def __init__(self):
        self.asked: dict = {}

    def time(self, launch, rule, *, launches=1, with_host=False):
        self.asked = {"launches": launches, "with_host": with_host}
        stats = timing.summarize([4.0] * 50, "noise", batches=2)
        return replace(stats, launches=launches, with_host_us=250.0 if with_host else None)

    def fp8_tflops(self):
        return self.fp8

    fp8 = 1400.0
    why_none = {"fp8_tflops": "the device has no FP8 tensor-core form the burner builds"}


def _gpu_record(launches: int = 1, rig=None, **tc):
    """A GPU record of the saxpy path's ``good`` variant making ``launches``
    launches, declared with the tensor-core fields ``tc`` (``tensor_cores``,
    ``tc_dtype``; ``on_launch=True`` sets them on the built launch instead)."""
    from bench_fakes import SHAPES, saxpy_path

    from leverctl.bench.device import Device
    from leverctl.bench.plan import items_for
    from leverctl.bench.run import run_item

    path = saxpy_path()
    on_launch = tc.pop("on_launch", False)
    good = path.variants["good"]
    if on_launch:

        def build(shape, _build=good.build):
            launch = _build(shape)
            launch.tensor_cores, launch.tc_dtype = tc["tensor_cores"], tc["tc_dtype"]
            return launch

        good = replace(good, build=build)
    else:
        good = replace(good, **tc)
    path = replace(path, variants={**path.variants, "good": replace(good, launches=launches)})
    item = items_for(path, {"gemv_sw": "good"}, [SHAPES[0]], catalog="c" * 16)[0]
    rig = rig or StubRig()
    rec = run_item(item, Device("gpu", "stub", _rig=rig), 0)
    return rec, rig


@pytest.mark.sim
def test_a_record_of_a_path_whose_variants_differ_in_launches_has_the_host_inclusive_time():
    rec, rig = _gpu_record(launches=3)  # 'good' now makes 3 launches, the others 1
    assert rec["status"] == "pass", rec["note"]
    assert rig.asked == {"launches": 3, "with_host": True}
    t, roof = rec["timing"], rec["roofline"]
    assert (t["launches"], t["with_host_us"], t["host_launch"]) == (3, 250.0, "excluded")
    assert (roof["launches"], roof["launch_us"]) == (3, 2.0)
    # 444 bytes at 4000 GB/s is 0.1 ns: the floor is the three launches
    assert roof["floor_us"] == pytest.approx(6.0, rel=1e-3) and roof["bound"] == "launch"


@pytest.mark.sim
def test_a_record_of_a_single_launch_path_is_not_timed_with_the_host():
    rec, rig = _gpu_record(launches=1)
    assert rig.asked == {"launches": 1, "with_host": False}
    assert rec["timing"]["with_host_us"] is None and rec["roofline"]["floor_us"] == pytest.approx(2.0, rel=1e-3)


# -- the rate a record's compute floor is drawn at (saxpy: 74 FLOPs, 444 bytes)


@pytest.mark.sim
def test_a_cuda_core_record_is_floored_at_the_fp32_rate():
    rec, _ = _gpu_record()
    assert (rec["tensor_cores"], rec["tc_dtype"]) == (None, None)
    assert (rec["roofline"]["compute_rate"], rec["roofline"]["compute_tflops"]) == ("fp32_tflops", 60.0)
    assert rec["note"] == ""


@pytest.mark.sim
def test_a_bf16_tensor_core_record_is_floored_at_the_bf16_peak():
    rec, _ = _gpu_record(tensor_cores="wgmma", tc_dtype="bf16")
    assert rec["status"] == "pass", rec["note"]
    assert (rec["tensor_cores"], rec["tc_dtype"]) == ("wgmma", "bf16")
    assert (rec["roofline"]["compute_rate"], rec["roofline"]["compute_tflops"]) == ("bf16_tflops", 700.0)


@pytest.mark.sim
def test_the_instruction_the_built_launch_says_wins_over_the_variants_declaration():
    # The W4A16 GEMM picks wgmma or mma.sync at build time by device: only the launch knows.
    rec, _ = _gpu_record(tensor_cores="mma.sync", tc_dtype="s8", on_launch=True)
    assert (rec["tensor_cores"], rec["tc_dtype"]) == ("mma.sync", "s8")
    assert (rec["roofline"]["compute_rate"], rec["roofline"]["compute_tflops"]) == ("fp8_tflops", 1400.0)


@pytest.mark.sim
def test_an_fp8_record_on_a_device_without_an_fp8_peak_has_no_compute_floor_and_says_why():
    rig = StubRig()
    rig.fp8 = None
    rec, _ = _gpu_record(rig=rig, tensor_cores="mma.sync", tc_dtype="e4m3")
    assert rec["status"] == "pass"
    assert (rec["roofline"]["compute_rate"], rec["roofline"]["compute_tflops"]) == ("fp8_tflops", None)
    assert rec["roofline"]["bound"] == "launch"
    assert rec["note"] == (
        "no fp8_tflops on this device (the device has no FP8 tensor-core form the burner "
        "builds): the floor has no compute term"
    )


@pytest.mark.sim
def test_a_record_measures_every_device_figure_once_before_its_timing():
    class CountingRig(StubRig):
        asked: list = []

        def __getattribute__(self, name):
            if name in ("copy_gbps", "fp32_tflops", "bf16_tflops", "fp8_tflops", "cublas_bf16_tflops"):
                type(self).asked.append(name)
            return object.__getattribute__(self, name)

    from bench_fakes import SHAPES, saxpy_path

    from leverctl.bench.device import FIGURES, Device
    from leverctl.bench.plan import items_for
    from leverctl.bench.run import run_items

    items = items_for(saxpy_path(), {"gemv_sw": "good"}, SHAPES, catalog="c" * 16)
    dev = Device("gpu", "stub", _rig=CountingRig())
    recs = run_items(items, dev, progress=False)
    assert [r["status"] for r in recs] == ["pass", "pass"]
    assert sorted(CountingRig.asked) == sorted(FIGURES)
    assert dev.to_json()["cublas_bf16_tflops"] == 650.0
