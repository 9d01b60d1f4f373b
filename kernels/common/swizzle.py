"""The 128-byte shared-memory swizzle that Hopper's wgmma descriptors
(swizzle mode 1) and bank-conflict-free ``ldmatrix``/128-bit staging use.

A tile row of 128 bytes holds eight 16-byte *chunks*. Unswizzled, chunk
``c`` of every row sits in the same four banks, so eight threads reading
chunk ``c`` of eight consecutive rows (a column of an ``ldmatrix`` or of a
K-major operand) all hit the same banks: an 8-way conflict. The swizzle
stores chunk ``c`` of row ``r`` at chunk ``c ^ (r % 8)``: the eight rows of
an 8 x 128-byte *atom* then spread one column over all 32 banks, and every
16-byte chunk stays contiguous, so 128-bit stores and ``cp.async`` of 16
bytes keep their width.

On byte offsets within a tile whose rows are 128 bytes apart this is
``offset ^ ((offset >> 7) & 7) << 4``: bits 4-6 (the chunk) XOR bits 7-9
(the row within the atom). It is the function CuTe names
``Swizzle<3, 4, 3>`` (3 bits of mask, 4 bits of base -- 16-byte units --,
a shift of 3) applied to byte offsets, and what the hardware applies to
absolute shared addresses for a descriptor's 128-byte mode, which is why a
swizzled tile starts on a 1024-byte boundary (:data:`ATOM_BYTES`): there
the relative and absolute bits agree.

A K-major operand tile of ``rows`` x ``K`` is stored as K blocks of 128
bytes (64 bf16 or 128 E4M3), each block ``rows`` x 128 bytes, rows 128
bytes apart, blocks ``rows * 128`` bytes apart (:func:`kmajor_offset`); its
wgmma descriptor has SBO = 1024 (eight rows) and its start address moves
along K inside a block by plain byte offsets (the hardware swizzles the
result).
"""

from __future__ import annotations

import numpy as np
from numba import config

from .launch import device_inline

ROW_BYTES = 128  # one swizzled row: eight 16-byte chunks
CHUNK_BYTES = 16
ATOM_ROWS = 8
ATOM_BYTES = ATOM_ROWS * ROW_BYTES  # 1024: the pattern repeats every eight rows
SBO = ATOM_BYTES  # a K-major SW128 descriptor's stride-dimension byte offset
# ``cuda.shared.array(..., alignment=SMEM_ALIGN)`` for a swizzled tile: the
# simulator refuses alignments (its wgmma twin puts every shared array on a
# 1024-byte boundary itself).
SMEM_ALIGN = None if config.ENABLE_CUDASIM else ATOM_BYTES


def sw128_np(offset):
    """:func:`sw128` on host integers or NumPy arrays."""
    offset = np.asarray(offset)
    return offset ^ (((offset >> 7) & 7) << 4)


def kmajor_offset_np(row, kbyte, rows: int):
    """:func:`kmajor_offset` on host integers or NumPy arrays."""
    row, kbyte = np.asarray(row), np.asarray(kbyte)
    return sw128_np((kbyte >> 7) * (rows * ROW_BYTES) + row * ROW_BYTES + (kbyte & 127))


@device_inline
def sw128(offset):
    """The swizzled byte offset of ``offset`` in a 128-byte-row tile."""
    return offset ^ (((offset >> 7) & 7) << 4)


@device_inline
def kmajor_offset(row, kbyte, rows):
    """Byte offset of (``row``, byte ``kbyte`` along K) in a K-major SW128
    tile of ``rows`` rows (a multiple of 8): 128-byte K blocks of ``rows``
    rows each, swizzled."""
    return sw128((kbyte >> 7) * (rows * ROW_BYTES) + row * ROW_BYTES + (kbyte & 127))
