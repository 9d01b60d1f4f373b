"""Launch-size checks for the W4A16 kernels (raise on impossible configs)."""
from __future__ import annotations

MAX_THREADS_PER_BLOCK = 1024
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
MAX_STATIC_SHARED = 48 * 1024  # bytes a kernel may declare statically
# Row-group blocks the grid-stride GEMVs launch at most: 132 SMs (H200) x 16
# resident 128-thread blocks. More blocks would only queue.
MAX_RESIDENT_BLOCKS = 132 * 16


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check(grid: tuple[int, ...], block: tuple[int, ...], shared_bytes: int = 0) -> None:
    grid = tuple(int(g) for g in grid)
    block = tuple(int(b) for b in block)
    threads = 1
    for b in block:
        if b < 1:
            raise ValueError(f"block {block}: every dimension must be >= 1")
        threads *= b
    if threads > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"block {block}: {threads} threads > {MAX_THREADS_PER_BLOCK}")
    if any(g < 1 for g in grid):
        raise ValueError(f"grid {grid}: every dimension must be >= 1 (empty problem?)")
    if grid[0] > MAX_GRID_X or any(g > MAX_GRID_YZ for g in grid[1:]):
        raise ValueError(f"grid {grid} exceeds the device's grid limits")
    if shared_bytes > MAX_STATIC_SHARED:
        raise ValueError(f"{shared_bytes} B of static shared memory > {MAX_STATIC_SHARED} B")
