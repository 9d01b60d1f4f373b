"""What the attention family's decode paths share (``paged_decode``,
``dflash_contig``, ``mla_decode``): the fp32 online-softmax tolerance and the
variant a module declares."""

from __future__ import annotations

from ..common.path import Tolerance, Variant

# fp32 accumulation against a float64 reference on the same bf16 inputs.
# At Qwen3-Next's shape and 32K tokens correct float32 arithmetic stays near
# 3e-7 of the output's largest magnitude, one token dropped moves an output
# by almost 1e-2 of it (tests/kernels/attention/test_paged_decode_model_shapes.py), a
# NaN from a poisoned slot fails outright.
TOL = Tolerance(rel=2e-4, abs_of_max=1e-4)


def variant(mod, traffic, launches=2) -> Variant:
    """The variant module ``mod`` declares (``NAME``, ``SUMMARY``, ``build``)."""
    return Variant(mod.NAME, mod.SUMMARY, mod.build, traffic=traffic, launches=launches)
