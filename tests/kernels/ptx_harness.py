"""Compile the kernel families for sm_90 (H200) without a GPU, and check
what ptxas says about each kernel.

The test session runs kernels in the CUDA simulator, which executes their
Python and accepts what the CUDA target rejects: a shared-array size
computed inside the kernel, a kernel that types into fp64 arithmetic, one
that spills or asks for more registers than its block size allows. Each
``<family>/test_*_ptx.py`` therefore lists its kernels as *jobs* in a
``jobs()`` function::

    def jobs():  # runs in the compile process, on the CUDA target
        from numba import types
        ...
        return [(name, dispatcher, signature, threads_per_block), ...]

and imports the ``compiled`` fixture from here, which calls
:func:`compile_for_sm90`. The first such call in a test run (one per run
under pytest-xdist, whose workers share the result) runs this file as one
child process, with the simulator
off, for every ``*_ptx.py`` module the session collected (one pool of
workers for all their kernels: two families take about as long as their
kernels' compile time split over the cores). The child

1. answers the two numba-cuda look-ups that need NVRTC or a GPU (the path of
   libnvrtc, unused when compiling to PTX; the current device, asked for its
   compute capability) for sm_90, where they fail;
2. compiles a probe kernel, so that a machine without libNVVM (or without
   libdevice) is told apart from a kernel that does not compile;
3. compiles every job to PTX for compute capability 9.0 with the kernel's
   own launch bounds, on forked worker processes, a module's jobs together
   (the device functions they share are typed once, not once a worker),
   and assembles each PTX with ``ptxas -arch=sm_90 -v``. A kernel that does not
   compile is recorded as such; the others still are. A job two modules
   list alike (same dispatcher, signature and block size) compiles once.

:func:`check_ptx` and :func:`check_ptxas` then assert on the records. The
tests skip, saying why, only where libNVVM or ptxas is missing.
CUDA_HOME defaults to /usr/local/cuda when that exists.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP = 77  # the child's exit status when there is no libNVVM
SM90_REGISTERS = 65536  # 32-bit registers per SM (and per block)
REG_UNIT = 256  # registers are allocated per warp in units of 256
STATIC_SMEM = 48 * 1024  # the most shared memory a kernel may declare statically
MAX_WORKERS = 8
# The compile of every module's kernels, under the tests' own limit (pyproject's
# timeout): about 100 s on two cores.
COMPILE_S = 540


# ── the parent (the test session) ────────────────────────────────────────────


def cuda_home() -> str | None:
    for cand in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if cand and Path(cand).is_dir():
            return cand
    return None


_SESSION: dict[str, dict] = {}  # jobs file -> its records, once per session


def compile_for_sm90(request) -> dict:
    """The calling module's records: ``{"ptxas": path or None, "listed":
    [names], "kernels": {name: record}}``. The first call compiles every
    collected ``*_ptx.py`` module's jobs at once; skips the calling test
    where there is no libNVVM."""
    mine = str(request.module.__file__)
    if mine not in _SESSION:
        mods = {getattr(it, "module", None) for it in request.session.items}
        files = {str(m.__file__) for m in mods if m is not None and str(m.__file__).endswith("_ptx.py")}
        _SESSION.update(_compile_once(sorted(files | {mine}), request.getfixturevalue("tmp_path_factory")))
    res = _SESSION[mine]
    if "skip" in res:
        pytest.skip(res["skip"])
    if "fail" in res:
        pytest.fail(res["fail"], pytrace=False)
    missing = set(res["listed"]) - set(res["kernels"])
    assert not missing, f"jobs without a result: {sorted(missing)}"
    return res


@pytest.fixture(scope="module")
def compiled(request) -> dict:
    """The using module's kernels compiled for sm_90: a test module imports
    this fixture next to its ``jobs()``."""
    return compile_for_sm90(request)


@pytest.fixture(scope="module")
def sm90a(compiled, tmp_path_factory) -> dict:
    """The using module's kernels (the ``compiled`` fixture) with each PTX
    retargeted to sm_90a, where wgmma exists, and assembled there: ``{"ptxas",
    "kernels": {name: record + "cubin"}}`` in the harness's record format. A
    module whose kernels use wgmma imports this fixture beside ``compiled``."""
    check_ptx(compiled, fp64=False)
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    out = tmp_path_factory.mktemp("sm90a")
    recs = {}
    for name, rec in compiled["kernels"].items():
        ptx = Path(rec["ptx"]).read_text()
        assert re.search(r"^\.target sm_90$", ptx, re.M), f"{name}: no .target sm_90 line"
        path = out / f"{name}.ptx"
        path.write_text(retarget(ptx, "sm_90a"))
        cubin = out / f"{name}.cubin"
        recs[name] = {
            **rec,
            **assemble(compiled["ptxas"], path, "sm_90a", cubin),
            "ptx": str(path),
            "cubin": str(cubin),
        }
    return {"ptxas": compiled["ptxas"], "kernels": recs}


def _compile_once(jobs_files: list[str], tmp_path_factory) -> dict[str, dict]:
    """:func:`_compile` once per test run. Under pytest-xdist every worker
    collects the same modules; the first to get here compiles them all
    (its pool already uses every core) and leaves the records beside the
    workers' temporary folders, and the others wait on the lock and read
    them instead of compiling again."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _compile(jobs_files, tmp_path_factory.mktemp("sm90"))
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent  # common to the run's workers
    done = shared / "sm90-records.json"
    with open(shared / "sm90.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            records = json.loads(done.read_text())
            if set(jobs_files) <= set(records):
                return records
        records = _compile(jobs_files, shared / "sm90")
        tmp = done.with_suffix(".tmp")
        tmp.write_text(json.dumps(records))
        tmp.replace(done)
        return records


def _compile(jobs_files: list[str], out_dir: Path) -> dict[str, dict]:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    # Its own session, so that a compile past its time takes its forked
    # workers with it: killed alone, they would hold its pipes open and the
    # wait for its output would never end.
    proc = subprocess.Popen(
        [sys.executable, __file__, str(out_dir), *jobs_files],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=COMPILE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {f: {"fail": f"the sm_90 compile process took over {COMPILE_S} s"} for f in jobs_files}
    except BaseException:  # the test's own limit, an interrupt: nothing is left compiling
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if proc.returncode == SKIP:
        why = json.loads(last)["skip"] if last else "no libNVVM/libdevice to compile for sm_90"
        return {f: {"skip": why} for f in jobs_files}
    if proc.returncode != 0:  # every module's test fails, without compiling again
        return {f: {"fail": "the sm_90 compile process failed:\n" + err[-4000:]} for f in jobs_files}
    return json.loads(last)


def check_ptx(compiled: dict, *, fp64: bool = False) -> None:
    """PTX-level checks: with ``fp64=False`` no kernel has fp64 arithmetic
    (an fp64 literal or ``math`` call typed as float64 would put it there)."""
    assert compiled["kernels"], "no jobs listed"
    broken = {name: rec["error"] for name, rec in compiled["kernels"].items() if "error" in rec}
    assert not broken, "kernels that do not compile for sm_90:\n" + "\n\n".join(
        f"{name}: {err}" for name, err in broken.items()
    )
    for name, rec in compiled["kernels"].items():
        if not fp64:
            assert rec["f64"] == 0, f"{name}: {rec['f64']} fp64 instructions in {rec['ptx']}"
        lb = rec["launch_bounds"]
        if lb:
            assert rec["threads"] <= lb[0], f"{name}: {rec['threads']} threads over its launch bounds {lb}"


def check_ptxas(compiled: dict) -> None:
    """ptxas for sm_90 accepts every kernel, with no stack frame, spills or
    local memory, registers for the whole block within the SM's register
    file, and static shared memory within 48 KiB."""
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    for name, rec in compiled["kernels"].items():
        if "error" in rec:
            pytest.fail(f"{name} does not compile for sm_90 (see the compile test)")
        log = rec["log"]
        assert rec["rc"] == 0, f"{name}: ptxas failed: {log[-2000:]}"
        assert rec["regs"] is not None, f"{name}: no register count in: {log}"
        assert rec["stack"] == 0, f"{name}: {rec['stack']} bytes of stack frame: {log}"
        assert rec["spill"] == 0, f"{name}: {rec['spill']} bytes of spills: {log}"
        assert rec["lmem"] == 0, f"{name}: {rec['lmem']} bytes of local memory: {log}"
        per_warp = -(-rec["regs"] * 32 // REG_UNIT) * REG_UNIT
        warps = -(-rec["threads"] // 32)
        assert per_warp * warps <= SM90_REGISTERS, (
            f"{name}: {rec['regs']} registers x {rec['threads']} threads exceed the {SM90_REGISTERS} registers of an SM"
        )
        assert rec["smem"] <= STATIC_SMEM, f"{name}: {rec['smem']} bytes of static shared memory"


# ── the child (CUDA target, simulator off) ───────────────────────────────────


def _answer_lookups_for_sm90() -> None:
    """Where the toolkit has libNVVM but not NVRTC, or there is no driver,
    answer the two look-ups that compiling to PTX makes but does not need."""
    import types as _t

    import numba.cuda.cuda_paths as cp

    try:
        cp._get_nvrtc_path()
    except Exception:
        cp._get_nvrtc_path = lambda: ("unavailable", None)
    import numba.cuda.dispatcher as disp

    # Kernels and device functions ask the current device for its compute
    # capability; the target here is sm_90 whatever the machine has.
    disp.get_current_device = lambda: _t.SimpleNamespace(compute_capability=(9, 0))


def _probe() -> None:
    """Compile a kernel that needs libdevice; exit SKIP when the toolkit's
    compiler libraries are missing."""
    import math

    from numba import cuda

    def probe(a):
        a[0] = math.exp(a[1])

    try:
        cuda.compile_ptx(probe, "void(float32[::1])", cc=(9, 0))
    except Exception as e:
        msg = f"{type(e).__name__}: {e}"
        low = msg.lower()
        if any(w in low for w in ("nvvm", "libdevice", "nvrtc", "cuda_home", "dynamiclib")):
            why = "no libNVVM/libdevice to compile for sm_90 (set CUDA_HOME to a CUDA toolkit): "
            print(json.dumps({"skip": why + msg.splitlines()[0][:300]}))
            sys.exit(SKIP)
        raise


def _ptxas() -> str | None:
    """The newest ptxas found (``leverctl.profile.machine.find_tool``): one
    older than the libNVVM numba-cuda loads refuses its PTX's version."""
    from leverctl.profile.machine import find_tool

    return find_tool("ptxas")


def _num(pattern: str, log: str) -> int:
    return sum(int(x) for x in re.findall(pattern, log))


# Set in the child before the workers fork: they inherit the jobs.
_JOBS: list = []  # (family folder, name, dispatcher, signature, threads)
_PTXAS: str | None = None


def _compile_family(jobs: list[int]) -> list[tuple[int, dict]]:
    return [_compile_one(i) for i in jobs]


def _compile_one(i: int) -> tuple[int, dict]:
    import traceback

    from numba import cuda

    folder, name, kern, sig, threads = _JOBS[i]
    lb = kern.targetoptions.get("launch_bounds")
    try:
        ptx, _ = cuda.compile_ptx(kern.py_func, sig, cc=(9, 0), launch_bounds=lb)
    except Exception as e:
        return i, {"error": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}"}
    path = Path(folder, f"{name}.ptx")
    path.write_text(ptx)
    rec = {
        "threads": threads,
        "launch_bounds": list(lb) if lb else None,
        "f64": len(re.findall(r"\.f64\b", ptx)),
        "ptx": str(path),
    }
    if _PTXAS:
        cubin = path.with_suffix(".cubin")
        rec.update(assemble(_PTXAS, path, cubin=cubin))
        if rec["rc"] == 0:
            rec["sm90_cubin"] = str(cubin)  # kept: the SASS tests read it (:func:`sass`)
    return i, rec


def assemble(ptxas: str, ptx_path, arch: str = "sm_90", cubin=os.devnull) -> dict:
    """``ptxas -arch=<arch> -v`` on one PTX file: its exit status, log and
    the figures :func:`check_ptxas` reads (``cubin``: where to write it)."""
    r = subprocess.run([ptxas, f"-arch={arch}", "-v", "-o", str(cubin), str(ptx_path)], capture_output=True, text=True)
    log = r.stderr
    m = re.search(r"Used (\d+) registers", log)
    return dict(
        rc=r.returncode,
        log=log,
        regs=int(m.group(1)) if m else None,
        stack=_num(r"(\d+) bytes stack frame", log),
        spill=_num(r"(\d+) bytes spill (?:stores|loads)", log),
        lmem=_num(r"(\d+) bytes lmem", log),
        smem=_num(r"(\d+) bytes smem", log),
    )


def nvdisasm() -> str | None:
    """The nvdisasm to read SASS with: the newest of PATH's, $CUDA_HOME/bin's
    and the ``nvidia-cuda-nvdisasm`` wheel's (``find_tool``)."""
    from leverctl.profile.machine import find_tool

    return find_tool("nvdisasm")


def _load_jobs(jobs_file: str) -> list:
    """The jobs of one ``*_ptx.py`` file. Its folder goes on ``sys.path``,
    as pytest puts it there, so that a ``jobs()`` may import a helper beside
    it (``common/cvt_kernels.py``); the shared ones (``tc_claims``) are in
    this file's folder, ``sys.path[0]`` here."""
    import importlib.util

    folder = str(Path(jobs_file).resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(f"_ptx_jobs_{Path(jobs_file).stem}", jobs_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    jobs = list(mod.jobs())
    names = [j[0] for j in jobs]
    assert len(set(names)) == len(names), f"duplicate job names in {jobs_file}"
    return jobs


def main(out_dir: str, jobs_files: list[str]) -> None:
    """Compile the jobs of every file in ``jobs_files`` into
    ``out_dir/<file stem>/`` (``<name>.ptx`` and ``records.json``); print
    ``{jobs file: records}``."""
    global _JOBS, _PTXAS
    import multiprocessing as mp

    _answer_lookups_for_sm90()
    _probe()  # also brings NVVM and libdevice up once, before the fork
    _PTXAS = _ptxas()
    folders = {f: Path(out_dir, Path(f).stem) for f in jobs_files}
    listed, failed = {}, {}
    for f in jobs_files:
        folders[f].mkdir(parents=True, exist_ok=True)
        try:
            jobs = _load_jobs(f)
        except Exception:  # that module's tests fail; the others still compile
            import traceback

            failed[f] = f"listing the jobs of {f} failed:\n{traceback.format_exc()[-3000:]}"
            jobs = []
        listed[f] = [j[0] for j in jobs]
        _JOBS += [(str(folders[f]), *j) for j in jobs]
    owner = [f for f in jobs_files for _ in listed[f]]
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:
        ncpu = os.cpu_count() or 1
    # A kernel two modules list alike (the same dispatcher, from a cached
    # factory, at the same signature and block size: a path built from other
    # families' kernels lists theirs) compiles once; its record serves both.
    first: dict = {}
    for i, (_, _, kern, sig, threads) in enumerate(_JOBS):
        first.setdefault((id(kern), sig if isinstance(sig, str) else tuple(sig), threads), i)
    same = [first[(id(k), s if isinstance(s, str) else tuple(s), t)] for _, _, k, s, t in _JOBS]
    workers = max(1, min(len(first), ncpu, MAX_WORKERS))
    # A task is a family's kernels (one jobs file's), so that the device
    # functions they share are typed once, in one worker; the families with
    # the most kernels first, so that the workers finish together.
    tasks: dict[str, list[int]] = {}
    for i in sorted(set(same)):
        tasks.setdefault(owner[i], []).append(i)
    order = sorted(tasks.values(), key=len, reverse=True)
    if workers > 1 and "fork" in mp.get_all_start_methods():
        # Compiling is single-threaded and holds the GIL: processes, forked
        # so that they inherit the jobs and the warmed-up compiler.
        with mp.get_context("fork").Pool(workers) as pool:
            compiled = dict(r for rs in pool.imap_unordered(_compile_family, order, chunksize=1) for r in rs)
    else:
        compiled = dict(r for rs in map(_compile_family, order) for r in rs)
    done = {i: compiled[same[i]] for i in range(len(_JOBS))}
    result = {f: {"fail": why} for f, why in failed.items()}
    for f in set(jobs_files) - set(failed):
        recs = {_JOBS[i][1]: done[i] for i in range(len(_JOBS)) if owner[i] == f}
        result[f] = {"ptxas": _PTXAS, "listed": listed[f], "kernels": recs}
        Path(folders[f], "records.json").write_text(json.dumps(result[f]))
    print(json.dumps(result))


# ── comparing two compiles ───────────────────────────────────────────────────


def normalized_ptx(text: str) -> list[str]:
    """PTX lines without what changes from one compile to the next while
    the code does not: comments, Numba's environment globals, mangled
    symbol names, and the numbering of shared arrays (kept in order)."""
    out: list[str] = []
    smem: dict[str, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("//") or "NumbaEnv" in line:
            continue
        line = re.sub(r"_cudapy_smem_\d+", lambda m: f"SMEM{smem.setdefault(m.group(0), len(smem))}", line)
        out.append(re.sub(r"_Z\w+", "SYM", line))
    return out


def diff_dirs(before: str, after: str) -> bool:
    """Print, per kernel, whether its PTX changed between two output folders
    of ``main`` (and the ptxas figures); True when none did."""
    same = True
    fams = sorted({p.parent.name for d in (before, after) for p in Path(d).glob("*/records.json")})
    for fam in fams:
        same &= _diff_family(Path(before, fam), Path(after, fam))
    return same


def _diff_family(before: Path, after: Path) -> bool:
    if not (before / "records.json").exists() or not (after / "records.json").exists():
        print(f"{before.name}: compiled on one side only")
        return False
    same = True
    recs = [json.loads(Path(d, "records.json").read_text())["kernels"] for d in (before, after)]
    for name in sorted(set(recs[0]) | set(recs[1])):
        if name not in recs[0] or name not in recs[1]:
            print(f"{name}: only in one of them")
            same = False
            continue
        if "error" in recs[0][name] or "error" in recs[1][name]:
            print(f"{before.name}/{name}: does not compile on one side")
            same = False
            continue
        # a kernel two modules list alike is compiled once: its record names the other's file
        a, b = (normalized_ptx(Path(r[name]["ptx"]).read_text()) for r in recs)
        figures = " ".join(
            f"{k}={recs[0][name].get(k)}->{recs[1][name].get(k)}" for k in ("regs", "spill", "stack", "smem", "f64")
        )
        print(f"{before.name}/{name}: {'same PTX' if a == b else 'PTX CHANGED'}  {figures}")
        same &= a == b
    return same


USAGE = """usage: python tests/kernels/ptx_harness.py OUT_DIR JOBS_FILE...
       python tests/kernels/ptx_harness.py --diff BEFORE_DIR AFTER_DIR

The first form compiles the jobs of test_*_ptx.py files (tests/kernels/*/) for
sm_90 into OUT_DIR/<file stem>/ (<name>.ptx, records.json). The second says which
kernels' PTX a change altered: compile before and after it, then compare
the two OUT_DIRs."""


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--diff":
        sys.exit(0 if diff_dirs(sys.argv[2], sys.argv[3]) else 1)
    if len(sys.argv) < 3 or sys.argv[1].startswith("-"):
        sys.exit(USAGE)
    # Before numba is imported: the CUDA target, not the simulator, and sm_90
    # named (there may be no device to ask; it also spares numba-cuda the
    # NVRTC query for the architectures the toolkit supports).
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    os.environ["NUMBA_FORCE_CUDA_CC"] = "9.0"
    if cuda_home():
        os.environ["CUDA_HOME"] = cuda_home()
    main(sys.argv[1], sys.argv[2:])


def with_maps(kern, sig: tuple) -> tuple:
    """A pipeline GEMM kernel's signature: ``sig`` (the mainloop's nine
    arrays), and the tensor maps after them where its copies go by TMA."""
    from numba import types

    return (*sig, types.uint64[:, ::1]) if getattr(kern, "copy", "") == "tma" else sig


def retarget(ptx: str, arch: str) -> str:
    """PTX compiled for sm_90 with its ``.target`` line naming ``arch``."""
    return re.sub(r"^\.target sm_90$", f".target {arch}", ptx, flags=re.M)


_SASS: dict[tuple[str, str], str] = {}  # (PTX file, arch) -> its SASS, once a test process


def sass(compiled_: dict, name: str, arch: str = "sm_90") -> str:
    """The SASS of ``compiled_``'s kernel ``name`` assembled for ``arch``
    (``sm_90``, or ``sm_90a``, where every Hopper tensor-core form exists and
    sm_90 code assembles unchanged), read with nvdisasm. The sm_90 cubin is
    the compile's own; another arch is assembled once a test process, like
    the reading, whichever tests ask. Skips the test where ptxas or nvdisasm
    is missing."""
    disasm = need_sass(compiled_)
    rec = compiled_["kernels"][name]
    key = (rec["ptx"], arch)
    got = _SASS.get(key)
    if got is None:
        cubin = rec.get("sm90_cubin") if arch == "sm_90" else None
        if cubin is None:
            ptx = Path(rec["ptx"])
            out = Path(tempfile.mkdtemp(prefix=f"{arch}-", dir=ptx.parent))
            src, cubin = out / ptx.name, out / f"{ptx.stem}.cubin"
            src.write_text(retarget(ptx.read_text(), arch))
            subprocess.run(
                [compiled_["ptxas"], f"-arch={arch}", "-o", str(cubin), str(src)], check=True, capture_output=True
            )
        got = _SASS[key] = subprocess.run([disasm, str(cubin)], check=True, capture_output=True, text=True).stdout
    return got


def need_sass(compiled_: dict) -> str:
    """The nvdisasm to read the SASS of ``compiled_`` with; skips the test
    where ptxas or nvdisasm is missing."""
    import pytest

    if not compiled_["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    disasm = nvdisasm()
    if not disasm:
        pytest.skip("nvdisasm not found (PATH, $CUDA_HOME/bin or the nvidia-cuda-nvdisasm wheel)")
    return disasm
