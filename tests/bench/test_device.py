"""Choosing the device: the GPU probe's reasons, and auto/gpu/sim."""

from __future__ import annotations

import pytest

from leverctl.bench import device
from leverctl.errors import UserError


class FakeDriver:
    """Stands in for libcuda.so.1 behind ctypes: each cu* call returns a
    CUresult and writes through its byref arguments."""

    def __init__(self, init=0, count=1):
        self.init, self.count = init, count

    def cuInit(self, flags):
        return self.init

    def cuGetErrorName(self, code, out):
        out._obj.value = {100: b"CUDA_ERROR_NO_DEVICE", 999: b"CUDA_ERROR_UNKNOWN"}[code]
        return 0

    def cuDeviceGetCount(self, out):
        out._obj.value = self.count
        return 0

    def cuDeviceGet(self, out, ordinal):
        out._obj.value = ordinal
        return 0

    def cuDeviceGetName(self, buf, size, dev):
        buf.value = b"Fake H200"
        return 0

    def cuDeviceGetAttribute(self, out, which, dev):
        out._obj.value = {75: 9, 76: 0, 38: 60 << 20, 16: 132}[which]
        return 0

    def cuDriverGetVersion(self, out):
        out._obj.value = 13000
        return 0


def _loader(driver):
    def load(name):
        assert name == "libcuda.so.1"
        if driver is None:
            raise OSError("libcuda.so.1: cannot open shared object file")
        return driver

    return load


def test_no_driver_library_says_so():
    p = device.probe_gpu(_loader(None))
    assert (p.ok, p.reason) == (False, "no NVIDIA driver (libcuda.so.1 not found)")


def test_a_failing_cuinit_names_the_error():
    p = device.probe_gpu(_loader(FakeDriver(init=999)))
    assert (p.ok, p.reason) == (False, "cuInit failed: CUDA_ERROR_UNKNOWN")


def test_a_driver_with_no_devices_says_so():
    p = device.probe_gpu(_loader(FakeDriver(count=0)))
    assert (p.ok, p.reason) == (False, "no CUDA devices")


def test_a_working_driver_describes_device_zero():
    p = device.probe_gpu(_loader(FakeDriver()))
    assert p.ok and p.name == "Fake H200" and p.compute_capability == "9.0"
    assert p.l2_bytes == 60 << 20 and p.sm_count == 132
    assert "CUDA 13.0" in p.driver
    assert p.cuda_driver == "13.0"


def test_unknown_device_choice_is_bad_input():
    with pytest.raises(UserError, match="choose one of auto, gpu, sim"):
        device.choose("tpu")


def test_gpu_without_a_gpu_is_bad_input_with_the_reason():
    with pytest.raises(UserError) as e:
        device.choose("gpu", probe=lambda: device.Probe(False, "no CUDA devices"))
    assert e.value.line() == "--device gpu: no CUDA devices"


@pytest.mark.skipif(device.probe_gpu().ok, reason="this machine has a GPU")
def test_auto_without_a_gpu_is_the_simulator_and_keeps_the_reason():
    d = device.choose("auto", probe=lambda: device.Probe(False, "no NVIDIA driver (libcuda.so.1 not found)"))
    assert d.kind == "sim" and d.why_sim == "no NVIDIA driver (libcuda.so.1 not found)"
    assert d.copy_gbps is None and d.fp32_tflops is None
    assert d.bf16_tflops is None and d.fp8_tflops is None and d.cublas_bf16_tflops is None
    assert d.measure_figures() == dict.fromkeys(device.FIGURES)
    j = d.to_json()
    assert set(j) == {
        "kind",
        "name",
        "compute_capability",
        "driver",
        "copy_gbps",
        "fp32_tflops",
        "bf16_tflops",
        "fp8_tflops",
        "cublas_bf16_tflops",
        "why_sim",
    }


def test_versions_name_the_libraries_and_the_cuda_versions_the_first_kernel_found():
    assert set(device.versions()) == {
        "leverctl",
        "python",
        "numba",
        "numba_cuda",
        "numpy",
        "cuda_driver",
        "cuda_runtime",
        "nvvm",
        "ptx_isa",
        "ptx_target",
    }
    assert device.versions()["numpy"]
    assert device.versions()["cuda_driver"] is None
    gpu = device.Device(
        "gpu",
        "Fake H200",
        cuda={"cuda_driver": "12.4", "cuda_runtime": "12.9", "nvvm": "2.0", "ptx_isa": "8.8", "ptx_target": "sm_90a"},
    )
    v = device.versions(gpu)
    assert (v["cuda_driver"], v["cuda_runtime"], v["nvvm"], v["ptx_isa"], v["ptx_target"]) == (
        "12.4",
        "12.9",
        "2.0",
        "8.8",
        "sm_90a",
    )


def test_describing_a_gpu_reads_only_what_was_gathered_and_never_measures():
    class Untouchable:
        def copy_gbps(self):
            raise AssertionError("the context was touched to describe the device")

        fp32_tflops = copy_gbps

    gpu = device.Device("gpu", "Fake H200", _rig=Untouchable())
    assert gpu.to_json()["copy_gbps"] is None
    gpu._ceilings.update(copy_gbps=4321.0, fp32_tflops=60.0)
    assert (gpu.to_json()["copy_gbps"], gpu.to_json()["fp32_tflops"]) == (4321.0, 60.0)


class FigureRig:
    """A rig whose figures are fixed, counted as they are asked for."""

    def __init__(self, **figures):
        self.figures = {
            "copy_gbps": 4000.0,
            "fp32_tflops": 60.0,
            "bf16_tflops": 700.0,
            "fp8_tflops": 1400.0,
            "cublas_bf16_tflops": 650.0,
            **figures,
        }
        self.asked: list[str] = []
        self.why_none = {"fp8_tflops": "the device has no FP8 tensor-core form the burner builds"}

    def __getattr__(self, name):
        if name not in device.FIGURES:
            raise AttributeError(name)

        def measure():
            self.asked.append(name)
            value = self.figures[name]
            if isinstance(value, Exception):
                raise value
            return value

        return measure


def test_a_gpu_measures_every_figure_once_and_describes_them():
    rig = FigureRig()
    gpu = device.Device("gpu", "Fake H200", _rig=rig)
    assert gpu.measure_figures() == rig.figures
    gpu.measure_figures()
    assert (gpu.bf16_tflops, gpu.fp8_tflops, gpu.cublas_bf16_tflops) == (700.0, 1400.0, 650.0)
    assert gpu.figure("bf16_tflops") == 700.0
    assert sorted(rig.asked) == sorted(device.FIGURES)  # once each
    j = gpu.to_json()
    assert [k for k in j if k in device.FIGURES] == list(device.FIGURES)
    assert (j["bf16_tflops"], j["fp8_tflops"], j["cublas_bf16_tflops"]) == (700.0, 1400.0, 650.0)
    with pytest.raises(KeyError, match="no device figure 'int8_tops'"):
        gpu.figure("int8_tops")


def test_a_tensor_core_peak_the_device_lacks_is_null_and_says_why():
    gpu = device.Device("gpu", "Fake A100", _rig=FigureRig(fp8_tflops=None))
    assert gpu.fp8_tflops is None and gpu.to_json()["fp8_tflops"] is None
    assert gpu.ceiling_notes == {"fp8_tflops": "the device has no FP8 tensor-core form the burner builds"}


def test_a_peak_that_fails_to_measure_is_null_with_its_error_and_never_retried():
    rig = FigureRig(bf16_tflops=RuntimeError("ptxas: wgmma needs sm_90a"))
    gpu = device.Device("gpu", "Fake H200", _rig=rig)
    figures = gpu.measure_figures()
    assert figures["bf16_tflops"] is None and figures["fp8_tflops"] == 1400.0 and gpu.lost is None
    assert gpu.ceiling_notes["bf16_tflops"] == "RuntimeError: ptxas: wgmma needs sm_90a"
    assert gpu.bf16_tflops is None and rig.asked.count("bf16_tflops") == 1


def test_copy_bandwidth_and_the_fp32_rate_are_required_ceilings_whose_failure_raises():
    gpu = device.Device("gpu", "Fake H200", _rig=FigureRig(copy_gbps=RuntimeError("out of memory")))
    with pytest.raises(RuntimeError, match="out of memory"):
        gpu.measure_figures()


def test_a_peak_that_loses_the_context_stops_the_run():
    class CudaAPIError(Exception):
        code = 700  # CUDA_ERROR_ILLEGAL_ADDRESS: sticky

    rig = FigureRig(bf16_tflops=CudaAPIError("illegal address"))
    gpu = device.Device("gpu", "Fake H200", _rig=rig)
    gpu.measure_figures()
    assert gpu.lost and "bf16_tflops" in gpu.lost
    assert "fp8_tflops" not in rig.asked  # nothing touches a lost context
