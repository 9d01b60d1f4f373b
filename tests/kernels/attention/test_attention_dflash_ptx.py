"""Every DFlash draft-block attention kernel compiles for sm_90 (H200) at
the model shape (Qwen3-Next's 16 query heads over 2 KV heads at d = 256, a
16-token draft block), in both layouts, without a GPU (``ptx_harness``):
no fp64, no spills or local memory, registers x threads within the SM's
register file, static shared memory within 48 KiB.
"""

from __future__ import annotations

from ptx_harness import check_ptx, check_ptxas, compiled  # noqa: F401 (compiled: the fixture)


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile process."""
    from numba import types

    from leverctl_kernels.attention.dflash_contig import _dflash
    from leverctl_kernels.attention.paged_decode import spec

    A = lambda dt, nd: types.Array(dt, nd, "C")  # noqa: E731
    u16, i32, f32, i64 = types.uint16, types.int32, types.float32, types.int64
    split = (A(u16, 4), A(u16, 4), A(u16, 4), A(i32, 2), A(i32, 1), i64, A(f32, 5), A(f32, 5))
    merge = (A(i32, 1), i64, A(f32, 5), A(f32, 5), A(f32, 4))
    T, M = spec.TARGET_CTAS, spec.MIN_SPLIT_BLOCKS
    nt = _dflash.threads_for(256)
    return [
        ("split_paged", _dflash.make_split(2, 8, 16, 256, T, M, True), split, nt),
        ("split_contig", _dflash.make_split(2, 8, 16, 256, T, M, False), split, nt),
        ("merge", _dflash.make_merge(2, 256, T, M), merge, _dflash.merge_threads(256)),
    ]


def test_every_dflash_attention_kernel_compiles_for_sm90_in_fp32(compiled):
    assert len(compiled["kernels"]) == 3
    check_ptx(compiled, fp64=False)


def test_dflash_attention_registers_spills_and_shared_memory_fit_the_launch(compiled):
    check_ptxas(compiled)


def test_the_contiguous_kernel_reads_no_block_table(compiled):
    """The layout is a compile-time constant: the contiguous split's PTX has
    no load of the table's int32 entries, only the sequence's length, and
    no room for them in shared memory (the paged one stages a word a
    thread)."""
    from leverctl_kernels.attention import _paged

    paged, contig = compiled["kernels"]["split_paged"], compiled["kernels"]["split_contig"]
    for rec, table in ((paged, True), (contig, False)):
        bound = _paged.split_shared_bytes(8, 256, _paged.V_TILES, table)
        assert bound - _paged.V_PAD <= rec["smem"] <= bound, (rec["smem"], bound)
    nt = _paged.threads_for(256)
    assert 4 * (nt - 1) <= paged["smem"] - contig["smem"] <= 4 * nt
    from pathlib import Path

    def int_loads(rec):  # 32-bit integer loads: the length (sign-extended), the table's entries (to shared)
        ptx = Path(rec["ptx"]).read_text()
        return ptx.count("ld.global.s32") + ptx.count("ld.global.u32")

    assert (int_loads(paged), int_loads(contig)) == (2, 1)  # context_lens, and the paged one's table


def test_both_split_kernels_stage_k_and_v_in_16_byte_loads(compiled):
    """``_paged.make_kv_stage`` at d = 256: ``ld.global.nc.v4.u32`` for K and
    V in both layouts, and V to shared memory as ``st.shared.v4``."""
    from pathlib import Path

    for name in ("split_paged", "split_contig"):
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        assert ptx.count("ld.global.nc.v4.u32") >= 4 and ptx.count("st.shared.v4.b32") >= 2, name
