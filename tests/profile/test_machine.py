"""Reading machine code: ptxas's log, cuobjdump's resource usage, the SASS
instruction mix, tensor-core claims and flags, first on short texts of the
forms the tools write, then on kernels planted in ``planted_kernels.py``
and compiled for sm_90 without a GPU, where what ptxas says is held to
what cuobjdump reads from the same cubin and the mix to what was planted."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import planted_kernels
import pytest

from leverctl.profile import machine
from leverctl.profile.machine import Mix, Resources, claim_problems, flags, instruction_mix, parse_ptxas_v, width
from leverctl.profile.occupancy import occupancy

# ── ptxas -v and cuobjdump texts ─────────────────────────────────────────────

PTXAS_SM90 = """\
ptxas info    : 8 bytes gmem
ptxas info    : Compiling entry function '_Z4copyPfS_' for 'sm_90'
ptxas info    : Function properties for _Z4copyPfS_
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers
ptxas info    : Compile time = 17.960 ms
ptxas info    : Compiling entry function '_Z5spillPfS_i' for 'sm_90'
ptxas info    : Function properties for _Z5spillPfS_i
    248 bytes stack frame, 564 bytes spill stores, 560 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 248 bytes cumulative stack size, 3072 bytes smem, 16 bytes lmem
ptxas info    : Compile time = 49.652 ms
"""

PTXAS_SM80 = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for _Z6helperf
    24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling function '_Z6helperf' for 'sm_80'
ptxas info    : Used 9 registers, 352 bytes cmem[0]
ptxas info    : Compiling entry function '_Z4tilePf' for 'sm_80'
ptxas info    : Function properties for _Z4tilePf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 464 bytes cmem[0]
"""

RESOURCE_USAGE = """\

Resource usage:
 Common:
  GLOBAL:8 CONSTANT[4]:8
 Function _Z5spillPfS_i:
  REG:32 STACK:248 SHARED:4096 LOCAL:16 CONSTANT[0]:644 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z4copyPfS_:
  REG:12 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:640 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_ptxas_v_gives_each_entry_kernels_figures():
    got = parse_ptxas_v(PTXAS_SM90)
    assert got == {
        "_Z4copyPfS_": Resources(registers=12, barriers=0, spill_stores=0, spill_loads=0),
        "_Z5spillPfS_i": Resources(
            registers=32, shared=3072, stack=248, local=16, barriers=1, spill_stores=564, spill_loads=560
        ),
    }
    assert got["_Z5spillPfS_i"].spills == 1124


def test_ptxas_v_leaves_device_functions_out_and_reads_the_constant_bank():
    got = parse_ptxas_v(PTXAS_SM80)
    assert list(got) == ["_Z4tilePf"]
    assert got["_Z4tilePf"] == Resources(
        registers=40, shared=1024, barriers=1, spill_stores=0, spill_loads=0, constant=464
    )


def test_cuobjdump_resource_usage_per_function():
    got = machine.parse_resource_usage(RESOURCE_USAGE)
    assert got == {
        "_Z5spillPfS_i": Resources(registers=32, shared=4096, stack=248, local=16, constant=644),
        "_Z4copyPfS_": Resources(registers=12, constant=640),
    }
    assert got["_Z5spillPfS_i"].spill_stores is None  # cuobjdump does not say


# ── SASS texts ───────────────────────────────────────────────────────────────

# The same instructions as nvdisasm and as cuobjdump -sass print them, with a
# data section's lines (also behind addresses) that are no instructions.
NVDISASM = """\
//--------------------- .nv.info                  --------------------------
        /*0000*/ 	.byte	0x04, 0x2f
        /*0004*/ 	.word	index@(_Z1kPf)
//--------------------- .text._Z1kPf            --------------------------
_Z1kPf:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R5, desc[UR4][R4.64] ;
        /*0020*/               @P0 LDG.E.128.CONSTANT R8, desc[UR4][R2.64] ;
        /*0030*/              @!P1 LDG.E.U8 R9, desc[UR4][R2.64] ;
        /*0040*/                   LDG.E.LTC128B.64 R10, desc[UR4][R2.64] ;
        /*0050*/                   STG.E.S16 desc[UR4][R2.64], R5 ;
        /*0060*/                   STG.E.128 desc[UR4][R2.64], R8 ;
        /*0070*/              @!PT LDS RZ, [RZ] ;
        /*0080*/                   LDS.U.128 R12, [R0+UR9] ;
        /*0090*/                   STS.U16 [R23+0xe], R22 ;
        /*00a0*/                   LDL.LU.64 R2, [R1+0x8] ;
        /*00b0*/                   STL.128 [R1], R4 ;
        /*00c0*/                   LDGSTS.E.BYPASS.128 [R15], desc[UR10][R2.64] ;
        /*00d0*/              @!UP1 UTMALDG.2D [UR8], [UR4] ;
        /*00e0*/                   UBLKCP.S.G [UR14], [UR4], UR6 ;
        /*00f0*/                   UTMASTG.2D [UR8], [UR4] ;
        /*0100*/                   LDSM.16.M88.4 R8, [R24+UR9] ;
        /*0110*/                   LDSM.16.MT88.2 R20, [R24+UR9] ;
        /*0120*/                   LDSM.16.M88 R28, [R24+UR9] ;
        /*0130*/                   WARPGROUP.ARRIVE ;
        /*0140*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24, gsb0 ;
        /*0150*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0160*/                   HMMA.16816.F32 R4, R20, R8, R4 ;
        /*0170*/                   FFMA R17, R16, R17, R18 ;
        /*0180*/                   FFMA.FTZ R17, R20, R21, R17 ;
        /*0190*/                   HFMA2.MMA R2, -RZ, RZ, 0, 1.52587890625e-05 ;
        /*01a0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*01b0*/                   BAR.ARV 0x1, 0x40 ;
        /*01c0*/              @!UP0 SYNCS.EXCH.64 URZ, [UR15], UR4 ;
        /*01d0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR15], R3 ;
        /*01e0*/                   WARPSYNC.ALL ;
        /*01f0*/                   NOP ;
        /*0200*/                   EXIT ;
        /*0210*/                   BRA `(.L_x_0);
        /*0220*/                   NOP;
"""


def _as_cuobjdump(text: str) -> str:
    """``text``'s instructions the way ``cuobjdump -sass`` prints them: a
    function header, each instruction with its encoding, and an encoding
    line of its own."""
    out = ["\tcode for sm_90", "\t\tFunction : _Z1kPf", '\t.headerflags\t@"EF_CUDA_SM90"']
    for line in text.splitlines():
        address, _, body = line.strip().partition("*/")
        if address.startswith("/*") and not body.strip().startswith("."):  # an instruction
            out.append(f"{line:<80}/* 0x000fe20000000800 */")
            out.append(" " * 87 + "/* 0x000fc40003f06270 */")
    return "\n".join(out)


def test_the_mix_counts_each_kind_by_width_and_form():
    mix = instruction_mix(NVDISASM)
    assert mix.total == 32  # 35 instructions less two NOPs and one @!PT
    assert mix.global_loads == {32: 1, 128: 1, 8: 1, 64: 1}
    assert mix.global_stores == {16: 1, 128: 1}
    assert mix.shared_loads == {128: 1} and mix.shared_stores == {16: 1}
    assert mix.local_loads == {64: 1} and mix.local_stores == {128: 1}
    assert mix.async_copies == {"LDGSTS": 1, "UTMALDG": 1, "UBLKCP": 1, "UTMASTG": 1}
    assert mix.ldsm == {"x4": 1, "x2.trans": 1, "x1": 1}
    assert mix.tensor_cores == {"HGMMA": 1, "HMMA": 1}
    assert mix.tensor_core_ops == {"HGMMA.64x128x16.F32.BF16": 1, "HMMA.16816.F32": 1}
    assert (mix.ffma, mix.hfma2) == (2, 1)
    assert mix.barriers == {
        "WARPGROUP.ARRIVE": 1,
        "WARPGROUP.DEPBAR": 1,
        "BAR.SYNC": 1,
        "BAR.ARV": 1,
        "SYNCS.EXCH": 1,
        "SYNCS.PHASECHK": 1,
        "WARPSYNC": 1,
    }
    assert mix.by_opcode["LDG.E.U8"] == 1 and "NOP" not in mix.by_opcode and "LDS" not in mix.by_opcode
    assert sum(mix.by_opcode.values()) == mix.total


def test_cuobjdump_sass_reads_as_nvdisasm_does():
    text = _as_cuobjdump(NVDISASM)
    assert "0x000fe2" in text and "Function : _Z1kPf" in text
    assert instruction_mix(text) == instruction_mix(NVDISASM)


@pytest.mark.parametrize(
    "opcode, bits",
    [
        ("LDG.E", 32),
        ("LDG.E.64", 64),
        ("LDG.E.128", 128),
        ("LDG.E.128.CONSTANT", 128),
        ("LDG.E.U8", 8),
        ("LDG.E.S8", 8),
        ("LDG.E.U16.CONSTANT", 16),
        ("STG.E.S16", 16),
        ("LDG.E.LTC128B.128", 128),  # an L2 prefetch hint, not a width
        ("LDG.E.EL.LTC128B", 32),
        ("LDS.U.64", 64),
        ("LDL.LU", 32),
        ("STL.128", 128),
        ("LDG.E.ENL2.256", 256),
    ],
)
def test_width_reads_the_size_modifier(opcode, bits):
    assert width(opcode) == bits


def test_mix_to_json_uses_string_widths():
    doc = json.loads(json.dumps(instruction_mix(NVDISASM).to_json()))
    assert doc["global_loads"] == {"32": 1, "128": 1, "8": 1, "64": 1}
    assert doc["tensor_cores"] == {"HGMMA": 1, "HMMA": 1} and doc["total"] == 32


# ── tensor-core claims ───────────────────────────────────────────────────────

SASS = {
    "hgmma_f16": "/*1aa0*/ HGMMA.64x128x16.F32 R24, gdesc[UR12], R24 ;",
    "hgmma_bf16": "/*1aa0*/ HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24, gsb0 ;",
    "qgmma": "/*0f10*/ QGMMA.64x256x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24, gsb0 ;",
    "igmma": "/*0f10*/ IGMMA.64x8x32.S8.S8 R28, gdesc[UR4], RZ, !UPT, gsb0 ;",
    "hmma_f16": "/*0200*/ HMMA.16816.F32 R8, R4, R2, R8 ;",
    "hmma_bf16": "/*0200*/ HMMA.16816.F32.BF16 R8, R4, R2, R8 ;",
    "imma": "/*0200*/ IMMA.16832.S8.S8 R8, R4.ROW, R2.COL, R8 ;",
    "none": "/*0100*/ FFMA R1, R2, R3, R1 ;",
}
PASSES = {
    ("wgmma", "f16"): {"hgmma_f16"},
    ("wgmma", "bf16"): {"hgmma_bf16"},
    ("wgmma", "e4m3"): {"qgmma"},
    ("wgmma", "s8"): {"igmma"},
    ("mma.sync", "f16"): {"hmma_f16"},
    ("mma.sync", "bf16"): {"hmma_bf16"},
    ("mma.sync", "s8"): {"imma"},
    ("mma.sync", "e4m3-via-f16"): {"hmma_f16"},
    (None, None): {"none"},
}


@pytest.mark.parametrize("claim", sorted(PASSES, key=str), ids=str)
def test_each_claim_passes_on_its_opcode_and_fails_on_every_other(claim):
    for name, sass in SASS.items():
        problems = claim_problems(sass, *claim)
        assert (problems == []) == (name in PASSES[claim]), (claim, name, problems)


def test_fp8_claims_over_hmma_name_the_fp16_path():
    (why, also) = claim_problems(SASS["hmma_f16"], "wgmma", "e4m3")
    assert "shows only HMMA" in why and "e4m3-via-f16" in why and "also has" in also
    (why,) = claim_problems(SASS["hmma_f16"], "mma.sync", "e4m3")
    assert "through FP16" in why


def test_the_rules_are_the_test_helpers_rules():
    """tests/kernels/tc_claims.py checks the families' SASS with the same
    rules; where it knows the claim (it has no wgmma s8, nor IGMMA), the
    answers are the same, word for word."""
    planted_kernels.harness()  # puts tests/kernels on sys.path
    import tc_claims

    for claim in PASSES:
        if claim == ("wgmma", "s8"):
            continue
        for name, sass in SASS.items():
            if name != "igmma":
                assert claim_problems(sass, *claim) == tc_claims.claim_problems(sass, *claim), (claim, name)


# ── flags ────────────────────────────────────────────────────────────────────

SPILLING = Resources(registers=32, stack=248, barriers=0, spill_stores=564, spill_loads=564)
CLEAN = Resources(registers=32, barriers=0, spill_stores=0, spill_loads=0)
HMMA_BF16 = instruction_mix(SASS["hmma_bf16"])


def test_flags_come_worst_first():
    low = occupancy("sm_90", 128, 255, 0)  # 12.5 %
    got = flags(SPILLING, HMMA_BF16, tensor_cores="wgmma", tc_dtype="bf16", memory_bound=True, occupancy=low)
    assert len(got) == 4
    assert got[0].startswith("register spills: 564 B stored and 564 B loaded")
    assert got[1].startswith("claims wgmma bf16 (HGMMA .F32.BF16); the SASS has ['HMMA.16816.F32.BF16']")
    assert got[2] == "claims wgmma but the SASS also has ['HMMA.16816.F32.BF16']"
    assert got[3].startswith("memory-bound at 12% theoretical occupancy (8 of 64 warps")
    assert "limited by registers" in got[3]


def test_a_clean_kernel_has_no_flags():
    full = occupancy("sm_90", 256, 32, 0)
    assert flags(CLEAN, HMMA_BF16, tensor_cores="mma.sync", tc_dtype="bf16", memory_bound=True, occupancy=full) == []
    assert flags(CLEAN, Mix(), memory_bound=True, occupancy=full) == []
    assert flags(None, None, tensor_cores="wgmma", tc_dtype="bf16") == []  # nothing to judge by


def test_local_memory_without_spills_is_flagged():
    (why,) = flags(Resources(registers=32, stack=256, barriers=0, spill_stores=0, spill_loads=0), None)
    assert why.startswith("local memory: 256 B per thread")


def test_low_occupancy_is_a_flag_only_on_a_memory_bound_path_and_below_the_line():
    quarter = occupancy("sm_90", 128, 32, 48 * 1024)  # 25 % exactly
    low = occupancy("sm_90", 128, 255, 0)
    assert flags(CLEAN, None, memory_bound=True, occupancy=quarter) == []
    assert flags(CLEAN, None, memory_bound=False, occupancy=low) == []
    assert len(flags(CLEAN, None, memory_bound=True, occupancy=low)) == 1
    assert flags(CLEAN, None, memory_bound=True, occupancy=quarter, low_occupancy=0.3) != []


def test_a_kernel_that_cannot_run_is_flagged_first_whatever_its_path():
    none = occupancy("sm_90", 128, 32, 0, 228 * 1024)
    got = flags(SPILLING, None, memory_bound=False, occupancy=none)
    assert got[0].startswith("cannot run on sm_90: 233472 bytes of shared memory")
    assert got[1].startswith("register spills") and len(got) == 2


def test_an_unclaimed_kernel_with_tensor_cores_is_flagged():
    (why,) = flags(CLEAN, HMMA_BF16)
    assert why == "claims no tensor cores but the SASS has ['HMMA.16816.F32.BF16']"


# ── finding the tools ────────────────────────────────────────────────────────

TOOL = "leverctl-test-tool"  # a name no toolkit has


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_find_tool_looks_on_path_in_cuda_home_and_in_the_wheels(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")] + sys.path)
    assert machine.find_tool(TOOL) is None
    (tmp_path / "site" / "nvidia" / "cu13" / "bin").mkdir(parents=True)
    (tmp_path / "site" / "nvidia" / "cu13" / "bin" / TOOL).write_text("not executable")
    assert machine.find_tool(TOOL) is None
    wheel = _executable(tmp_path / "site" / "nvidia" / "cu99" / "bin" / TOOL)
    assert machine.find_tool(TOOL) == str(wheel)
    home = _executable(tmp_path / "cuda" / "bin" / TOOL)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert machine.find_tool(TOOL) == str(home)
    on_path = _executable(tmp_path / "bin" / TOOL)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert machine.find_tool(TOOL) == str(on_path)


def _versioned(path: Path, release: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_find_tool_takes_the_newest_release_where_several_are_found(tmp_path, monkeypatch):
    """A toolkit's ptxas 13.0 on PATH refuses the PTX a 13.5 libNVVM wheel
    writes ("Unsupported .version 9.5"): the wheel's newer ptxas is taken;
    an older one in a later place never displaces a newer one."""
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")] + sys.path)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    old = _versioned(tmp_path / "bin" / TOOL, "13.0")
    new = _versioned(tmp_path / "site" / "nvidia" / "cu13" / "bin" / TOOL, "13.5")
    assert machine.find_tool(TOOL) == str(new)
    _versioned(new, "12.9")
    os.utime(new, (1, 1))  # a new mtime: the version is asked again
    assert machine.find_tool(TOOL) == str(old)


def test_resource_usage_without_cuobjdump_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "find_tool", lambda name: None)
    with pytest.raises(FileNotFoundError, match="cuobjdump not found"):
        machine.resource_usage(tmp_path / "x.cubin")


# ── planted kernels, compiled for sm_90 ──────────────────────────────────────

RESERVED = 1024  # the runtime's KiB, inside the cubin's shared section on sm_90 and later
SASS_FORMATS = ("tc_tile", "spills")  # read as cuobjdump -sass prints them too


def _tools() -> dict[str, str | None]:
    return {name: machine.find_tool(name) for name in ("ptxas", "nvdisasm", "cuobjdump")}


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, dict]:
    """Each planted kernel: PTX for CC 9.0 (one child process, the simulator
    off), assembled by ``ptxas -arch=sm_90 -v``, disassembled by nvdisasm,
    with cuobjdump's resource usage and SASS of the same cubin."""
    tools = _tools()
    missing = [name for name, path in tools.items() if not path]
    if missing:
        pytest.skip(f"{', '.join(missing)} not found (PATH, $CUDA_HOME/bin or the NVIDIA wheels)")
    out = tmp_path_factory.mktemp("planted")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run(
        [sys.executable, planted_kernels.__file__, str(out)], capture_output=True, text=True, env=env, timeout=600
    )
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "{}"
    if r.returncode == planted_kernels.harness().SKIP:
        pytest.skip(json.loads(last).get("skip", "no libNVVM to compile for sm_90"))
    assert r.returncode == 0, r.stderr[-4000:]
    names = json.loads(last)["kernels"]
    # nvdisasm and cuobjdump take most of a second each to start: one thread per core.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=cores) as pool:
        return dict(zip(names, pool.map(lambda name: _assemble(out, name, tools), names)))


def _run(*cmd) -> str:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    assert r.returncode == 0, f"{cmd}: {r.stderr[-2000:]}"
    return r.stdout + r.stderr


def _assemble(out: Path, name: str, tools: dict) -> dict:
    ptx, cubin = out / f"{name}.ptx", out / f"{name}.cubin"
    log = _run(tools["ptxas"], "-arch=sm_90", "-v", "-o", cubin, ptx)
    rec = {
        "ptx": ptx,
        "ptxas": parse_ptxas_v(log),
        "cuobjdump": machine.resource_usage(cubin, tools["cuobjdump"]),
        "mix": instruction_mix(_run(tools["nvdisasm"], cubin)),
    }
    if name in SASS_FORMATS:
        rec["cuobjdump_mix"] = instruction_mix(_run(tools["cuobjdump"], "-sass", cubin))
    return rec


def _one(rec: dict, source: str) -> Resources:
    (res,) = rec[source].values()
    return res


def test_every_planted_kernel_compiled(planted):
    assert set(planted) == {"copy_f32", "copy_widths", "copy_v4", "local_array", "shared_tile", "tc_tile", "spills"}


def test_ptxas_and_cuobjdump_agree_on_every_planted_kernel(planted):
    for name, rec in planted.items():
        assert list(rec["ptxas"]) == list(rec["cuobjdump"]), name  # one entry kernel, the same name
        pt, cu = _one(rec, "ptxas"), _one(rec, "cuobjdump")
        assert (pt.registers, pt.stack, pt.local) == (cu.registers, cu.stack, cu.local), name
        # The cubin's shared section holds the reserved KiB as well, where the kernel has any.
        assert cu.shared == pt.shared + (RESERVED if pt.shared else 0), name


def test_on_sm_80_the_shared_section_is_the_kernels_own(planted, tmp_path):
    """The reserved KiB is in the shared section from sm_90 on only: the
    same PTX assembled for sm_80 has a section of its arrays alone."""
    tools = _tools()
    text = planted["shared_tile"]["ptx"].read_text().replace(".target sm_90", ".target sm_80")
    ptx, cubin = tmp_path / "shared_tile.ptx", tmp_path / "shared_tile.cubin"
    ptx.write_text(text)
    log = subprocess.run(
        [tools["ptxas"], "-arch=sm_80", "-v", "-o", str(cubin), str(ptx)], capture_output=True, text=True
    )
    assert log.returncode == 0, log.stderr
    (pt,) = parse_ptxas_v(log.stderr).values()
    (cu,) = machine.resource_usage(cubin).values()
    assert pt.shared == cu.shared == 1024
    assert pt.constant == cu.constant  # ptxas reports the constant bank on sm_80


def test_nvdisasm_and_cuobjdump_sass_give_the_same_mix(planted):
    for name in SASS_FORMATS:
        assert planted[name]["mix"] == planted[name]["cuobjdump_mix"], name
        assert planted[name]["mix"].total > 0, name


def test_the_planted_widths_are_counted(planted):
    f32, widths, v4 = (planted[k]["mix"] for k in ("copy_f32", "copy_widths", "copy_v4"))
    assert (f32.global_loads, f32.global_stores) == ({32: 1}, {32: 1})
    assert (widths.global_loads, widths.global_stores) == ({8: 1, 16: 1, 64: 1}, {8: 1, 16: 1, 64: 1})
    assert (v4.global_loads, v4.global_stores) == ({128: 1}, {128: 1})
    assert v4.by_opcode["LDG.E.128"] == 1 and v4.by_opcode["STG.E.128"] == 1
    for mix in (f32, widths, v4):
        assert not (mix.shared_loads or mix.local_loads or mix.tensor_cores or mix.async_copies)


def test_shared_memory_and_its_barrier_are_counted(planted):
    mix, res = planted["shared_tile"]["mix"], _one(planted["shared_tile"], "ptxas")
    assert (mix.shared_loads, mix.shared_stores, mix.barriers) == ({32: 1}, {32: 1}, {"BAR.SYNC": 1})
    assert (res.shared, res.barriers) == (1024, 1)


def test_the_tensor_core_tile_is_read_whole(planted):
    mix = planted["tc_tile"]["mix"]
    assert mix.tensor_core_ops == {"HMMA.16816.F32.BF16": 1}
    assert mix.ldsm == {"x4": 1, "x2.trans": 1}
    assert mix.async_copies == {"LDGSTS": 1} and mix.by_opcode["LDGSTS.E.BYPASS.128"] == 1
    assert mix.shared_loads == {}  # ptxas pads with "@!PT LDS RZ, [RZ]": never run, not counted
    res = _one(planted["tc_tile"], "ptxas")
    assert flags(res, mix, tensor_cores="mma.sync", tc_dtype="bf16") == []
    assert "the SASS has ['HMMA.16816.F32.BF16']" in flags(res, mix, tensor_cores="wgmma", tc_dtype="bf16")[0]


def test_the_local_array_is_local_memory_and_flagged(planted):
    rec = planted["local_array"]
    res, mix = _one(rec, "ptxas"), rec["mix"]
    assert (res.stack, res.spills) == (256, 0)
    # 64 floats stored as 16 128-bit stores: the whole stack frame.
    assert mix.local_stores == {128: 16} and sum(w // 8 * n for w, n in mix.local_stores.items()) == res.stack
    (why,) = flags(res, mix)
    assert why.startswith("local memory: 256 B per thread")


def test_the_spilling_kernel_spills_what_its_sass_stores(planted):
    rec = planted["spills"]
    res, mix = _one(rec, "ptxas"), rec["mix"]
    assert res.registers == 65536 // (planted_kernels.SPILL_BOUNDS[0] * planted_kernels.SPILL_BOUNDS[1])
    assert res.spill_stores > 0 and res.spill_loads > 0
    # Every byte ptxas counts as spilled is a local store or load in the SASS.
    assert sum(w // 8 * n for w, n in mix.local_stores.items()) == res.spill_stores
    assert sum(w // 8 * n for w, n in mix.local_loads.items()) == res.spill_loads
    assert mix.ffma == planted_kernels.SPILL_ACCUMULATORS
    got = flags(res, mix, memory_bound=True, occupancy=occupancy("sm_90", 1024, res.registers, res.shared))
    assert len(got) == 1 and got[0].startswith(f"register spills: {res.spill_stores} B stored")


def test_the_copies_are_clean(planted):
    for name in ("copy_f32", "copy_widths", "copy_v4"):
        res = _one(planted[name], "ptxas")
        occ = occupancy("sm_90", 256, res.registers, res.shared)
        assert occ.fraction == 1.0, name
        assert flags(res, planted[name]["mix"], memory_bound=True, occupancy=occ) == [], name


def test_loads_in_flight_counts_a_threads_loads_until_one_is_used_or_a_branch():
    """Two 16-byte loads and a 4-byte one issued back to back are 36 bytes in
    flight; the run ends where an instruction reads a loaded register
    (``R5``, the second word of the first load), and at a branch back (a
    loop body's loads are not counted across its back edge), not at one
    forward (a label after it). Addresses and the destination of a
    non-load are not uses."""
    sass = "\n".join(
        [
            "        /*0000*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;",
            "        /*0010*/                   LDG.E.128.CONSTANT R8, desc[UR4][R2.64+0x10] ;",
            "        /*0020*/                   IADD3 R2, R2, 0x20, RZ ;",
            "        /*0030*/              @P0  LDG.E R12, desc[UR4][R2.64] ;",
            "        /*0040*/                   FFMA R20, R5, R6, R20 ;",
            "        /*0050*/                   LDG.E.64 R4, desc[UR4][R2.64] ;",
            "        /*0060*/              @P1  BRA `(.L_x_1) ;",
            "        /*0070*/                   LDG.E R14, desc[UR4][R2.64] ;",
            ".L_x_1:",
            "        /*0080*/                   BRA 0x0 ;",
            "        /*0090*/                   LDG.E R14, desc[UR4][R2.64] ;",
            "        /*00a0*/                   STG.E desc[UR4][R2.64], R14 ;",
        ]
    )
    assert machine.loads_in_flight(sass) == 16 + 16 + 4
    # the same without the use: the 8- and 4-byte loads join the run, past the
    # forward branch, until the branch back
    assert machine.loads_in_flight(sass.replace("FFMA R20, R5, R6, R20", "FFMA R20, R21, R22, R20")) == 48
    assert machine.loads_in_flight("") == 0


def _loop_sass(body: list[str], staging: list[str]) -> str:
    """A kernel of two innermost loops (a staging loop, then a main loop of
    ``body``) inside an outer loop, as nvdisasm prints them."""
    lines, at = [], 0

    def put(text):
        nonlocal at
        lines.append(f"        /*{at:04x}*/                   {text} ;")
        at += 0x10

    lines.append(".L_x_0:")
    put("S2R R0, SR_TID.X")
    lines.append(".L_x_1:")
    for text in staging:
        put(text)
    put("@P0 BRA `(.L_x_1)")
    lines.append(".L_x_2:")
    for text in body:
        put(text)
    put("@P1 BRA `(.L_x_2)")
    put("@P2 BRA `(.L_x_0)")
    put("EXIT")
    return "\n".join(lines)


def test_the_streaming_loop_is_the_largest_innermost_loop_with_a_128_bit_load():
    """Two innermost loops issue a 16-byte load: the staging loop (one load,
    three instructions with its branch) and the main loop (two 16-byte loads
    and a 2-byte scale, 28 instructions with its branch); the outer loop
    holds both and is not innermost. The main loop is the stream: 34 bytes
    a thread, 28 instructions, so a warp loads 32 x 34 / 28 = 38.9 bytes an
    issued instruction. Without its 16-byte loads the main loop is not a
    stream (the staging loop is then the only one); with none anywhere
    there is no stream loop."""
    body = [
        "LDG.E.128.CONSTANT R4, desc[UR4][R2.64]",
        "LDG.E.128.CONSTANT R8, desc[UR4][R2.64+0x200]",
        "LDG.E.U16 R12, desc[UR4][R14.64]",
        *["FFMA R20, R4, R5, R20"] * 24,
    ]
    staging = ["LDG.E.128.CONSTANT R30, desc[UR4][R32.64]", "STS.128 [R1], R30"]
    sass = _loop_sass(body, staging)
    loop = machine.stream_loop(sass)
    assert (loop.bytes, loop.instructions) == (34, 28)
    assert loop.bytes_per_issue == pytest.approx(32 * 34 / 28)
    assert loop.to_json() == {"bytes": 34, "instructions": 28, "bytes_per_issue": 38.857}
    narrow = _loop_sass([b.replace("LDG.E.128.CONSTANT", "LDG.E") for b in body], staging)
    assert (machine.stream_loop(narrow).bytes, machine.stream_loop(narrow).instructions) == (16, 3)
    assert machine.stream_loop(narrow.replace("LDG.E.128.CONSTANT", "LDG.E")) is None
    # every instruction of the loop is issued once an iteration: four more
    # FFMAs are four more instructions for the same bytes
    more = machine.stream_loop(_loop_sass(body + ["FFMA R21, R4, R5, R21"] * 4, staging))
    assert (more.bytes, more.instructions) == (34, 32)


def test_a_staging_loop_longer_than_the_main_loop_is_not_the_stream():
    """A staging loop that outgrows the main loop (a chunk's scales copied
    16 bytes at a time, its index arithmetic unrolled: 40 instructions, a
    constant made by ``HFMA2.MMA`` and an fp16 widened by ``HADD2.F32``
    among them) computes nothing with what it loads; the main loop, 28
    instructions, is still the stream. Where no loop computes, the longest
    is taken (the staging loop)."""
    body = [
        "LDG.E.128.CONSTANT R4, desc[UR4][R2.64]",
        "LDG.E.128.CONSTANT R8, desc[UR4][R2.64+0x200]",
        "LDG.E.U16 R12, desc[UR4][R14.64]",
        *["FFMA R20, R4, R5, R20"] * 24,
    ]
    staging = [
        "LDG.E.128.CONSTANT R30, desc[UR4][R32.64]",
        *["IMAD R33, R34, R35, R33"] * 36,
        "HFMA2.MMA R40, -RZ, RZ, 0, 0",  # a constant, not arithmetic
        "HADD2.F32 R41, -RZ, R30.H0_H0",  # an fp16 widened, not arithmetic
        "STS.128 [R1], R30",
    ]
    loop = machine.stream_loop(_loop_sass(body, staging))
    assert (loop.bytes, loop.instructions) == (34, 28)
    idle = [b.replace("FFMA R20, R4, R5, R20", "IADD3 R20, R4, R5, R20") for b in body]
    loop = machine.stream_loop(_loop_sass(idle, staging))
    assert (loop.bytes, loop.instructions) == (16, 41)


def test_loads_in_flight_takes_an_if_else_s_arms_as_alternatives():
    """A 16-byte load with a scalar fallback (the then arm: four 4-byte
    loads into R8-R11, then a branch over the else arm) and its vector arm
    (an address computed in R8, one 16-byte load into R8-R11): the else arm
    starts from the fork, so its reading R8 is not a use of the then arm's
    loads, and the arms' 16 bytes count once. 16 before the fork, 16 in
    either arm and 4 after: 36. Read as one straight line, the vector arm's
    address would end the run at 32 (the scalar arm's bytes on top of the
    first load's), and the two arms would count twice."""
    sass = "\n".join(
        [
            "        /*0000*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;",
            "        /*0010*/              @P0  BRA `(.L_x_2) ;",
            "        /*0020*/                   LDG.E R8, desc[UR4][R6.64] ;",
            "        /*0030*/                   LDG.E R9, desc[UR4][R6.64+0x4] ;",
            "        /*0040*/                   LDG.E R10, desc[UR4][R6.64+0x8] ;",
            "        /*0050*/                   LDG.E R11, desc[UR4][R6.64+0xc] ;",
            "        /*0060*/                   BRA `(.L_x_3) ;",
            ".L_x_2:",
            "        /*0070*/                   IMAD.WIDE.U32 R8, R1, UR4, R8 ;",
            "        /*0080*/                   LDG.E.128 R8, desc[UR4][R8.64] ;",
            ".L_x_3:",
            "        /*0090*/                   LDG.E R12, desc[UR4][R2.64] ;",
            "        /*00a0*/                   FFMA R20, R5, R6, R20 ;",
            "        /*00b0*/                   LDG.E R14, desc[UR4][R2.64] ;",
        ]
    )
    assert machine.loads_in_flight(sass) == 16 + 16 + 4
    # an else arm that uses the load before the fork ends its run there: the
    # arms meet at the shorter run (its 16), 20 with the next load, and the
    # best run is the then arm's 32
    used = sass.replace("IMAD.WIDE.U32 R8, R1, UR4, R8", "IMAD.WIDE.U32 R8, R4, UR4, R8")
    assert machine.loads_in_flight(used) == 16 + 16
    # the then arm's loads are used in the else arm only where a straight
    # reading mixes the arms: the one-line estimate stopped there (32)
    assert machine.loads_in_flight(sass.replace("@P0  BRA `(.L_x_2) ;", "NOP ;")) == 16 + 16
