"""A record's ``profile`` block (``bench --profile``), what the reports keep
of it, and the gate ``compare`` applies to two of them.

The block holds, for one (kernel path, variant, shape), what ``leverctl
profile`` shows of it: per kernel it launches, the machine-code figures on
the target architecture; for the variant, the simulator's memory figures at
its profile shape; the flags; and, after ``bench --ncu`` on a GPU, the
hardware's counters beside them (``hardware``). docs/records.md describes
it field by field.

This module imports nothing but the standard library: the reports and the
comparison read blocks without loading the compiler or the simulator.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

SECTOR_POINTS = 5.0  # sector efficiency down by more than this many points is a regression
WIDE_POINTS = 5.0  # so is the 128-bit loads' share of the loaded bytes
# What Little's law asks an SM to keep in flight to reach the copy bandwidth:
# bandwidth x latency / SMs. Hopper (H200): 4.8 TB/s x ~0.6 us / 132 SMs.
# A kernel whose loads in flight fall from at least this to below it has
# lost the bytes that fill the memory pipe; other architectures are not gated.
LITTLE_BYTES = {"sm_90a": 22 * 1024, "sm_90": 22 * 1024}
# What the issue rate asks: an SM issues at most one warp instruction a clock
# in each of its four schedulers, so a streaming loop reaches the copy
# bandwidth only if its warps load at least bandwidth / (SMs x 4 x clock)
# bytes per instruction they issue. Hopper (H200): 4.8 TB/s over 132 SMs x 4
# x 1.98 GHz = 4.6 bytes. A kernel whose streaming loop falls from at least
# this to below it now issues too many instructions for its bytes.
ISSUE_BYTES = {"sm_90a": 4.6, "sm_90": 4.6}
_EPS = 1e-9


def kernel_figures(row: Mapping[str, Any]) -> dict[str, Any]:
    """One kernel's figures in a block, from a profile row (``run.kernel_row``)."""
    if "resources" not in row:
        return {"name": row.get("name"), "error": row.get("error") or "not compiled"}
    res, occ, mix = row["resources"], row["occupancy"], row.get("mix") or {}
    return {
        "name": row["name"],
        "launches": row["launches"],
        "threads": row["threads"],
        "registers": res["registers"],
        "spill_stores": res["spill_stores"],
        "spill_loads": res["spill_loads"],
        "local": (res["local"] or 0) + (res["stack"] or 0),
        "shared": res["shared"] + (row.get("dynamic_shared") or 0),
        "occupancy": occ["fraction"],
        "active_warps": occ["active_warps"],
        "limiter": occ["limiter"],
        "tensor_cores": dict(mix.get("tensor_cores") or {}),
        "global_loads": dict(mix.get("global_loads") or {}),
        "global_stores": dict(mix.get("global_stores") or {}),
        "async_copies": dict(mix.get("async_copies") or {}),
        "ldsm": dict(mix.get("ldsm") or {}),
        "in_flight": dict(row.get("in_flight") or {}) or None,
        "stream_loop": dict(row.get("stream_loop") or {}) or None,
    }


def memory_figures(m: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The variant's memory figures in a block, from a trace (``trace.trace``)."""
    if not m:
        return None
    if "error" in m:
        return {"traced_at": m.get("profile_shape"), "error": m["error"]}
    g, sh = m["global"], m["shared"]
    worst = next((s for s in m.get("sites") or [] if s.get("waste_bytes")), None)
    return {
        "traced_at": m["profile_shape"],
        "sector_efficiency": g["sector_efficiency"],
        "requested_bytes": g["requested_bytes"],
        "declared_bytes": g["declared_bytes"],
        "requested_vs_declared": g["requested_vs_declared"],
        "wide_load_share": g.get("wide_load_share"),
        "shared_wavefronts": sh["wavefronts"],
        "ideal_wavefronts": sh["ideal_wavefronts"],
        "extra_wavefronts": sh["extra_wavefronts"],
        "worst_site": worst["site"] if worst else None,
    }


def blocks(
    arch: str, rows: Iterable[Mapping[str, Any]], memory: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Each (kernel path, variant, shape label)'s block, from a profile's
    rows and traces."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        b = out.setdefault(
            (r["kernel"], r["variant"], r["shape"]),
            {"arch": arch, "kernels": [], "memory": None, "flags": [], "hardware": None},
        )
        b["kernels"].append(kernel_figures(r))
        b["flags"].extend(f for f in r.get("flags") or [] if f not in b["flags"])
    for m in memory:
        b = out.get((m["kernel"], m["variant"], m["shape"]))
        if b is not None:
            b["memory"] = memory_figures(m)
    return out


def _num(x: Any) -> float | None:
    """A figure as read from a file: a finite number, or None (a hand-edited
    block's text or NaN is no figure, never a crash in a comparison)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or x in (float("inf"), float("-inf")):
        return None
    return x


def summary(block: Any) -> dict[str, Any] | None:
    """What the reports and the gate keep of a block (at a million records
    the whole blocks would not fit): the architecture, per kernel its
    registers, spills, local memory and occupancy, the memory figures that
    gate, and the flags. Figures that are not numbers are left out."""
    if not isinstance(block, dict):
        return None
    kernels = {}
    for k in block.get("kernels") if isinstance(block.get("kernels"), list) else []:
        if isinstance(k, dict) and isinstance(k.get("name"), str) and "error" not in k:
            loads = k.get("global_loads") if isinstance(k.get("global_loads"), dict) else {}
            kernels[k["name"]] = {
                "registers": _num(k.get("registers")),
                "spills": (_num(k.get("spill_stores")) or 0) + (_num(k.get("spill_loads")) or 0),
                "local": _num(k.get("local")) or 0,
                "occupancy": _num(k.get("occupancy")),
                "limiter": k.get("limiter") if isinstance(k.get("limiter"), str) else None,
                "load_bits": sorted(int(w) for w, n in loads.items() if str(w).isdigit() and _num(n)),
                "in_flight_sm": _num((k.get("in_flight") or {}).get("sm"))
                if isinstance(k.get("in_flight"), dict)
                else None,
                "bytes_per_issue": _num((k.get("stream_loop") or {}).get("bytes_per_issue"))
                if isinstance(k.get("stream_loop"), dict)
                else None,
            }
    mem = block.get("memory") if isinstance(block.get("memory"), dict) else {}
    flags = block.get("flags") if isinstance(block.get("flags"), list) else []
    return {
        "arch": block.get("arch") if isinstance(block.get("arch"), str) else None,
        "kernels": kernels,
        "sector_efficiency": _num(mem.get("sector_efficiency")),
        "wide_load_share": _num(mem.get("wide_load_share")),
        "extra_wavefronts": _num(mem.get("extra_wavefronts")),
        "traced_at": mem.get("traced_at") if isinstance(mem.get("traced_at"), str) else None,
        "flags": [f for f in flags if isinstance(f, str)],
    }


# Per-kernel figures held to a floor on the architectures that have one: a
# kernel that fell from at least the floor to below it regressed.
_FLOORS = (
    (
        "in_flight_sm",
        LITTLE_BYTES,
        lambda b, n, f: (
            f"loads in flight {b / 1024:.1f} -> {n / 1024:.1f} KiB/SM, below the {f / 1024:.0f} KiB Little's law asks"
        ),
    ),
    (
        "bytes_per_issue",
        ISSUE_BYTES,
        lambda b, n, f: (
            f"streaming loop {b:.2f} -> {n:.2f} bytes per issued instruction, below the {f} the issue rate asks"
        ),
    ),
)


def regressions(base: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """What got worse from ``base``'s summary to ``new``'s, one phrase each
    naming the kernel and the figure: new or more spills, new or more local
    memory, lower occupancy, no 128-bit global load where there was one,
    loads in flight per SM fallen below what Little's law asks
    (:data:`LITTLE_BYTES`, from at least it), the streaming loop's bytes
    per issued instruction fallen below what the issue rate asks
    (:data:`ISSUE_BYTES`, from at least it), sector efficiency or the
    128-bit loads' share of the loaded bytes down by more than
    :data:`SECTOR_POINTS` / :data:`WIDE_POINTS` points, new or more
    shared-memory bank conflicts (extra wavefronts). Empty when either side has no profile, or the two
    were made for different architectures (the caller says so)."""
    if not base or not new or base.get("arch") != new.get("arch"):
        return []
    out = []
    for name, b in base["kernels"].items():
        n = new["kernels"].get(name)
        if n is None:
            continue
        if n["spills"] > b["spills"]:
            out.append(f"{name}: spills {b['spills']} -> {n['spills']} bytes")
        if n["local"] > b["local"]:
            out.append(f"{name}: local memory {b['local']} -> {n['local']} bytes per thread")
        bo, no = b.get("occupancy"), n.get("occupancy")
        if bo is not None and no is not None and no < bo - _EPS:
            out.append(f"{name}: occupancy {bo:.0%} -> {no:.0%} ({n.get('limiter')})")
        if 128 in (b.get("load_bits") or ()) and n.get("load_bits") is not None and 128 not in n["load_bits"]:
            out.append(f"{name}: no 128-bit global load (load bits {_bits(b['load_bits'])} -> {_bits(n['load_bits'])})")
        for key, targets, say in _FLOORS:
            floor, was, now = targets.get(base["arch"]), b.get(key), n.get(key)
            if floor and was is not None and now is not None and was >= floor > now:
                out.append(f"{name}: {say(was, now, floor)}")
    be, ne = base.get("sector_efficiency"), new.get("sector_efficiency")
    if be is not None and ne is not None and (be - ne) * 100 > SECTOR_POINTS + _EPS:
        out.append(f"sector efficiency {be:.1%} -> {ne:.1%}")
    bs, ns = base.get("wide_load_share"), new.get("wide_load_share")
    if bs is not None and ns is not None and (bs - ns) * 100 > WIDE_POINTS + _EPS:
        out.append(f"128-bit loads' share of the loaded bytes {bs:.1%} -> {ns:.1%}")
    bw, nw = base.get("extra_wavefronts"), new.get("extra_wavefronts")
    if bw is not None and nw is not None and nw > bw:
        out.append(f"shared bank conflicts: {bw} -> {nw} extra wavefronts")
    return out


def _bits(widths) -> str:
    return "/".join(map(str, widths)) or "none"
