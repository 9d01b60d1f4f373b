"""Each kernel a profile names, compiled for the target and taken apart:
PTX from numba-cuda (for the target's compute capability, with the
kernel's own launch bounds), assembled by ``ptxas -v`` for the target
(``.target sm_90a`` where the architecture-specific one is asked for, the
only one with ``wgmma``), and disassembled by ``nvdisasm``.

This module runs in the compiling child (``python -m leverctl.profile.build``),
which reads one JSON request on stdin and writes one JSON answer on stdout:

    request  {"arch": "sm_90a", "cache": DIR, "keep": DIR or null,
              "items": [{"path": "w4a16.gemv", "variant": "gemv_sw",
                         "shape": {"label": ..., "dims": {...}},
                         "types_shape": {"label": ..., "dims": {...}}}, ...]}
    answer   {"items": [{"kernels": [...], "error": str or null}, ...]}

Each item's capture (its launches and their kernels' keys) is cached too,
under ``cache/captures``, by the source its build and inputs reach, the
item and the architecture: a warm profile captures nothing.
A kernel's compiled result is cached under ``cache`` by a key made of the
source of the kernel's module and of every kernels module it reaches, the kernel's name, its closure's constants, its
argument types, launch bounds, the architecture and the compiler versions:
a second profile with nothing changed compiles nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import capture, machine


def source_digest(*objects: Any) -> str:
    """A digest of the source of every ``leverctl_kernels`` module the
    objects' modules reach: each module's own, and through its globals
    (modules, functions, kernels, classes) the modules it uses, and theirs.
    Editing one path's spec invalidates that path's cached kernels and
    traces, not every path's."""
    h = hashlib.sha256()
    roots = {_module_of(o) for obj in objects for o in (obj, *_closure(obj))} - {None}
    for name in sorted(_reached(tuple(sorted(roots)))):
        mod = sys.modules.get(name)
        f = getattr(mod, "__file__", None)
        h.update(name.encode())
        if f:
            h.update(Path(f).read_bytes())
    return h.hexdigest()


_PACKAGE = "leverctl_kernels"


def _closure(obj: Any, depth: int = 0) -> list:
    """What a function closes over, and what those close over (a variant's
    ``build`` made by a factory holds the kernel module's functions)."""
    fn = getattr(obj, "py_func", obj)
    if depth > 4 or not hasattr(fn, "__code__"):
        return []
    cells = [c.cell_contents for c in (fn.__closure__ or ()) if _filled(c)]
    return cells + [x for c in cells for x in _closure(c, depth + 1)]


def _module_of(obj: Any) -> str | None:
    if isinstance(obj, type(sys)):
        name = obj.__name__
    else:
        name = getattr(getattr(obj, "py_func", obj), "__module__", None)
    return name if isinstance(name, str) and name.split(".")[0] == _PACKAGE else None


_REACHED: dict[tuple, frozenset] = {}


def _reached(roots: tuple) -> frozenset:
    if roots in _REACHED:
        return _REACHED[roots]
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in sys.modules:
            continue
        seen.add(name)
        parent = name.rpartition(".")[0]
        if parent.split(".")[0] == _PACKAGE:
            todo.append(parent)  # a package's __init__ runs before its modules
        for value in list(vars(sys.modules[name]).values()):
            other = _module_of(value)
            # a package's attributes include every submodule imported
            # anywhere: not what its own code uses
            if other and other not in seen and not other.startswith(name + "."):
                todo.append(other)
    _REACHED[roots] = frozenset(seen)
    return _REACHED[roots]


def _constant(value: Any, depth: int = 0) -> str:
    """A stable text for a closure cell's value (the kernel's compile-time
    constants, and the device functions it calls with theirs)."""
    if depth > 6:
        return "..."
    fn = getattr(value, "py_func", None) or (value if callable(value) and hasattr(value, "__code__") else None)
    if fn is not None:
        cells = [_constant(c.cell_contents, depth + 1) for c in (fn.__closure__ or ()) if _filled(c)]
        return f"{fn.__module__}.{fn.__qualname__}({','.join(cells)};{_constant(fn.__defaults__, depth + 1)})"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_constant(v, depth + 1) for v in value) + ")"
    return repr(value)


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def kernel_key(launch: capture.Launch, arch: str, versions: str) -> str:
    lb = launch.kernel.targetoptions.get("launch_bounds")
    text = "|".join(
        (source_digest(launch.kernel), versions, arch, _constant(launch.kernel), str(launch.argtypes), repr(lb))
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def package_version(package: str) -> str:
    """An installed distribution's version; ``-`` where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "-"
    except Exception:  # noqa: BLE001 - an unknown version only weakens the cache key
        return "?"


def _versions(tools: dict | None = None) -> str:
    """The compilers' versions, for the cache keys: numba's and
    numba-cuda's, the libNVVM wheel's (else a toolkit's), and each tool's
    path and release (a ptxas that refused the PTX is not asked again
    after an upgrade, nor its answer reused by another one)."""
    import numba

    of = package_version
    text = f"numba {numba.__version__}, numba-cuda {of('numba-cuda')}, nvvm {of('nvidia-nvvm')}"
    for name, path in sorted((tools or {}).items()):
        text += f", {name} {path} {machine.release_text(path)}"
    return text


def compile_kernel(launch: capture.Launch, arch: str, out: Path, tools: dict) -> dict:
    """PTX, cubin and SASS of one launch's kernel under ``out``; the raw
    texts' paths and ptxas's log."""
    from numba import cuda

    lb = launch.kernel.targetoptions.get("launch_bounds")
    ptx, _ = cuda.compile_ptx(launch.kernel.py_func, launch.argtypes, cc=capture.cc_of(arch), launch_bounds=lb)
    if arch.endswith("a"):
        ptx = re.sub(r"^\.target (sm_\d+)$", rf".target {arch}", ptx, flags=re.M)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernel.ptx").write_text(ptx)
    r = subprocess.run(
        [tools["ptxas"], f"-arch={arch}", "-v", "-o", str(out / "kernel.cubin"), str(out / "kernel.ptx")],
        capture_output=True,
        text=True,
    )
    result = {"ptxas_rc": r.returncode, "ptxas_log": r.stderr}
    if r.returncode == 0 and tools.get("nvdisasm"):
        d = subprocess.run([tools["nvdisasm"], str(out / "kernel.cubin")], capture_output=True, text=True)
        (out / "kernel.sass").write_text(d.stdout)
    return result


def _cache_one(job: tuple) -> str:
    """Compile one kernel into the cache (a worker's task); its key."""
    key, launch, arch, cache, tools = job
    folder = cache / key
    if (folder / "result.json").exists():
        return key
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=f".{key}."))
    try:
        res = compile_kernel(launch, arch, tmp, tools)
    except Exception as e:  # noqa: BLE001 - one kernel that does not compile is a row, not the end
        res = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
    (tmp / "result.json").write_text(json.dumps(res))
    try:
        os.replace(tmp, folder)
    except OSError:  # another run cached it first
        shutil.rmtree(tmp, ignore_errors=True)
    return key


def _captured(item: dict):
    from leverctl_kernels.common.path import Shape
    from leverctl_kernels.registry import get_path

    path = get_path(item["path"])
    shape = Shape(item["shape"]["label"], item["shape"]["dims"])
    types_shape = Shape(item["types_shape"]["label"], item["types_shape"]["dims"])
    return capture.capture(path, item["variant"], shape, types_shape)


def _meta(launches, keys: list[str]) -> dict:
    """What the answer needs of a capture, as JSON (cached: a second profile
    captures nothing)."""
    return {
        "launches": [
            {
                "kernel": la.name,
                "site": la.site,
                "key": key,
                "threads": la.threads,
                "block": list(la.block),
                "grid": list(la.grid),
                "dynamic_shared": la.dynamic_shared,
                "tma_bytes": capture.tma_bytes(la.kernel),
            }
            for la, key in zip(launches, keys)
        ],
        "tensor_cores": launches.tensor_cores,
        "tc_dtype": launches.tc_dtype,
    }


# What a cached capture holds (``_meta``): 2 added each launch's TMA bytes in flight.
CAPTURE_FORMAT = 2


def capture_key(item: dict, arch: str, versions: str) -> str:
    """A capture's cache key: the source the variant's build and inputs
    reach, the item (path, variant, shape, the shape its types come from),
    the architecture and the compiler versions."""
    from leverctl_kernels.registry import get_path

    path = get_path(item["path"])
    digest = source_digest(path.variants[item["variant"]].build, path.make_inputs)
    what = json.dumps(
        [CAPTURE_FORMAT, item["path"], item["variant"], item["shape"], item["types_shape"]], sort_keys=True
    )
    return hashlib.sha256("|".join((digest, versions, arch, what)).encode()).hexdigest()[:24]


def _answer(item: dict, meta: dict, cache: Path, keep: Path | None) -> dict:
    kernels: dict[str, dict] = {}
    for launch in meta["launches"]:
        key = launch["key"]
        if key in kernels:
            kernels[key]["launches"] += 1
            continue
        folder = cache / key
        res = json.loads((folder / "result.json").read_text())
        kernels[key] = {**launch, "launches": 1, "dir": str(folder), **res}
        if keep is not None and "error" not in res:
            dest = keep / item["path"] / item["variant"] / f"{launch['kernel']}-{key[:8]}"
            dest.mkdir(parents=True, exist_ok=True)
            for f in folder.iterdir():
                if f.suffix in (".ptx", ".cubin", ".sass"):
                    shutil.copyfile(f, dest / f.name)
    return {
        "kernels": list(kernels.values()),
        "tensor_cores": meta["tensor_cores"],
        "tc_dtype": meta["tc_dtype"],
        "error": None,
    }


def _cached_capture(item: dict, arch: str, versions: str, cache: Path) -> tuple[Path, dict | None]:
    """The capture's cache file, and what it holds where every kernel it
    names is compiled in the cache too (else None: capture again)."""
    f = cache / "captures" / f"{capture_key(item, arch, versions)}.json"
    if not f.exists():
        return f, None
    meta = json.loads(f.read_text())
    if all((cache / la["key"] / "result.json").exists() for la in meta["launches"]):
        return f, meta
    return f, None


def _save(f: Path, meta: dict) -> None:
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, f)


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def main() -> None:
    req = json.loads(sys.stdin.read())
    arch = req["arch"]
    capture.prepare(arch)
    capture.answer_device_lookups(arch)
    import warnings

    warnings.simplefilter("ignore")  # numba's grid-size hints: the profile says it in figures
    cache = Path(req["cache"])
    cache.mkdir(parents=True, exist_ok=True)
    keep = Path(req["keep"]) if req.get("keep") else None
    tools = {"ptxas": machine.find_tool("ptxas"), "nvdisasm": machine.find_tool("nvdisasm")}
    versions = _versions(tools)

    # 1. every item's launches (seconds); 2. the kernels not cached yet,
    # compiled on forked workers (each compile is single-threaded), largest
    # block first; 3. the answers, from the cache.
    captured: list = []
    todo: dict[str, tuple] = {}
    saves: list[tuple[Path, dict]] = []
    for item in req["items"]:
        f, meta = _cached_capture(item, arch, versions, cache)
        if meta is not None:
            captured.append(meta)
            continue
        try:
            launches = _captured(item)
        except Exception as e:  # noqa: BLE001 - a variant that cannot be captured is a row
            captured.append(f"{type(e).__name__}: {str(e)[:300]}")
            continue
        keys = [kernel_key(la, arch, versions) for la in launches]
        captured.append(meta := _meta(launches, keys))
        saves.append((f, meta))
        for la, key in zip(launches, keys):
            if not (cache / key / "result.json").exists():
                todo.setdefault(key, (key, la, arch, cache, tools))
    jobs = list(todo.values())
    workers = min(len(jobs), _workers())
    if workers > 1 and "fork" in __import__("multiprocessing").get_all_start_methods():
        import multiprocessing as mp

        global _JOBS
        _JOBS = jobs
        with mp.get_context("fork").Pool(workers) as pool:
            list(pool.imap_unordered(_cache_nth, range(len(jobs)), chunksize=1))
    else:
        for job in jobs:
            _cache_one(job)
    for f, meta in saves:  # after their kernels are in the cache
        _save(f, meta)
    answers = []
    for item, got in zip(req["items"], captured):
        if isinstance(got, str):
            answers.append({"kernels": [], "error": got})
        else:
            answers.append(_answer(item, got, cache, keep))
    json.dump({"items": answers, "tools": tools}, sys.stdout)


_JOBS: list = []  # set before the workers fork: they inherit the launches


def _cache_nth(i: int) -> str:
    return _cache_one(_JOBS[i])


if __name__ == "__main__":
    main()
