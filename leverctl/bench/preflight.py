"""Before anything runs on a fresh GPU machine: the Python version, every
package the bench and its tests import, and the CUDA toolkit libraries
numba-cuda loads, one line per missing piece, so a bare machine says at once
everything it lacks instead of failing on the first import an hour in.

    python -m leverctl.bench.preflight [--wheels scripts/gpu-wheels.txt]

Exit 0 when everything is there, 2 (with one ``leverctl: preflight: ...``
line per missing piece on stderr) when not. Standard library only, and it
imports nothing of leverctl's beyond this module, so it runs before the
rest can.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

MIN_PYTHON = (3, 11)  # pyproject's requires-python


@dataclass(frozen=True)
class Need:
    """One piece: ``check()`` raises when it is missing; ``wheel`` is the
    distribution in scripts/gpu-wheels.txt that brings it."""

    what: str
    wheel: str
    check: Callable[[], object]


def _import(name: str) -> Callable[[], object]:
    return lambda: importlib.import_module(name)


def _cuda_lib(name: str) -> Callable[[], object]:
    def check():
        from cuda.pathfinder import load_nvidia_dynamic_lib

        return load_nvidia_dynamic_lib(name)

    return check


def _numba_cuda():
    # numba still ships an old built-in numba.cuda; numba-cuda's import hook
    # (a .pth file) replaces it. Without the hook the kernels fail to import.
    cuda = importlib.import_module("numba.cuda")
    if getattr(cuda, "implementation", "Built-in") == "Built-in":
        raise ImportError(f"numba.cuda is numba's built-in copy ({cuda.__file__}), not numba-cuda")
    return cuda


def _libdevice():
    from numba.cuda.cudadrv.libs import get_libdevice

    path = get_libdevice()
    if not path or not Path(path).is_file():
        raise FileNotFoundError("libdevice.10.bc not found")
    return path


NEEDS: tuple[Need, ...] = (
    Need("typer", "typer", _import("typer")),
    Need("rich", "rich", _import("rich")),
    Need("tomli_w", "tomli-w", _import("tomli_w")),
    Need("numpy", "numpy", _import("numpy")),
    Need("llvmlite", "llvmlite", _import("llvmlite.binding")),
    Need("numba", "numba", _import("numba")),
    Need("numba.cuda", "numba-cuda", _numba_cuda),
    Need("cuda.bindings", "cuda-bindings", _import("cuda.bindings.driver")),
    Need("cuda.core", "cuda-core", _import("cuda.core")),
    Need("libNVVM", "nvidia-cuda-nvcc-cu12", _cuda_lib("nvvm")),
    Need("libdevice", "nvidia-cuda-nvcc-cu12", _libdevice),
    Need("nvJitLink", "nvidia-nvjitlink-cu12", _cuda_lib("nvJitLink")),
    Need("NVRTC", "nvidia-cuda-nvrtc-cu12", _cuda_lib("nvrtc")),
    Need("pytest", "pytest", _import("pytest")),
    Need("hypothesis", "hypothesis", _import("hypothesis")),
    Need("ml_dtypes", "ml-dtypes", _import("ml_dtypes")),
    Need("leverctl", "this checkout", _import("leverctl.cli.app")),
    Need("leverctl_kernels", "this checkout (kernels/)", _import("leverctl_kernels.registry")),
)


def wheel_pins(path: Path) -> tuple[tuple[int, int] | None, dict[str, str]]:
    """(the ``# python: X.Y`` the wheels are for, {normalized name: version})
    from a wheel list such as scripts/gpu-wheels.txt."""
    pins: dict[str, str] = {}
    python = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#\s*python:\s*(\d+)\.(\d+)", line)
        if m:
            python = (int(m.group(1)), int(m.group(2)))
        body = line.split("#", 1)[0].strip()
        if "==" in body:
            name, version = body.split("==", 1)
            pins[_norm(name)] = version.strip()
    return python, pins


def wheels_missing(wheels: Path, folder: Path) -> list[str]:
    """The ``name==version`` lines of the wheel list that ``folder`` holds
    no wheel file for (empty: the set is all there)."""
    have = set()
    for whl in Path(folder).glob("*.whl"):
        name, version = whl.name.split("-")[:2]
        have.add((_norm(name), version))
    return [f"{name}=={version}" for name, version in wheel_pins(wheels)[1].items() if (name, version) not in have]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 160 else text[:159] + "…"


def problems(
    needs: Sequence[Need] | None = None, *, version: tuple[int, ...] | None = None, wheels: Path | None = None
) -> list[str]:
    """One line per missing piece; empty when everything is there."""
    needs = NEEDS if needs is None else needs
    version = tuple(version or sys.version_info[:3])
    python, pins = wheel_pins(wheels) if wheels is not None and wheels.is_file() else (None, {})
    out = []
    here = ".".join(map(str, version[:3]))
    if version[:2] < MIN_PYTHON:
        out.append(f"Python {here}: leverctl needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or later")
    elif python is not None and version[:2] != python:
        out.append(
            f"Python {here}: the wheels {wheels} lists are built for Python {python[0]}.{python[1]}; "
            f"run with that python (PYTHON=python{python[0]}.{python[1]})"
        )
    for need in needs:
        try:
            need.check()
        except Exception as e:  # noqa: BLE001 - each missing piece becomes one line
            pin = pins.get(_norm(need.wheel))
            bring = f"{need.wheel}=={pin}" if pin else need.wheel
            where = " (make wheels, on a machine with a network, puts it in .whl/)" if pin else ""
            out.append(f"{need.what} is missing: {type(e).__name__}: {_one_line(e)}; it comes from {bring}{where}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m leverctl.bench.preflight", description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheels", type=Path, default=None, help="the wheel list (scripts/gpu-wheels.txt)")
    ap.add_argument(
        "--wheel-dir",
        type=Path,
        default=None,
        help="only say which listed wheels this folder lacks, one per line (exit 1 if any)",
    )
    args = ap.parse_args(argv)
    if args.wheel_dir is not None:
        lacking = wheels_missing(args.wheels, args.wheel_dir)
        print("".join(f"{w}\n" for w in lacking), end="")
        return 1 if lacking else 0
    found = problems(wheels=args.wheels)
    for line in found:
        print(f"leverctl: preflight: {line}", file=sys.stderr)
    if not found:
        print(f"preflight: Python {platform.python_version()} and all {len(NEEDS)} pieces are there")
    return 2 if found else 0


if __name__ == "__main__":
    sys.exit(main())
