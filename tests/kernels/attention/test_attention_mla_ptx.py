"""The MLA decode kernel compiles for sm_90 (H200) at DeepSeek-V3's shape
(128 heads, latent rank 512 + 64 rotary dims, eight heads a block), without
a GPU (``ptx_harness``): no fp64, no spills or local memory, registers x
threads within the SM's register file, static shared memory within 48 KiB
and equal to what the launch checks.
"""

from __future__ import annotations

from ptx_harness import check_ptx, check_ptxas, compiled  # noqa: F401 (compiled: the fixture)


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile process."""
    from numba import types

    from leverctl_kernels.attention.mla_decode import _mla

    A = lambda dt, nd: types.Array(dt, nd, "C")  # noqa: E731
    u16, i32, f32, i64 = types.uint16, types.int32, types.float32, types.int64
    sig = (A(u16, 3), A(u16, 3), A(u16, 3), A(u16, 3), A(i32, 1), i64, A(f32, 3))
    return [("mla_decode_dsv3", _mla.make_decode(128, 512, 64, 192), sig, _mla.threads_for(512))]


def test_the_mla_decode_kernel_compiles_for_sm90_in_fp32(compiled):
    assert len(compiled["kernels"]) == 1
    check_ptx(compiled, fp64=False)


def test_mla_decode_registers_spills_and_shared_memory_fit_the_launch(compiled):
    check_ptxas(compiled)


def test_the_shared_memory_the_launch_checks_is_what_ptxas_reports(compiled):
    from leverctl_kernels.attention.mla_decode import _mla

    assert compiled["kernels"]["mla_decode_dsv3"]["smem"] == _mla.shared_bytes(8, 512, 64)


def test_the_kv_tile_comes_in_16_byte_loads_all_issued_before_the_stores(compiled):
    """DeepSeek-V3's 576 dims on 256 threads: five 16-byte chunks a lane
    (``ld.global.nc.v4.u32``), none of them stored before the last is issued:
    a run of five such loads with no shared store between them (the q rows,
    staged once a block before the loop, come 16 bytes a lane too, each
    stored as it comes)."""
    from pathlib import Path

    ptx = Path(compiled["kernels"]["mla_decode_dsv3"]["ptx"]).read_text()
    run = longest = total = 0
    for line in ptx.splitlines():
        if "ld.global.nc.v4.u32" in line:
            run, total = run + 1, total + 1
            longest = max(longest, run)
        elif "st.shared" in line:
            run = 0
    assert total >= 7 and longest >= 5, (total, longest)
