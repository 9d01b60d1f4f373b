"""What a tensor-core claim means in machine code: a record's
``tensor_cores`` ("wgmma" | "mma.sync") and ``tc_dtype`` (the inputs the
tensor cores take) name the SASS opcode the variant's kernels must hold.
:func:`claim_problems` reads a kernel's SASS against its claim; the family
SASS tests and ``test_tc_claims.py`` call it.

    claim                          SASS it must hold (and must not)
    wgmma     f16                  HGMMA.<MxNxK>.F32          (not .BF16)
    wgmma     bf16                 HGMMA.<MxNxK>.F32.BF16
    wgmma     e4m3                 QGMMA.<MxNxK>.F32.E4M3.E4M3
    mma.sync  f16                  HMMA.16816.F32             (not .BF16)
    mma.sync  bf16                 HMMA.16816.F32.BF16
    mma.sync  s8                   IMMA.16832.S8.S8
    mma.sync  e4m3-via-f16         HMMA.16816.F32: sm_90 runs mma.sync's E4M3
                                   form on the FP16 datapath, and a record
                                   says so by this name

A kernel that claims FP8 (``e4m3``) and whose SASS shows only HMMA fails:
the FP8 tensor cores are reached through wgmma alone, and a timing of FP8
through FP16 must say so. A warpgroup claim with warp MMA in the SASS (or the
other way round) fails too.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

_GMMA = re.compile(r"\b([HQ]GMMA)\.(\d+x\d+x\d+)\.([\w.]+)")
_WARP = re.compile(r"\b([HI]MMA)\.(\d+)\.([\w.]+)")

FORMS = ("wgmma", "mma.sync")
DTYPES = ("f16", "bf16", "e4m3", "s8", "e4m3-via-f16")


def opcodes(sass: str) -> list[str]:
    """Every tensor-core opcode in ``sass``, in order."""
    return [m.group(0) for m in re.finditer(r"\b(?:[HQ]GMMA|[HI]MMA)\.[\w.]+", sass)]


def _want(form: str, dtype: str):
    """(predicate on one opcode, description) for a claim."""
    if form == "wgmma":
        table = {
            "f16": (lambda op: op.startswith("HGMMA.") and ".F32" in op and "BF16" not in op, "HGMMA .F32 (fp16)"),
            "bf16": (lambda op: op.startswith("HGMMA.") and op.split(".")[2:4] == ["F32", "BF16"], "HGMMA .F32.BF16"),
            "e4m3": (lambda op: op.startswith("QGMMA.") and ".E4M3.E4M3" in op, "QGMMA .E4M3.E4M3"),
        }
    else:
        table = {
            "f16": (lambda op: op.startswith("HMMA.16816.F32") and "BF16" not in op, "HMMA.16816.F32 (fp16)"),
            "bf16": (lambda op: op.startswith("HMMA.16816.F32.BF16"), "HMMA.16816.F32.BF16"),
            "s8": (lambda op: op.startswith("IMMA.16832.S8.S8"), "IMMA.16832.S8.S8"),
            "e4m3-via-f16": (
                lambda op: op.startswith("HMMA.16816.F32") and "BF16" not in op,
                "HMMA.16816.F32 (E4M3 through FP16)",
            ),
        }
    return table.get(dtype)


def claim_problems(sass: str, tensor_cores: str | None, tc_dtype: str | None) -> list[str]:
    """Why ``sass`` does not hold what the claim says (empty: it does)."""
    ops = opcodes(sass)
    if tensor_cores is None:
        return [f"claims no tensor cores but the SASS has {sorted(set(ops))}"] if ops else []
    if tensor_cores not in FORMS or tc_dtype not in DTYPES:
        return [f"unknown claim {tensor_cores!r} / {tc_dtype!r}"]
    want = _want(tensor_cores, tc_dtype)
    if want is None:
        if tc_dtype == "e4m3" and tensor_cores == "mma.sync":
            return [
                "claims FP8 (e4m3) on mma.sync: sm_90 runs that through FP16 (HMMA); the claim must say e4m3-via-f16"
            ]
        return [f"{tensor_cores} has no {tc_dtype} form"]
    ok, what = want
    problems = []
    if not ops:
        problems.append(f"claims {tensor_cores} {tc_dtype} ({what}) but the SASS has no tensor-core opcode")
    elif not any(ok(op) for op in ops):
        if tc_dtype == "e4m3" and all(op.startswith("HMMA.") for op in ops):
            problems.append(
                f"claims FP8 tensor cores ({what}) but the SASS shows only HMMA "
                f"{sorted(set(ops))}: FP8 through FP16, which the claim must say (e4m3-via-f16)"
            )
        else:
            problems.append(f"claims {tensor_cores} {tc_dtype} ({what}); the SASS has {sorted(set(ops))}")
    other = [op for op in ops if (op[1:4] == "MMA") != (tensor_cores == "mma.sync")]
    if other:
        problems.append(f"claims {tensor_cores} but the SASS also has {sorted(set(other))}")
    return problems


# Which compiled kernels prove each tensor-core variant's claim, per form it
# can run on: (path, variant, form) -> (the *_ptx.py test module that
# compiles them, its job names). test_tc_claims.py checks that every
# variant claiming tensor cores is here for every form its build can take;
# each listed module checks the SASS of its jobs with :func:`check_claims`.
CLAIM_JOBS: dict[tuple[str, str, str], tuple[str, tuple[str, ...]]] = {
    ("w4a16.gemm", "small_m", "wgmma"): ("test_w4a16_wgmma_ptx", ("gemm_wgmma_bn64",)),
    ("w4a16.gemm", "default_tiles", "wgmma"): ("test_w4a16_wgmma_ptx", ("gemm_wgmma_bn128",)),
    ("w4a16.gemm", "small_m", "mma.sync"): ("test_w4a16_mma_ptx", ("gemm_tc_mma_sync_bn64",)),
    ("w4a16.gemm", "default_tiles", "mma.sync"): ("test_w4a16_mma_ptx", ("gemm_tc_mma_sync_bn128",)),
    ("gdn.prefill", "regresident", "mma.sync"): ("test_gdn_ptx", ("prefill_regresident",)),
    ("gdn.prefill", "global_state", "mma.sync"): ("test_gdn_ptx", ("prefill_global_state",)),
    ("gdn.prefill_multi_stream", "batched", "mma.sync"): ("test_gdn_ptx", ("prefill_multi_stream",)),
    ("gdn.prefill_multi_stream", "per_stream", "mma.sync"): ("test_gdn_ptx", ("prefill_regresident",)),
    ("gdn.verify", "wy17", "mma.sync"): ("test_gdn_ptx", ("verify_wy17",)),
    ("gdn.verify", "wyn", "mma.sync"): ("test_gdn_ptx", ("verify_wyn_t17", "verify_wyn_t5")),
    ("mamba2.prefill_scan", "ssd", "mma.sync"): ("test_mamba2_ptx", ("ssd_chunk_scan", "ssd_chunk_scan_largest")),
    ("ffn.prefill", "bf16_v1", "wgmma"): ("test_ffn_prefill_wgmma_ptx", ("bf16_v1_gemm",)),
    ("ffn.prefill", "bf16_v2", "wgmma"): ("test_ffn_prefill_wgmma_ptx", ("bf16_v2_gemm",)),
    ("ffn.prefill", "w4a4", "wgmma"): ("test_ffn_prefill_wgmma_ptx", ("w4a4_gemm",)),
    ("ffn.prefill", "fp8_m64", "wgmma"): ("test_ffn_prefill_wgmma_ptx", ("fp8_m64_gemm",)),
    ("ffn.prefill", "int8_faith2", "mma.sync"): ("test_ffn_prefill_ptx", ("int8_faith2_gemm",)),
    ("ffn.prefill", "int8_faith5", "mma.sync"): ("test_ffn_prefill_ptx", ("int8_faith5_gemm",)),
    ("ffn.prefill", "q4k_mmq", "mma.sync"): ("test_ffn_prefill_ptx", ("q4k_mmq",)),
    ("attention.proj_bf16_tc", "bf16_tc", "wgmma"): ("test_projections_ptx", ("proj_bf16_tc",)),
    ("attention.proj_bf16_tc", "bf16_tc", "mma.sync"): ("test_projections_ptx", ("proj_bf16_tc_mma",)),
    ("attention.proj_bf16_tc_w4a16", "bf16_n128", "mma.sync"): ("test_projections_ptx", ("proj_bf16_n128_mma",)),
    ("attention.proj_bf16_tc", "fp8_e4m3", "wgmma"): ("test_projections_ptx", ("proj_fp8_e4m3",)),
    ("attention.proj_bf16_tc_w4a16", "bf16_n128", "wgmma"): ("test_projections_ptx", ("proj_bf16_n128",)),
    ("attention.proj_bf16_tc_w4a16", "w4a16_f16", "wgmma"): ("test_w4a16_wgmma_ptx", ("gemm_wgmma_bn128",)),
    ("attention.proj_bf16_tc_w4a16", "w4a16_f16", "mma.sync"): ("test_w4a16_mma_ptx", ("gemm_tc_mma_sync_bn128",)),
    ("attention.rotation", "runtime_rotation", "wgmma"): ("test_attention_rotation_ptx", ("project_wgmma",)),
    ("attention.rotation", "runtime_rotation", "mma.sync"): ("test_attention_rotation_ptx", ("project_mma",)),
    ("attention.rotation", "pre_rotated", "wgmma"): ("test_attention_rotation_ptx", ("project_wgmma",)),
    ("attention.rotation", "pre_rotated", "mma.sync"): ("test_attention_rotation_ptx", ("project_mma",)),
    ("attention.proj_fp8", "m16", "wgmma"): ("test_projections_ptx", ("proj_fp8_m16",)),
    ("attention.proj_fp8", "m32", "wgmma"): ("test_projections_ptx", ("proj_fp8_m32",)),
    ("ffn.prefill", "nvfp4_mmq", "mma.sync"): ("test_ffn_prefill_ptx", ("nvfp4_mmq",)),
    ("ffn.prefill", "bf16_v1", "mma.sync"): ("test_ffn_prefill_ptx", ("bf16_v1_gemm_mma",)),
    ("ffn.prefill", "bf16_v2", "mma.sync"): ("test_ffn_prefill_ptx", ("bf16_v2_gemm_mma",)),
    ("ffn.prefill", "w4a4", "mma.sync"): ("test_ffn_prefill_ptx", ("w4a4_gemm_mma",)),
    ("mamba2.prefill_proj", "w4a4", "wgmma"): ("test_ffn_prefill_wgmma_ptx", ("w4a4_gemm",)),
    ("mamba2.prefill_proj", "w4a4", "mma.sync"): ("test_ffn_prefill_ptx", ("w4a4_gemm_mma",)),
    ("moe.gateup_fp4", "int4", "mma.sync"): ("test_moe_ptx", ("gateup_tc_int4",)),
    ("moe.gateup_fp4", "nvfp4", "mma.sync"): ("test_moe_ptx", ("gateup_tc_nvfp4",)),
    ("moe.down_fp4", "int4", "mma.sync"): ("test_moe_ptx", ("down_tc_int4",)),
    ("moe.down_fp4", "nvfp4", "mma.sync"): ("test_moe_ptx", ("down_tc_nvfp4",)),
    # the decode variants: the 64-row kernels and the 16-row decode tile's the launch takes at decode shapes
    ("moe.decode_fp8_grouped", "grouped", "mma.sync"): (
        "test_moe_ptx",
        ("gateup_tc_fp8", "down_tc_fp8", "gateup_tc_fp8_decode", "down_tc_fp8_decode"),
    ),
    ("moe.decode_via_prefill", "prefill", "mma.sync"): (
        "test_moe_ptx",
        ("gateup_tc_int4", "down_tc_int4", "gateup_tc_int4_decode", "down_tc_int4_decode"),
    ),
    # The MoE prefill variants: the gate/up (or up) and the down GEMM each launches, the
    # engine's grouped kernels (common/gemm/grouped.py) on its mma.sync form.
    ("moe.prefill_grouped", "grouped", "mma.sync"): ("test_moe_prefill_ptx", ("gateup_grouped", "down_grouped")),
    ("moe.prefill_grouped", "grouped+fp8_down", "mma.sync"): (
        "test_moe_prefill_ptx",
        ("gateup_grouped", "down_fp8_bounded"),
    ),
    ("moe.prefill_grouped", "grouped+bounded_down", "mma.sync"): (
        "test_moe_prefill_ptx",
        ("gateup_grouped", "down_bounded"),
    ),
    ("moe.prefill_grouped", "bounded+fp8_down", "mma.sync"): (
        "test_moe_prefill_ptx",
        ("gateup_bounded", "down_fp8_bounded"),
    ),
    ("moe.prefill_grouped", "bounded", "mma.sync"): ("test_moe_prefill_ptx", ("gateup_bounded", "down_bounded")),
    ("moe.prefill_sorted", "a16", "mma.sync"): ("test_moe_prefill_ptx", ("sorted_up", "down_bounded")),
    ("moe.prefill_sorted", "w4a4_up", "mma.sync"): ("test_moe_prefill_ptx", ("sorted_up_w4a4", "down_bounded")),
    ("moe.shared_expert", "a16", "mma.sync"): ("test_moe_prefill_ptx", ("shared_up", "down_grouped")),
    ("moe.shared_expert", "w4a4_up", "mma.sync"): ("test_moe_prefill_ptx", ("shared_up_w4a4", "down_grouped")),
    ("moe.shared_expert", "w4a4_down", "mma.sync"): ("test_moe_prefill_ptx", ("shared_up", "shared_down_w4a4")),
    ("moe.shared_expert", "w4a4", "mma.sync"): ("test_moe_prefill_ptx", ("shared_up_w4a4", "shared_down_w4a4")),
}


def claim_module(name: str):
    """The SASS test module ``name`` (a :data:`CLAIM_JOBS` entry's), found
    in its family's folder below this one and imported by its basename, as
    pytest imports it (the same module where pytest already has)."""
    import importlib
    import sys

    found = sorted(Path(__file__).resolve().parent.glob(f"*/{name}.py"))
    assert len(found) == 1, f"{name}.py: {len(found)} files in tests/kernels/*/"
    folder = str(found[0].parent)
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module(name)


def forms_of(variant) -> tuple[str, ...]:
    """The forms a variant's build can take: all that its build declares
    (``build.forms``, a dispatcher by device), else the one it claims."""
    return tuple(getattr(variant.build, "forms", None) or (variant.tensor_cores,))


def check_claims(module: str, compiled: dict) -> int:
    """Assert that every job ``module`` lists in :data:`CLAIM_JOBS`,
    assembled for sm_90a (the target every Hopper tensor-core form exists
    on; sm_90 code assembles there unchanged), holds the opcode its variant
    claims (the variant's declared ``tc_dtype``, the entry's form); returns
    how many kernels were read. A kernel several variants launch is
    assembled and read once (``ptx_harness.sass``)."""
    from ptx_harness import sass as sass_of

    from leverctl_kernels.registry import get_path

    read = 0
    for (path, variant, form), (mod, jobs) in CLAIM_JOBS.items():
        if mod != module:
            continue
        dtype = get_path(path).variants[variant].tc_dtype
        for job in jobs:
            sass = sass_of(compiled, job, "sm_90a")
            problems = claim_problems(sass, form, dtype)
            assert not problems, f"{path} {variant} on {form} ({job}): {problems}"
            read += 1
    return read


def sass_claims_test(module: str):
    """The test a family's SASS module binds at module level (pytest
    collects it there): ``module``'s :data:`CLAIM_JOBS` kernels, assembled
    for sm_90a, hold the opcode of their variant's (form, tc_dtype) claim."""
    import pytest
    from ptx_harness import nvdisasm

    def test_the_sass_holds_what_each_variants_records_claim(compiled):
        disasm = nvdisasm()
        if not compiled["ptxas"] or not disasm:
            pytest.skip("ptxas or nvdisasm not found")
        assert check_claims(module, compiled) > 0

    return test_the_sass_holds_what_each_variants_records_claim
