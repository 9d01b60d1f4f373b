"""Shared-memory geometry of the SSD scan kernels (``ssd.py``), numba-free:
the decision table (``selection.mamba2``) reads the largest state size that
fits, the engine's ``ssd_scan_fits(state_size)``.

The chunk blocks stage a 32-token tile of C and one of B as fp32 rows of the
state size (rows padded by one word against bank conflicts:
``2 * 32 * 4 * (n + 1)`` bytes), the tile's 32 x 32 decay-masked C.B block
and the chunk's cumulative decay and dt (up to 256 tokens each), all within
the 48 KiB any block may declare statically.
"""

from __future__ import annotations

SSD_TILE = 32  # tokens per staged C/B tile of the SSD kernels
SSD_MAX_CHUNK = 256  # longest chunk the SSD kernels hold the cumulative decay of
SSD_SMEM_LIMIT = 48 * 1024


def ssd_shared_bytes(n: int) -> int:
    """Shared memory of the SSD chunk kernels at state size ``n``."""
    return 4 * (2 * SSD_TILE * (n + 1) + SSD_TILE * SSD_TILE + 2 * SSD_MAX_CHUNK)


SSD_MAX_STATE = (SSD_SMEM_LIMIT // 4 - SSD_TILE * SSD_TILE - 2 * SSD_MAX_CHUNK) // (2 * SSD_TILE) - 1


def ssd_scan_fits(n: int) -> bool:
    return ssd_shared_bytes(n) <= SSD_SMEM_LIMIT
