"""The rig's tensor-core peak kernels (``common/peak.py``) compile without a
GPU: the warpgroup burns for sm_90a (bf16 HGMMA.64x256x16, E4M3
QGMMA.64x256x32, four per commit group, never serialised), the warp burn
for sm_90 (HMMA.16816.F32.BF16), all with no spills; and the FLOP count a
burn reports is the instructions' work."""

from __future__ import annotations

import re
import subprocess

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm, sm90a  # noqa: F401 (compiled, sm90a: fixtures)

SASS = {"peak_bf16": "HGMMA.64x256x16.F32.BF16", "peak_e4m3": "QGMMA.64x256x32.F32.E4M3.E4M3"}


def jobs():
    from numba import types

    from leverctl_kernels.common import peak

    sig = (types.float32[::1], types.int64)
    return [
        ("peak_bf16", peak.wgmma_kernel("bf16"), sig, 128),
        ("peak_e4m3", peak.wgmma_kernel("e4m3"), sig, 128),
        ("peak_mma_bf16", peak.mma_sync_kernel(), sig, peak.WARPS_MMA * 32),
    ]


def test_the_peak_kernels_compile_in_fp32(compiled):
    check_ptx(compiled, fp64=False)


def test_ptxas_for_sm90a_accepts_them_without_spills_or_serialisation(sm90a):
    check_ptxas(sm90a)
    for name, rec in sm90a["kernels"].items():
        assert not re.findall(r"\(C75\d\d\)", rec["log"]), f"{name}: {rec['log']}"


def test_the_sass_is_the_widest_warpgroup_mma(sm90a):
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    for name, want in SASS.items():
        sass = subprocess.run(
            [disasm, sm90a["kernels"][name]["cubin"]], check=True, capture_output=True, text=True
        ).stdout
        gmma = re.findall(r"\b[HQ]GMMA\.[\w.]+", sass)
        assert len(gmma) == 4 and all(g.startswith(want) for g in gmma), (name, gmma)
    sass = subprocess.run(
        [disasm, sm90a["kernels"]["peak_mma_bf16"]["cubin"]], check=True, capture_output=True, text=True
    ).stdout
    hmma = re.findall(r"\bHMMA\.[\w.]+", sass)
    assert len(hmma) >= 4 and all(h.startswith("HMMA.16816.F32.BF16") for h in hmma), hmma


def test_flops_per_group_is_the_instructions_work():
    from leverctl_kernels.common import peak

    assert peak.flops_per_group("bf16", "wgmma") == 4 * 2 * 64 * 256 * 16
    assert peak.flops_per_group("e4m3", "wgmma") == 4 * 2 * 64 * 256 * 32
    assert peak.flops_per_group("bf16", "mma.sync") == 4 * 4 * 2 * 16 * 8 * 16


def test_no_fp8_burn_without_wgmma_and_unknown_kinds_are_refused():
    from leverctl_kernels.common import peak

    assert peak.burner("e4m3", 132, form="mma.sync") is None
    with pytest.raises(ValueError, match="bf16 or e4m3"):
        peak.burner("fp32", 132)
