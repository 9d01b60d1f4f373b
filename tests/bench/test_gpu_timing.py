"""Timing sanity on a real GPU (LEVERCTL_TEST_DEVICE=gpu pytest -m gpu).

These check the rig against things whose answer is known: a kernel that
spins for a set time, an empty kernel (whose time must not include numba's
launch overhead), the measured ceilings (the tensor-core peaks among them)
and launch latency, the clock
warm-up, a call of several launches timed with and without the host's
launch cost, and one full record.
"""

from __future__ import annotations

import pytest
from bench_fakes import saxpy_path

from leverctl.bench.plan import items_for
from leverctl.bench.run import run_item
from leverctl.bench.timing import StopRule, _kernels
from leverctl_kernels.common.path import Shape

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu():
    from leverctl.bench import device

    d = device.choose("gpu")
    d.rig()  # builds the flush buffer
    return d


def test_events_time_a_kernel_that_spins_for_50_microseconds(gpu):
    import numpy as np
    from numba import cuda

    delay = _kernels()[0]
    sink = cuda.device_array(1, dtype=np.int32)
    delay[1, 1](np.uint64(1000), sink)  # compile
    cuda.synchronize()
    times = gpu.rig().measure(lambda: delay[1, 1](np.uint64(50_000), sink), 20, flush=False)
    med = sorted(times)[10]
    assert 48 <= med <= 65, times


def _empty_launch():
    """One block of an empty kernel, compiled and run once already."""
    import numpy as np
    from numba import cuda

    @cuda.jit
    def empty(a):
        pass

    a = cuda.device_array(1, dtype=np.float32)
    empty[1, 32](a)
    cuda.synchronize()
    return lambda: empty[1, 32](a)


def test_an_empty_kernel_is_timed_without_the_hosts_launch_overhead(gpu):
    stats = gpu.rig().time(_empty_launch(), StopRule(max_seconds=1.0))
    # A launch costs the host tens of microseconds in numba; on the GPU an
    # empty kernel is a few. Queued behind the delay kernel we see the latter.
    assert stats.median_us < 10, stats


def test_the_launch_latency_is_a_few_microseconds_and_feeds_the_floor(gpu):
    lat = gpu.rig().launch_us()
    assert 0.3 < lat < 15, lat
    assert gpu.rig().launch_us() == lat  # once per run


def test_the_rig_warms_the_clocks_before_its_first_sample(gpu):
    import numpy as np
    from numba import cuda

    from leverctl.bench import timing

    rig = gpu.rig()
    rig._idle_since = None  # as a fresh rig
    before = rig.warmed_s
    delay = _kernels()[0]
    sink = cuda.device_array(1, dtype=np.int32)
    rig.time(lambda: delay[1, 1](np.uint64(5_000), sink), StopRule(max_seconds=0.3))
    assert rig.warmed_s - before >= timing.WARM_S


def test_several_launches_cost_the_host_more_than_the_gpu(gpu):
    launch = _empty_launch()

    def eight():
        for _ in range(8):
            launch()

    stats = gpu.rig().time(eight, StopRule(max_seconds=0.5), launches=8, with_host=True)
    # numba's launch costs the host microseconds each; queued, the GPU does not wait for it
    assert stats.with_host_us > stats.median_us, stats
    assert stats.to_json()["host_launch"] == "excluded"


def test_the_measured_ceilings_are_plausible(gpu, monkeypatch):
    copy, fp32 = gpu.copy_gbps, gpu.fp32_tflops
    assert 100 < copy < 20_000
    assert 1 < fp32 < 500
    # measured once per run: asked again, the device gives the very figures it measured, and the rig, which
    # measured them, keeps them and measures nothing more
    rig = gpu.rig()
    assert rig._copy_gbps == copy and rig._fp32_tflops == fp32
    monkeypatch.setattr(rig, "measure", lambda *a, **k: pytest.fail("a ceiling was measured a second time"))
    assert gpu.copy_gbps is copy and gpu.fp32_tflops is fp32
    assert rig.copy_gbps() is copy and rig.fp32_tflops() is fp32


def test_the_tensor_core_peaks_are_plausible_and_above_the_fp32_rate(gpu):
    # An H100/H200 is specified at ~990 dense BF16 and ~1980 dense FP8 TFLOP/s;
    # an A100 at 312 BF16 and no FP8. Any sm_80+ part has a BF16 form.
    figures = gpu.measure_figures()
    bf16, fp8 = figures["bf16_tflops"], figures["fp8_tflops"]
    assert bf16 is not None, gpu.ceiling_notes
    assert 2 * gpu.fp32_tflops < bf16 < 3000, figures
    if gpu.compute_capability and gpu.compute_capability.startswith("9."):
        assert fp8 is not None and 1.3 * bf16 < fp8 < 6000, (figures, gpu.ceiling_notes)
    lib = figures["cublas_bf16_tflops"]
    if lib is not None:  # torch is optional; when there, cuBLAS comes near the peak
        assert 0.3 * bf16 < lib < 1.5 * bf16, figures
    assert gpu.measure_figures() == figures  # measured once per run


def test_sampling_stops_by_its_rule_with_a_sane_spread(gpu):
    import numpy as np
    from numba import cuda

    delay = _kernels()[0]
    sink = cuda.device_array(1, dtype=np.int32)
    stats = gpu.rig().time(lambda: delay[1, 1](np.uint64(20_000), sink), StopRule(max_seconds=1.0))
    assert stats.stopped_by in ("noise", "time")
    assert stats.samples >= 10
    assert stats.p20_us <= stats.median_us <= stats.p80_us
    if stats.stopped_by == "noise":
        assert stats.noise <= 0.005


def test_a_gpu_record_has_timing_roofline_and_a_recheck(gpu):
    path = saxpy_path()
    item = items_for(path, {"gemv_sw": True}, [Shape("n4M", {"n": 1 << 22})])[0]
    rec = run_item(item, gpu, 0, stop=StopRule(max_seconds=0.5))
    assert rec["status"] == "pass", rec["note"]
    assert rec["error"]["rechecked"] is True
    t, roof = rec["timing"], rec["roofline"]
    assert t["samples"] >= 10 and t["median_us"] > 0
    assert roof["bound"] == "memory" and 0 < roof["pct_of_floor"] <= 150
    assert roof["launches"] == 1 and 0 < roof["launch_us"] < 15
    # 48 MiB moved: well above launch overhead, near the copy bandwidth
    assert rec["achieved"]["gbps"] > 0.2 * gpu.copy_gbps
