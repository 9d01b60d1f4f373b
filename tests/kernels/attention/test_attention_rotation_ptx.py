"""The ``attention.rotation`` kernels compile for sm_90 (H200) at the model
shape (32 q heads, 8 KV heads, d = 128, hidden 4096), without a GPU (see
``ptx_harness``): no fp64, no spills or local memory, registers x threads
within the SM, static shared memory within 48 KiB. The decode-graph path
launches the GDN and paged attention kernels their own ``_ptx`` tests
compile already.
"""

from __future__ import annotations

from ptx_harness import check_ptx, check_ptxas, compiled  # noqa: F401 (compiled: the fixture)


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile process."""
    from numba import types

    from leverctl_kernels.attention.rotation import _rotation

    A = lambda dt, nd: types.Array(dt, nd, "C")  # noqa: E731
    u8, u16, f32 = types.uint8, types.uint16, types.float32
    hq, hkv, d, hidden = 32, 8, 128, 4096
    n = (hq + 2 * hkv) * d
    write = (A(f32, 2), A(f32, 3), A(u8, 3), A(u8, 3), A(f32, 2), A(f32, 2))
    return [
        ("project", _rotation.make_project(n, hidden), (A(u16, 2), A(u16, 2), A(f32, 2)), _rotation.PROJ_THREADS),
        ("write_rotate", _rotation.make_write(hq, hkv, d, True), write, 32),
        ("write_plain", _rotation.make_write(hq, hkv, d, False), write, 32),
        ("rotate_weights", _rotation.make_rotate_weights(d, hidden), (A(u16, 2), A(f32, 2), A(u16, 2)), 128),
    ]


def test_every_rotation_kernel_compiles_for_sm90_in_fp32(compiled):
    assert len(compiled["kernels"]) == 4
    check_ptx(compiled, fp64=False)


def test_rotation_registers_spills_and_shared_memory_fit_the_launch(compiled):
    check_ptxas(compiled)
