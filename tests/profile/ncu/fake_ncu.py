#!/usr/bin/env python3
"""A stand-in ``ncu`` for the tests: checks the arguments ``bench --ncu``
gives it (the CSV raw page, base units, profiling from cuProfilerStart
only, every metric asked for, a log file, then this project's measured
child on a request naming the variant) and writes recorded output.

FAKE_NCU_MODE: ``ok`` (raw.csv), ``perm`` (counters not readable),
``unknown-metric`` (the GMMA metric unknown until it is left out).
FAKE_NCU_CALLS: a file each call's arguments are appended to, as JSON.
"""

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GMMA = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"


def fail(why: str) -> None:
    print(f"fake ncu: {why}: {sys.argv[1:]}", file=sys.stderr)
    sys.exit(3)


def main() -> None:
    args = sys.argv[1:]
    if os.environ.get("FAKE_NCU_CALLS"):
        with open(os.environ["FAKE_NCU_CALLS"], "a") as f:
            f.write(json.dumps(args) + "\n")

    def value(flag: str) -> str:
        if flag not in args:
            fail(f"no {flag}")
        return args[args.index(flag) + 1]

    if "--csv" not in args:
        fail("no --csv")
    wanted = (
        ("--page", "raw"),
        ("--print-units", "base"),
        ("--profile-from-start", "off"),
        ("--clock-control", "none"),
    )
    for flag, want in wanted:
        if value(flag) != want:
            fail(f"{flag} is not {want}")
    metrics = value("--metrics").split(",")
    log = Path(value("--log-file"))
    at = args.index("-m") if "-m" in args else fail("no python -m")
    if args[at + 1] != "leverctl.profile.ncu" or not Path(args[at - 1]).name.startswith("python"):
        fail("the child is not python -m leverctl.profile.ncu")
    req = json.loads(Path(args[at + 2]).read_text())
    if not (req["path"] and req["variant"] and req["shape"]["label"] and isinstance(req["shape"]["dims"], dict)):
        fail("the request does not name a variant at a shape")
    mode = os.environ.get("FAKE_NCU_MODE", "ok")
    if mode == "perm":
        log.write_text((HERE / "perm.txt").read_text())
        sys.exit(1)
    if mode == "unknown-metric" and GMMA in metrics:
        log.write_text((HERE / "unknown_metric.txt").read_text())
        sys.exit(1)
    text = (HERE / "raw.csv").read_text()
    log.write_text(text)


if __name__ == "__main__":
    main()
