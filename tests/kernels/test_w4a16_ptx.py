"""Every W4A16 kernel compiles for the real CUDA target (sm_90, PTX).

The simulator runs kernel source as Python and accepts things the CUDA
compiler rejects (a shared-array size computed inside the kernel, say), so
this compiles each factory's default configuration to PTX with libNVVM in a
separate process (the test session itself runs on the simulator). No GPU is
needed; without libNVVM the test is skipped. When ``ptxas`` is found as
well, each PTX is assembled for sm_90 and must use no local memory (no
register spills, no stack frame).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

SKIP = 77

# Runs in a child process on the CUDA target (simulator off). Where the
# toolkit has libNVVM but not NVRTC, or there is no driver, two numba-cuda
# look-ups that only serve to find a device are answered for sm_90.
CHILD = r"""
import json, sys, types as _t
try:
    import numba.cuda.cuda_paths as cp
    try:
        cp._get_nvrtc_path()
    except Exception:
        cp._get_nvrtc_path = lambda: ("unavailable", None)
    import numba.cuda.dispatcher as disp
    try:
        disp.get_current_device()
    except Exception:
        disp.get_current_device = lambda: _t.SimpleNamespace(compute_capability=(9, 0))
    from numba import cuda, types
except Exception as e:
    print(json.dumps({"skip": f"numba-cuda internals moved: {type(e).__name__}: {e}"}))
    sys.exit(77)

from leverctl_kernels.w4a16 import (ffn_fused_silu_down, gemm_tiled, gemv_64t, gemv_dual_64t,
                                    gemv_dual_sw, gemv_sw, silu_mul)

f16, u32 = types.float16, types.uint32
V, M = f16[::1], f16[:, ::1]
W = u32[:, ::1]
jobs = {
    "gemv_sw": (gemv_sw.make_gemv_sw(), (V, W, M, V)),
    "gemv_64t": (gemv_64t.make_gemv_64t(), (V, W, M, V)),
    "gemv_dual_sw": (gemv_dual_sw.make_gemv_dual_sw(), (V, V, W, M, W, M, V)),
    "gemv_dual_64t": (gemv_dual_64t.make_gemv_dual_64t(), (V, V, W, M, W, M, V)),
    "silu_mul": (silu_mul.make_silu_mul(), (V, V, V)),
    "ffn_fused_silu_down": (ffn_fused_silu_down.make_ffn_fused_silu_down(), (V, W, M, V, V)),
    "gemm_small_m": (gemm_tiled.kernel_for(gemm_tiled.SMALL_M), (M, M, W, M)),
    "gemm_default": (gemm_tiled.kernel_for(gemm_tiled.DEFAULT), (M, M, W, M)),
}
out_dir = sys.argv[1]
done = {}
for name, (kernel, sig) in jobs.items():
    try:
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
    except Exception as e:
        msg = f"{type(e).__name__}: {e}"
        if not done and ("nvvm" in msg.lower() or "libdevice" in msg.lower()):
            print(json.dumps({"skip": "libNVVM not available: " + msg[:300]}))
            sys.exit(77)
        raise
    path = f"{out_dir}/{name}.ptx"
    open(path, "w").write(ptx)
    done[name] = path
print(json.dumps({"ptx": done}))
"""


def _cuda_home() -> str | None:
    for cand in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if cand and pathlib.Path(cand).is_dir():
            return cand
    return None


def test_kernels_compile_for_sm90(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    home = _cuda_home()
    if home:
        env.setdefault("CUDA_HOME", home)
    env.setdefault("NUMBA_FORCE_CUDA_CC", "9.0")  # no device to ask
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=600,
    )
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode == SKIP:
        pytest.skip(json.loads(last)["skip"] if last else "no CUDA compiler")
    assert proc.returncode == 0, proc.stderr[-4000:]
    ptx = json.loads(last)["ptx"]
    assert len(ptx) == 8

    ptxas = shutil.which("ptxas") or (home and shutil.which("ptxas", path=f"{home}/bin"))
    if not ptxas:
        return
    for name, path in ptx.items():
        res = subprocess.run([ptxas, "-arch=sm_90", "-v", "-o", os.devnull, path], capture_output=True, text=True)
        assert res.returncode == 0, f"{name}: {res.stderr[-2000:]}"
        info = res.stderr
        assert "0 bytes stack frame" in info, f"{name}: {info}"
        assert "0 bytes spill stores" in info and "0 bytes spill loads" in info, f"{name}: {info}"
