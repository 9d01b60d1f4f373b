"""Timing statistics, the stopping rule and the roofline, on synthetic samples."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from leverctl.bench.timing import (
    StopRule,
    compute_rate,
    percentile,
    relative_noise,
    roofline,
    sample_until_stable,
    summarize,
)


@pytest.mark.parametrize("q", [0, 20, 25, 50, 75, 80, 100])
def test_percentile_matches_numpy_linear_interpolation(q):
    xs = sorted(random.Random(1).uniform(1, 9) for _ in range(37))
    assert percentile(xs, q) == pytest.approx(np.percentile(xs, q))


def test_identical_samples_have_no_noise():
    assert relative_noise([5.0] * 12) == 0.0


def test_noise_is_the_relative_standard_error_of_the_median_and_shrinks_with_more_samples():
    rng = random.Random(7)
    few = [rng.gauss(100, 2) for _ in range(20)]
    many = few + [rng.gauss(100, 2) for _ in range(1980)]
    # sigma 2 % of the median: SE of the median ~ 1.2533 * 0.02 / sqrt(n)
    assert relative_noise(many) == pytest.approx(1.2533 * 0.02 / math.sqrt(2000), rel=0.15)
    assert relative_noise(many) < relative_noise(few)


def test_fewer_than_two_samples_are_infinitely_noisy():
    assert relative_noise([3.0]) == math.inf


def test_summary_reports_median_and_the_20_80_spread():
    s = summarize([float(x) for x in range(1, 102)], "noise")
    assert (s.median_us, s.p20_us, s.p80_us, s.samples) == (51.0, 21.0, 81.0, 101)
    assert s.to_json()["stopped_by"] == "noise"


class FakeClock:
    """Advances by ``step`` seconds per reading."""

    def __init__(self, step: float):
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def test_quiet_samples_stop_on_noise_after_two_batches_never_inside_the_first():
    calls = []

    def measure(n):
        calls.append(n)
        return [10.0 + 0.001 * (i % 3) for i in range(n)]

    s = sample_until_stable(measure, StopRule(min_samples=10), FakeClock(0.0))
    assert s.stopped_by == "noise"
    assert (s.samples, s.batches, calls) == (50, 2, [25, 25])
    assert s.noise <= 0.005


def first_batch_slow():
    """A timer whose first batch is quiet and wrong (idle clocks: 12 us),
    the rest 10 us."""
    calls = []

    def measure(n):
        calls.append(n)
        if len(calls) == 1:
            return [12.0 + 0.001 * (i % 3) for i in range(n)]
        return [10.0 + 0.001 * (i % 5) for i in range(n)]

    return measure


def test_a_quiet_but_slow_first_batch_cannot_end_the_sampling():
    rule = StopRule(min_samples=10, max_seconds=1e9)
    s = sample_until_stable(first_batch_slow(), rule, FakeClock(0.0))
    assert s.stopped_by == "noise" and s.batches > 2
    assert s.median_us == pytest.approx(10.0, rel=1e-3)
    # The rule it replaces (one batch may decide) reports the first batch's 12 us.
    old = sample_until_stable(first_batch_slow(), StopRule(min_samples=10, min_batches=1), FakeClock(0.0))
    assert (old.batches, old.median_us) == (1, pytest.approx(12.0, rel=1e-3))


def test_noisy_samples_keep_sampling_until_quiet_enough():
    rng = random.Random(3)
    s = sample_until_stable(
        lambda n: [rng.gauss(10, 0.5) for _ in range(n)], StopRule(min_samples=10, max_seconds=1e9), FakeClock(0.0)
    )
    # 5 % jitter needs about (1.2533 * 0.05 / 0.005)^2 ~ 160 samples
    assert s.stopped_by == "noise"
    assert 60 < s.samples < 400
    assert s.median_us == pytest.approx(10, rel=0.02)


def test_the_time_cap_stops_a_run_that_never_gets_quiet():
    rng = random.Random(4)
    s = sample_until_stable(
        lambda n: [rng.uniform(1, 100) for _ in range(n)], StopRule(min_samples=10, max_seconds=2.0), FakeClock(0.5)
    )
    assert s.stopped_by == "time"
    assert s.samples >= 10


def test_the_minimum_sample_count_holds_even_past_the_time_cap():
    rng = random.Random(5)
    s = sample_until_stable(
        lambda n: [rng.uniform(1, 100) for _ in range(min(n, 3))],
        StopRule(min_samples=10, max_seconds=0.0),
        FakeClock(10.0),
    )
    assert s.samples >= 10


def test_the_sample_cap_stops_sampling():
    rng = random.Random(6)
    s = sample_until_stable(
        lambda n: [rng.uniform(1, 100) for _ in range(n)],
        StopRule(min_samples=10, max_seconds=1e9, max_samples=60),
        FakeClock(0.0),
    )
    assert (s.stopped_by, s.samples) == ("samples", 60)


def test_a_timer_that_returns_nothing_is_an_error_not_a_hang():
    with pytest.raises(RuntimeError):
        sample_until_stable(lambda n: [], StopRule(), FakeClock(0.0))


def test_a_memory_bound_kernel_is_floored_by_the_copy_bandwidth():
    # 4 GB/s -> 4000 bytes per microsecond; 40 000 bytes = 10 us; few flops.
    roof, ach = roofline(nbytes=40_000, flops=10, median_us=20.0, copy_gbps=4.0, compute_tflops=1.0)
    assert roof["bound"] == "memory"
    assert roof["floor_us"] == pytest.approx(10.0)
    assert roof["pct_of_floor"] == pytest.approx(50.0)
    assert ach["gbps"] == pytest.approx(2.0)
    assert ach["tflops"] == pytest.approx(10 / 20e-6 / 1e12, rel=1e-3)


def test_the_floor_of_a_microsecond_decode_kernel_includes_the_launch_latency():
    # 4 MB at 4000 GB/s is 1 us of traffic; a launch costs the GPU 2.5 us.
    roof, _ = roofline(nbytes=4_000_000, flops=10, median_us=4.0, copy_gbps=4000.0, compute_tflops=60.0, launch_us=2.5)
    assert roof["floor_us"] == pytest.approx(3.5)
    assert roof["pct_of_floor"] == pytest.approx(87.5)  # not the 25 % of the traffic alone
    assert (roof["bound"], roof["launch_us"], roof["launches"]) == ("launch", 2.5, 1)
    without, _ = roofline(nbytes=4_000_000, flops=10, median_us=4.0, copy_gbps=4000.0, compute_tflops=60.0)
    assert without["pct_of_floor"] == pytest.approx(25.0) and without["bound"] == "memory"


def test_each_launch_of_a_multi_launch_call_adds_to_the_floor():
    # one launch per sequence, 8 sequences: 8 launch latencies
    roof, _ = roofline(
        nbytes=40_000_000, flops=0, median_us=40.0, copy_gbps=4000.0, compute_tflops=60.0, launch_us=2.0, launches=8
    )
    assert roof["floor_us"] == pytest.approx(10.0 + 16.0)
    assert roof["bound"] == "launch" and roof["launches"] == 8


def test_the_timing_object_says_the_host_launch_cost_is_excluded():
    d = summarize([4.0, 5.0, 6.0], "noise").to_json()
    assert d["host_launch"] == "excluded"
    assert (d["launches"], d["with_host_us"], d["batches"]) == (1, None, 1)


def test_a_compute_bound_kernel_is_floored_by_the_fp32_rate():
    # 60 TFLOP/s -> 6e7 flops per microsecond; 6e9 flops = 100 us.
    roof, ach = roofline(nbytes=1000, flops=6_000_000_000, median_us=125.0, copy_gbps=4000.0, compute_tflops=60.0)
    assert roof["bound"] == "compute"
    assert roof["floor_us"] == pytest.approx(100.0)
    assert roof["pct_of_floor"] == pytest.approx(80.0)
    assert ach["tflops"] == pytest.approx(48.0)
    assert (roof["compute_rate"], roof["compute_tflops"]) == ("fp32_tflops", 60.0)


# -- which rate a compute floor is drawn at


@pytest.mark.parametrize(
    "tensor_cores, tc_dtype, rate",
    [
        (None, None, "fp32_tflops"),
        ("mma.sync", "f16", "bf16_tflops"),
        ("wgmma", "bf16", "bf16_tflops"),
        ("wgmma", "e4m3", "fp8_tflops"),
        ("mma.sync", "e4m3-via-f16", "bf16_tflops"),  # mma.sync's E4M3 runs on the FP16 datapath
        ("mma.sync", "s8", "fp8_tflops"),  # no INT8 peak of its own: the FP8 figure
    ],
    ids=["cuda-cores", "mma-f16", "wgmma-bf16", "wgmma-e4m3", "mma-e4m3-via-f16", "mma-s8"],
)
def test_the_compute_floor_uses_the_rate_of_the_instruction_the_variant_ran_on(tensor_cores, tc_dtype, rate):
    assert compute_rate(tensor_cores, tc_dtype) == (rate, None)


def test_a_tensor_core_variant_without_an_input_type_gets_no_compute_floor_rather_than_a_guess():
    rate, why = compute_rate("wgmma", None)
    assert rate is None and "without a declared tc_dtype" in why
    rate, why = compute_rate("mma.sync", "tf32")
    assert rate is None and "tf32" in why


def test_a_tensor_core_gemm_is_floored_by_the_bf16_peak_not_the_fp32_rate():
    # m = n = k = 4096: 137 GFLOP; 700 TFLOP/s -> 196 us, FP32 at 60 -> 2.3 ms.
    flops = 2 * 4096**3
    nbytes = 3 * 2 * 4096**2
    roof, _ = roofline(
        nbytes, flops, median_us=250.0, copy_gbps=4000.0, compute_tflops=700.0, compute_rate="bf16_tflops"
    )
    assert (roof["bound"], roof["compute_rate"], roof["compute_tflops"]) == ("compute", "bf16_tflops", 700.0)
    assert roof["pct_of_floor"] == pytest.approx(100 * flops / 700e12 / 250e-6, rel=1e-3)  # 78.5 %
    # The same timing against the FP32 rate would read as 9 times past the ceiling.
    fp32, _ = roofline(nbytes, flops, median_us=250.0, copy_gbps=4000.0, compute_tflops=60.0)
    assert fp32["pct_of_floor"] > 900


def test_a_variant_with_part_of_its_flops_on_tensor_cores_pays_the_rest_at_the_fp32_rate():
    # 1 TFLOP, a third on tensor cores at 700, the rest at FP32 60: 0.48 + 11.1 ms.
    flops, tc = 3 * 10**12, 10**12
    roof, _ = roofline(
        1000,
        flops,
        median_us=20_000.0,
        copy_gbps=4000.0,
        compute_tflops=700.0,
        compute_rate="bf16_tflops",
        tc_flops=tc,
        fp32_tflops=60.0,
    )
    want = (tc / 700e12 + (flops - tc) / 60e12) * 1e6
    assert roof["floor_us"] == pytest.approx(want, rel=1e-3) and roof["tc_flops"] == tc
    # All of it at the tensor-core rate would put the floor 7x lower: the split is what moves it.
    whole, _ = roofline(
        1000, flops, median_us=20_000.0, copy_gbps=4000.0, compute_tflops=700.0, compute_rate="bf16_tflops"
    )
    assert whole["floor_us"] < roof["floor_us"] / 7 and whole["tc_flops"] is None
    # On CUDA cores the split means nothing.
    fp32, _ = roofline(
        1000, flops, median_us=20_000.0, copy_gbps=4000.0, compute_tflops=60.0, tc_flops=tc, fp32_tflops=60.0
    )
    assert fp32["floor_us"] == pytest.approx(flops / 60e12 * 1e6, rel=1e-3) and fp32["tc_flops"] is None


def test_gdn_chunked_traffic_names_its_tensor_core_part():
    from leverctl_kernels.gdn.prefill import spec

    shape = {"t": 100, "chunk": 64, "hk": 1, "hv": 2, "dk": 16, "dv": 8}
    t = spec.prefill_traffic(type("S", (), {"__getitem__": lambda self, k: shape[k]})())
    assert 0 < t.tc_flops < t.flops
    tri = lambda L: L * (L - 1) // 2  # noqa: E731
    assert t.tc_flops == 2 * (2 * tri(64) * 16 + 2 * (tri(64) + 64) * 16 + 2 * tri(36) * 16 + 2 * (tri(36) + 36) * 16)


def test_pct_of_floor_is_against_the_larger_of_the_compute_and_memory_floors():
    # 8 MB at 4000 GB/s = 2 us; 1.4 GFLOP at 700 TFLOP/s = 2 us + a hair more.
    mem, _ = roofline(
        8_000_000, 1_000_000_000, median_us=4.0, copy_gbps=4000.0, compute_tflops=700.0, compute_rate="bf16_tflops"
    )
    assert mem["bound"] == "memory" and mem["floor_us"] == pytest.approx(2.0)
    cmp_, _ = roofline(
        8_000_000, 2_800_000_000, median_us=8.0, copy_gbps=4000.0, compute_tflops=700.0, compute_rate="bf16_tflops"
    )
    assert cmp_["bound"] == "compute" and cmp_["floor_us"] == pytest.approx(4.0)
    assert cmp_["pct_of_floor"] == pytest.approx(50.0)


def test_without_a_measured_rate_the_floor_is_the_memory_term_and_names_the_missing_rate():
    roof, _ = roofline(
        8_000_000, 10**12, median_us=4.0, copy_gbps=4000.0, compute_tflops=None, compute_rate="fp8_tflops"
    )
    assert (roof["bound"], roof["floor_us"]) == ("memory", pytest.approx(2.0))
    assert (roof["compute_rate"], roof["compute_tflops"]) == ("fp8_tflops", None)
