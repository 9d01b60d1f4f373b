"""Every W4A16 kernel compiles for sm_90 (H200), without a GPU: each
factory's default configuration, to PTX with libNVVM and through ptxas
(``ptx_harness``). No fp64, no spills or local memory, and registers and
static shared memory that fit the launch; the decode GEMVs stream their
weights in 128-bit loads. Skipped only where libNVVM (or, for the ptxas
checks, ptxas; for the SASS, nvdisasm) is missing.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)
from ptx_harness import sass as sass_of


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile
    process. Slowest to compile first: the workers finish together."""
    from numba import types

    from leverctl_kernels.w4a16 import _row_block
    from leverctl_kernels.w4a16.ffn_decode import fused_silu_down as ffn_fused_silu_down
    from leverctl_kernels.w4a16.ffn_decode import silu_mul
    from leverctl_kernels.w4a16.gemm import gemm_tiled
    from leverctl_kernels.w4a16.gemv import gemv_64t, gemv_sw
    from leverctl_kernels.w4a16.gemv_dual import gemv_dual_64t, gemv_dual_sw

    f16, u32 = types.float16, types.uint32
    V, M, W = f16[::1], f16[:, ::1], u32[:, ::1]
    sw_threads = gemv_sw.DEFAULT_WARPS * 32
    small, default = gemm_tiled.SMALL_M, gemm_tiled.DEFAULT
    return [
        ("gemm_default", gemm_tiled.kernel_for(default), (M, M, W, M), default.threads),
        ("gemm_small_m", gemm_tiled.kernel_for(small), (M, M, W, M), small.threads),
        ("gemv_sw", gemv_sw.make_gemv_sw(), (V, W, M, V), sw_threads),
        ("gemv_dual_64t", gemv_dual_64t.make_gemv_dual_64t(), (V, V, W, M, W, M, V), _row_block.NT),
        ("gemv_64t", gemv_64t.make_gemv_64t(), (V, W, M, V), _row_block.NT),
        ("ffn_fused_silu_down", ffn_fused_silu_down.make_ffn_fused_silu_down(), (V, W, M, V, V), sw_threads),
        ("gemv_dual_sw", gemv_dual_sw.make_gemv_dual_sw(), (V, V, W, M, W, M, V), sw_threads),
        ("silu_mul", silu_mul.make_silu_mul(), (V, V, V), silu_mul.THREADS),
    ]


def test_every_w4a16_kernel_compiles_for_sm90_in_fp32(compiled):
    assert len(compiled["kernels"]) == 8
    check_ptx(compiled, fp64=False)


def test_w4a16_registers_spills_and_shared_memory_fit_the_launch(compiled):
    check_ptxas(compiled)


def _wide_loads() -> dict[str, int]:
    """The 128-bit weight loads each decode GEMV's code holds on its 16-byte
    path (``common.vload.ldg_v4``): one warp per row, ``UNROLL`` groups per
    lane and matrix, written twice (a chunk's first step loaded before the
    activations are staged, the later steps in the loop); in the 64-thread
    blocks, one group of each of ``ROWS`` rows and matrix."""
    from leverctl_kernels.w4a16 import _row_block, _warp_rows

    u, r = _warp_rows.UNROLL, _row_block.DEFAULT_ROWS
    return {
        "gemv_sw": 2 * u,
        "gemv_dual_sw": 4 * u,
        "ffn_fused_silu_down": 2 * u,
        "gemv_64t": r,
        "gemv_dual_64t": 2 * r,
    }


# Kernels that also stage their fp16 activations by 16-byte loads, and the
# fewest such loads their code holds: x in the one-warp-per-row GEMVs and
# gate and up in the SiLU-fused kernel (which stores silu(gate) * up in
# fp32), a thread's first two chunks issued before any is stored; x in the
# 64-thread blocks one load at a time (fewer registers).
X_BY_16_BYTES = {"gemv_sw": 2, "gemv_dual_sw": 2, "ffn_fused_silu_down": 4, "gemv_64t": 1, "gemv_dual_64t": 1}


def test_the_decode_gemvs_stream_their_weights_in_128_bit_loads(compiled):
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    for name, want in _wide_loads().items():
        rec = compiled["kernels"][name]
        assert rec["spill"] == 0 and rec["lmem"] == 0 and rec["stack"] == 0, (name, rec["log"])
        ptx = open(rec["ptx"]).read()
        want += X_BY_16_BYTES.get(name, 0)
        got = len(re.findall(r"ld\.global\.nc\.v4\.u32", ptx))
        assert got == want if name not in X_BY_16_BYTES else got >= want, (name, got, want)
        sass = sass_of(compiled, name)
        wide = re.findall(r"\bLDG\.E\.128\.CONSTANT\b", sass)
        ok = len(wide) == want if name not in X_BY_16_BYTES else len(wide) >= want
        assert ok, f"{name}: {len(wide)} LDG.E.128.CONSTANT, want {want} (weights: one per group of a step, twice)"
        assert not re.search(r"\b(LDL|STL)\b", sass), f"{name}: local memory in the SASS"


def test_the_tiled_gemms_stage_their_tiles_by_16_byte_loads(compiled):
    """The tiled FMA GEMM's wide build (``gemm_tiled``, C-contiguous
    arrays): its A tile's 16-byte units (one a thread of the small tiles,
    two of the default ones), a round's W load (16 bytes of a row a lane)
    and the scale window (16 bytes, or 8 where a row's scales are 8-byte
    units), as ``ld.global.nc`` in the PTX and ``LDG.E.128``/``LDG.E.64``
    in the SASS, no local memory."""
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    for name, a_units in (("gemm_small_m", 1), ("gemm_default", 2)):
        rec = compiled["kernels"][name]
        ptx = open(rec["ptx"]).read()
        assert len(re.findall(r"ld\.global\.nc\.v4\.u32", ptx)) == a_units + 2, name
        assert len(re.findall(r"ld\.global\.nc\.v2\.u32", ptx)) == 1, name
        sass = sass_of(compiled, name)
        assert len(re.findall(r"\bLDG\.E\.128\.CONSTANT\b", sass)) >= a_units + 2, name
        assert re.search(r"\bLDG\.E\.64\.CONSTANT\b", sass), name
        assert not re.search(r"\b(LDL|STL)\b", sass), f"{name}: local memory in the SASS"


# The streaming loop of each decode GEMV (``leverctl.profile.machine.stream_loop``):
# a warp's bytes loaded per instruction it issues, at least the 4.6 an H200's
# 4.8 TB/s asks of 132 SMs issuing four a clock at 1.98 GHz (sm_90; ptxas
# 13.0 and 13.5 alike give gemv_sw and the fused kernel 4.65, gemv_64t 4.69,
# the dual kernels 4.90-4.91). Each int4 value is one AND (``LOP3``), one FADD
# and one FFMA (``int4_device.dot8``'s subnormal decode), a word's high half
# one shift; its activation comes with three others in one ``LDS.128``. The
# magic-number decode before it (a ``PRMT`` and two ``LEA.HI`` a word to fill
# its halves) gave 4.2-4.6; the decode before that (a shift, a rematerialised
# mask and an address a value, one ``LDS`` a value) 2.0 in gemv_sw.
ISSUE_FLOOR = 4.6


def test_the_decode_gemvs_stream_three_instructions_a_value(compiled):
    """In each decode GEMV's streaming loop: the staged activations are
    read 16 bytes at a time (``LDS.128``, no narrower shared load); no value
    pays a shift, an address or a constant moved into a register (at most
    one ``LOP3`` and one FADD an FFMA, and one more of each a word; shifts
    and constant moves fewer than the words, for the loop's indices: the old
    decode had a shift and a move a value); and the loop loads at least
    ``ISSUE_FLOOR`` bytes a warp instruction."""
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    if not nvdisasm():
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    from leverctl.profile import machine

    for name in _wide_loads():
        sass = sass_of(compiled, name)
        loop = machine.stream_loop(sass)
        assert loop is not None, f"{name}: no streaming loop"
        ops = [
            m.group(2)
            for line in sass.splitlines()
            if (m := machine._OPERANDS.match(line)) and (a := machine._ADDRESS.match(line))
            if loop.start <= int(a.group(1), 16) <= loop.end
        ]
        base = [op.split(".", 1)[0] for op in ops]
        ffma, lds = base.count("FFMA"), [op for op in ops if op.startswith("LDS")]
        assert ffma >= 64, (name, ffma)
        assert lds and all(op == "LDS.128" for op in lds), f"{name}: shared loads {sorted(set(lds))}"
        words = ffma // 8
        # beyond one a value: at most one a word (its sum into a group's or a row's)
        assert base.count("LOP3") <= ffma + words and base.count("FADD") <= ffma + words, (name, ops)
        # one a word (its high half-word), a few for the loop's indices; no
        # fill of the halves (PRMT, LEA.HI: three a word in the magic decode)
        assert base.count("SHF") <= words + 8, f"{name}: {base.count('SHF')} shifts in {ffma} values"
        fill = base.count("PRMT") + ops.count("LEA.HI")
        assert fill <= 2, f"{name}: {fill} PRMT/LEA.HI in {ffma} values (the magic decode's fill: three a word)"
        remat = ops.count("IMAD.MOV.U32")
        assert remat <= words, f"{name}: {remat} moves of a constant (the old decode: one a value)"
        assert loop.bytes_per_issue >= ISSUE_FLOOR, f"{name}: {loop.bytes_per_issue:.2f} bytes an issue"
