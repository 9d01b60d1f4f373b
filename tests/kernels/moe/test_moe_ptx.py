"""Every MoE kernel compiles for sm_90 (H200) without a GPU (``ptx_harness``):
the expert kernels in each weight format they are built for, the routing
sort and combine, the router's gate in its three precisions, the top-k and
the union count. No fp64 arithmetic, no spills, stack or local memory (the
eight decoded weights of a chunk stay in registers), registers x threads
within an SM's, static shared memory within 48 KiB. Only the grouped
expert GEMMs (``_experts_tc``: the grouped GEMM engine's kernels, in each
weight format) have the fp16 ``mma.sync`` in their PTX, and their SASS
holds ``HMMA.16816.F32`` as the records of ``moe.gateup_fp4`` and
``moe.down_fp4`` (prefill shapes) and of the grouped variants of
``moe.decode_fp8_grouped`` and ``moe.decode_via_prefill`` claim
(``tc_claims``); the other kernels have no tensor-core instruction, as
theirs say (``tensor_cores`` null)."""

from __future__ import annotations

from pathlib import Path

from ptx_harness import check_ptx, check_ptxas, compiled  # noqa: F401 (compiled: the fixture)
from tc_claims import sass_claims_test

# The formats each expert kernel is built for by some variant.
ROWS_FORMATS = ("int4", "nvfp4", "fp8")
# The grouped GEMMs on tensor cores: int4 and NVFP4 (the expert stages at
# prefill shapes; int4 also decode through the prefill path) and FP8 (the
# FP8 grouped decode).
TC_FORMATS = ("int4", "nvfp4", "fp8")
# The formats of the decode variants on the grouped GEMMs (``decode_via_prefill``
# int4, ``decode_fp8_grouped`` fp8): their kernels on the 16-row decode tile too.
DECODE_TILE_FORMATS = ("int4", "fp8")
MMA_PTX = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
# The decode paths whose kernels these are (the prefill paths': test_moe_prefill_ptx).
DECODE_PATHS = (
    "moe.router",
    "moe.gateup_fp4",
    "moe.down_fp4",
    "moe.decode_fp8_grouped",
    "moe.decode_multi_seq",
    "moe.decode_via_prefill",
    "moe.union_stats",
)
TC_CLAIMS = {
    ("moe.gateup_fp4", "int4"),
    ("moe.gateup_fp4", "nvfp4"),
    ("moe.down_fp4", "int4"),
    ("moe.down_fp4", "nvfp4"),
    ("moe.decode_fp8_grouped", "grouped"),
    ("moe.decode_via_prefill", "prefill"),
}


def jobs():
    from numba import types

    from leverctl_kernels.moe import _experts, _experts_tc, _router, _union
    from leverctl_kernels.moe._prefill import grouped as G

    A = lambda dt, nd: types.Array(dt, nd, "C")  # noqa: E731
    f16, f32, i32, u8, u16, u32 = types.float16, types.float32, types.int32, types.uint8, types.uint16, types.uint32
    weights = {
        "int4": (A(u32, 3), A(f16, 3), A(f32, 1)),
        "nvfp4": (A(u8, 3), A(u8, 3), A(f32, 1)),
        "fp8": (A(u8, 3), A(f32, 3), A(f32, 1)),
    }
    T = _experts.THREADS
    out = []
    for fmt in ROWS_FORMATS:
        w = weights[fmt]
        out.append(
            (
                f"gateup_rows_{fmt}",
                _experts.make_gateup_rows(fmt),
                (A(f32, 2), A(f16, 2), A(i32, 2), *w, types.int64),
                T,
            )
        )
        out.append(
            (
                f"down_rows_{fmt}",
                _experts.make_down_rows(fmt),
                (A(f32, 2), A(f32, 2), A(i32, 2), A(f32, 2), *w, types.int64),
                T,
            )
        )
    out.append(
        (
            "down_rows_nvfp4_pairs",
            _experts.make_down_rows("nvfp4", True),
            (A(f32, 2), A(f32, 2), A(i32, 2), A(f32, 2), *weights["nvfp4"], types.int64),
            T,
        )
    )
    ep = types.Tuple((A(f32, 1), A(f32, 2), A(f32, 1), A(f32, 1), A(f32, 1), A(i32, 1)))
    scales = {"int4": A(f16, 3), "nvfp4": A(u8, 3), "fp8": A(f32, 3)}
    for fmt in TC_FORMATS:
        wfmt = _experts_tc.FORMAT[fmt]
        tail = (A(u32, 3), scales[fmt])
        gu = (A(f32, 2), A(u32, 2), *tail, A(u8, 2), A(i32, 1), A(i32, 1), types.int32, ep)
        dn = (A(f32, 2), A(f32, 2), *tail, A(i32, 1), A(i32, 1), A(i32, 1), types.int32, ep)
        gu_kern = G.make_grouped(G.GROUPED, True, G.SILU_GLU, G.FLOAT, wfmt, 2, True)
        dn_kern = G.make_grouped(G.GROUPED, True, G.NONE, G.FLOAT, wfmt, 4, True)
        out.append((f"gateup_tc_{fmt}", gu_kern, gu, 128))
        out.append((f"down_tc_{fmt}", dn_kern, dn, 128))
        if fmt in DECODE_TILE_FORMATS:  # the decode tile the launch takes for a few rows an expert
            out.append((f"gateup_tc_{fmt}_decode", gu_kern.decode(), gu, 128))
            out.append((f"down_tc_{fmt}_decode", dn_kern.decode(), dn, 128))
    out.append(("route_count", _experts.make_route_count(), (A(i32, 1), A(i32, 2)), _experts.SORT_THREADS))
    out.append(
        (
            "route_scatter",
            _experts.make_route_scatter(),
            (A(i32, 1), A(i32, 1), A(i32, 1), A(i32, 1), A(i32, 2)),
            _experts.SORT_THREADS,
        )
    )
    out.append(("combine", _experts.make_combine(), (A(f32, 2), A(f32, 2), A(f32, 2)), _experts.COMBINE_THREADS))
    for prec in _router.PRECISIONS:
        x = A(f32, 2) if prec == "fp32_routing" else A(u16, 2)
        out.append((f"gate_{prec}", _router.make_gate(prec), (A(f32, 2), x, A(u16, 2)), T))
    out.append(("topk", _router.make_topk(), (A(i32, 2), A(f32, 2), A(f32, 2)), _router.TOPK_THREADS))
    out.append(("union_count", _union.make_union_count(), (A(i32, 1), A(i32, 1), A(i32, 2)), _union.THREADS))
    return out


def test_every_moe_kernel_compiles_for_sm90_in_fp32(compiled):
    assert len(compiled["kernels"]) == 2 * len(ROWS_FORMATS) + 2 * len(TC_FORMATS) + 2 * len(DECODE_TILE_FORMATS) + 9
    check_ptx(compiled, fp64=False)


def test_ptxas_accepts_them_without_spills_or_local_memory(compiled):
    check_ptxas(compiled)


def test_only_the_grouped_expert_gemms_have_the_f16_mma_and_their_variants_claim_it(compiled):
    from leverctl_kernels.registry import get_path

    decode = [get_path(name) for name in DECODE_PATHS]
    claims = {
        (p.name, v.name): (v.tensor_cores, v.tc_dtype) for p in decode for v in p.variants.values() if v.tensor_cores
    }
    assert claims == {pv: ("mma.sync", "f16") for pv in TC_CLAIMS}
    for name, rec in compiled["kernels"].items():
        assert "error" not in rec, f"{name} does not compile for sm_90 (see the compile test)"
        n = Path(rec["ptx"]).read_text().count(MMA_PTX)
        assert (n > 0) == ("_tc_" in name), f"{name}: {n} x {MMA_PTX}"


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_moe_ptx")


def test_the_decode_tile_kernels_issue_hmma_and_copy_the_tokens_rows_by_ldgsts(compiled):
    """The decode tile's gate/up and down (int4 and FP8 weights) hold
    ``HMMA.16816.F32``; gate/up copies the tokens' fp16 rows by 128-bit
    ``LDGSTS`` through the row map (down's float32 rows and every weight
    format pass through registers: their stagers convert them); every
    format's weights (the wide stager: 16 FP8 codes or 32 int4 values a
    load) and down's float32 rows come in 128-bit loads; int4's group
    scales a window of four groups a lane in one 64-bit read-only load
    (``ldg_v2``); down's float32 rows' pairs of lanes swap halves by
    butterfly shuffles across 8 lanes."""
    import re

    import pytest
    from ptx_harness import nvdisasm
    from ptx_harness import sass as sass_of
    from tc_claims import opcodes

    disasm = nvdisasm()
    if not compiled["ptxas"] or not disasm:
        pytest.skip("ptxas or nvdisasm not found")
    for fmt in DECODE_TILE_FORMATS:
        for gemm in ("gateup", "down"):
            name = f"{gemm}_tc_{fmt}_decode"
            sass = sass_of(compiled, name, "sm_90a")
            assert any(op.startswith("HMMA.16816.F32") for op in opcodes(sass)), (name, opcodes(sass))
            copies = re.search(r"\bLDGSTS\.E\.BYPASS(\.\w+)*\.128\b", sass)
            assert bool(copies) == (gemm == "gateup"), name
            # the weights a 16-byte load (the wide stager), and down's float32 rows
            assert re.search(r"\bLDG\.E\.128(\.\w+)*\b", sass), name
            assert bool(re.search(r"\bLDG\.E\.64\.CONSTANT\b", sass)) == (fmt == "int4"), name
            assert bool(re.search(r"\bSHFL\.BFLY\b[^;]*\b0x8\b", sass)) == (gemm == "down"), name


def test_the_per_row_kernels_stage_their_activations_and_read_them_16_bytes_at_a_time(compiled):
    """Each per-row kernel stages its activations into shared memory by
    16-byte loads and stores behind a barrier (FP8's gate/up keeps x fp16,
    as loaded; int4's and NVFP4's convert it to float32, ``.v4.f32``, as
    every down kernel keeps its SiLU products), and reads them back 16
    bytes at a time; its weights come in ``ld.global.nc.v4.u32``."""
    for fmt in ROWS_FORMATS:
        x = "b32" if fmt == "fp8" else "f32"
        for name, store, load in (
            (f"gateup_rows_{fmt}", f"st.shared.v4.{x}", f"ld.shared.v4.{x}"),
            (f"down_rows_{fmt}", "st.shared.v4.f32", "ld.shared.v4.f32"),
        ):
            ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
            for want in ("ld.global.nc.v4.u32", store, load, "bar.sync"):
                assert want in ptx, (name, want)


def test_the_router_gate_stages_x_and_reads_16_bytes_a_lane(compiled):
    """The gate stages its row of ``x`` by 16-byte loads and shared stores
    behind a barrier, then reads the weights in ``ld.global.nc.v4.u32`` and
    ``x`` back in 16-byte shared loads: every precision."""
    from leverctl_kernels.moe import _router

    for prec in _router.PRECISIONS:
        ptx = Path(compiled["kernels"][f"gate_{prec}"]["ptx"]).read_text()
        back = "ld.shared.v4.f32" if prec == "fp32_routing" else "ld.shared.v4.b32"
        for want in ("ld.global.nc.v4.u32", "st.shared.v4.b32", "bar.sync", back):
            assert want in ptx, (prec, want)


def test_nvfp4_down_loads_a_steps_scales_as_words_and_shuffles_what_it_loads(compiled):
    """The NVFP4 down kernel for rows of whole scale words (``PAIRS``) reads
    a step's block scales as one 32-bit load a lane and passes the loaded
    word straight to a butterfly shuffle (the neighbour's pairs), with no
    16-bit scale load; the kernel for the other rows keeps its 16-bit loads
    and, like the int4 and FP8 kernels, shuffles no loaded word."""
    import re

    def shuffled_loads(name):
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        words = set(re.findall(r"ld\.global\.[bsu]32\s+(%r\d+),", ptx))
        shuffled = re.findall(r"shfl\.sync\.bfly\.b32\s+%r\d+\|%p\d+,\s*(%r\d+),", ptx)
        return [r for r in shuffled if r in words], ptx

    got, ptx = shuffled_loads("down_rows_nvfp4_pairs")
    assert len(got) == 1 and "ld.global.u16" not in ptx, got
    got, ptx = shuffled_loads("down_rows_nvfp4")
    assert got == [] and "ld.global.u16" in ptx, got
    for fmt in ("int4", "fp8"):
        assert shuffled_loads(f"down_rows_{fmt}")[0] == [], fmt


def _stream_loop_ops(compiled) -> dict[str, list[str]]:
    """Every per-row kernel's streaming loop (``machine.stream_loop``) as
    its opcodes, by kernel name (sm_90a)."""
    import pytest
    from ptx_harness import nvdisasm
    from ptx_harness import sass as sass_of

    from leverctl.profile import machine

    if not compiled["ptxas"] or not nvdisasm():
        pytest.skip("ptxas or nvdisasm not found")
    names = [f"{g}_rows_{fmt}" for fmt in ROWS_FORMATS for g in ("gateup", "down")] + ["down_rows_nvfp4_pairs"]
    out = {}
    for name in names:
        sass = sass_of(compiled, name, "sm_90a")
        loop = machine.stream_loop(sass)
        assert loop is not None, name
        out[name] = [
            m.group(2)
            for line in sass.splitlines()
            if (m := machine._OPERANDS.match(line)) and (a := machine._ADDRESS.match(line))
            and loop.start <= int(a.group(1), 16) <= loop.end
        ]  # fmt: skip
    return out


def test_the_per_row_kernels_streaming_loops_hold_no_check_that_can_raise(compiled):
    """The streaming loop of every per-row kernel holds no ``EXIT``: a
    check that can raise (an array view's shape test) taken inside the loop
    stays there, run every load (the weights' and NVFP4's scale words were
    viewed a load until 2026-12-07: 30-70 more instructions a step)."""
    for name, ops in _stream_loop_ops(compiled).items():
        assert "EXIT" not in ops, (name, ops.count("EXIT"))


def test_the_per_row_kernels_streaming_loops_count_and_index_in_32_bits(compiled):
    """The streaming loop of every per-row kernel keeps its counter and its
    indices 32-bit (``common/index32.py``): no 64-bit comparison
    (``ISETP ... .EX``) and no add carrying into a high word (``IMAD.X``,
    ``IADD3.X``), which a 64-bit loop counter or load index makes. Until
    2026-12-07 every one of them had both: Numba's 64-bit ``range`` and
    each load's 64-bit element index, 10-27 such instructions a step."""
    wide = {
        name: [op for op in ops if op.startswith(("IMAD.X", "IADD3.X")) or op.endswith(".EX")]
        for name, ops in _stream_loop_ops(compiled).items()
    }
    assert not any(wide.values()), wide
