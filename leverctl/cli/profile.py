"""``leverctl profile``: each kernel of the variants the levers choose (or
every variant), compiled for a GPU architecture without one, and what its
machine code says about its speed: registers, spills, shared memory,
theoretical occupancy and what limits it, the instruction mix (tensor-core
instructions, load and store widths, asynchronous copies) and flags.

Exit codes: 0 profiled (flags are findings, not failures), 2 bad input
(an unknown --arch, missing tools, an unwritable --keep or --out).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..levers.files import check_output_path, write_atomically
from . import common

FORMATS = ("table", "json", "markdown")


def _keep_dir(value: str) -> Path:
    from ..errors import UserError

    p = Path(value)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".leverctl-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UserError(f"--keep {value}: cannot write there ({e.strerror or e})") from None
    return p


def table(doc: dict) -> Any:
    from ..tables import new_table

    t = new_table(
        "path",
        "variant",
        "shape",
        "kernel",
        "threads",
        "regs",
        "smem",
        "occupancy",
        "tensor cores",
        "global ld/st",
        "async",
        "in flight",
        "stream B/issue",
        "flags",
        title=f"{doc['engine']} kernels on {doc['arch']} at {doc['shapes']} shapes",
    )
    order = sorted(doc["rows"], key=lambda r: (-len(r.get("flags") or []), r["kernel"], r["variant"], r["shape"]))
    for r in order:
        mark = "▶ " if r["selected"] else "  "
        if r.get("name") is None or "resources" not in r:
            blank = [""] * 9
            t.add_row(r["kernel"], mark + r["variant"], r["shape"], r.get("name") or "–", *blank, "; ".join(r["flags"]))
            continue
        res, occ, mix = r["resources"], r["occupancy"], r.get("mix") or {}
        smem = res["shared"] + r["dynamic_shared"]
        t.add_row(
            r["kernel"],
            mark + r["variant"],
            r["shape"],
            r["name"] + (f" x{r['launches']}" if r["launches"] > 1 else ""),
            str(r["threads"]),
            str(res["registers"]),
            f"{smem / 1024:.1f} KiB" if smem else "0",
            f"{occ['fraction']:.0%} ({occ['limiter']})",
            _tc_text(mix),
            _widths_text(mix),
            _async_text(mix),
            _in_flight_text(r.get("in_flight")),
            _issue_text(r.get("stream_loop")),
            "; ".join(r["flags"]) or "–",
        )
    return t


def _in_flight_text(f: dict | None) -> str:
    """A thread's global-load bytes in flight and its SM's at the occupancy."""
    if not f:
        return "–"
    return f"{f['thread']} B; {f['sm'] / 1024:.1f} KiB/SM"


def _issue_text(s: dict | None) -> str:
    """The streaming loop: a warp's loaded bytes per instruction it issues,
    and the loop's bytes a thread and instructions an iteration."""
    if not s:
        return "–"
    return f"{s['bytes_per_issue']:.2f} ({s['bytes']} B / {s['instructions']})"


def _tc_text(mix: dict) -> str:
    tc = mix.get("tensor_cores") or {}
    return ", ".join(f"{k} {v}" for k, v in tc.items() if v) or "–"


def _widths_text(mix: dict) -> str:
    ld, st = mix.get("global_loads") or {}, mix.get("global_stores") or {}

    def one(d):
        return "/".join(f"{v}×{k}" for k, v in sorted(d.items(), key=lambda kv: int(kv[0])) if v) or "0"

    return f"ld {one(ld)}; st {one(st)}"


def _async_text(mix: dict) -> str:
    a = mix.get("async_copies") or {}
    return ", ".join(f"{k} {v}" for k, v in a.items() if v) or "–"


def register(app: typer.Typer) -> None:
    @app.command("profile")
    @common.with_setup
    def profile(
        setup: common.Setup,
        kernel: common.KernelOpt = None,
        axis: common.AxisOpt = None,
        shapes: Annotated[
            Optional[str],
            typer.Option("--shapes", metavar="smoke|model", help="model (the recipe's sizes, default) or smoke."),
        ] = None,
        all_variants: Annotated[
            bool,
            typer.Option("--all-variants", help="Every variant of the selected paths, not only the chosen ones."),
        ] = False,
        arch: common.ArchOpt = None,
        no_memory: Annotated[
            bool,
            typer.Option("--no-memory", help="Machine code only: skip tracing memory accesses in the simulator."),
        ] = False,
        keep: Annotated[
            Optional[str],
            typer.Option("--keep", metavar="DIR", help="Write each kernel's PTX, cubin and SASS under DIR."),
        ] = None,
        summary: Annotated[
            bool,
            typer.Option(
                "--summary",
                help="JSON of one entry per variant (the markdown table's figures, per kernel too) and its "
                "source digest, instead of every kernel row and trace.",
            ),
        ] = False,
        fmt: Annotated[
            Optional[str],
            typer.Option("--format", "-f", metavar="FORMAT", help="table, json or markdown (one row per variant)."),
        ] = None,
        out: Annotated[
            Optional[Path],
            typer.Option(
                "--out",
                "-o",
                metavar="FILE",
                help="Write the profile to this file (atomically), in the format its suffix names (.txt .json .md).",
                parser=lambda s: check_output_path(s, "--out", make_folder=True),
            ),
        ] = None,
    ) -> None:
        """Compile each kernel for a GPU architecture (no GPU needed) and show
        what its machine code says about its speed."""
        from ..errors import UserError

        fmt = common.output_format(fmt, out, FORMATS)
        if summary and fmt != "json":
            raise UserError(f"--summary: a JSON summary; with --format {fmt} the profile is written whole")
        from ..bench.axes import parse_axes

        parse_axes(axis)  # its form, before the tools are looked for; its names once the paths are known
        common.check_arch(arch)
        from ..profile.run import check_tools

        check_tools()
        if arch is None:
            from ..bench.device import probe_gpu
            from ..profile.run import arch_for

            gpu = probe_gpu()
            arch = arch_for(gpu.compute_capability if gpu.ok else None)
        preset = shapes or "model"
        if preset not in common.SHAPES:
            raise UserError(f"--shapes {preset!r}: smoke or model")
        keep_dir = _keep_dir(keep) if keep else None
        res = setup.resolve()
        _cat, recipe = setup.load()

        from ..bench import device

        device.choose("sim")  # the parent only plans; the child compiles for the target
        from ..profile import run

        paths = common.select_paths(common.registered_paths(), kernel, res)
        model = (recipe.model if recipe else None) or None
        axes = common.axes_for(axis, paths, preset, model, res)
        items = run.items_for(res, paths, preset=preset, model=model, all_variants=all_variants, axes=axes)
        sources = run.sources(items)  # before anything is compiled: a kernel edited meanwhile makes it stale
        rows = run.profile(items, arch, run.default_cache(), keep_dir)
        mem = [] if no_memory else run.memory(items, run.default_cache())
        doc = {
            "schema": run.SCHEMA,
            "engine": res.engine,
            "recipe": res.recipe,
            "arch": arch,
            "shapes": preset,
            "rows": rows,
            "memory": mem,
            "sources": sources,
            "tools": run.tool_versions(),
        }
        unrunnable = sorted({f"{r['kernel']} {r['variant']}" for r in rows if r["selected"] and r.get("error")})
        if unrunnable:
            raise UserError(f"--arch {arch} cannot run {', '.join(unrunnable)}: {_first_error(rows)}")
        width, color = common.tty_table(fmt)
        if fmt == "json":
            text = json.dumps(summary_doc(doc) if summary else doc, indent=2) + "\n"
        elif fmt == "markdown":
            text = markdown(doc)
        else:
            text = render_table(doc, width, color) if out is None else render_table(doc, None, False)
        if out is not None:
            write_atomically(out, text, make_folder=True)
        else:
            common.write(text)


def _first_error(rows: list[dict]) -> str:
    return next(r["error"] for r in rows if r["selected"] and r.get("error"))


def render_table(doc: dict, width: int | None, color: bool) -> str:
    import io

    from rich.console import Console

    from ..tables import fit

    buf = io.StringIO()
    console = Console(
        file=buf, width=width or 200, force_terminal=color, no_color=not color, soft_wrap=False, highlight=False
    )
    console.print(fit(table(doc), width or 200))
    if doc["memory"]:
        console.print(fit(memory_table(doc), width or 200))
    return buf.getvalue()


def memory_table(doc: dict) -> Any:
    from ..tables import new_table

    t = new_table(
        "path",
        "variant",
        "traced at",
        "global sector efficiency",
        "128-bit loads",
        "requested / declared",
        "shared wavefronts (ideal)",
        "worst site",
        title="memory behaviour (CUDA simulator, every access traced per warp instruction)",
    )
    seen = set()
    for m in sorted(doc["memory"], key=lambda m: (m["kernel"], m["variant"])):
        key = (m["kernel"], m["variant"], m["profile_shape"])
        if key in seen:
            continue
        seen.add(key)
        mark = "▶ " if m["selected"] else "  "
        if "error" in m:
            t.add_row(m["kernel"], mark + m["variant"], m["profile_shape"], "", "", "", "", f"not traced: {m['error']}")
            continue
        g, sh = m["global"], m["shared"]
        ratio = g["requested_vs_declared"]
        worst = m["sites"][0] if m["sites"] else None
        t.add_row(
            m["kernel"],
            mark + m["variant"],
            m["profile_shape"],
            f"{g['sector_efficiency']:.0%}" if g["sector_efficiency"] is not None else "–",
            f"{wide:.0%}" if (wide := g.get("wide_load_share")) is not None else "–",
            f"{ratio:.2f}" if ratio is not None else "–",
            f"{sh['wavefronts']} ({sh['ideal_wavefronts']})" if sh["wavefronts"] else "–",
            _site_text(worst),
        )
    return t


def _site_text(site: dict | None) -> str:
    if not site or not site.get("waste_bytes"):
        return "–"
    where = site["site"] + (f" via {site['via']}" if site.get("via") else "")
    if site["space"] == "shared":
        return f"{where}: shared {site['kind']} {site.get('ways')}-way"
    return f"{where}: global {site['kind']} {site.get('efficiency', 0):.0%}"


def variant_summaries(doc: dict) -> list[dict]:
    """One summary per (path, variant) over its shapes and kernels: the
    worst figure of each kind (most registers, lowest occupancy, widest and
    narrowest global load...), for a table of every path on one page."""
    groups: dict[tuple, dict] = {}
    for r in doc["rows"]:
        g = groups.setdefault(
            (r["kernel"], r["variant"]),
            {"path": r["kernel"], "variant": r["variant"], "selected": False, "kernels": set(), "rows": []},
        )
        g["selected"] |= r["selected"]
        if r.get("name"):
            g["kernels"].add(r["name"])
        g["rows"].append(r)
    mem: dict[tuple, dict] = {}  # the traced shape with the lowest sector efficiency
    for m in doc.get("memory") or []:
        eff = (m.get("global") or {}).get("sector_efficiency")
        have = mem.get((m["kernel"], m["variant"]))
        if have is None or (eff is not None and eff < ((have.get("global") or {}).get("sector_efficiency") or 1.0)):
            mem[(m["kernel"], m["variant"])] = m
    out = []
    for key, g in groups.items():
        ok = [r for r in g["rows"] if "resources" in r]
        per_kernel: dict[str, dict] = {}
        for r in ok:
            k = per_kernel.setdefault(
                r["name"],
                {
                    "registers": 0,
                    "spills": 0,
                    "occupancy": 1.0,
                    "load_bits": [],
                    "in_flight_sm": None,
                    "bytes_per_issue": None,
                },
            )
            res = r["resources"]
            k["registers"] = max(k["registers"], res["registers"])
            k["spills"] = max(k["spills"], (res["spill_stores"] or 0) + (res["local"] or 0) + (res["stack"] or 0))
            k["occupancy"] = min(k["occupancy"], r["occupancy"]["fraction"])
            bits = {int(w) for w, n in ((r["mix"] or {}).get("global_loads") or {}).items() if n}
            k["load_bits"] = sorted(set(k["load_bits"]) | bits)
            sm = (r.get("in_flight") or {}).get("sm")
            if sm is not None:
                k["in_flight_sm"] = sm if k["in_flight_sm"] is None else min(k["in_flight_sm"], sm)
            bpi = (r.get("stream_loop") or {}).get("bytes_per_issue")
            if bpi is not None:
                k["bytes_per_issue"] = bpi if k["bytes_per_issue"] is None else min(k["bytes_per_issue"], bpi)
        loads: dict[str, int] = {}
        tc: dict[str, int] = {}
        asyncs: dict[str, int] = {}
        for r in ok:
            for w, n in (r["mix"] or {}).get("global_loads", {}).items():
                loads[w] = loads.get(w, 0) + n
            for k, n in (r["mix"] or {}).get("tensor_cores", {}).items():
                tc[k] = max(tc.get(k, 0), n)
            for k, n in (r["mix"] or {}).get("async_copies", {}).items():
                asyncs[k] = asyncs.get(k, 0) + n
        m = mem.get(key, {})
        lowest = min((r["occupancy"]["fraction"] for r in ok), default=None)
        # what binds where the occupancy is lowest: every equal limit of those kernels, not the others' limits
        binding = {
            lim
            for r in ok
            if r["occupancy"]["fraction"] == lowest
            for lim in r["occupancy"].get("limiters") or [r["occupancy"]["limiter"]]
        }
        out.append(
            {
                "path": g["path"],
                "variant": g["variant"],
                "selected": g["selected"],
                "kernels": sorted(g["kernels"]),
                "max_registers": max((r["resources"]["registers"] for r in ok), default=None),
                "spills": sum((r["resources"]["spill_stores"] or 0) + (r["resources"]["local"] or 0) for r in ok),
                "min_occupancy": lowest,
                "limiters": sorted(binding),
                "tensor_cores": tc,
                "global_load_widths": sorted(int(w) for w in loads),
                "async_copies": asyncs,
                "in_flight_sm": max(((r.get("in_flight") or {}).get("sm") or 0 for r in ok), default=None),
                # the kernel whose streaming loop issues the most instructions for its bytes
                "bytes_per_issue": min(
                    (b for r in ok if (b := (r.get("stream_loop") or {}).get("bytes_per_issue")) is not None),
                    default=None,
                ),
                "sector_efficiency": (m.get("global") or {}).get("sector_efficiency"),
                "requested_vs_declared": (m.get("global") or {}).get("requested_vs_declared"),
                "wide_load_share": (m.get("global") or {}).get("wide_load_share"),
                "extra_wavefronts": (m.get("shared") or {}).get("extra_wavefronts"),
                "traced_at": m.get("profile_shape"),
                "flags": sorted({f for r in g["rows"] for f in r.get("flags") or []}),
                "per_kernel": dict(sorted(per_kernel.items())),
            }
        )
    return out


def summary_doc(doc: dict) -> dict:
    """What ``--summary`` writes: the profile's variants (the markdown
    table's figures, and per kernel its worst registers, spills, occupancy
    and loads in flight and every load width) and their source digests,
    without the rows and traces behind them: small enough to keep in the
    repository (docs/profiles/) and to hold the figures to in tests."""
    keep = ("schema", "engine", "recipe", "arch", "shapes", "tools", "sources")
    return {**{k: doc.get(k) for k in keep}, "variants": variant_summaries(doc)}


def markdown(doc: dict) -> str:
    """The one-row-per-variant table, from a profile or its summary."""
    summaries = doc["variants"] if "variants" in doc else variant_summaries(doc)
    head = (
        f"Profile of {doc['engine']} kernels on {doc['arch']} at {doc['shapes']} shapes "
        "(one row per variant, the worst figure over its kernels and shapes, the occupancy with what binds "
        "there; ▶ the levers choose it).\n\n"
        "| path | variant | kernels | regs (max) | occupancy (min) | tensor cores | global load bits | "
        "async copies | loads in flight (KiB/SM, max) | streaming loop bytes per issue (min) | sector efficiency | "
        "128-bit share of loaded bytes | requested / declared | extra shared wavefronts | flags |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    lines = []
    for v in summaries:
        occ = v["min_occupancy"]
        eff, ratio, wide = v["sector_efficiency"], v["requested_vs_declared"], v["wide_load_share"]
        lines.append(
            "| "
            + " | ".join(
                [
                    v["path"],
                    ("▶ " if v["selected"] else "") + v["variant"],
                    ", ".join(v["kernels"]) or "–",
                    str(v["max_registers"]) if v["max_registers"] is not None else "–",
                    f"{occ:.0%} ({', '.join(v['limiters'])})" if occ is not None else "–",
                    ", ".join(f"{k}" for k in v["tensor_cores"]) or "–",
                    "/".join(map(str, v["global_load_widths"])) or "–",
                    ", ".join(v["async_copies"]) or "none",
                    f"{v['in_flight_sm'] / 1024:.1f}" if v["in_flight_sm"] is not None else "–",
                    f"{v['bytes_per_issue']:.2f}" if v.get("bytes_per_issue") is not None else "–",
                    f"{eff:.0%}" if eff is not None else "–",
                    f"{wide:.0%}" if wide is not None else "–",
                    f"{ratio:.2f}" if ratio is not None else "–",
                    str(v["extra_wavefronts"]) if v["extra_wavefronts"] is not None else "–",
                    "; ".join(v["flags"]) or "–",
                ]
            )
            + " |"
        )
    return head + "\n".join(lines) + "\n"
