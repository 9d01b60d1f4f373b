"""Native number conversions: one name, the PTX ``cvt`` instruction on the
GPU and an exact twin in the simulator.

=======================  =========================================  ==========
function                 on the GPU (sm_90)                         returns
=======================  =========================================  ==========
``f32_to_bf16(x)``       ``cvt.rn.bf16.f32``                        uint16
``f32x2_to_bf16x2(lo,    ``cvt.rn.bf16x2.f32 d, hi, lo``            uint32
hi)``
``bf16_to_f32(b)``       ``shl.b32`` by 16 (see below)              float32
``f32x2_to_e4m3x2(lo,    ``cvt.rn.satfinite.e4m3x2.f32 d, hi, lo``  uint16
hi)``
``e4m3x2_to_f32x2(c)``   ``cvt.rn.f16x2.e4m3x2`` then two           (float32,
                         ``cvt.f32.f16``                            float32)
``e4m3_to_f32(c)``       ``cvt.rn.f16x2.e4m3x2`` then one           float32
                         ``cvt.f32.f16`` (the low half)
``f32_to_e4m3(x)``       ``cvt.rn.satfinite.e4m3x2.f32`` with 0     uint8
                         above it, the low byte kept
``f16x2_to_f32x2(w)``    ``mov.b32`` to two halves, two             (float32,
                         ``cvt.f32.f16``                            float32)
``f32_bits(x)``          none: the register read as a word          uint32
``bits_f32(w)``          none: a word read as a float32             float32
``e2m1_to_f32(n)``       bits placed by ``shl``/``and``/``or``,     float32
                         one ``mul`` by ``2**126``
=======================  =========================================  ==========

Pairs are in memory order: ``lo`` is the element at the lower address, the
low half (bits 0-15 of a bf16x2, bits 0-7 of an e4m3x2), as a kernel storing
the packed word into a ``uint16``/``uint8`` view of the tensor expects. The
ISA puts the *first* source operand in the *upper* half, so the instructions
are emitted with ``hi`` first; ``e4m3x2_to_f32x2`` returns ``(lo, hi)``.

Results, code for code (the twins reproduce these):

* ``f32_to_bf16``: round to nearest even, overflow to inf, subnormals kept
  (kernels are compiled without ``fastmath``, so no ``.ftz``); a NaN gives
  the canonical NaN ``0x7fff`` whatever its sign and payload. Here the twin
  departs from ``bits.f32_to_bf16`` (which keeps the sign and the payload's
  top bits) to follow the instruction, whose NaN result is canonical; CUDA's
  own software fallback for ``__float2bfloat16`` returns ``0x7fff`` to agree
  with it. (``tests/kernels/common/test_cvt.py`` checks this on a GPU under
  ``LEVERCTL_TEST_DEVICE=gpu``; an H200 agreed on 2026-12-04.)
* ``f32x2_to_f16x2``: round to nearest even, overflow to inf, subnormals
  kept, as NumPy's float16 conversion; a NaN gives the canonical NaN
  ``0x7fff`` (seen on an H200, 2026-12-04, where NumPy gives ``0x7e00``).
* ``bf16_to_f32``: exact, the bits shifted up 16, NaN payloads included.
  ``cvt.f32.bf16`` (sm_90) is exact too, but the ISA does not say what it
  does with a NaN's payload; the shift leaves nothing to guess.
* ``f32x2_to_e4m3x2``: round to nearest even; ``satfinite`` clamps finite
  overflow and inf to +-448 (``0x7e``/``0xfe``) and turns NaN into ``0x7f``
  whatever its sign. ``bits.f32_to_e4m3`` does exactly this already.
* ``f16x2_to_f32x2``: exact (every f16 is an f32), bits 0-15 first: two
  fp16 values as one 32-bit word holds them (a 128-bit load of fp16
  activations gives four such words).
* ``e4m3x2_to_f32x2``: exact (every E4M3 value is an f16, every f16 an f32);
  ``0x7f``/``0xff`` give a NaN, whose sign and payload are not part of the
  contract (the twin gives bits.py's, the tests compare a NaN as a NaN).
  ``e4m3_to_f32`` is its low half alone (a scale byte, a code of a row that
  is not whole words), ``f32_to_e4m3`` ``f32x2_to_e4m3x2``'s low byte.

Device code converts through these names, never through ``bits.py``'s
scalar codecs: those branch, and ``bits.e4m3_to_f32`` turns a 64-bit
integer into a float (``I2F.S64``, a quarter-rate instruction) a code.
They are the twins' and the host's (``tests/kernels/common/test_cvt.py``
holds every kernels module to it).

Dispatch: the module reads ``numba.config.ENABLE_CUDASIM`` once, at import,
and binds each name either to an ``@intrinsic`` whose lowering is the
instruction as inline PTX (``llvmlite.ir.InlineAsm``) or to a simulator
device function built on ``bits.py``. The simulator cannot lower an
intrinsic at all, and the CUDA target cannot run Python, so the choice is
per process and fixed before any kernel is compiled; a kernel calls
``cvt.f32_to_bf16`` and gets the right one in both places, with no branch
left in the compiled code. ``tests/conftest.py`` sets the simulator before
anything imports numba.cuda, and the sm_90 compile harness starts its own
process with it off, so each sees the binding it needs. Tests compare the
twins with ``bits.py``'s host codecs and ``ml_dtypes``
(``tests/kernels/common/test_cvt.py``) and check that the intrinsics compile to the
named instructions and assemble for sm_90 (``tests/kernels/common/test_cvt_ptx.py``).

The e4m3x2 forms need PTX ISA 7.8 and sm_89+; the PTX ``.version`` is the
one libNVVM emits (9.0 from CUDA 13's at sm_90), which covers them, and
``test_cvt_ptx`` checks it. ``.target sm_90`` itself needs ``.version`` 7.8,
so no PTX for sm_90 can be too old for them: with ``.version 7.7`` ptxas 13.0
prints both "Feature 'cvt with .e4m3x2/.e5m2x2' requires PTX ISA .version 7.8
or later" and "PTX .version 7.7 does not support .target sm_90".
"""

from __future__ import annotations

import numpy as np
from numba import config

from . import bits as B
from .launch import device_inline

BF16_NAN = 0x7FFF  # canonical bf16 NaN: what cvt.rn.bf16.f32 gives for any NaN
F16_NAN = 0x7FFF  # canonical f16 NaN: what cvt.rn.f16x2.f32 gave for a NaN on an H200

SIMULATED = bool(config.ENABLE_CUDASIM)

__all__ = [
    "BF16_NAN",
    "SIMULATED",
    "bf16_to_f32",
    "bf16x2_to_f32x2",
    "bf16x8_to_f32",
    "e4m3x2_to_f32x2",
    "e4m3_to_f32",
    "e2m1_to_f32",
    "bits_f32",
    "f32_bits",
    "f32_to_bf16",
    "f32x2_to_bf16x2",
    "f32x2_to_e4m3x2",
    "f32_to_e4m3",
    "f32x2_to_f16x2",
    "f16x2_to_f32x2",
    "f16x8_to_f32",
]


if SIMULATED:
    # --- twins: Python run by the simulator, bits.py's codecs ------------------

    @device_inline
    def f32_to_bf16(x):
        """bf16 bits (uint16) of float32 ``x``: RNE, overflow to inf, NaN
        to 0x7fff (``cvt.rn.bf16.f32``)."""
        xf = np.float32(x)
        if xf != xf:
            return np.uint16(BF16_NAN)
        return B.f32_to_bf16(xf)

    @device_inline
    def f32x2_to_bf16x2(lo, hi):
        """``lo`` in bits 0-15, ``hi`` in bits 16-31 (``cvt.rn.bf16x2.f32``)."""
        return np.uint32(int(f32_to_bf16(lo)) | (int(f32_to_bf16(hi)) << 16))

    @device_inline
    def bf16_to_f32(b):
        """float32 of bf16 bits ``b``: the bits shifted up 16."""
        return np.uint32(int(b) << 16).view(np.float32)  # keeps NaN payloads

    @device_inline
    def f32x2_to_f16x2(lo, hi):
        """fp16 bits of ``lo`` in bits 0-15, of ``hi`` in bits 16-31: RNE,
        overflow to inf, NaN canonical (``cvt.rn.f16x2.f32``; NumPy's float16
        conversion rounds the same way but keeps a NaN's sign and payload)."""
        x = np.array([lo, hi], dtype=np.float32)
        with np.errstate(over="ignore"):  # overflow to inf is the conversion's rule, not an accident
            h = np.where(np.isnan(x), np.uint16(F16_NAN), x.astype(np.float16).view(np.uint16))
        return np.uint32(int(h[0]) | (int(h[1]) << 16))

    @device_inline
    def f32_bits(x):
        """The bits of float32 ``x`` as a uint32 (a 16-byte store's word)."""
        return np.float32(x).view(np.uint32)

    @device_inline
    def bits_f32(w):
        """The float32 whose bits are word ``w`` (a wide load's word)."""
        return np.uint32(w).view(np.float32)

    @device_inline
    def f32x2_to_e4m3x2(lo, hi):
        """``lo`` in bits 0-7, ``hi`` in bits 8-15, saturating
        (``cvt.rn.satfinite.e4m3x2.f32``)."""
        return np.uint16(int(B.f32_to_e4m3(lo)) | (int(B.f32_to_e4m3(hi)) << 8))

    @device_inline
    def f16x2_to_f32x2(w):
        """``(value of bits 0-15, value of bits 16-31)`` of two fp16 in a word."""
        h = np.array([int(w) & 0xFFFF, (int(w) >> 16) & 0xFFFF], dtype=np.uint16).view(np.float16)
        return np.float32(h[0]), np.float32(h[1])

    @device_inline
    def e4m3x2_to_f32x2(c):
        """``(value of bits 0-7, value of bits 8-15)`` of an e4m3x2 word
        (``cvt.rn.f16x2.e4m3x2`` and ``cvt.f32.f16``)."""
        ci = int(c)
        return B.e4m3_to_f32(ci & 0xFF), B.e4m3_to_f32((ci >> 8) & 0xFF)

    @device_inline
    def e4m3_to_f32(c):
        """float32 value of the E4M3 code in the low byte of ``c``."""
        return B.e4m3_to_f32(int(c) & 0xFF)

else:
    # --- intrinsics: the instruction as inline PTX ------------------------------
    from llvmlite import ir
    from numba import types
    from numba.core.extending import intrinsic

    _I16, _I32, _F32 = ir.IntType(16), ir.IntType(32), ir.FloatType()

    def _asm(builder, ret, args, text, constraints):
        fnty = ir.FunctionType(ret, [a.type for a in args])
        return builder.asm(fnty, text, constraints, args, side_effect=False)

    def _f32(context, builder, ty, v):
        return context.cast(builder, v, ty, types.float32)

    @intrinsic
    def _cvt_rn_bf16_f32(typingctx, x):
        if not isinstance(x, (types.Float, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            return _asm(builder, _I16, [_f32(context, builder, x, args[0])], "cvt.rn.bf16.f32 $0, $1;", "=h,f")

        return types.uint16(x), codegen

    @intrinsic
    def _cvt_rn_bf16x2_f32(typingctx, lo, hi):
        if not all(isinstance(t, (types.Float, types.Integer)) for t in (lo, hi)):
            return None

        def codegen(context, builder, sig, args):
            a = [_f32(context, builder, t, v) for t, v in zip((lo, hi), args)]
            # first source -> upper half: hi goes first
            return _asm(builder, _I32, [a[1], a[0]], "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f")

        return types.uint32(lo, hi), codegen

    @intrinsic
    def _cvt_rn_f16x2_f32(typingctx, lo, hi):
        if not all(isinstance(t, (types.Float, types.Integer)) for t in (lo, hi)):
            return None

        def codegen(context, builder, sig, args):
            a = [_f32(context, builder, t, v) for t, v in zip((lo, hi), args)]
            return _asm(builder, _I32, [a[1], a[0]], "cvt.rn.f16x2.f32 $0, $1, $2;", "=r,f,f")

        return types.uint32(lo, hi), codegen

    @intrinsic
    def _f32_bits(typingctx, x):
        if not isinstance(x, (types.Float, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(_f32(context, builder, x, args[0]), _I32)

        return types.uint32(x), codegen

    @intrinsic
    def _bits_f32(typingctx, w):
        if not isinstance(w, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(context.cast(builder, args[0], w, types.uint32), _F32)

        return types.float32(w), codegen

    @intrinsic
    def _bf16_to_f32_shift(typingctx, b):
        if not isinstance(b, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            # A shift, not cvt.f32.bf16: see the module docstring.
            v = builder.zext(context.cast(builder, args[0], b, types.uint16), _I32)
            return builder.bitcast(builder.shl(v, ir.Constant(_I32, 16)), _F32)

        return types.float32(b), codegen

    @intrinsic
    def _cvt_rn_satfinite_e4m3x2_f32(typingctx, lo, hi):
        if not all(isinstance(t, (types.Float, types.Integer)) for t in (lo, hi)):
            return None

        def codegen(context, builder, sig, args):
            a = [_f32(context, builder, t, v) for t, v in zip((lo, hi), args)]
            return _asm(builder, _I16, [a[1], a[0]], "cvt.rn.satfinite.e4m3x2.f32 $0, $1, $2;", "=h,f,f")

        return types.uint16(lo, hi), codegen

    def _two_f32(arg_ty, bits, text, constraint):
        """An intrinsic of one integer argument (cast to ``bits`` wide) whose
        asm writes two float32 (``$0``, ``$1``) from it (``$2``)."""
        ret = types.UniTuple(types.float32, 2)
        as_ty = types.uint16 if bits == 16 else types.uint32

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[0], arg_ty, as_ty)
            pair = _asm(builder, ir.LiteralStructType([_F32, _F32]), [v], text, "=f,=f," + constraint)
            lo_v, hi_v = builder.extract_value(pair, 0), builder.extract_value(pair, 1)
            return context.make_tuple(builder, ret, [lo_v, hi_v])

        return ret(arg_ty), codegen

    @intrinsic
    def _cvt_e4m3x2_f32x2(typingctx, c):
        if not isinstance(c, types.Integer):
            return None
        text = (
            "{ .reg .b32 h2; .reg .b16 l16, h16;\n"
            "cvt.rn.f16x2.e4m3x2 h2, $2;\n"
            "mov.b32 {l16, h16}, h2;\n"
            "cvt.f32.f16 $0, l16;\n"
            "cvt.f32.f16 $1, h16; }"
        )
        return _two_f32(c, 16, text, "h")

    @intrinsic
    def _cvt_e4m3_f32(typingctx, c):
        if not isinstance(c, types.Integer):
            return None
        text = (
            "{ .reg .b32 h2; .reg .b16 l16, h16;\n"
            "cvt.rn.f16x2.e4m3x2 h2, $1;\n"
            "mov.b32 {l16, h16}, h2;\n"
            "cvt.f32.f16 $0, l16; }"
        )

        def codegen(context, builder, sig, args):
            v = builder.and_(context.cast(builder, args[0], c, types.uint16), ir.Constant(_I16, 0xFF))
            return _asm(builder, _F32, [v], text, "=f,h")

        return types.float32(c), codegen

    @intrinsic
    def _cvt_f16x2_f32x2(typingctx, w):
        if not isinstance(w, types.Integer):
            return None
        text = "{ .reg .b16 l16, h16;\nmov.b32 {l16, h16}, $2;\ncvt.f32.f16 $0, l16;\ncvt.f32.f16 $1, h16; }"
        return _two_f32(w, 32, text, "r")

    f16x2_to_f32x2 = _cvt_f16x2_f32x2
    f32_bits = _f32_bits
    bits_f32 = _bits_f32
    f32_to_bf16 = _cvt_rn_bf16_f32
    f32x2_to_bf16x2 = _cvt_rn_bf16x2_f32
    bf16_to_f32 = _bf16_to_f32_shift
    f32x2_to_e4m3x2 = _cvt_rn_satfinite_e4m3x2_f32
    f32x2_to_f16x2 = _cvt_rn_f16x2_f32
    e4m3x2_to_f32x2 = _cvt_e4m3x2_f32x2
    e4m3_to_f32 = _cvt_e4m3_f32


@device_inline
def f32_to_e4m3(x):
    """FP8 E4M3 code (uint8) of float32 ``x``: round to nearest even,
    saturating to +-448, NaN to ``0x7f`` (``f32x2_to_e4m3x2``'s low byte;
    ``bits.f32_to_e4m3`` gives the same codes by branches and ``frexp``)."""
    return np.uint8(f32x2_to_e4m3x2(x, np.float32(0.0)) & np.uint16(0xFF))


_TWO_P126 = np.float32(2.0**126)


@device_inline
def e2m1_to_f32(n):
    """float32 value of an FP4 E2M1 nibble ``n`` (bits 0-3; the rest must
    be zero) as ``bits.e2m1_to_f32`` gives it, in three instructions: the
    nibble's exponent and mantissa bits placed in float32's exponent and
    top mantissa bit (bits 22-24), its sign in bit 31, times ``2**126``.
    E2M1's bias is 1 against float32's 127, so that float is the value
    ``2**-126`` times: exponent field ``e >= 1`` gives ``2**(e - 127) (1 +
    m / 2)``, ``e = 0`` the subnormal ``m 2**-127`` (0.5 once scaled: E2M1's
    own subnormal); the product is exact (kernels keep subnormals: no
    ``fastmath``). ``bits.e2m1_to_f32`` takes a branch and an
    integer-to-float conversion (``I2F``, a quarter-rate instruction) a
    value."""
    u = np.uint32(n)
    return bits_f32(((u & np.uint32(7)) << np.uint32(22)) | ((u & np.uint32(8)) << np.uint32(28))) * _TWO_P126


@device_inline
def bf16x2_to_f32x2(w):
    """``(value of bits 0-15, value of bits 16-31)`` of two bf16 in a word
    (a staged pair of bf16 rows): each half shifted up to a float32."""
    return bf16_to_f32(np.uint16(w & np.uint32(0xFFFF))), bf16_to_f32(np.uint16(w >> np.uint32(16)))


def _eight(pair):
    """Eight float32 of the four words of a 16-byte load, each word's pair by
    ``pair`` (bits 0-15 first): the values in memory order."""

    @device_inline
    def eight(words):
        w0, w1, w2, w3 = words
        a0, a1 = pair(w0)
        a2, a3 = pair(w1)
        a4, a5 = pair(w2)
        a6, a7 = pair(w3)
        return a0, a1, a2, a3, a4, a5, a6, a7

    return eight


f16x8_to_f32 = _eight(f16x2_to_f32x2)  # eight fp16 (a 16-byte load of activations) as float32
bf16x8_to_f32 = _eight(bf16x2_to_f32x2)  # eight bf16 likewise
