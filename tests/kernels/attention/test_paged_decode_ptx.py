"""Every paged decode attention kernel compiles for sm_90 (H200) at model
shapes (Qwen3-Next's 16 query heads over 2 KV heads at d = 256, and a
Llama-style 32 over 8 at d = 128), without a GPU: to PTX with libNVVM and
through ptxas (``ptx_harness``). No fp64 arithmetic, no spills or local
memory, registers x threads within the SM's register file, static shared
memory within 48 KiB; skipped only where libNVVM (or ptxas) is missing.
"""

from __future__ import annotations

from ptx_harness import check_ptx, check_ptxas, compiled  # noqa: F401 (compiled: the fixture)


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile process."""
    from numba import types

    from leverctl_kernels.attention import _paged
    from leverctl_kernels.attention.paged_decode import spec

    A = lambda dt, nd: types.Array(dt, nd, "C")  # noqa: E731
    u16, i32, f32, i64 = types.uint16, types.int32, types.float32, types.int64
    split = (A(u16, 3), A(u16, 4), A(u16, 4), A(i32, 2), A(i32, 1), i64, i64, A(f32, 4), A(f32, 4))
    merge = (A(i32, 1), i64, i64, A(f32, 4), A(f32, 4), A(f32, 3))
    T, M = spec.TARGET_CTAS, spec.MIN_SPLIT_BLOCKS
    out = []
    for tag, hkv, g, d in (("qwen3next", 2, 8, 256), ("llama", 8, 4, 128)):
        out += [
            (f"split_{tag}", _paged.make_split(hkv, g, d, T, M), split, _paged.threads_for(d)),
            (f"merge_{tag}", _paged.make_merge(hkv, d, T, M), merge, _paged.merge_threads(d)),
        ]
    return out


def test_every_attention_kernel_compiles_for_sm90_in_fp32(compiled):
    assert len(compiled["kernels"]) == 4
    check_ptx(compiled, fp64=False)


def test_attention_registers_spills_and_shared_memory_fit_the_launch(compiled):
    check_ptxas(compiled)


def test_the_shared_memory_the_launch_checks_is_what_ptxas_reports(compiled):
    from leverctl_kernels.attention import _paged

    rec = compiled["kernels"]["split_qwen3next"]
    bound = _paged.split_shared_bytes(8, 256, _paged.V_TILES)
    assert bound - _paged.V_PAD <= rec["smem"] <= bound


def test_the_split_kernels_read_k_and_v_in_16_byte_loads_and_store_v_in_16_byte_stores(compiled):
    """At the model head dims the K and V tiles come in as
    ``ld.global.nc.v4.u32`` (a block stages 16 tokens x D / 8 chunks of
    each on D threads: two chunks of K and two of V a lane, all four issued
    before any is stored), and so do the group's q rows (once a block);
    V goes to shared memory as ``st.shared.v4``; the merge reads no cache."""
    from pathlib import Path

    for name, rec in compiled["kernels"].items():
        ptx = Path(rec["ptx"]).read_text()
        wide, v4_stores = ptx.count("ld.global.nc.v4.u32"), ptx.count("st.shared.v4.b32")
        if name.startswith("split_"):
            assert wide >= 5 and v4_stores >= 2, (name, wide, v4_stores)
        else:
            assert wide == 0, name


def test_the_merge_reads_the_partials_and_writes_its_row_16_bytes_a_lane(compiled):
    """The merge at the model head dims: a lane's 16-byte chunk of each
    split's partial row by ``ld.global.nc.v4.f32`` (one site, in the loop
    over the splits) and of the output by ``st.global.v4.f32``; the
    float-a-lane loop (unaligned rows) stays beside it. Its launch bound is
    a thread per chunk: D / 4."""
    from pathlib import Path

    from leverctl_kernels.attention import _paged

    for tag, d in (("qwen3next", 256), ("llama", 128)):
        rec = compiled["kernels"][f"merge_{tag}"]
        ptx = Path(rec["ptx"]).read_text()
        assert ptx.count("ld.global.nc.v4.f32") >= 1 and ptx.count("st.global.v4.f32") == 1, tag
        assert rec["launch_bounds"][0] == _paged.merge_threads(d) == d // 4, tag
