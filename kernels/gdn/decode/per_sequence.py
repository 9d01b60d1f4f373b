"""``gdn.decode`` variant ``per_sequence`` (lever ``gdn_batched_fla`` off):
one launch per sequence of the batch, each stepping that sequence's state.

Same layouts and per-block work as ``batched`` (see there); the sequence
index is a kernel argument instead of a block coordinate::

    for n in 0..N-1:   launch Hv * dv/BV blocks of BV * KSPLIT threads on
                       pool[slots[n]] and row n of q, k, v, g, beta, o

Memory-bound like ``batched`` and moves the same bytes; what it adds is
``N`` launch overheads and ``N`` tails in which a launch of ``Hv * dv/BV``
blocks (128 at the model shape) cannot fill the GPU.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda

from .._layout import slice_launch
from .batched import make_decode_block, shared_bytes

NAME = "per_sequence"
SUMMARY = "one launch per sequence, block per (head, column slice), state in registers"


@lru_cache(maxsize=None)
def make_decode_per_sequence(DK: int, DV: int):
    """Compile the one-sequence decode step at ``DK x DV``."""
    decode_block = make_decode_block(DK, DV)

    @cuda.jit
    def gdn_decode_one(n, q, k, v, g, beta, slots, state, o):
        decode_block(n, cuda.blockIdx.x, v.shape[1] // q.shape[1], q, k, v, g, beta, slots, state, o)

    return gdn_decode_one


def build(shape):
    grid, nt = slice_launch(shape, shared_bytes)
    kern = make_decode_per_sequence(shape["dk"], shape["dv"])

    def launch(b):
        st = b["state"]
        args = (b["q"], b["k"], b["v"], b["g"], b["beta"], b["slots"], st.reshape(st.size), b["o"])
        for n in range(shape["n"]):
            kern[grid, nt](n, *args)

    return launch
