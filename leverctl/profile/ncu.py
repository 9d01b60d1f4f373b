"""Hardware counters from Nsight Compute (``bench --ncu``, on a GPU).

For each timed variant, ``ncu`` runs a child process
(``python -m leverctl.profile.ncu REQUEST.json``) that builds the variant,
draws its inputs, launches it once outside the profiled range (compiling
it), then once inside ``cuda.profile_start()``/``profile_stop()``: with
``--profile-from-start off`` only that launch's kernels are measured. ncu
writes its raw page as CSV (``--csv --page raw --print-units base``) into
a log file, which :func:`parse_csv` reads into one figure set per kernel
launch:

    dram_pct_of_peak      DRAM throughput, % of the peak sustained
    achieved_occupancy    active warps over the SM's maximum, % (achieved)
    shared_bank_conflicts shared-memory bank conflicts, loads and stores
    sectors_per_request   32-byte sectors per global load request (4 is a
                          fully coalesced 32-bit warp access)
    sector_efficiency     bytes used per global-load sector fetched, %
    tensor_pipe_pct       tensor pipe active cycles, % of peak (HMMA or GMMA)
    duration_us           the kernel's duration

A counter this ncu or this GPU does not know is dropped (ncu names it in
an ``==ERROR==`` line) and the rest measured again; a device whose counters
the user may not read (``ERR_NVGPUCTRPERM``) is one line, after which the
bench goes on without them.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Our figure -> the ncu metrics it is made from.
METRICS: dict[str, tuple[str, ...]] = {
    "dram_pct_of_peak": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",),
    "achieved_occupancy": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "shared_bank_conflicts": (
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    ),
    "sectors_per_request": (
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    ),
    "sector_efficiency": ("smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",),
    "tensor_pipe_pct": (
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    ),
    "duration_us": ("gpu__time_duration.sum",),
}
ALL_METRICS = tuple(dict.fromkeys(m for ms in METRICS.values() for m in ms))
TIMEOUT_S = 180.0  # one variant under ncu (replays included); past it the bench goes on without counters
PERMISSION = "ERR_NVGPUCTRPERM"
CHILD = "leverctl.profile.ncu"


class NcuUnusable(Exception):
    """ncu cannot measure on this machine at all (permissions, no device):
    said once, and the bench stops asking."""


def find_ncu() -> str | None:
    return shutil.which("ncu")


def command(ncu: str, metrics: tuple[str, ...], log: Path, request: Path) -> list[str]:
    return [
        ncu,
        "--csv",
        "--page",
        "raw",
        "--print-units",
        "base",
        "--profile-from-start",
        "off",
        # Measure the card as it is: ncu's default locks the clocks to base.
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--metrics",
        ",".join(metrics),
        "--log-file",
        str(log),
        sys.executable,
        "-m",
        CHILD,
        str(request),
    ]


def _number(text: str) -> float | None:
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "nan"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def short_name(name: str) -> str:
    """A kernel's own name from ncu's (demangled) one:
    ``leverctl_kernels::w4a16::...::<locals>::gemv_sw[abi:v1,...](Array<...>)``
    or ``cudapy::...::$3clocals$3e::gemv_sw$241(Array<...>)`` -> ``gemv_sw``."""
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the argument list: the first "(" at template depth 0
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = re.sub(r"\[[^\]]*\]$", "", name[:cut].strip())
    last = head.split("::")[-1].split(".")[-1]
    return re.sub(r"\$\d+$", "", last) or name  # numba's unique suffix: gemv_sw$241


def _table(text: str) -> list[dict[str, str]]:
    """The CSV rows of ncu's output (its ``==PROF==`` and other lines left
    out), as dicts by header."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if not lines:
        return []
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def parse_csv(text: str) -> list[dict[str, Any]]:
    """One figure set per profiled kernel launch, in launch order, from
    ncu's CSV: the raw page (one row per launch, a column per metric, a
    units row first) or the details page (one row per metric)."""
    rows = _table(text)
    if not rows:
        return []
    if "Metric Name" in rows[0] and "Metric Value" in rows[0]:
        launches: dict[str, dict[str, str]] = {}
        for r in rows:
            d = launches.setdefault(r.get("ID", ""), {"Kernel Name": r.get("Kernel Name", "")})
            d[r["Metric Name"]] = r["Metric Value"]
        rows = list(launches.values())
    out = []
    for r in rows:
        name = r.get("Kernel Name") or r.get("Function Name") or ""
        if not name or (r.get("ID") == "" and not any(_number(r.get(m, "")) is not None for m in ALL_METRICS)):
            continue  # the units row
        got = {m: _number(r[m]) for m in ALL_METRICS if m in r}
        out.append({"name": short_name(name), "ncu_name": name[:300], **figures(got)})
    return out


def figures(m: dict[str, float | None]) -> dict[str, float | None]:
    """Our figures from one launch's metrics (None where a metric is absent)."""

    def one(key: str) -> float | None:
        return m.get(METRICS[key][0])

    ld, st = (m.get(k) for k in METRICS["shared_bank_conflicts"])
    sectors, requests = (m.get(k) for k in METRICS["sectors_per_request"])
    tensor = [x for x in (m.get(k) for k in METRICS["tensor_pipe_pct"]) if x is not None]
    ns = one("duration_us")
    return {
        "dram_pct_of_peak": one("dram_pct_of_peak"),
        "achieved_occupancy": one("achieved_occupancy"),
        "shared_bank_conflicts": (ld or 0) + (st or 0) if ld is not None or st is not None else None,
        "sectors_per_request": sectors / requests if sectors is not None and requests else None,
        "sector_efficiency": one("sector_efficiency"),
        "tensor_pipe_pct": max(tensor) if tensor else None,
        "duration_us": ns / 1000.0 if ns is not None else None,
    }


def unknown_metrics(text: str, asked: tuple[str, ...]) -> list[str]:
    """The metrics an ``==ERROR==`` line of ncu's says it cannot collect."""
    errors = [line for line in text.splitlines() if "==ERROR==" in line]
    return [m for m in asked if any(m in line for line in errors)]


def _problem(text: str) -> str:
    errors = [line.split("==ERROR==", 1)[1].strip() for line in text.splitlines() if "==ERROR==" in line]
    return errors[0][:200] if errors else ""


@dataclass
class Runner:
    """``bench --ncu``: measures one variant at a time; after a failure that
    would repeat for every variant (counters not readable), measures no more."""

    ncu: str
    keep: Path | None = None  # where each run's raw ncu output is copied (LEVERCTL_NCU_LOGS)
    metrics: tuple[str, ...] = ALL_METRICS
    dropped: tuple[str, ...] = ()
    unusable: str | None = None

    def measure(self, path: str, variant: str, shape: dict, seed: list[int]) -> dict[str, Any]:
        """The ``hardware`` part of a record's profile block; NcuUnusable when
        ncu cannot measure on this machine; RuntimeError for this variant alone."""
        if self.unusable:
            raise NcuUnusable(self.unusable)
        with tempfile.TemporaryDirectory(prefix="leverctl-ncu-") as tmp:
            req = Path(tmp) / "request.json"
            req.write_text(json.dumps({"path": path, "variant": variant, "shape": shape, "seed": seed}))
            for _ in range(3):  # at most two rounds of dropping metrics ncu does not know
                log = Path(tmp) / "ncu.csv"
                text, rc = self._run(log, req)
                if PERMISSION in text:
                    self.unusable = f"ncu cannot read the GPU's performance counters ({PERMISSION}: {_problem(text)})"
                    raise NcuUnusable(self.unusable)
                bad = unknown_metrics(text, self.metrics)
                if bad and len(bad) < len(self.metrics):
                    self.metrics = tuple(m for m in self.metrics if m not in bad)
                    self.dropped = (*self.dropped, *bad)
                    continue
                break
            if self.keep is not None:
                self.keep.mkdir(parents=True, exist_ok=True)
                safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{path}-{variant}-{shape['label']}")
                (self.keep / f"{safe}.csv").write_text(text)
            kernels = parse_csv(text)
            if not kernels:
                why = _problem(text) or f"ncu exited {rc} and measured no kernel"
                raise RuntimeError(why)
        return {"tool": "ncu", "kernels": kernels, "metrics_missing": list(self.dropped)}

    def _run(self, log: Path, req: Path) -> tuple[str, int]:
        log.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        try:
            r = subprocess.run(
                command(self.ncu, self.metrics, log, req), capture_output=True, text=True, timeout=TIMEOUT_S, env=env
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"ncu took longer than {TIMEOUT_S:g} s") from None
        except OSError as e:
            self.unusable = f"ncu could not be started: {e.strerror or e}"
            raise NcuUnusable(self.unusable) from None
        text = (log.read_text(errors="replace") if log.exists() else "") + "\n" + r.stdout + "\n" + r.stderr
        return text, r.returncode


def main() -> None:
    """The measured child: one variant launched once to compile, then once
    between cuProfilerStart and cuProfilerStop."""
    import numpy as np
    from numba import cuda

    from leverctl.bench.check import run_once
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.registry import get_path

    req = json.loads(Path(sys.argv[1]).read_text())
    path = get_path(req["path"])
    shape = Shape(req["shape"]["label"], req["shape"]["dims"])
    inputs = path.make_inputs(shape, np.random.default_rng(req["seed"]))
    launch = path.variants[req["variant"]].build(shape)
    bufs, _ = run_once(path, shape, launch, inputs, cuda)
    cuda.synchronize()
    cuda.profile_start()
    launch(bufs)
    cuda.synchronize()
    cuda.profile_stop()


if __name__ == "__main__":
    main()
