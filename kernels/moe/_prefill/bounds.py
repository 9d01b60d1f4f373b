"""The per-expert tile bound of the bounded grouped GEMMs, in plain
integers (no numba or numpy: the tests and ``select`` read it too).

A grouped GEMM whose grid is sized on the host before the routing is known
gives every expert the same number of M tiles, ``max_m_tiles``: its grid
has that many tile rows per expert. An expert routed more rows than
``max_m_tiles * BM`` gets no block for the excess: those rows are never
computed, and whatever their scratch holds flows on into the combine. The
engine sizes the bound one of four ways:

* exact: the routing's own largest count, read back from the device (a
  host sync, so never under graph capture);
* worst case: every token on one expert (a token takes an expert at most
  once, so ``T`` rows);
* a load factor ``n``: at most ``n`` times the average rows per expert
  (``T * top_k / E``), never above the worst case;
* the sorted prefill's estimate: twice the average.
"""

from __future__ import annotations

BM = 8  # rows per M tile of the bound (the kernel computes in 64-row tiles and masks rows past the bound)


def tiles(rows: int, bm: int = BM) -> int:
    return -(-int(rows) // bm)


def worst_case(tokens: int, bm: int = BM) -> int:
    """M tiles for every token on one expert."""
    return max(1, tiles(tokens, bm))


def load_factor_cap(tokens: int, top_k: int, experts: int, factor: int, bm: int = BM) -> int:
    """M tiles for ``factor`` times the average rows per expert, capped at
    the worst case."""
    cap = -(-(int(factor) * int(tokens) * int(top_k)) // (int(experts) * bm))
    return max(1, min(worst_case(tokens, bm), cap))


def estimate(tokens: int, top_k: int, experts: int, bm: int = BM) -> int:
    """The sorted prefill's estimate: twice the average rows per expert."""
    return load_factor_cap(tokens, top_k, experts, 2, bm)


def exact(counts, bm: int = BM) -> int:
    """M tiles of the most loaded expert (at least one)."""
    return max(1, max((tiles(c, bm) for c in counts), default=1))


def rows_lost(counts, m_tiles: int | None, bm: int = BM) -> int:
    """Routed rows a grid of ``m_tiles`` M tiles per expert leaves
    uncomputed (None: a grid that covers every row)."""
    if m_tiles is None:
        return 0
    cap = int(m_tiles) * bm
    return sum(max(0, int(c) - cap) for c in counts)
