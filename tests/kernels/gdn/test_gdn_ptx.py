"""Every GDN kernel compiles for sm_90 (H200) at the model shape (d = 128,
chunk 64, conv width 4), without a GPU: to PTX with libNVVM and through
ptxas (``ptx_harness``). No fp64 arithmetic, no spills or local memory,
registers x threads within the SM's register file, static shared memory
within 48 KiB; skipped only where libNVVM (or, for the ptxas checks, ptxas)
is missing. The chunked kernels (prefill, WY verifies) have the fp16
``mma.sync`` in their PTX and ``HMMA.16816.F32`` in their SASS (read with
``nvdisasm`` where it is found), within a register budget each; the other
kernels have no tensor-core instruction.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, need_sass  # noqa: F401 (compiled: the fixture)
from ptx_harness import sass as sass_of
from tc_claims import sass_claims_test

# The kernels whose chunk makes k.k and q.k on mma.sync (fp16, f32 accumulators).
TENSOR_CORE = (
    "prefill_regresident",
    "prefill_global_state",
    "prefill_multi_stream",
    "verify_wy17",
    "verify_wyn_t17",
    "verify_wyn_t5",
)
MMA_PTX = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
# Registers per thread each may use at 128 threads: the prefills' 41 KiB of
# shared memory already limit an SM to five blocks, and 255 registers (the
# most a thread can have) still let two run; the verifies keep four blocks
# an SM (128 registers) with room to spare.
REG_BUDGET = {
    "prefill_regresident": 255,
    "prefill_global_state": 255,
    "prefill_multi_stream": 255,
    "verify_wy17": 96,
    "verify_wyn_t17": 96,
    "verify_wyn_t5": 96,
}


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile
    process. Slowest to compile first: the workers finish together."""
    from numba import types

    from leverctl_kernels.gdn import _layout, _prefill
    from leverctl_kernels.gdn.decode import batched as decode_batched
    from leverctl_kernels.gdn.decode import per_sequence as decode_per_sequence
    from leverctl_kernels.gdn.fused_conv import fused as conv_fused
    from leverctl_kernels.gdn.fused_conv import separate as conv_separate
    from leverctl_kernels.gdn.prefill_multi_stream import batched as multi_stream
    from leverctl_kernels.gdn.verify import recurrent as verify_recurrent
    from leverctl_kernels.gdn.verify import wy17 as verify_wy17
    from leverctl_kernels.gdn.verify import wyn as verify_wyn

    D, C, W = 128, 64, 4
    A = lambda dt, nd: types.Array(dt, nd, "C")  # noqa: E731
    f16, f32, i32 = types.float16, types.float32, types.int32
    nt = _layout.tile_for(D, D).threads
    tok = (A(f16, 3), A(f16, 3), A(f16, 3), A(f32, 2), A(f32, 2), A(f32, 3), A(f32, 3))
    tokflat = tok[:5] + (A(f32, 1), A(f32, 3))
    streams = tok[:5] + (A(i32, 1), A(f32, 4), A(f32, 3))  # offsets, state [S, Hv, dk, dv]
    dec = (A(f16, 3), A(f16, 3), A(f16, 3), A(f32, 2), A(f32, 2), A(i32, 1), A(f32, 1), A(f32, 3))
    decf = (A(f32, 3),) * 3 + dec[3:]
    fused = (
        A(f16, 2),
        A(f16, 2),
        A(f16, 3),
        A(f32, 2),
        A(f32, 2),
        A(f16, 3),
        A(f32, 1),
        A(i32, 1),
        A(f32, 1),
        A(f32, 3),
    )
    conv = (A(f16, 2), A(f16, 2), A(f16, 3), A(i32, 1), A(f32, 3), A(f32, 3), A(f32, 3))
    return [
        ("prefill_regresident", _prefill.make_prefill(C, D, D, True), tok, nt),
        ("verify_wy17", verify_wy17.make_verify_wy17(D, D), tok, nt),
        ("verify_wyn_t17", verify_wyn.make_verify_wyn(17, D, D), tok, nt),
        ("prefill_global_state", _prefill.make_prefill(C, D, D, False), tok, nt),
        ("prefill_multi_stream", multi_stream.make_prefill_multi_stream(C, D, D), streams, nt),
        ("verify_wyn_t5", verify_wyn.make_verify_wyn(5, D, D), tok, nt),
        ("fused_conv", conv_fused.make_fused_conv(W, D, D), fused, conv_fused.threads(D, D)),
        ("verify_recurrent_t17", verify_recurrent.make_verify_recurrent(17, D, D), tokflat, nt),
        ("verify_recurrent_t5", verify_recurrent.make_verify_recurrent(5, D, D), tokflat, nt),
        ("decode_batched", decode_batched.make_decode_batched(D, D), dec, nt),
        ("decode_batched_f32", decode_batched.make_decode_batched(D, D), decf, nt),
        ("decode_per_sequence", decode_per_sequence.make_decode_per_sequence(D, D), (types.int64,) + dec, nt),
        ("conv_silu", conv_separate.make_conv_kernel(W, D, D), conv, conv_separate.CONV_THREADS),
        ("gated_rmsnorm", conv_separate.make_norm_kernel(D), (A(f32, 3), A(f16, 3), A(f32, 1), A(f32, 3)), D),
    ]


def test_every_gdn_kernel_compiles_for_sm90_in_fp32(compiled):
    assert len(compiled["kernels"]) == 14
    check_ptx(compiled, fp64=False)


def test_gdn_registers_spills_and_shared_memory_fit_the_launch(compiled):
    check_ptxas(compiled)


def test_the_chunked_kernels_have_the_f16_mma_in_their_ptx_and_the_others_none(compiled):
    for name, rec in compiled["kernels"].items():
        if "error" in rec:
            pytest.fail(f"{name} does not compile for sm_90 (see the compile test)")
        ptx = Path(rec["ptx"]).read_text()
        n = ptx.count(MMA_PTX)
        assert (n > 0) == (name in TENSOR_CORE), f"{name}: {n} x {MMA_PTX}"
        # A's and P's results go into M as column pairs, one 8-byte store a lane (``_mma_qk._puts``)
        pairs = ptx.count("st.shared.v2.f32")
        assert (pairs >= 2) == (name in TENSOR_CORE), f"{name}: {pairs} x st.shared.v2.f32"


def test_the_chunked_kernels_run_hmma_within_their_register_budget(compiled):
    need_sass(compiled)  # skips here where ptxas or nvdisasm is missing
    for name in TENSOR_CORE:
        rec = compiled["kernels"][name]
        assert rec["spill"] == 0 and rec["lmem"] == 0, f"{name}: {rec['log']}"
        assert rec["regs"] <= REG_BUDGET[name], f"{name}: {rec['regs']} registers, budget {REG_BUDGET[name]}"
        sass = sass_of(compiled, name)
        hmma = set(re.findall(r"\bHMMA\.[\w.]+", sass))
        assert hmma == {"HMMA.16816.F32"}, f"{name}: {sorted(hmma)} in its SASS"


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_gdn_ptx")


# The kernels that stream the recurrent state, and the 16-byte accesses their
# PTX must hold at d = 128: (coherent v4 loads, v4 stores) at least. The
# single-token step (decode, recurrent verify, fused conv) holds an 8 x 4
# patch a thread: 8 rows, one v4 load and one v4 store each (the output
# row adds v4 stores where it is fp32 in global memory); the chunked
# kernels move the slice through shared memory 16 bytes a step.
STATE_V4 = {
    "decode_batched": (8, 9),
    "decode_batched_f32": (8, 9),
    "decode_per_sequence": (8, 9),
    "verify_recurrent_t17": (8, 9),
    "verify_recurrent_t5": (8, 9),
    "fused_conv": (8, 8),
    "verify_wy17": (4, 9),
    "verify_wyn_t17": (4, 4),
    "verify_wyn_t5": (4, 4),
    "prefill_regresident": (4, 4),
    "prefill_multi_stream": (4, 4),
}
# The step kernels write nothing 4 bytes at a time: state and o go 16 bytes a store.
NO_SCALAR_F32_STORE = (
    "decode_batched",
    "decode_batched_f32",
    "decode_per_sequence",
    "verify_recurrent_t17",
    "verify_recurrent_t5",
)


def test_the_state_moves_16_bytes_a_load_and_a_store(compiled):
    for name, (loads, stores) in STATE_V4.items():
        rec = compiled["kernels"][name]
        if "error" in rec:
            pytest.fail(f"{name} does not compile for sm_90 (see the compile test)")
        ptx = Path(rec["ptx"]).read_text()
        got = ptx.count("ld.global.v4.f32"), ptx.count("st.global.v4.f32")
        assert got[0] >= loads and got[1] >= stores, f"{name}: {got} v4 loads/stores, want at least {(loads, stores)}"
        # The state is float32 and written in place: never a read-only load of
        # it (the chunked kernels' read-only v4 loads are their staged fp16
        # q/k/v rows, as u32 words: test_the_chunk_stages_its_rows_16_bytes_a_lane).
        assert "ld.global.nc.v4.f32" not in ptx, f"{name}: the state is written in place: no read-only loads of it"
        if name in NO_SCALAR_F32_STORE:
            assert ptx.count("st.global.f32") == 0, f"{name}: scalar fp32 stores"


# The chunk stages its q and k rows and v's column slice into shared memory
# once, 16 bytes a lane (``_chunk.make_stage``): one read-only v4 load of
# eight halves and one v4 shared store per piece, at least one each for q,
# k and v in every chunked kernel's PTX (into dynamic shared memory declared
# 16-byte aligned), and as many LDG.E.128.CONSTANT in
# its SASS; the MMAs and dot products then read shared memory. No local
# memory, no spills, registers within the budget above (the prefills were
# 254 before the staging, now under it).
STAGED = ("ld.global.nc.v4.u32", "st.shared.v4.b32")


def test_the_chunk_stages_its_rows_16_bytes_a_lane(compiled):
    for name in TENSOR_CORE:
        rec = compiled["kernels"][name]
        if "error" in rec:
            pytest.fail(f"{name} does not compile for sm_90 (see the compile test)")
        ptx = Path(rec["ptx"]).read_text()
        got = tuple(ptx.count(op) for op in STAGED)
        assert min(got) >= 3, f"{name}: {dict(zip(STAGED, got))}: q, k and v not staged 16 bytes a lane"
        # the staged rows' dynamic shared memory starts on 16 bytes (the v4 stores need it)
        assert re.search(r"\.extern \.shared \.align 16 ", ptx), f"{name}: dynamic shared memory not 16-byte aligned"
        assert ".local" not in ptx, f"{name}: local memory in its PTX"
    need_sass(compiled)  # skips here where ptxas or nvdisasm is missing
    for name in TENSOR_CORE:
        rec = compiled["kernels"][name]
        assert rec["spill"] == 0 and rec["lmem"] == 0 and rec["stack"] == 0, f"{name}: {rec['log']}"
        assert rec["regs"] <= min(REG_BUDGET[name], 254), f"{name}: {rec['regs']} registers"
        sass = sass_of(compiled, name)
        wide = len(re.findall(r"\bLDG\.E\.128\.CONSTANT\b", sass))
        assert wide >= 3, f"{name}: {wide} LDG.E.128.CONSTANT in its SASS"
        assert "LDL" not in sass and "STL" not in sass, f"{name}: local memory in its SASS"


# The single-token steps stage their token rows into fp32 shared memory
# once a block, 16 bytes a lane (``_rows``): q's, k's and v's pieces by
# read-only v4 loads (eight halves, or four floats where the separate
# mixer's activations are fp32), stored as v4 shared stores; the decode's
# fp16 rows 8 bytes a lane (four halves, one v4 shared store: a
# quarter-warp's stores one 128-byte run); the conv (fused
# and separate) reads x and its taps the same way and its rolling state by
# coherent v4 loads, writing the state back by v4 stores
# (``_conv.make_conv_piece``). (PTX ops wanted at least once each.)
ROWS_V4 = {
    "decode_batched": ("ld.global.nc.v2.u32", "st.shared.v4.f32"),
    "decode_batched_f32": ("ld.global.nc.v4.u32", "st.shared.v4.b32"),
    "decode_per_sequence": ("ld.global.nc.v2.u32", "st.shared.v4.f32"),
    "verify_recurrent_t17": ("ld.global.nc.v4.u32", "st.shared.v4.f32"),
    "verify_recurrent_t5": ("ld.global.nc.v4.u32", "st.shared.v4.f32"),
    "fused_conv": ("ld.global.nc.v4.u32", "ld.global.v4.u32", "st.global.v4.b32", "st.shared.v4.f32"),
    "conv_silu": ("ld.global.nc.v4.u32", "ld.global.v4.u32", "st.global.v4.b32", "st.global.v4.f32"),
}


def test_the_steps_stage_their_rows_and_the_conv_its_channels_in_wide_loads(compiled):
    for name, ops in ROWS_V4.items():
        rec = compiled["kernels"][name]
        if "error" in rec:
            pytest.fail(f"{name} does not compile for sm_90 (see the compile test)")
        ptx = Path(rec["ptx"]).read_text()
        got = {op: len(re.findall(re.escape(op) + r"\s", ptx)) for op in ops}
        assert min(got.values()) >= 1, f"{name}: {got}"
        assert ".local" not in ptx, f"{name}: local memory in its PTX"
    need_sass(compiled)  # skips here where ptxas or nvdisasm is missing
    for name in ROWS_V4:
        rec = compiled["kernels"][name]
        assert rec["spill"] == 0 and rec["lmem"] == 0 and rec["stack"] == 0, f"{name}: {rec['log']}"
        sass = sass_of(compiled, name)
        wide = "64" if "ld.global.nc.v2.u32" in ROWS_V4[name] else "128"
        assert re.search(rf"\bLDG\.E\.{wide}\.CONSTANT\b", sass), f"{name}: no LDG.E.{wide}.CONSTANT in its SASS"
        assert "LDL" not in sass and "STL" not in sass, f"{name}: local memory in its SASS"
