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


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "leverctl" / "profile"


def items_for(res, paths, *, preset: str, model, all_variants: bool) -> list[Item]:
    """The variants to profile: the plan's selection at ``preset`` shapes,
    and with ``all_variants`` every other variant of the same paths at the
    same shapes."""
    from ..bench.plan import plan_for

    plan = plan_for(res, paths, shapes=preset, model=model)
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


def _types_shape(path):
    return min(path.shapes("smoke", None), key=lambda s: path.traffic(s).bytes)


def compile_items(items: list[Item], arch: str, cache: Path, keep: Path | None) -> list[dict]:
    """Every item's kernels compiled in a child process for ``arch``."""
    req = {
        "arch": arch,
        "cache": str(cache),
        "keep": str(keep) if keep else None,
        "items": [
            {
                "path": it.path.name,
                "variant": it.variant,
                "shape": {"label": it.shape.label, "dims": dict(it.shape.dims)},
                "types_shape": {"label": (t := _types_shape(it.path)).label, "dims": dict(t.dims)},
            }
            for it in items
        ],
    }
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run(
        [sys.executable, "-m", "leverctl.profile.build"],
        input=json.dumps(req),
        capture_output=True,
        text=True,
        env=env,
    )
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"compiling for {arch} failed: {last}")
    answer = json.loads(r.stdout)
    return answer["items"]


def check_tools() -> None:
    """ptxas and nvdisasm, or bad input saying how to get them (before
    anything is planned or compiled)."""
    missing = [t for t in ("ptxas", "nvdisasm") if machine.find_tool(t) is None]
    if missing:
        raise UserError(
            f"profile needs {' and '.join(missing)}, not found on PATH, in CUDA_HOME or in NVIDIA's wheels: "
            "pip install 'leverctl[profile]' (or put a CUDA toolkit on PATH)"
        )


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
    mix = machine.instruction_mix(sass_path.read_text()) if sass_path.exists() else None
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


def profile_shapes(path, shape) -> list:
    """The shapes a variant's memory behaviour may be simulated at, best
    first: the path's own ``extra["profile_shape"](model shape)`` where it
    declares one (the model's row lengths and strides, few rows), else its
    smoke shapes, smallest first (rows shorter than the model's: their
    sector figures are then a lower bound). The first one the variant
    builds at is used (WY-17 builds only at 17 tokens)."""
    make = path.extra.get("profile_shape")
    if make:
        return [make(shape)]
    return sorted(path.shapes("smoke", None), key=lambda s: path.traffic(s).bytes)


def _buildable(it: Item, shapes: list):
    """The first of ``shapes`` the variant builds at (bound as the item's
    shape is: its own dimensions kept); the first when none does (the
    trace then says why)."""
    from leverctl_kernels.common.path import Shape

    extra = {k: v for k, v in it.shape.dims.items() if k not in shapes[0].dims}
    shapes = [Shape(s.label, {**s.dims, **extra}) for s in shapes]
    for s in shapes:
        try:
            it.path.variants[it.variant].build(s)
            return s
        except (ValueError, IndexError):
            continue
    return shapes[0]


def memory(items: list[Item], cache: Path) -> list[dict]:
    """Each item's memory behaviour, traced in the CUDA simulator (this
    process must have chosen it) at its profile shape. Items sharing a
    variant and profile shape are traced once, and a trace is cached by the
    kernels' source, the variant and the shape."""
    import hashlib

    from . import memtrace
    from .build import _source_digest

    digest = _source_digest()
    done: dict[tuple, dict] = {}
    out = []
    for it in items:
        ps = _buildable(it, profile_shapes(it.path, it.shape))
        key = (it.path.name, it.variant, ps.label)
        if key not in done:
            text = "|".join((digest, it.path.name, it.variant, repr(sorted(ps.dims.items()))))
            cached = cache / "memory" / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"
            if cached.exists():
                done[key] = json.loads(cached.read_text())
            else:
                try:
                    mp = memtrace.profile_variant(it.path, it.variant, ps)
                    done[key] = {"profile_shape": ps.label, **mp.to_json()}
                    cached.parent.mkdir(parents=True, exist_ok=True)
                    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(done[key]))
                    os.replace(tmp, cached)
                except Exception as e:  # noqa: BLE001 - one variant that cannot be traced is a row
                    done[key] = {"profile_shape": ps.label, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        out.append(
            {
                "kernel": it.path.name,
                "variant": it.variant,
                "selected": it.selected,
                "shape": it.shape.label,
                **done[key],
            }
        )
    return out


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
