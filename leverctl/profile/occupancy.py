"""Theoretical occupancy: how many blocks of a kernel fit on one SM at once,
from an architecture's published limits and the kernel's registers, shared
memory and block size, and which limit binds.

The arithmetic is the CUDA occupancy calculator's, as NVIDIA's
``cuda_occupancy.h`` (CUDA Toolkit 13.0; the calculator behind
``cudaOccupancyMaxActiveBlocksPerMultiprocessor``) does it:

* warps: a block takes ``ceil(threads / 32)`` warp slots of the SM's;
* registers: each warp's ``registers x 32`` rounded up to the allocation
  unit (256); the SM's register file is split between its four
  sub-partitions, each holding whole warps; a block fits at all only if
  its warps, counted up to a multiple of four, fit in the 65536 registers a
  block may have, and no thread has more than 255;
* shared memory: static + dynamic + the 1 KiB the runtime reserves per
  block (sm_80 on), rounded up to the allocation unit (128 bytes); a block
  over the per-block maximum (the opt-in one: a kernel that needs more than
  48 KiB sets ``cudaFuncAttributeMaxDynamicSharedMemorySize``) cannot run;
  the SM's whole shared memory is assumed to be carved out for it, which is
  what the driver does by default when a block needs it;
* blocks: the SM's cap on resident blocks;
* barriers (sm_90 on, only when a block's named-barrier count is given):
  twice the block cap, shared between the resident blocks.

Nothing here reads a GPU, and nothing here imports numpy or numba.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

WARP = 32

# The order ties are named in: a fixed limit of the SM (warps, blocks) before
# a resource of the kernel (registers, shared memory, barriers). When a fixed
# limit binds as tightly as a resource, using less of the resource gains no
# block, so the fixed limit is the answer that tells what to change.
LIMITS = ("warps", "blocks", "registers", "shared memory", "barriers")


@dataclass(frozen=True)
class Arch:
    """One architecture's per-SM limits (sizes in bytes, counts per SM
    unless named per block or per thread)."""

    name: str
    gpus: str
    max_warps: int  # resident warps per SM
    max_blocks: int  # resident blocks per SM
    max_threads_per_block: int
    registers: int  # 32-bit registers per SM
    max_registers_per_block: int
    max_registers_per_thread: int
    register_unit: int  # a warp's registers are allocated in multiples of this
    warp_granularity: int  # warps are placed in this many sub-partitions, each with its share of registers
    shared: int  # shared memory per SM (the largest carve-out)
    max_shared_per_block: int  # opt-in maximum, without the reserved part
    shared_unit: int  # a block's shared memory is allocated in multiples of this
    reserved_shared: int  # shared memory the runtime reserves in every block
    barriers: int | None  # named barriers per SM the calculator counts (None: it counts none)


KIB = 1024

# Sources, per field:
#   max_warps, max_blocks, max_threads_per_block, registers, max_registers_per_block,
#   max_registers_per_thread, shared, max_shared_per_block: CUDA C++ Programming Guide,
#   "Compute Capabilities", table "Technical Specifications per Compute Capability"
#   (8.0: 64 warps, 32 blocks, 164 KB / 163 KB; 8.9: 48 warps, 24 blocks, 100 KB / 99 KB;
#   9.0 and 10.0: 64 warps, 32 blocks, 228 KB / 227 KB; all: 64 K registers per SM and
#   per block, 255 per thread, 1024 threads per block).
#   register_unit (256, per warp), warp_granularity (4 sub-partitions), shared_unit
#   (128 bytes from 8.x on): cuda_occupancy.h, cudaOccRegAllocationGranularity,
#   cudaOccSubPartitionsPerMultiprocessor, cudaOccSMemAllocationGranularity; the same
#   figures as the CUDA Occupancy Calculator spreadsheet's GPU data.
#   reserved_shared (1 KB per block from 8.0 on): the Programming Guide's shared-memory
#   notes per compute capability ("1 KB of shared memory is reserved for system use")
#   and cudaDevAttrReservedSharedMemoryPerBlock, which cuda_occupancy.h adds to every block.
#   barriers: cuda_occupancy.h, cudaOccMaxBlocksPerSMBlockBarrierLimit (twice the block
#   cap on 9.0 and 10.0; applied from compute capability 9 on only).
_COMMON = dict(
    max_threads_per_block=1024,
    registers=64 * KIB,
    max_registers_per_block=64 * KIB,
    max_registers_per_thread=255,
    register_unit=256,
    warp_granularity=4,
    shared_unit=128,
    reserved_shared=1 * KIB,
)


def _arch(name: str, gpus: str, warps: int, blocks: int, shared_kib: int, barriers: int | None) -> Arch:
    return Arch(
        name=name,
        gpus=gpus,
        max_warps=warps,
        max_blocks=blocks,
        shared=shared_kib * KIB,
        max_shared_per_block=(shared_kib - 1) * KIB,
        barriers=barriers,
        **_COMMON,
    )


ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        _arch("sm_80", "A100", warps=64, blocks=32, shared_kib=164, barriers=None),
        _arch("sm_89", "L40, RTX 4090", warps=48, blocks=24, shared_kib=100, barriers=None),
        _arch("sm_90", "H100, H200", warps=64, blocks=32, shared_kib=228, barriers=64),
        _arch("sm_90a", "H100, H200", warps=64, blocks=32, shared_kib=228, barriers=64),
        _arch("sm_100a", "B200", warps=64, blocks=32, shared_kib=228, barriers=64),
    )
}


def get_arch(name: str) -> Arch:
    """The limits of ``name``; a ValueError naming the known ones otherwise."""
    try:
        return ARCHS[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}: one of {', '.join(ARCHS)}") from None


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of one kernel fit on an SM, and why no more.

    ``limits`` holds the block count each limit alone allows (``barriers``
    only where counted); ``limiter`` is the one that binds, the first of
    :data:`LIMITS` where several bind equally (``limiters`` lists them
    all). With ``blocks == 0`` the kernel cannot run at this block size and
    ``reason`` says why."""

    arch: str
    threads_per_block: int
    warps_per_block: int
    blocks: int  # resident blocks per SM
    active_warps: int
    max_warps: int
    fraction: float  # active_warps / max_warps
    limiter: str
    limiters: tuple[str, ...]
    limits: Mapping[str, int]
    registers_per_block: int  # allocated: per-warp allocation x warps
    shared_per_block: int  # allocated: static + dynamic + reserved, rounded up
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["limits"] = dict(self.limits)
        out["limiters"] = list(self.limiters)
        return out


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _warp_limit(a: Arch, threads: int, warps: int) -> tuple[int, str]:
    if threads > a.max_threads_per_block:
        return 0, f"{threads} threads per block: over the {a.max_threads_per_block} a block may have"
    return a.max_warps // warps, ""


def _register_limit(a: Arch, regs: int, warps: int) -> tuple[int, int, str]:
    """(blocks, registers allocated per block, why none fit)."""
    per_warp = _round_up(regs * WARP, a.register_unit)
    per_block = per_warp * warps
    if regs > a.max_registers_per_thread:
        return 0, per_block, f"{regs} registers per thread: over the {a.max_registers_per_thread} a thread may have"
    # The hardware counts a block's warps up to a whole number per sub-partition.
    assumed = per_warp * _round_up(warps, a.warp_granularity)
    if assumed > a.max_registers_per_block:
        return (
            0,
            per_block,
            f"{regs} registers x {warps} warps take {assumed} registers: over the "
            f"{a.max_registers_per_block} a block may have",
        )
    if per_warp == 0:  # no registers: no limit of their own
        return a.max_blocks, 0, ""
    warps_fit = (a.registers // a.warp_granularity // per_warp) * a.warp_granularity
    return warps_fit // warps, per_block, ""


def _shared_limit(a: Arch, static: int, dynamic: int) -> tuple[int, int, str]:
    """(blocks, shared bytes allocated per block, why none fit)."""
    per_block = _round_up(static + dynamic + a.reserved_shared, a.shared_unit)
    if per_block > a.max_shared_per_block + a.reserved_shared:
        return (
            0,
            per_block,
            f"{static + dynamic} bytes of shared memory per block ({static} static, {dynamic} dynamic): "
            f"over the {a.max_shared_per_block} a block may have",
        )
    return a.shared // per_block, per_block, ""


def occupancy(
    arch: str,
    threads_per_block: int,
    regs_per_thread: int,
    smem_static: int,
    smem_dynamic: int = 0,
    *,
    barriers: int = 0,
) -> Occupancy:
    """Theoretical occupancy of a kernel on one SM of ``arch``.

    ``smem_static`` is the kernel's own static shared memory, as ``ptxas
    -v`` reports it ("N bytes smem"), without the reserved KiB this adds;
    ``barriers`` the named barriers a block uses ("used N barriers"), which
    limit blocks from sm_90 on (0: not counted)."""
    a = get_arch(arch)
    if threads_per_block < 1:
        raise ValueError(f"threads per block must be at least 1, not {threads_per_block}")
    if min(regs_per_thread, smem_static, smem_dynamic, barriers) < 0:
        raise ValueError("registers, shared memory and barriers cannot be negative")
    warps = -(-threads_per_block // WARP)
    limits: dict[str, int] = {}
    reasons: dict[str, str] = {}
    limits["warps"], reasons["warps"] = _warp_limit(a, threads_per_block, warps)
    limits["blocks"] = a.max_blocks
    limits["registers"], regs_block, reasons["registers"] = _register_limit(a, regs_per_thread, warps)
    limits["shared memory"], smem_block, reasons["shared memory"] = _shared_limit(a, smem_static, smem_dynamic)
    if a.barriers and barriers > 0:
        limits["barriers"] = a.barriers // barriers
        reasons["barriers"] = f"{barriers} barriers per block: over the {a.barriers} an SM has"
    blocks = min(limits.values())
    limiters = tuple(k for k in LIMITS if limits.get(k) == blocks)
    active = blocks * warps
    return Occupancy(
        arch=a.name,
        threads_per_block=threads_per_block,
        warps_per_block=warps,
        blocks=blocks,
        active_warps=active,
        max_warps=a.max_warps,
        fraction=active / a.max_warps,
        limiter=limiters[0],
        limiters=limiters,
        limits=limits,
        registers_per_block=regs_block,
        shared_per_block=smem_block,
        reason=reasons[limiters[0]] if blocks == 0 else "",
    )
