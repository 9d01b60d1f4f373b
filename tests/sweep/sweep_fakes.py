"""Fake kernel paths, runner and device for the sweep's tests.

The paths steer real lever fields of the shipped catalogs, so plans are built
against the real Atlas and Metrale catalogs; nothing here compiles or runs a
kernel. ``fake_record`` stands in for the bench's ``run_item``: a record whose
status and (optionally) timing are a fixed function of the item, so tests can
say in advance which configuration wins.

Run as a script, this module is ``leverctl`` with the fakes installed (for
the kill-and-resume test): ``python sweep_fakes.py sweep ...``. The
environment variables FAKE_DELAY (seconds per run), FAKE_RUN_LOG (a file
that gets one line per run), FAKE_GPU (1: a timed fake GPU) steer it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Mapping

from leverctl_kernels.common.path import Choice, KernelPath, Shape, Tolerance, Traffic, Variant

SMOKE = [Shape("n37", {"n": 37}), Shape("n64", {"n": 64})]
MODEL = [Shape("n4096", {"n": 4096})]


def _shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    return list(SMOKE if preset == "smoke" else MODEL)


def _variant(name: str) -> Variant:
    return Variant(name, f"fake {name}", build=lambda shape: lambda bufs: None)


def _path(
    name: str,
    levers: tuple[str, ...],
    variants: tuple[str, ...],
    select,
    lever_defaults=None,
    engines: tuple[str, ...] = (),
    shapes=_shapes,
) -> KernelPath:
    return KernelPath(
        name=name,
        family=name.split(".")[0],
        summary=f"fake {name}",
        levers=levers,
        lever_defaults=lever_defaults or {},
        variants={v: _variant(v) for v in variants},
        select=select,
        shapes=shapes,
        make_inputs=lambda shape, rng: {},
        outputs=lambda shape: {},
        reference=lambda shape, inputs: {},
        traffic=lambda shape: Traffic(100, 10, 20),
        tolerance=Tolerance(1e-3, 1e-3),
        engines=engines,
    )


def gemv_path() -> KernelPath:
    return _path("fake.gemv", ("gemv_sw",), ("sw", "t64"), lambda lv, s: Choice("sw" if lv["gemv_sw"] else "t64"))


def ffn_path() -> KernelPath:
    """Three levers; Atlas lacks decode_split_silu (lever_defaults: off)."""

    def select(lv, s):
        if lv["decode_ffn_via_gemm"]:
            return Choice("gemm")
        return Choice(("sw" if lv["gemv_sw"] else "t64") + ("+split" if lv["decode_split_silu"] else "+fused"))

    return _path(
        "fake.ffn",
        ("decode_ffn_via_gemm", "decode_split_silu", "gemv_sw"),
        ("gemm", "sw+split", "sw+fused", "t64+split", "t64+fused"),
        select,
        lever_defaults={"decode_split_silu": False},
    )


def grouped_path() -> KernelPath:
    """Metrale only (its levers are not in Atlas): a tri-state and a count."""

    def select(lv, s):
        exact = lv["moe_prefill_exact_tiles"]
        return Choice("exact" if exact else "capped" if lv["moe_prefill_max_load_factor"] else "worst")

    return _path(
        "fake.grouped", ("moe_prefill_exact_tiles", "moe_prefill_max_load_factor"), ("exact", "capped", "worst"), select
    )


def verify_path() -> KernelPath:
    def select(lv, s):
        return Choice("wy17" if lv["gdn_wy17"] else "wyn" if lv["gdn_wyn"] else "recurrent")

    return _path("fake.verify", ("gdn_wy17", "gdn_wyn"), ("wy17", "wyn", "recurrent"), select)


def all_paths() -> list[KernelPath]:
    return [gemv_path(), ffn_path(), grouped_path(), verify_path()]


# ── a fake run ──────────────────────────────────────────────────────────────

# Median microseconds per variant on the fake GPU: sw beats t64, split beats
# fused, wy17 beats wyn beats recurrent, and the "gemm" FFN is fastest but fails
# its check, so it must never win.
FAKE_US = {
    "sw": 10.0,
    "t64": 14.0,
    "sw+split": 20.0,
    "sw+fused": 22.0,
    "t64+split": 26.0,
    "t64+fused": 30.0,
    "gemm": 5.0,
    "exact": 9.0,
    "capped": 7.0,
    "worst": 8.0,
    "wy17": 3.0,
    "wyn": 4.0,
    "recurrent": 6.0,
}
FAILING_VARIANTS = {"gemm"}


def fake_record(item, device_name: str = "fake simulator", timed: bool = False) -> dict[str, Any]:
    from leverctl.bench.plan import lever_json

    passed = item.variant not in FAILING_VARIANTS and not item.failed
    rec = {
        "kernel": item.kernel,
        "variant": item.variant,
        "levers": {f: lever_json(v) for f, v in item.levers.items()},
        "config": item.config,
        "shape": item.shape.as_dict(),
        "status": "pass" if passed else "fail",
        "note": item.note if passed else (item.note or "rel error 0.5 > 0.001"),
        "error": {
            "rel": 1e-4 if passed else 0.5,
            "max_abs": 1e-4,
            "tol_rel": 1e-3,
            "tol_abs": 1e-3,
            "nonfinite": 0,
            "unwritten": 0,
            "rechecked": timed,
        },
        "timing": None,
        "traffic": {"bytes": 110, "flops": 20},
        "roofline": None,
        "achieved": None,
        "reference_lib": None,
        "device": device_name,
        "plan": item.plan,
        "catalog": item.catalog,
    }
    if timed and passed:
        us = FAKE_US[item.variant] * (1 + item.shape["n"] / 1000)
        rec["timing"] = {
            "median_us": us,
            "p20_us": us * 0.995,
            "p80_us": us * 1.005,
            "samples": 100,
            "noise": 0.002,
            "stopped_by": "noise",
        }
    return rec


def fake_device(kind: str = "sim"):
    from leverctl.bench.device import Device

    return Device(kind=kind, name="Fake GPU" if kind == "gpu" else "fake simulator")


def install(monkeypatch=None, *, gpu: bool = False, delay: float = 0.0, log: str | None = None) -> dict:
    """Point the CLI at the fake paths, device and runner. Returns a dict
    whose "runs" counts the runner's calls."""
    import leverctl.bench.device as devmod
    import leverctl.bench.run as runmod
    import leverctl.cli.common as clicommon

    calls = {"runs": 0}

    def run_item(item, device, rng_seed=0, *, stop=None):
        calls["runs"] += 1
        if delay:
            time.sleep(delay)
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{item.kernel} {item.shape.label} {item.config}\n")
        return fake_record(item, device.name, timed=device.is_gpu)

    def choose(choice="auto", **_kw):
        return fake_device("gpu" if gpu else "sim")

    setters = [
        (clicommon, "registered_paths", all_paths),
        (clicommon, "table_paths", lambda: [clicommon.TablePath.of(p) for p in all_paths()]),
        (runmod, "run_item", run_item),
        (devmod, "choose", choose),
        (devmod, "probe_gpu", lambda *a, **k: devmod.Probe(gpu, "fake")),
    ]
    for mod, name, value in setters:
        if monkeypatch is not None:
            monkeypatch.setattr(mod, name, value)
        else:
            setattr(mod, name, value)
    return calls


def cli(args, capsys) -> tuple[Any, str, str]:
    """leverctl ``args`` in this process: (exit code, stdout, stderr)."""
    import pytest

    from leverctl.cli.app import main

    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return e.value.code, out, err


if __name__ == "__main__":
    install(
        gpu=os.environ.get("FAKE_GPU") == "1",
        delay=float(os.environ.get("FAKE_DELAY", "0")),
        log=os.environ.get("FAKE_RUN_LOG"),
    )
    from leverctl.cli.app import main

    main(sys.argv[1:])
