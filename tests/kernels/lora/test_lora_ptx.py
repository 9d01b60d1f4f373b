"""The LoRA kernels compile for sm_90 (H200) without a GPU
(``ptx_harness``): no fp64, no spills, stack or local memory, registers and
static shared memory within an SM's; all three run on FP32 cores (no
tensor-core opcode in their SASS, as their records say)."""

from __future__ import annotations

import subprocess

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)
from ptx_harness import sass as sass_of
from tc_claims import claim_problems

NAMES = ("lora_proj_fused", "lora_proj_base", "lora_xa", "lora_merge")


def jobs():
    from numba import types

    from leverctl_kernels.lora import _kernels as K

    f16, f32 = types.float16, types.float32
    proj_sig = (f16[:, ::1], f16[:, ::1], f16[:, ::1], f32[:, ::1], f16[:, ::1], f32)
    threads = K.WARPS * 32
    return [
        ("lora_proj_fused", K.make_proj(True), proj_sig, threads),
        ("lora_proj_base", K.make_proj(False), proj_sig, threads),
        ("lora_xa", K.make_xa(), (f32[:, ::1], f16[:, ::1], f16[:, ::1]), threads),
        ("lora_merge", K.make_merge(), (f16[:, ::1], f16[:, ::1], f16[:, ::1], f16[:, ::1], f32), K.MERGE_THREADS),
    ]


def test_lora_kernels_compile_for_sm90_in_fp32(compiled):
    assert set(compiled["kernels"]) == set(NAMES)
    check_ptx(compiled, fp64=False)


def test_ptxas_accepts_them_without_spills(compiled):
    check_ptxas(compiled)


def test_their_sass_has_no_tensor_core_opcode(compiled):
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    for name in NAMES:
        sass = sass_of(compiled, name)
        assert claim_problems(sass, None, None) == [], (name, claim_problems(sass, None, None))


def test_the_merge_moves_w_a_and_w_merged_16_bytes_an_access_without_spilling(compiled):
    """The merge's 16-byte path: W's rows and A's staged strip by
    ``ld.global.nc.v4.u32`` (SASS ``LDG.E.128.CONSTANT``), W' by
    ``st.global.v4.b32`` (``STG.E.128``), A's strip into and out of shared
    memory by ``st.shared.v4.b32``/``ld.shared.v4.b32``; its register tile
    held in registers: no spill, stack or local memory."""
    from pathlib import Path

    rec = compiled["kernels"]["lora_merge"]
    if "error" in rec:
        pytest.fail("lora_merge does not compile for sm_90 (see the compile test)")
    ptx = Path(rec["ptx"]).read_text()
    for op in ("ld.global.nc.v4.u32", "st.global.v4.b32", "st.shared.v4.b32", "ld.shared.v4.b32"):
        assert op in ptx, f"lora_merge: no {op} in {rec['ptx']}"
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    assert rec["rc"] == 0 and (rec["spill"], rec["stack"], rec["lmem"]) == (0, 0, 0), rec["log"]
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    sass = sass_of(compiled, "lora_merge")
    assert "LDG.E.128.CONSTANT" in sass and "STG.E.128" in sass, "lora_merge: no 16-byte global load or store in SASS"
    assert "STL" not in sass and "LDL" not in sass, "lora_merge: local memory in its SASS"
