"""The GDN kernels compile for sm_90 (H200) at the model shape, without a GPU.

The simulator runs the kernels' Python, not their compiled form: a kernel
that types badly on the CUDA target, falls into fp64 arithmetic, spills, or
asks for more registers than its block size allows would pass every
simulator test. Where libNVVM is installed (a CUDA toolkit, or the
``nvidia-nvvm`` and ``nvidia-cuda-nvrtc`` wheels with ``CUDA_HOME`` pointing
at them) this compiles every GDN kernel to PTX for compute capability 9.0 in
a subprocess (the test session itself is pinned to the simulator) and, when
``ptxas`` is also found, checks registers, spills and shared memory.
Elsewhere it skips.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, re, shutil, subprocess, sys, tempfile, os
from pathlib import Path
from numba import cuda, types
def _probe(a):
    a[0] = 1.0
try:
    cuda.compile_ptx(_probe, "void(float32[:])", cc=(9, 0))
except Exception as e:  # no libNVVM (or NVRTC) here
    print(json.dumps({"skip": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})); sys.exit(0)
import numba.cuda.dispatcher as disp

class _SM90:  # device functions ask the current device for its CC; there is none
    compute_capability = (9, 0)
disp.get_current_device = lambda: _SM90()

from leverctl_kernels.gdn import (_layout, _prefill, conv_fused, conv_separate, decode_batched,
                                  decode_per_sequence, verify_recurrent, verify_wy17, verify_wyn)
D, C, W = 128, 64, 4
A = lambda dt, nd: types.Array(dt, nd, "C")
f16, f32, i32 = types.float16, types.float32, types.int32
tile = _layout.tile_for(D, D)
tok = (A(f16, 3), A(f16, 3), A(f16, 3), A(f32, 2), A(f32, 2), A(f32, 3), A(f32, 3))
tokflat = tok[:5] + (A(f32, 1), A(f32, 3))
dec = (A(f16, 3), A(f16, 3), A(f16, 3), A(f32, 2), A(f32, 2), A(i32, 1), A(f32, 1), A(f32, 3))
decf = (A(f32, 3),) * 3 + dec[3:]
jobs = [  # name, dispatcher, signature, threads per block
    ("prefill_regresident", _prefill.make_prefill(C, D, D, True), tok, tile.threads),
    ("prefill_global_state", _prefill.make_prefill(C, D, D, False), tok, tile.threads),
    ("verify_recurrent_t17", verify_recurrent.make_verify_recurrent(17, D, D), tokflat, tile.threads),
    ("verify_recurrent_t5", verify_recurrent.make_verify_recurrent(5, D, D), tokflat, tile.threads),
    ("verify_wyn_t17", verify_wyn.make_verify_wyn(17, D, D), tok, tile.threads),
    ("verify_wyn_t5", verify_wyn.make_verify_wyn(5, D, D), tok, tile.threads),
    ("verify_wy17", verify_wy17.make_verify_wy17(D, D), tok, tile.threads),
    ("decode_batched", decode_batched.make_decode_batched(D, D), dec, tile.threads),
    ("decode_batched_f32", decode_batched.make_decode_batched(D, D), decf, tile.threads),
    ("decode_per_sequence", decode_per_sequence.make_decode_per_sequence(D, D), (types.int64,) + dec, tile.threads),
    ("fused_conv", conv_fused.make_fused_conv(W, D, D),
     (A(f16, 2), A(f16, 2), A(f16, 3), A(f32, 2), A(f32, 2), A(f16, 3), A(f32, 1), A(i32, 1), A(f32, 1), A(f32, 3)),
     conv_fused.threads(D, D)),
    ("conv_silu", conv_separate.make_conv_kernel(W, D, D),
     (A(f16, 2), A(f16, 2), A(f16, 3), A(i32, 1), A(f32, 3), A(f32, 3), A(f32, 3)), conv_separate.CONV_THREADS),
    ("gated_rmsnorm", conv_separate.make_norm_kernel(D), (A(f32, 3), A(f16, 3), A(f32, 1), A(f32, 3)), D),
]
home = os.environ.get("CUDA_HOME", "")
ptxas = shutil.which("ptxas") or next((str(p) for p in [Path(home, "bin", "ptxas")] if home and p.exists()), None)
out, tmp = {}, tempfile.mkdtemp()
for name, kern, sig, threads in jobs:
    lb = kern.targetoptions.get("launch_bounds")
    ptx, _ = cuda.compile_ptx(kern.py_func, sig, cc=(9, 0), launch_bounds=lb)
    rec = {"threads": threads, "f64": len(re.findall(r"\.f64\b", ptx))}
    if ptxas:
        path = Path(tmp, name + ".ptx"); path.write_text(ptx)
        r = subprocess.run([ptxas, "-arch=sm_90", "-v", str(path), "-o", os.devnull], capture_output=True, text=True)
        log = r.stderr
        rec["rc"] = r.returncode
        rec["regs"] = int(re.search(r"Used (\d+) registers", log).group(1)) if "Used" in log else None
        rec["spill"] = sum(int(x) for x in re.findall(r"(\d+) bytes spill", log))
        m = re.search(r"(\d+) bytes smem", log)
        rec["smem"] = int(m.group(1)) if m else 0
    out[name] = rec
print(json.dumps({"ptxas": bool(ptxas), "kernels": out}))
'''


@pytest.fixture(scope="module")
def compiled():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in res:
        pytest.skip(f"no libNVVM to compile for sm_90 ({res['skip'][:120]})")
    return res


def test_every_gdn_kernel_compiles_for_sm90_in_fp32(compiled):
    for name, rec in compiled["kernels"].items():
        assert rec["f64"] == 0, f"{name}: fp64 arithmetic in the PTX"


def test_registers_spills_and_shared_memory_fit_the_launch(compiled):
    if not compiled["ptxas"]:
        pytest.skip("ptxas not found (PATH or $CUDA_HOME/bin)")
    for name, rec in compiled["kernels"].items():
        assert rec["rc"] == 0, name
        assert rec["spill"] == 0, f"{name}: {rec['spill']} bytes of spills"
        assert rec["regs"] * rec["threads"] <= 65536, f"{name}: {rec['regs']} registers x {rec['threads']} threads"
        assert rec["smem"] <= 48 * 1024, f"{name}: {rec['smem']} bytes of static shared memory"
