"""The ``attention.rotation`` kernels compile for sm_90 (H200) at the model
shape (32 q heads, 8 KV heads, d = 128, hidden 4096), without a GPU (see
``ptx_harness``): no fp64, no spills or local memory, registers x threads
within the SM, static shared memory within 48 KiB, assembled for sm_90a.
The projection is the GEMM engine's bf16 kernel on both forms: wgmma
m64n64k16 bf16 (``HGMMA .F32.BF16``) and mma.sync m16n8k16 bf16 (``HMMA``),
both operands copied as stored (TMA on wgmma, ``cp.async`` on mma.sync), as the variants' records claim
(``tc_claims``). The decode-graph path launches the GDN and paged
attention kernels their own ``_ptx`` tests compile already.
"""

from __future__ import annotations

import re
from pathlib import Path

from ptx_harness import check_ptx, check_ptxas, compiled, sm90a, with_maps  # noqa: F401 (compiled, sm90a: fixtures)
from tc_claims import sass_claims_test

PROJECT = {"project_wgmma": "wgmma", "project_mma": "mma.sync"}


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile process."""
    from numba import types

    from leverctl_kernels.attention.rotation import _rotation

    A = lambda dt, nd: types.Array(dt, nd, "C")  # noqa: E731
    u8, u16, u32, f32 = types.uint8, types.uint16, types.uint32, types.float32
    hq, hkv, d, hidden = 32, 8, 128, 4096
    write = (A(f32, 2), A(f32, 3), A(u8, 3), A(u8, 3), A(f32, 2), A(f32, 2))
    # the engine's signature: qkv, x and W as bf16 pairs, W as its (unread) scales, the unit scales, no A scales
    gemm = (A(f32, 2), A(u32, 2), A(u32, 2), A(u16, 2), A(f32, 1), A(f32, 1), A(f32, 1), A(u8, 2), A(f32, 1))
    threads = 128 * _rotation.TILE["wgs"]
    kernels = {name: _rotation.project_kernel(form) for name, form in PROJECT.items()}
    return [
        *((name, k, with_maps(k, gemm), threads) for name, k in kernels.items()),
        ("write_rotate", _rotation.make_write(hq, hkv, d, True), write, 32),
        ("write_plain", _rotation.make_write(hq, hkv, d, False), write, 32),
        ("rotate_weights", _rotation.make_rotate_weights(d, hidden), (A(u16, 2), A(f32, 2), A(u16, 2)), 128),
    ]


def test_every_rotation_kernel_compiles_for_sm90_in_fp32(compiled):
    assert len(compiled["kernels"]) == 5
    check_ptx(compiled, fp64=False)
    for name, form in PROJECT.items():
        ptx = Path(compiled["kernels"][name]["ptx"]).read_text()
        copy = "cp.async.bulk.tensor.2d" if form == "wgmma" else "cp.async.cg.shared.global"
        assert copy in ptx, name  # both operands copied as stored
        if form == "wgmma":
            assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in ptx
        else:
            assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx and "wgmma.mma_async" not in ptx


def test_rotation_registers_spills_and_shared_memory_fit_the_launch(sm90a):
    check_ptxas(sm90a)
    for name, rec in sm90a["kernels"].items():
        odd = re.findall(r"\(C75\d\d\)[^\n]{0,160}", rec["log"])
        assert not odd, f"{name}: {odd}"


test_the_sass_holds_what_each_variants_records_claim = sass_claims_test("test_attention_rotation_ptx")
