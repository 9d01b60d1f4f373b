"""A profile from plan to rows: which variants at which shapes (the plan
``bench`` would make at model shapes, or every variant with
``all_variants``), their kernels compiled in a child process
(:mod:`.build`), and each kernel's figures (:mod:`.machine`,
:mod:`.occupancy`) and flags.

One row per distinct kernel of a variant at a shape: ``launches`` says how
many times one call of the variant launches it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from . import capture, machine, occupancy

SCHEMA = "leverctl.profile/1"

# Arithmetic intensity (FLOP per byte) below which a path is memory-bound
# on the target: its FP32 rate over its copy bandwidth (the ridge of the
# roofline without tensor cores). H100/H200 SXM: about 67 TFLOP/s over
# 3.35-4.8 TB/s; A100: 19.5 over 2.0; L40: 90 over 0.86; B200: 80 over 8.
RIDGE = {"sm_80": 9.7, "sm_89": 100.0, "sm_90": 14.0, "sm_90a": 14.0, "sm_100a": 10.0}
LOW_OCCUPANCY = 0.25  # below this a memory-bound kernel is flagged


@dataclass(frozen=True)
class Item:
    path: Any  # KernelPath
    variant: str
    shape: Any  # Shape
    selected: bool  # the levers choose it (else --all-variants added it)


# A GPU's compute capability (as the driver gives it) -> the architecture it
# is profiled for: the architecture-specific target where there is one.
ARCH_OF_CC = {"8.0": "sm_80", "8.9": "sm_89", "9.0": "sm_90a", "10.0": "sm_100a"}
DEFAULT_ARCH = "sm_90a"


def arch_for(compute_capability: str | None) -> str:
    """The architecture to profile for on a GPU of ``compute_capability``
    (None: no GPU): its own where leverctl knows it, else sm_90a."""
    return ARCH_OF_CC.get(compute_capability or "", DEFAULT_ARCH)


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "leverctl" / "profile"


def items_for(res, paths, *, preset: str, model, all_variants: bool, axes: tuple = ()) -> list[Item]:
    """The variants to profile: the plan's selection at ``preset`` shapes,
    and with ``all_variants`` every other variant of the same paths at the
    same shapes."""
    from ..bench.plan import plan_for

    plan = plan_for(res, paths, shapes=preset, model=model, axes=axes)
    items: dict[tuple, Item] = {}
    for it in plan.items:
        if it.failed or not it.variant:
            continue
        key = (it.path.name, it.variant, it.shape.label)
        items.setdefault(key, Item(it.path, it.variant, it.shape, not it.baseline))
        if all_variants:
            for v in it.path.variants:
                key = (it.path.name, v, it.shape.label)
                if key in items:
                    continue
                shape = _bound_for(it.path, v, it.shape, it.levers, res.engine)
                if _builds(it.path, v, shape):  # WY-17 only at 17 tokens, the 4-row tier up to 4 rows...
                    items[key] = Item(it.path, v, shape, False)
    return list(items.values())


def _builds(path, variant: str, shape) -> bool:
    """Whether ``variant`` builds at ``shape`` at all (this process runs the
    simulator, where a build compiles nothing)."""
    try:
        path.variants[variant].build(shape)
    except (ValueError, IndexError):
        return False
    return True


def _bound_for(path, variant: str, shape, levers, engine: str):
    """``shape`` as bound by lever values that select ``variant`` (a path
    whose levers bind a dimension into the run, ``moe.union_stats``'s
    ``stats``, builds each variant only at its own binding)."""
    import itertools

    if path.bind is None:
        return shape
    free = [f for f in path.levers if isinstance(levers.get(f), bool)]
    for values in itertools.product((False, True), repeat=len(free)):
        trial = {**levers, **dict(zip(free, values))}
        bound = path.bind(trial, shape, engine)
        if path.select(trial, bound).variant == variant:
            return bound
    return shape


def _types_shape(path, shape):
    """The smoke shape whose buffers stand in for ``shape``'s types: the
    path's own ``extra["types_shape"](shape)`` where its smoke shapes are of
    different kinds (``decode.per_sequence``: an MLA step's buffers are not
    a GDN step's), else its smallest."""
    pick = path.extra.get("types_shape")
    if pick:
        return pick(shape)
    return min(path.shapes("smoke", None), key=lambda s: path.traffic(s).bytes)


def compile_items(items: list[Item], arch: str, cache: Path, keep: Path | None) -> list[dict]:
    """Every item's kernels compiled in a child process for ``arch``."""
    req = {
        "arch": arch,
        "cache": str(cache),
        "keep": str(keep) if keep else None,
        "items": [
            {
                **_request_item(it),
                "types_shape": {"label": (t := _types_shape(it.path, it.shape)).label, "dims": dict(t.dims)},
            }
            for it in items
        ],
    }
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return _child("leverctl.profile.build", req, env, f"compiling for {arch}")["items"]


def check_tools() -> None:
    """ptxas and nvdisasm, or bad input saying how to get them (before
    anything is planned or compiled)."""
    missing = [t for t in ("ptxas", "nvdisasm") if machine.find_tool(t) is None]
    if missing:
        raise UserError(
            f"profile needs {' and '.join(missing)}, not found on PATH, in CUDA_HOME or in NVIDIA's wheels: "
            "pip install 'leverctl[profile]' (or put a CUDA toolkit on PATH)"
        )


def in_flight(sass: str, occ, tma_block: int = 0) -> dict:
    """The loads in flight: a thread's (``thread``), a block's TMA copies
    (``tma_block``, where it has any) and an SM's at the occupancy (``sm``)."""
    t = machine.loads_in_flight(sass)
    out = {"thread": t, "sm": t * occ.active_warps * 32 + tma_block * occ.blocks}
    if tma_block:
        out["tma_block"] = tma_block
    return out


def kernel_row(item: Item, k: dict, arch: str) -> dict:
    """One kernel's figures and flags."""
    row: dict[str, Any] = {
        "kernel": item.path.name,
        "variant": item.variant,
        "selected": item.selected,
        "shape": item.shape.label,
        "name": k["kernel"],
        "site": k["site"],
        "launches": k["launches"],
        "threads": k["threads"],
        "grid": k["grid"],
        "dynamic_shared": k["dynamic_shared"],
    }
    if k.get("error") or k.get("ptxas_rc"):
        row["error"] = k.get("error") or _last_line(k.get("ptxas_log", ""))
        row["flags"] = [f"does not compile for {arch}: {row['error']}"]
        return row
    res = next(iter(machine.parse_ptxas_v(k["ptxas_log"]).values()))
    sass_path = Path(k["dir"]) / "kernel.sass"
    sass = sass_path.read_text() if sass_path.exists() else None
    mix = machine.instruction_mix(sass) if sass is not None else None
    occ = occupancy.occupancy(
        arch, k["threads"], res.registers, res.shared, k["dynamic_shared"], barriers=res.barriers or 0
    )
    traffic = item.path.variant_traffic(item.variant, item.shape)
    bound = traffic.bytes > 0 and traffic.flops / traffic.bytes < RIDGE[arch]
    row.update(
        {
            "resources": res.to_json(),
            "occupancy": occ.to_json(),
            "mix": mix.to_json() if mix else None,
            # global-load bytes a thread has in flight before it uses them, and an SM's
            # at the occupancy (resident threads x that, and each resident block's TMA
            # copies, whose size the SASS does not show): Little's law's side of the bandwidth
            "in_flight": in_flight(sass, occ, k.get("tma_bytes") or 0) if sass is not None else None,
            # the streaming loop's bytes and instructions: the issue rate's side of the bandwidth
            "stream_loop": (sl.to_json() if (sl := machine.stream_loop(sass)) else None) if sass is not None else None,
            "memory_bound": bound,
            # the tensor-core claim is the variant's, judged over all its kernels (_claim)
            "flags": machine.flags(res, None, memory_bound=bound, occupancy=occ, low_occupancy=LOW_OCCUPANCY),
        }
    )
    row["occupancy_flag"] = (
        bool(machine.flags(None, None, memory_bound=bound, occupancy=occ, low_occupancy=LOW_OCCUPANCY))
        and occ.blocks > 0
    )
    return row


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "unknown error"


def _request_item(it: Item) -> dict:
    return {
        "path": it.path.name,
        "variant": it.variant,
        "selected": it.selected,
        "shape": {"label": it.shape.label, "dims": dict(it.shape.dims)},
    }


def _child(module: str, req: dict, env: dict[str, str], what: str) -> dict:
    """Run ``python -m module`` on one JSON request; its JSON answer, or
    bad input naming what failed (its last line of stderr)."""
    r = subprocess.run([sys.executable, "-m", module], input=json.dumps(req), capture_output=True, text=True, env=env)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{what} failed: {last}")
    return json.loads(r.stdout)


def memory(items: list[Item], cache: Path) -> list[dict]:
    """Each item's memory behaviour, traced in the CUDA simulator in a
    child process (:mod:`.trace`; this one may hold a GPU) at its profile
    shape: one dict per item, in order."""
    if not items:
        return []
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    req = {"cache": str(cache), "items": [_request_item(it) for it in items]}
    return _child("leverctl.profile.trace", req, env, "tracing memory accesses in the simulator")["items"]


def tool_versions() -> dict[str, str]:
    """The compilers a profile was made with: libNVVM's wheel (``-`` for a
    toolkit's), numba-cuda, and the release of each CUDA tool used."""
    from .build import package_version

    out = {"numba-cuda": package_version("numba-cuda"), "nvidia-nvvm": package_version("nvidia-nvvm")}
    for name in ("ptxas", "nvdisasm"):
        path = machine.find_tool(name)
        out[name] = machine.release_text(path)
    return out


def sources(items: list[Item]) -> dict[str, str]:
    """Each profiled variant's source digest (``"path variant"``: the
    digest of every kernels module its build, inputs and traffic reach, as
    the cache keys use it): a saved profile is the code's as long as these
    match (tests/profile/test_roofline.py holds the committed ones to it)."""
    from .build import source_digest

    out = {}
    for it in items:
        key = f"{it.path.name} {it.variant}"
        if key not in out:
            out[key] = source_digest(it.path.variants[it.variant].build, it.path.make_inputs, it.path.traffic)
    return dict(sorted(out.items()))


def profile(items: list[Item], arch: str, cache: Path, keep: Path | None) -> list[dict]:
    capture.cc_of(arch)  # an unknown arch is bad input before anything runs
    rows = []
    for item, answer in zip(items, compile_items(items, arch, cache, keep)):
        if answer["error"]:
            rows.append(
                {
                    "kernel": item.path.name,
                    "variant": item.variant,
                    "selected": item.selected,
                    "shape": item.shape.label,
                    "name": None,
                    "error": answer["error"],
                    "flags": [f"not captured: {answer['error']}"],
                }
            )
            continue
        mine = [kernel_row(item, k, arch) for k in answer["kernels"]]
        _claim(mine, answer["tensor_cores"], answer["tc_dtype"])
        rows.extend(mine)
    return rows


def _claim(rows: list[dict], tensor_cores: str | None, tc_dtype: str | None) -> None:
    """A variant's tensor-core claim holds when the SASS of the kernels it
    launches, together, backs it (a quantise step beside the GEMM has no
    MMA of its own): the problems go on the kernel with the most
    tensor-core instructions, else on every kernel of the variant."""
    for r in rows:
        r["claim"] = {"tensor_cores": tensor_cores, "tc_dtype": tc_dtype}
    mixes = [r for r in rows if r.get("mix")]
    if not mixes:
        return
    ops = [op for r in mixes for op, n in r["mix"]["tensor_core_ops"].items() for _ in range(n)]
    problems = machine.tc_claim_problems(ops, tensor_cores, tc_dtype)
    if not problems:
        return
    with_tc = [r for r in mixes if r["mix"]["tensor_core_ops"]]
    for r in with_tc[:1] or mixes:
        # after what stops or spills the kernel, before its occupancy
        at = len(r["flags"]) - (1 if r["occupancy_flag"] else 0)
        r["flags"] = r["flags"][:at] + problems + r["flags"][at:]


def record_blocks(plan_items, arch: str, cache: Path, *, with_memory: bool = True) -> dict[tuple, dict]:
    """``bench --profile``: the ``profile`` block (:mod:`.block`) of each
    (path, variant, shape label) among ``plan_items`` (a bench plan's items;
    failed ones have none)."""
    from . import block

    items: dict[tuple, Item] = {}
    for it in plan_items:
        if it.failed or not it.variant:
            continue
        items.setdefault((it.path.name, it.variant, it.shape.label), Item(it.path, it.variant, it.shape, True))
    todo = list(items.values())
    rows = profile(todo, arch, cache, None)
    mem = memory(todo, cache) if with_memory else []
    return block.blocks(arch, rows, mem)
