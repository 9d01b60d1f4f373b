"""A kernel's machine code read for what decides its speed, without a GPU:
the resources ptxas gave it, the static instruction mix of its SASS, and
flags for what is plainly wrong.

    parse_ptxas_v       ``ptxas -v``'s log: registers, barriers, static shared memory, stack, spills, per kernel
    resource_usage      ``cuobjdump --dump-resource-usage`` on a cubin: the same figures from the cubin itself
    instruction_mix     ``nvdisasm`` (or ``cuobjdump -sass``) text: instructions counted by opcode and kind
    claim_problems      a tensor-core claim ("wgmma" or "mma.sync", and the inputs' type) held against the SASS
    flags               one sentence per finding, worst first
    find_tool           a CUDA binary on PATH, in the toolkit, or in an NVIDIA pip wheel

SASS spellings, as ptxas 13.0 writes them for sm_90/sm_90a (read from
compiled kernels): global ``LDG.E`` (32-bit), ``LDG.E.64``, ``LDG.E.128``,
``LDG.E.U8``, ``LDG.E.S8``, ``LDG.E.U16``, ``LDG.E.S16``, read-only
``LDG.E.64.CONSTANT`` and ``LDG.E.128.CONSTANT``; ``STG.E``, ``STG.E.64``,
``STG.E.128``, ``STG.E.U8``, ``STG.E.U16``; shared ``LDS``, ``LDS.U8``,
``LDS.S8``, ``LDS.U16``, ``LDS.64``, ``LDS.128`` and ``STS`` likewise; local
``LDL``, ``STL``, ``STL.64``, ``STL.128``, spill reloads ``LDL.LU`` and
``LDL.LU.64``; ``cp.async`` ``LDGSTS.E.BYPASS.128`` (16 bytes) and
``LDGSTS.E`` (4), with ``LDGDEPBAR`` and ``DEPBAR.LE`` to wait; TMA ``UTMALDG.2D`` and
``UTMASTG.2D``; bulk copies ``UBLKCP.S.G`` (global to shared) and
``UBLKCP.G.S``; ``ldmatrix`` ``LDSM.16.M88`` (x1), ``LDSM.16.M88.4``
(x4), transposed ``LDSM.16.MT88.2`` (x2); tensor cores
``HGMMA.64x128x16.F32``, ``HGMMA.64x64x16.F32.BF16``,
``QGMMA.64x256x32.F32.E4M3.E4M3``, ``IGMMA.64x8x32.S8.S8``,
``HMMA.16816.F32``, ``HMMA.16816.F32.BF16``, ``IMMA.16832.S8.S8`` (sm_100a:
``UTCHMMA``, ``UTCQMMA``, ``UTCIMMA``); barriers
``BAR.SYNC.DEFER_BLOCKING``, ``BAR.ARV``, ``WARPGROUP.ARRIVE``,
``WARPGROUP.DEPBAR.LE``, mbarriers ``SYNCS.EXCH.64``,
``SYNCS.ARRIVE.TRANS64``, ``SYNCS.PHASECHK.TRANS64.TRYWAIT``
(``__syncwarp`` left no ``WARPSYNC`` in the kernels read; one is counted
where it appears). Padding ptxas leaves in, ``@!PT LDS RZ, [RZ]`` (a
never-true predicate) and ``NOP``, is not counted.

Nothing here imports numba or numpy.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    from .occupancy import Occupancy

# ── finding the tools ────────────────────────────────────────────────────────


def _wheel_dirs() -> list[Path]:
    """The running interpreter's site-packages folders, where the NVIDIA
    wheels (``nvidia-cuda-nvdisasm``, ``nvidia-cuda-cuobjdump``...) put
    their binaries under ``nvidia/*/bin``."""
    dirs = [sysconfig.get_paths().get(k) for k in ("purelib", "platlib")]
    try:
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # a virtualenv's old site module lacks them
        pass
    dirs += sys.path
    seen: list[Path] = []
    for d in dirs:
        if d and Path(d).is_dir() and Path(d) not in seen:
            seen.append(Path(d))
    return seen


def find_tool(name: str) -> str | None:
    """The path of the CUDA binary ``name``: on PATH, in ``$CUDA_HOME/bin``,
    in ``/usr/local/cuda/bin``, or in an NVIDIA pip wheel inside this
    interpreter's site-packages; None where it is in none of them. Where
    several are found, the newest release (``name --version``) wins, the
    earlier place in that order on a tie: libNVVM (a toolkit's or a
    wheel's, whichever numba-cuda loads) writes PTX of its own ISA version,
    which an older ptxas refuses ("Unsupported .version 9.5"), while a newer
    ptxas, nvdisasm or cuobjdump reads what an older toolkit made."""
    found = _candidates(name)
    if len(found) > 1:
        best = max(range(len(found)), key=lambda i: (tool_release(found[i]), -i))
        return found[best]
    return found[0] if found else None


def _candidates(name: str) -> list[str]:
    out: list[str] = []
    on_path = shutil.which(name)
    if on_path:
        out.append(on_path)
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        cand = Path(home, "bin", name) if home else None
        if cand and cand.is_file() and os.access(cand, os.X_OK):
            out.append(str(cand))
    for d in _wheel_dirs():
        for cand in sorted(d.glob(f"nvidia/*/bin/{name}")):
            if cand.is_file() and os.access(cand, os.X_OK):
                out.append(str(cand))
    return list(dict.fromkeys(out))


_RELEASES: dict[tuple[str, float], tuple[int, ...]] = {}
_RELEASE = re.compile(r"release (\d+)\.(\d+)")


def tool_release(path: str) -> tuple[int, ...]:
    """A CUDA binary's release as ``(major, minor)`` from its ``--version``
    ("Cuda compilation tools, release 13.5, ..."); ``()`` where it says none."""
    try:
        key = (path, os.stat(path).st_mtime)
    except OSError:
        return ()
    if key not in _RELEASES:
        try:
            r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
            m = _RELEASE.search(r.stdout + r.stderr)
            _RELEASES[key] = (int(m.group(1)), int(m.group(2))) if m else ()
        except (OSError, subprocess.SubprocessError):
            _RELEASES[key] = ()
    return _RELEASES[key]


def release_text(path: str | None) -> str:
    """:func:`tool_release` as text ("13.5"); ``-`` for no tool or no release."""
    return (".".join(map(str, tool_release(path))) or "-") if path else "-"


# ── resources ────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Resources:
    """What one kernel was given, per thread or per block. A figure its
    source does not report is None (cuobjdump reports no spills or barriers;
    ptxas for sm_90 no constant bank size).

    ``shared`` is the static shared memory as the source says it: ptxas
    reports the kernel's own arrays; the cubin's shared section, which
    cuobjdump reports, also holds the 1 KiB reserved for the runtime on
    sm_90 and later whenever the kernel has any (ptxas 13.0)."""

    registers: int
    shared: int = 0  # static shared memory per block, bytes
    stack: int = 0  # stack frame per thread, bytes: local arrays, spills, calls
    local: int = 0  # other local memory per thread ("lmem"), bytes
    barriers: int | None = None  # named barriers per block
    spill_stores: int | None = None  # bytes per thread
    spill_loads: int | None = None
    constant: int | None = None  # bytes of constant bank 0 (the parameters)

    @property
    def spills(self) -> int:
        return (self.spill_stores or 0) + (self.spill_loads or 0)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_OTHER = re.compile(r"Compiling function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(.*)")


def _used_items(rest: str) -> dict[str, int]:
    """The items after "Used N registers": "used 1 barriers", "1024 bytes
    smem", "464 bytes cmem[0]", "8 bytes lmem"..."""
    items: dict[str, int] = {}
    for part in rest.split(","):
        part = part.strip()
        if m := re.fullmatch(r"used (\d+) barriers", part):
            items["barriers"] = int(m.group(1))
        elif m := re.fullmatch(r"(\d+) bytes (smem|lmem|cmem\[0\])", part):
            items[m.group(2)] = int(m.group(1))
    return items


def parse_ptxas_v(log: str) -> dict[str, Resources]:
    """The entry kernels of a ``ptxas -v`` log (its stderr), by the name
    ptxas prints (mangled): the "Used N registers, ..." line of each and
    the "N bytes stack frame, N bytes spill stores, N bytes spill loads"
    line of its "Function properties". Device functions compiled on their
    own are left out: their figures are not a launch's."""
    used: dict[str, dict[str, int]] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    entry = props = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry = m.group(1)
        elif _OTHER.search(line):
            entry = None
        elif m := _PROPS.search(line):
            props = m.group(1)
        elif (m := _FRAME.search(line)) and props:
            frames[props] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED.search(line)) and entry:
            used[entry] = {"registers": int(m.group(1)), **_used_items(m.group(2))}
    out = {}
    for name, u in used.items():
        stack, stores, loads = frames.get(name, (0, 0, 0))
        out[name] = Resources(
            registers=u["registers"],
            shared=u.get("smem", 0),
            stack=stack,
            local=u.get("lmem", 0),
            barriers=u.get("barriers", 0),
            spill_stores=stores,
            spill_loads=loads,
            constant=u.get("cmem[0]"),
        )
    return out


def parse_resource_usage(text: str) -> dict[str, Resources]:
    """``cuobjdump --dump-resource-usage``'s output: per "Function NAME:"
    its "REG:n STACK:n SHARED:n LOCAL:n CONSTANT[0]:n ..." line."""
    out: dict[str, Resources] = {}
    name = None
    for line in text.splitlines():
        if m := re.match(r"\s*Function (\S+):\s*$", line):
            name = m.group(1)
        elif name and "REG:" in line:
            v = {k: int(n) for k, n in re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line)}
            out[name] = Resources(
                registers=v["REG"],
                shared=v.get("SHARED", 0),
                stack=v.get("STACK", 0),
                local=v.get("LOCAL", 0),
                constant=v.get("CONSTANT[0]"),
            )
            name = None
    return out


def resource_usage(cubin_path: str | os.PathLike, cuobjdump: str | None = None) -> dict[str, Resources]:
    """Every kernel's resources as the cubin itself records them, through
    ``cuobjdump --dump-resource-usage`` (``cuobjdump``: its path; found with
    :func:`find_tool` when not given). FileNotFoundError where there is
    none; RuntimeError where it fails."""
    tool = cuobjdump or find_tool("cuobjdump")
    if not tool:
        raise FileNotFoundError("cuobjdump not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-cuobjdump wheel)")
    r = subprocess.run([tool, "--dump-resource-usage", str(cubin_path)], capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"cuobjdump failed on {cubin_path}: {last}")
    return parse_resource_usage(r.stdout)


# ── the instruction mix ──────────────────────────────────────────────────────

# "/*0160*/   @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;   /* 0x... */": an address, an
# optional predicate, the opcode with its modifiers, the operands, a semicolon.
# Data sections print ".byte ..." after an address; cuobjdump's encoding lines
# ("/* 0x000fe2... */") carry no address. Neither matches.
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:(@!?U?P(?:T|\d))\s+)?([A-Z][\w.]*)")
_NEVER = ("@!PT", "@!UPT")  # a predicate that is never true: padding ptxas leaves in

_WIDTHS = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "32": 32, "64": 64, "128": 128, "256": 256}
_TENSOR = re.compile(r"^(?:[HQIB]GMMA|[HIDB]MMA|UTC[A-Z]*MMA)$")
_WARP_MMA = ("HMMA", "IMMA", "DMMA", "BMMA")
_ASYNC = ("LDGSTS", "UTMALDG", "UTMASTG", "UTMAREDG", "UTMAPF", "UBLKCP", "UBLKRED", "UBLKPF")
_MEMORY = {"LDG": "global_loads", "STG": "global_stores", "LDS": "shared_loads", "STS": "shared_stores"}
_MEMORY |= {"LDL": "local_loads", "STL": "local_stores"}


@dataclass(frozen=True)
class Mix:
    """Static instruction counts of a kernel's SASS (each instruction once,
    however often it runs). Memory operations are counted by access width
    in bits per thread (``{128: 2}``: two 128-bit instructions).

    ``total`` counts every instruction but ``NOP`` (alignment padding and
    scheduling fill) and those under a never-true predicate (``@!PT``:
    padding too); ``by_opcode`` holds the same, by full opcode with its
    modifiers. ``tensor_cores`` is by kind (HGMMA, QGMMA, IGMMA, HMMA,
    IMMA, ...), ``tensor_core_ops`` by full opcode
    (``HGMMA.64x128x16.F32``). ``ldsm`` is by matrices per instruction,
    ``x1``/``x2``/``x4``, transposed ones as ``x2.trans`` etc.
    ``async_copies`` is by opcode (LDGSTS: ``cp.async``; UTMALDG, UTMASTG:
    TMA; UBLKCP: bulk copies). ``barriers`` is by opcode and its first
    modifier (``BAR.SYNC``, ``BAR.ARV``, ``WARPGROUP.ARRIVE``,
    ``SYNCS.ARRIVE``, ...), plus ``WARPSYNC``."""

    total: int = 0
    by_opcode: Mapping[str, int] = field(default_factory=dict)
    tensor_cores: Mapping[str, int] = field(default_factory=dict)
    tensor_core_ops: Mapping[str, int] = field(default_factory=dict)
    ffma: int = 0
    hfma2: int = 0
    global_loads: Mapping[int, int] = field(default_factory=dict)
    global_stores: Mapping[int, int] = field(default_factory=dict)
    shared_loads: Mapping[int, int] = field(default_factory=dict)
    shared_stores: Mapping[int, int] = field(default_factory=dict)
    local_loads: Mapping[int, int] = field(default_factory=dict)
    local_stores: Mapping[int, int] = field(default_factory=dict)
    ldsm: Mapping[str, int] = field(default_factory=dict)
    async_copies: Mapping[str, int] = field(default_factory=dict)
    barriers: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain dicts; widths as strings, as JSON keys are."""
        out: dict[str, Any] = {}
        for k, v in asdict(self).items():
            out[k] = {str(w): n for w, n in v.items()} if isinstance(v, dict) else v
        return out


def opcodes(sass: str) -> list[str]:
    """Every instruction's opcode with its modifiers (``LDG.E.128``), in
    order, without predicates; never-executed (``@!PT``) ones and ``NOP``
    left out. Reads ``nvdisasm`` and ``cuobjdump -sass`` text alike."""
    ops = []
    for line in sass.splitlines():
        m = _INSTRUCTION.match(line)
        if m and m.group(1) not in _NEVER and m.group(2) != "NOP":
            ops.append(m.group(2))
    return ops


def width(opcode: str) -> int:
    """Access width in bits of a load or store opcode: its size modifier
    (``.U8``, ``.S16``, ``.64``, ``.128``...), else 32."""
    sizes = [_WIDTHS[m] for m in opcode.split(".")[1:] if m in _WIDTHS]
    return sizes[0] if sizes else 32


def _ldsm_key(opcode: str) -> str:
    """``LDSM.16.M88.4`` -> ``x4``; ``LDSM.16.MT88.2`` -> ``x2.trans``;
    another form -> its modifiers."""
    m = re.fullmatch(r"LDSM\.16\.(M|MT)88(?:\.(\d))?", opcode)
    if not m:
        return opcode.removeprefix("LDSM.")
    return f"x{m.group(2) or 1}" + (".trans" if m.group(1) == "MT" else "")


def _barrier_key(opcode: str) -> str | None:
    parts = opcode.split(".")
    if parts[0] in ("BAR", "WARPGROUP", "SYNCS"):
        return ".".join(parts[:2])
    return "WARPSYNC" if parts[0] == "WARPSYNC" else None


def instruction_mix(sass: str) -> Mix:
    """The static instruction mix of ``sass`` (``nvdisasm X.cubin`` or
    ``cuobjdump -sass X.cubin`` text; every function in it together)."""
    ops = opcodes(sass)
    groups: dict[str, Counter] = {k: Counter() for k in _MEMORY.values()}
    tc, tc_ops, ldsm, copies, bars = Counter(), Counter(), Counter(), Counter(), Counter()
    ffma = hfma2 = 0
    for op in ops:
        base = op.split(".", 1)[0]
        if base in _MEMORY:
            groups[_MEMORY[base]][width(op)] += 1
        elif _TENSOR.match(base):
            tc[base] += 1
            tc_ops[op] += 1
        elif base == "FFMA":
            ffma += 1
        elif base == "HFMA2":
            hfma2 += 1
        elif base == "LDSM":
            ldsm[_ldsm_key(op)] += 1
        elif base in _ASYNC:
            copies[base] += 1
        elif key := _barrier_key(op):
            bars[key] += 1
    return Mix(
        total=len(ops),
        by_opcode=dict(Counter(ops)),
        tensor_cores=dict(tc),
        tensor_core_ops=dict(tc_ops),
        ffma=ffma,
        hfma2=hfma2,
        ldsm=dict(ldsm),
        async_copies=dict(copies),
        barriers=dict(bars),
        **{k: dict(sorted(c.items())) for k, c in groups.items()},
    )


_OPERANDS = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:(@!?U?P(?:T|\d))\s+)?([A-Z][\w.]*)\s*([^;]*);")
_REG = re.compile(r"\bR(\d+)(?:\.64)?\b")
_REG64 = re.compile(r"\bR(\d+)\.64\b")
# where a thread waits for, or may no longer have, what it loaded: a batch of loads ends there
# (a branch only when it may go back: a loop's next iteration is not this one's run)
_BATCH_END = ("BAR", "DEPBAR", "BRX", "JMP", "EXIT", "RET", "CALL", "WARPSYNC", "SYNCS", "MEMBAR")
_LABEL = re.compile(r"^\s*(\.L\w+):")
_ADDRESS = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/")
_TARGET = re.compile(r"`\((\.L\w+)\)|\b0x([0-9a-fA-F]+)\b")
# What a streaming loop computes with: floating-point and tensor-core
# instructions (a staging loop has none; its index arithmetic is integer),
# but for the idioms ptxas writes with them that compute nothing: a constant
# made by ``HFMA2.MMA Rd, -RZ, RZ, ...`` and an fp16 widened by ``HADD2.F32
# Rd, -RZ, Rs`` (a conversion, which a staging loop may hold).
_ARITH = frozenset(
    ("FFMA", "FADD", "FMUL", "FFMA2", "FADD2", "FMUL2", "HFMA2", "HADD2", "HMUL2", "DFMA", "DADD", "DMUL", "FMNMX")
    + ("HMMA", "IMMA", "DMMA", "BMMA", "HGMMA", "QGMMA", "IGMMA")
)
_NOT_ARITH = re.compile(r"^\S+\s+R\w+,\s*-RZ,")


def _computes(op: str, line: str) -> bool:
    """Whether an instruction computes (:data:`_ARITH`, or a tcgen05 MMA)."""
    base = op.split(".", 1)[0]
    if not (base in _ARITH or (base.startswith("UTC") and base.endswith("MMA"))):
        return False
    m = _OPERANDS.match(line)
    return not (m and _NOT_ARITH.match(f"{op} {m.group(3)}"))


_NO_DEST = ("ST", "STG", "STS", "STL", "RED", "ATOM", "ATOMG", "ATOMS", "LDGSTS")


def _registers(operands: str) -> list[int]:
    """Register numbers an operand list names (``R4.64``: R4 and R5)."""
    out = [int(m.group(1)) for m in _REG.finditer(operands)]
    out += [int(m.group(1)) + 1 for m in _REG64.finditer(operands)]
    return out


def _backward(line: str, labels: Mapping[str, int]) -> bool:
    """A branch whose target is not after it (or not known)."""
    here = _ADDRESS.match(line)
    t = _TARGET.search(line.split("BRA", 1)[1])
    if not here or not t:
        return True
    target = labels.get(t.group(1)) if t.group(1) else int(t.group(2), 16)
    return target is None or target <= int(here.group(1), 16)


def _branch_target(line: str, labels: Mapping[str, int]) -> int | None:
    t = _TARGET.search(line.split("BRA", 1)[1])
    if not t:
        return None
    return labels.get(t.group(1)) if t.group(1) else int(t.group(2), 16)


def _labels(sass: str) -> dict[str, int]:
    """Each label's address: the instruction after it."""
    labels: dict[str, int] = {}
    pending: list[str] = []
    for line in sass.splitlines():
        if lab := _LABEL.match(line):
            pending.append(lab.group(1))
        elif (a := _ADDRESS.match(line)) and pending:
            labels.update((name, int(a.group(1), 16)) for name in pending)
            pending = []
    return labels


def loads_in_flight(sass: str) -> int:
    """The most bytes of global loads a thread has issued and not yet used,
    reading the SASS in order: a run of ``LDG`` (and ``LDGSTS``, whose
    bytes land in shared memory) ends at the first instruction that reads a
    register one of them writes, at a barrier or a wait, or at a branch
    that may go back (a loop's next iteration is not this one's run). A
    forward branch leaves the loads in flight. The two arms of an if/else
    (a conditional branch to the else arm, the then arm ending in a branch
    over it) are alternatives: the else arm starts from the state at the
    fork, not from the end of the then arm (a vector load's arm and its
    scalar fallback load the same bytes into the same registers, and
    neither uses the other's), and where they meet the run goes on from
    the shorter of the two and with what either left pending. One thread's
    share of what Little's law asks of an SM (``× resident threads``);
    every function in ``sass`` together."""
    labels = _labels(sass)
    best = run = 0
    pending: set[int] = set()
    forks: dict[int, tuple[int, set[int]]] = {}  # a conditional branch's target -> (run, pending) there
    joins: dict[int, list[tuple[int, set[int]]]] = {}  # where then arms jump to -> their (run, pending)
    after_then = False  # the last instruction was an unconditional branch forward (a then arm's end)
    for line in sass.splitlines():
        if a := _ADDRESS.match(line):
            here = int(a.group(1), 16)
            fork = forks.pop(here, None)
            if fork is not None and after_then:  # an else arm: from the fork, not the then arm's end
                run, pending = fork[0], set(fork[1])
            if here in joins:  # the arms meet
                arms = [*joins.pop(here), (run, pending)]
                run = min(r for r, _ in arms)
                pending = set().union(*(p for _, p in arms))
            after_then = False
        m = _OPERANDS.match(line)
        if not m or m.group(1) in _NEVER or m.group(2) == "NOP":
            continue
        op, operands = m.group(2), m.group(3)
        base = op.split(".", 1)[0]
        regs = _registers(operands)
        if base == "LDG":
            dest = regs[0] if regs else None
            run += width(op) // 8
            if dest is not None:
                pending.update(range(dest, dest + max(1, width(op) // 32)))
        elif base == "LDGSTS":
            run += 16 if "128" in op else width(op) // 8
        elif base == "BRA" and not _backward(line, labels):
            target = _branch_target(line, labels)
            if target is not None and m.group(1) is None:
                joins.setdefault(target, []).append((run, set(pending)))
                after_then = True
            elif target is not None:
                forks[target] = (run, set(pending))
        else:
            reads = regs if base in _NO_DEST else regs[1:]
            if base in _BATCH_END or pending.intersection(reads) or base == "BRA":
                best = max(best, run)
                run = 0
                pending.clear()
        best = max(best, run)
    return best


@dataclass(frozen=True)
class StreamLoop:
    """The streaming loop of a kernel (:func:`stream_loop`).
    ``bytes`` a thread loads an iteration (every global load in the loop),
    ``instructions`` the loop's, each issued once a warp an iteration;
    ``bytes_per_issue``: a warp's loaded bytes per instruction it issues."""

    start: int
    end: int
    bytes: int
    instructions: int

    @property
    def bytes_per_issue(self) -> float:
        return 32 * self.bytes / self.instructions

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "instructions": self.instructions,
            "bytes_per_issue": round(self.bytes_per_issue, 3),
        }


def stream_loop(sass: str) -> StreamLoop | None:
    """The loop that streams a kernel's operand, read from its SASS: of the
    innermost loops (a backward branch's span, from its target to it, that
    holds no other backward branch's span) that issue a 128-bit global
    load, the longest of those that compute with what they load (a
    floating-point or tensor-core instruction, :data:`_ARITH`), else the
    longest: a kernel's main loop is its largest loop that computes; the
    loops beside it stage or finish what it streams, and a staging loop
    (a chunk's scales copied to shared memory, its index arithmetic
    unrolled) can outgrow a main loop whose decode is lean. None where no
    such loop exists (a kernel with no 128-bit load, or whose loads are all
    unrolled out of any loop).

    An SM issues at most one warp instruction a clock in each of its four
    schedulers, so a loop whose warps issue ``I`` instructions for every
    ``B`` bytes they load moves at most ``4 B / I`` bytes a clock an SM,
    however many loads are in flight: the ceiling the issue rate puts on a
    memory-bound kernel, beside Little's law's (``loads_in_flight``). Every
    instruction of the span counts (a branch not taken inside it too), as
    if every lane ran every iteration."""
    labels = _labels(sass)
    insts: list[tuple[int, str, str]] = []  # (address, opcode, line)
    for line in sass.splitlines():
        m = _OPERANDS.match(line)
        a = _ADDRESS.match(line)
        if m and a and m.group(1) not in _NEVER and m.group(2) != "NOP":
            insts.append((int(a.group(1), 16), m.group(2), line))
    spans = []
    for addr, op, line in insts:
        if op.split(".", 1)[0] == "BRA" and _backward(line, labels):
            target = _branch_target(line, labels)
            if target is not None and target <= addr:
                spans.append((target, addr))
    inner = [s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]
    best: StreamLoop | None = None
    best_key: tuple = ()
    for lo, hi in inner:
        body = [(op, line) for addr, op, line in insts if lo <= addr <= hi]
        loads = [op for op, _ in body if op.split(".", 1)[0] == "LDG"]
        if not any(width(op) == 128 for op in loads):
            continue
        loop = StreamLoop(lo, hi, sum(width(op) // 8 for op in loads), len(body))
        computes = any(_computes(op, line) for op, line in body)
        if best is None or (computes, loop.instructions, loop.bytes) > best_key:
            best, best_key = loop, (computes, loop.instructions, loop.bytes)
    return best


# ── tensor-core claims ───────────────────────────────────────────────────────

# A record's ``tensor_cores`` ("wgmma" | "mma.sync") and ``tc_dtype`` (the inputs)
# name the SASS opcode its kernels must hold:
#
#     wgmma     f16            HGMMA.<MxNxK>.F32         (not .BF16)
#     wgmma     bf16           HGMMA.<MxNxK>.F32.BF16
#     wgmma     e4m3           QGMMA.<MxNxK>.F32.E4M3.E4M3
#     wgmma     s8             IGMMA.<MxNxK>.S8.S8
#     mma.sync  f16            HMMA.16816.F32            (not .BF16)
#     mma.sync  bf16           HMMA.16816.F32.BF16
#     mma.sync  s8             IMMA.16832.S8.S8
#     mma.sync  e4m3-via-f16   HMMA.16816.F32: sm_90 runs mma.sync's E4M3 form on
#                              the FP16 datapath, and a record says so by this name
#
# FP8 (e4m3) over HMMA alone fails: the FP8 tensor cores are reached through wgmma
# only, and a timing of FP8 through FP16 must say so. A warpgroup claim with warp
# MMA in the SASS (or the other way round) fails too. The same rules as
# tests/kernels/tc_claims.py, which checks the families' compiled kernels.

FORMS = ("wgmma", "mma.sync")
DTYPES = ("f16", "bf16", "e4m3", "s8", "e4m3-via-f16")


def _hmma_f16(op: str) -> bool:
    return op.startswith("HMMA.16816.F32") and "BF16" not in op


_WANT = {
    ("wgmma", "f16"): (lambda op: op.startswith("HGMMA.") and ".F32" in op and "BF16" not in op, "HGMMA .F32 (fp16)"),
    ("wgmma", "bf16"): (
        lambda op: op.startswith("HGMMA.") and op.split(".")[2:4] == ["F32", "BF16"],
        "HGMMA .F32.BF16",
    ),
    ("wgmma", "e4m3"): (lambda op: op.startswith("QGMMA.") and ".E4M3.E4M3" in op, "QGMMA .E4M3.E4M3"),
    ("wgmma", "s8"): (lambda op: op.startswith("IGMMA.") and ".S8.S8" in op, "IGMMA .S8.S8"),
    ("mma.sync", "f16"): (_hmma_f16, "HMMA.16816.F32 (fp16)"),
    ("mma.sync", "bf16"): (lambda op: op.startswith("HMMA.16816.F32.BF16"), "HMMA.16816.F32.BF16"),
    ("mma.sync", "s8"): (lambda op: op.startswith("IMMA.16832.S8.S8"), "IMMA.16832.S8.S8"),
    ("mma.sync", "e4m3-via-f16"): (_hmma_f16, "HMMA.16816.F32 (E4M3 through FP16)"),
}


def tensor_core_opcodes(sass: str) -> list[str]:
    """Every tensor-core opcode of ``sass``, in order."""
    return [op for op in opcodes(sass) if _TENSOR.match(op.split(".", 1)[0])]


def _is_warp_mma(op: str) -> bool:
    return op.split(".", 1)[0] in _WARP_MMA


def tc_claim_problems(ops: Iterable[str], tensor_cores: str | None, tc_dtype: str | None) -> list[str]:
    """Why the tensor-core opcodes ``ops`` do not hold what the claim says
    (empty: they do); ``tensor_cores`` None claims none."""
    ops = list(ops)
    if tensor_cores is None:
        return [f"claims no tensor cores but the SASS has {sorted(set(ops))}"] if ops else []
    if tensor_cores not in FORMS or tc_dtype not in DTYPES:
        return [f"unknown claim {tensor_cores!r} / {tc_dtype!r}"]
    want = _WANT.get((tensor_cores, tc_dtype))
    if want is None:
        if tc_dtype == "e4m3" and tensor_cores == "mma.sync":
            return [
                "claims FP8 (e4m3) on mma.sync: sm_90 runs that through FP16 (HMMA); the claim must say e4m3-via-f16"
            ]
        return [f"{tensor_cores} has no {tc_dtype} form"]
    ok, what = want
    problems = []
    if not ops:
        problems.append(f"claims {tensor_cores} {tc_dtype} ({what}) but the SASS has no tensor-core opcode")
    elif not any(ok(op) for op in ops):
        if tc_dtype == "e4m3" and all(op.startswith("HMMA.") for op in ops):
            problems.append(
                f"claims FP8 tensor cores ({what}) but the SASS shows only HMMA "
                f"{sorted(set(ops))}: FP8 through FP16, which the claim must say (e4m3-via-f16)"
            )
        else:
            problems.append(f"claims {tensor_cores} {tc_dtype} ({what}); the SASS has {sorted(set(ops))}")
    other = [op for op in ops if _is_warp_mma(op) != (tensor_cores == "mma.sync")]
    if other:
        problems.append(f"claims {tensor_cores} but the SASS also has {sorted(set(other))}")
    return problems


def claim_problems(sass: str, tensor_cores: str | None, tc_dtype: str | None) -> list[str]:
    """Why ``sass`` does not hold what the claim says (empty: it does)."""
    return tc_claim_problems(tensor_core_opcodes(sass), tensor_cores, tc_dtype)


# ── flags ────────────────────────────────────────────────────────────────────


def _local_flag(res: Resources) -> str | None:
    if res.spills:
        return (
            f"register spills: {res.spill_stores or 0} B stored and {res.spill_loads or 0} B loaded per thread "
            f"through local memory ({res.stack} B stack frame, {res.registers} registers)"
        )
    if res.stack or res.local:
        return (
            f"local memory: {res.stack + res.local} B per thread (a stack frame: a local array indexed "
            f"at run time, or a call)"
        )
    return None


def _occupancy_flag(occ: Occupancy, memory_bound: bool, low: float) -> str | None:
    if not memory_bound or occ.fraction >= low:
        return None
    return (
        f"memory-bound at {occ.fraction:.0%} theoretical occupancy ({occ.active_warps} of {occ.max_warps} warps, "
        f"{occ.blocks} blocks of {occ.threads_per_block} threads, limited by {occ.limiter}): "
        f"too few warps in flight to hide memory latency"
    )


def flags(
    resources: Resources | None,
    mix: Mix | None,
    *,
    tensor_cores: str | None = None,
    tc_dtype: str | None = None,
    memory_bound: bool = False,
    occupancy: Occupancy | None = None,
    low_occupancy: float = 0.25,
) -> list[str]:
    """What is plainly wrong with one kernel, one short sentence each,
    worst first: it cannot run at its block size; it spills registers or
    uses local memory; its tensor-core claim (``tensor_cores``,
    ``tc_dtype``, as a variant records them; None: no claim) is not what
    its SASS holds; it is on a memory-bound path (``memory_bound``) below
    ``low_occupancy`` theoretical occupancy. A figure not given (None)
    is not judged: without SASS no claim is checked."""
    out: list[str] = []
    if occupancy is not None and occupancy.blocks == 0:
        out.append(f"cannot run on {occupancy.arch}: {occupancy.reason}")
    if resources is not None and (f := _local_flag(resources)):
        out.append(f)
    if mix is not None:
        out += tc_claim_problems(list(mix.tensor_core_ops), tensor_cores, tc_dtype)
    if occupancy is not None and occupancy.blocks and (f := _occupancy_flag(occupancy, memory_bound, low_occupancy)):
        out.append(f)
    return out
