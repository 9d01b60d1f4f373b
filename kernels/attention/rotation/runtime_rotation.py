"""``attention.rotation`` variant ``runtime_rotation``: the QKV projection
on the weights as trained, then the KV-cache write rotates every head of
q, k and v with the fast Walsh-Hadamard transform before it stores q and
quantises K and V to FP8 E4M3. What Metrale does unless
``weight_pre_rotated`` is on at head dim 128. Kernels: ``_rotation``."""

from __future__ import annotations

from ...common import tc
from ._rotation import launcher

NAME = "runtime_rotation"
SUMMARY = "project, then rotate each head (fast Walsh-Hadamard) in the KV-cache write"


def build(shape, form: str | None = None):
    """The projection on the device's tensor-core form, or ``form`` (tests pass it)."""
    return launcher(shape, pre_rotated=False, form=form)


build.forms = tc.FORMS
