"""The native conversions of ``common/cvt.py`` compile for sm_90 to the named
PTX instructions (``ptx_harness``), with no FP64, and ptxas accepts them
with no spills. Each function is compiled inside a small kernel, as a kernel
would inline it; the e4m3x2 forms need PTX ISA 7.8 and sm_89+, so ptxas
accepting them also checks the ``.version`` libNVVM emits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ptx_harness import check_ptx, check_ptxas, compiled, nvdisasm  # noqa: F401 (compiled: the fixture)
from ptx_harness import sass as sass_of

THREADS = 128

# kernel name -> instructions its PTX must contain
EXPECTED = {
    "round_trips": ["cvt.rn.satfinite.e4m3x2.f32", "cvt.rn.f16x2.e4m3x2", "cvt.rn.bf16x2.f32", "cvt.rn.bf16.f32"],
    "f32_to_bf16": ["cvt.rn.bf16.f32"],
    "f32x2_to_bf16x2": ["cvt.rn.bf16x2.f32"],
    "f32x2_to_f16x2": ["cvt.rn.f16x2.f32"],
    "bf16_to_f32": ["shl.b32"],  # a shift, by design
    "f32x2_to_e4m3x2": ["cvt.rn.satfinite.e4m3x2.f32"],
    "e4m3x2_to_f32x2": ["cvt.rn.f16x2.e4m3x2", "cvt.f32.f16"],
    "f16x2_to_f32x2": ["mov.b32", "cvt.f32.f16"],
    "e2m1_to_f32": ["mul.f32"],  # bits placed, then times 2**126
    "e4m3_to_f32": ["cvt.rn.f16x2.e4m3x2", "cvt.f32.f16"],
    "f32_to_e4m3": ["cvt.rn.satfinite.e4m3x2.f32"],
}


def jobs():
    """(name, dispatcher, signature, threads per block); runs in the compile
    process, where ``cvt`` binds the intrinsics."""
    from numba import cuda, types

    from leverctl_kernels.common import cvt as C

    assert not C.SIMULATED
    f32, u16, u32 = types.float32, types.uint16, types.uint32

    from cvt_kernels import conversion_kernels

    k = conversion_kernels()

    @cuda.jit
    def round_trips(x, out):
        # every function twice in one kernel: the inline PTX's own registers
        # are scoped, so two copies do not collide
        i = cuda.grid(1)
        if i < x.size // 4:
            a, b, c, d = x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]
            w1, w2 = C.f32x2_to_e4m3x2(a, b), C.f32x2_to_e4m3x2(c, d)
            a1, b1 = C.e4m3x2_to_f32x2(w1)
            c1, d1 = C.e4m3x2_to_f32x2(w2)
            p = C.f32x2_to_bf16x2(a1, b1) ^ C.f32x2_to_bf16x2(c1, d1)
            out[i] = (
                C.bf16_to_f32(C.f32_to_bf16(a1 + c1)) + C.bf16_to_f32(C.f32_to_bf16(b1 + d1)) + types.float32(p & 1)
            )

    return [
        ("round_trips", round_trips, (f32[::1], f32[::1]), THREADS),
        ("f32_to_bf16", k["f32_to_bf16"], (f32[::1], u16[::1]), THREADS),
        ("f32x2_to_bf16x2", k["f32x2_to_bf16x2"], (f32[::1], u32[::1]), THREADS),
        ("f32x2_to_f16x2", k["f32x2_to_f16x2"], (f32[::1], u32[::1]), THREADS),
        ("bf16_to_f32", k["bf16_to_f32"], (u16[::1], f32[::1]), THREADS),
        ("f32x2_to_e4m3x2", k["f32x2_to_e4m3x2"], (f32[::1], u16[::1]), THREADS),
        ("e4m3x2_to_f32x2", k["e4m3x2_to_f32x2"], (u16[::1], f32[::1]), THREADS),
        ("f16x2_to_f32x2", k["f16x2_to_f32x2"], (u32[::1], f32[::1]), THREADS),
        ("e2m1_to_f32", k["e2m1_to_f32"], (types.uint8[::1], f32[::1]), THREADS),
        ("e4m3_to_f32", k["e4m3_to_f32"], (types.uint8[::1], f32[::1]), THREADS),
        ("f32_to_e4m3", k["f32_to_e4m3"], (f32[::1], types.uint8[::1]), THREADS),
    ]


def _ptx(compiled, name: str) -> str:
    return Path(compiled["kernels"][name]["ptx"]).read_text()


def test_every_conversion_compiles_for_sm90_without_fp64(compiled):
    assert set(compiled["kernels"]) == set(EXPECTED)
    check_ptx(compiled, fp64=False)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_conversion_is_the_native_instruction(compiled, name):
    ptx = _ptx(compiled, name)
    for ins in EXPECTED[name]:
        assert re.search(rf"^\s*{re.escape(ins)}\s", ptx, re.M), f"{name}: no {ins} in\n{ptx}"


def test_e2m1_decoding_places_bits_and_converts_nothing(compiled):
    """No ``cvt`` to float (an integer-to-float conversion is ``I2F``, a
    quarter-rate instruction), one multiply by ``2**126``
    (``0f7E800000``), in the PTX; no ``I2F`` in the SASS."""
    ptx = _ptx(compiled, "e2m1_to_f32")
    assert not re.search(r"^\s*cvt\.(rn\.)?f32\.[us]", ptx, re.M), ptx
    assert re.search(r"mul\.f32\s+%f\d+,\s*%f\d+,\s*0f7E800000;", ptx), ptx
    if compiled["ptxas"] and nvdisasm():
        assert "I2F" not in sass_of(compiled, "e2m1_to_f32")


def test_bf16_decoding_is_one_shift_and_no_conversion(compiled):
    ptx = _ptx(compiled, "bf16_to_f32")
    assert re.search(r"shl\.b32\s+%r\d+,\s*%r\d+,\s*16;", ptx), ptx
    assert not re.search(r"^\s*cvt\.(rn\.)?f32\.", ptx, re.M), ptx


@pytest.mark.parametrize(
    "name, ins",
    [
        ("f32x2_to_bf16x2", "cvt.rn.bf16x2.f32"),
        ("f32x2_to_f16x2", "cvt.rn.f16x2.f32"),
        ("f32x2_to_e4m3x2", "cvt.rn.satfinite.e4m3x2.f32"),
    ],
)
def test_pairs_put_the_higher_element_first_as_the_isa_wants(compiled, name, ins):
    # The ISA puts the first source in the upper half, so x[2i+1] (loaded
    # from 4 bytes past x[2i]) must be the first source.
    ptx = _ptx(compiled, name)
    hi = re.search(r"ld\.global\.f32\s+(%f\d+),\s*\[%rd\d+\+4\]", ptx)
    lo = re.search(r"ld\.global\.f32\s+(%f\d+),\s*\[%rd\d+\]", ptx)
    cvt = re.search(rf"{re.escape(ins)}\s+%\w+,\s*(%f\d+),\s*(%f\d+);", ptx)
    assert hi and lo and cvt, ptx
    assert (cvt.group(1), cvt.group(2)) == (hi.group(1), lo.group(1))


def test_single_e4m3_conversions_keep_their_code_in_the_low_half(compiled):
    """``f32_to_e4m3``: zero is the first source (the upper byte), the value
    the second; ``e4m3_to_f32``: the code's byte alone goes to the pair
    conversion, and only the low half becomes a float."""
    ptx = _ptx(compiled, "f32_to_e4m3")
    zero = re.search(r"mov\.f32\s+(%f\d+),\s*0f00000000;", ptx)
    cvt = re.search(r"cvt\.rn\.satfinite\.e4m3x2\.f32\s+%rs\d+,\s*(%f\d+),\s*(%f\d+);", ptx)
    assert zero and cvt and cvt.group(1) == zero.group(1) != cvt.group(2), ptx
    ptx = _ptx(compiled, "e4m3_to_f32")
    assert len(re.findall(r"^\s*cvt\.f32\.f16\s", ptx, re.M)) == 1, ptx


def test_the_ptx_version_has_the_e4m3x2_forms(compiled):
    # cvt.*.e4m3x2 need PTX ISA 7.8 (ptxas rejects them in an older .version)
    m = re.search(r"^\.version (\d+)\.(\d+)", _ptx(compiled, "f32x2_to_e4m3x2"), re.M)
    assert m and (int(m.group(1)), int(m.group(2))) >= (7, 8), m and m.group(0)


def test_conversions_assemble_for_sm90_with_no_stack_or_spills(compiled):
    check_ptxas(compiled)
