"""``attention.rotation`` variant ``pre_rotated`` (Metrale's
``weight_pre_rotated``, head dim 128): the Q/K/V weights were rotated at
load (``W' = H W`` per head, stored bf16), so the projection already gives
rotated q, k and v and the KV-cache write skips its rotation. The load
runs once per weight buffer, never in a timed call. Kernels: ``_rotation``."""

from __future__ import annotations

from ...common import tc
from ._rotation import launcher

NAME = "pre_rotated"
SUMMARY = "project on weights rotated at load; the KV-cache write does not rotate"


def build(shape, form: str | None = None):
    """The projection on the device's tensor-core form, or ``form`` (tests pass it)."""
    return launcher(shape, pre_rotated=True, form=form)


build.forms = tc.FORMS
