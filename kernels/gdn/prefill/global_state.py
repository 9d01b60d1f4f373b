"""``gdn.prefill`` variant ``global_state`` (lever ``gdn_regresident`` off).

Same chunk algebra as ``regresident``, but the state slice lives in global
memory: every chunk reads it (for ``K S`` and ``Q S``) and writes the updated
slice back, the way a split chunk pipeline materialises the chunk-boundary
states. That is ``2 * Hv * dk * dv * 4`` bytes per chunk instead of per call;
the variant's ``traffic`` declares the extra ``(chunks - 1)`` round trips.
The repeated reads of a slice within a chunk mostly hit L1/L2; the declared
figure counts each round trip once.
"""

from __future__ import annotations

from .._mma_qk import TC_FORM
from .._prefill import build_prefill, make_prefill

NAME = "global_state"
TENSOR_CORES = TC_FORM  # A and P on mma.sync (``_mma_qk``)
SUMMARY = "chunked WY prefill, state slice read from and written back to global memory every chunk"


def make_prefill_global_state(C: int, DK: int, DV: int):
    return make_prefill(C, DK, DV, False)


def build(shape):
    return build_prefill(shape, resident=False)
