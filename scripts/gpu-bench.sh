#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the bench at model shapes for every recipe
# in recipes/ (each against its engine's defaults), in one process, then the
# GPU-only tests, everything into OUTDIR.
#
#   scripts/gpu-bench.sh OUTDIR
#
# Made for a bare machine with no network: only its python3 (3.12) and the
# wheels this checkout brings in .whl/ (`make wheels`, run where there is a
# network, puts every wheel scripts/gpu-wheels.txt lists there). Nothing here
# reaches a package index: pip runs with --no-index (PIP_NO_INDEX too), from
# its own wheel if the machine's python has no pip. With the whole set the
# environment is those wheels alone; with only some (the pieces a machine
# lacks), or none, it is the python's own packages plus them.
#
# Order: the interpreter; the environment (.venv-gpu, offline); one line per
# missing piece (Python version, every import, the CUDA libraries); then
# leverctl.bench.campaign, whose first kernel is one thread (a toolkit the
# driver cannot load stops it there, saying what to pin) and which appends
# every record to OUTDIR/records.jsonl as it finishes; then pytest -m gpu.
#
# OUTDIR: summary.txt (what happened, one line per step, and the device
# figures: copy bandwidth, FP32 rate, BF16/FP8 tensor-core peaks and
# cuBLAS's BF16 GEMM rate, measured once before any kernel), device.json,
# records.jsonl, bench-RECIPE.json/.md, ALL.md, campaign.log, bench-ncu.json, ncu.log, ncu/,
# bench-per-sequence.json, per-sequence.log, gemm-tiles.json, gemm-tiles.log,
# pytest-tc.log, pytest-gpu.log,
# pip.log, nvidia-smi.txt, versions.txt; and all of it packed as OUTDIR.tar.gz.
#
# GPU_SYSTEM_PACKAGES=1: let the python's own packages into .venv-gpu too.
# GPU_BENCH_BUDGET seconds in all (default 420), GPU_TEST_BUDGET of them for
# the tests (default 120), GPU_NCU_BUDGET for bench --profile --ncu on
# GPU_NCU_KERNELS (default 90 s on w4a16.gemv and gdn.decode); GPU_PERSEQ_BUDGET (default 60) for
# decode.per_sequence's per-sequence step against the batched one; GPU_TILES_BUDGET (default 90) for
# scripts/gemm-tile-ab.py (the GEMM engine's 64-row tile on one warpgroup against two); GPU_TC_BUDGET (default 90) and
# GPU_TC_WORKERS (pytest-xdist workers, default 8) for the tensor-core
# primitives' tests (GPU_TC_TESTS: other test paths), run on the GPU before the bench. GPU_BENCH_DEVICE=sim and GPU_BENCH_KERNELS="w4a16.gemv ..."
# try the whole script without a GPU, at smoke shapes in the simulator.
set -uo pipefail

out=${1:?usage: scripts/gpu-bench.sh OUTDIR}
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)  # OUTDIR as the caller meant it, before moving to the checkout
cd "$(dirname "$0")/.."
budget=${GPU_BENCH_BUDGET:-420}
test_budget=${GPU_TEST_BUDGET:-120}
device=${GPU_BENCH_DEVICE:-gpu}
py=${PYTHON:-python3}
venv=${GPU_VENV:-.venv-gpu}
wheels=scripts/gpu-wheels.txt
summary="$out/summary.txt"
: >"$summary"
status=0
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONUNBUFFERED=1
unset NUMBA_ENABLE_CUDASIM

say() { echo "$*" | tee -a "$summary"; }

# -- 0. the interpreter ----------------------------------------------------------
if ! command -v "$py" >/dev/null; then
  say "preflight: no $py on PATH (set PYTHON=python3.12)"; exit 2
fi
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  say "preflight: $("$py" -V 2>&1) at $(command -v "$py"): leverctl needs Python 3.11 or later, and the wheels in .whl/ are for $(sed -n 's/^# python: *//p' $wheels)"
  exit 2
fi

# .whl/ may hold the whole listed set, or only the pieces a machine lacks.
have_wheels=0 complete=0
if ls .whl/*.whl >/dev/null 2>&1; then
  have_wheels=1
  PYTHONPATH=. "$py" -m leverctl.bench.preflight --wheels $wheels --wheel-dir .whl >"$out/wheels-missing.txt" 2>&1 \
    && complete=1
fi
want_py=$(sed -n 's/^# python: *//p' $wheels)
if [ $complete = 1 ] && [ "$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$want_py" ]; then
  say "preflight: $("$py" -V 2>&1) at $(command -v "$py"): the wheels in .whl/ are for Python $want_py (set PYTHON=python$want_py)"
  exit 2
fi

# -- 1. the environment, offline ---------------------------------------------------
if [ ! -x "$venv/bin/python" ]; then
  # The whole set: a venv of its own, so nothing the machine has installed
  # (another numba, CUDA 13 bindings) can stand in for the pinned wheels.
  # Otherwise the python's own packages, with whatever wheels .whl/ adds.
  # GPU_SYSTEM_PACKAGES=1 lets the machine's packages in anyway (torch, for
  # the optional cuBLAS reference); the wheels installed still come first.
  opts=(); [ $complete = 0 ] || [ "${GPU_SYSTEM_PACKAGES:-0}" = 1 ] && opts=(--system-site-packages)
  "$py" -m venv "${opts[@]}" "$venv" >>"$out/pip.log" 2>&1 \
    || "$py" -m venv "${opts[@]}" --without-pip "$venv" >>"$out/pip.log" 2>&1 \
    || { say "preflight: $py -m venv failed (see pip.log)"; exit 2; }
  if [ ${#opts[@]} -gt 0 ]; then
    # When python3 is itself a virtual environment, --system-site-packages
    # reaches only its base interpreter: add its packages too, as site
    # directories, so their own .pth files run (numba-cuda's is the one that
    # makes `numba.cuda` numba-cuda rather than numba's old built-in copy).
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$py" -c 'import site; print("import site; list(map(site.addsitedir, %r))" % site.getsitepackages())' \
      >"$site/_host_packages.pth"
  fi
fi
venv=$(cd "$venv" && pwd)
vpy="$venv/bin/python"
site=$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ $have_wheels = 1 ]; then
  # pip from its own wheel when the venv has none (a python without ensurepip).
  pipwhl=$(ls .whl/pip-*.whl 2>/dev/null | head -n 1)
  if "$vpy" -m pip --version >/dev/null 2>&1; then pip=("$vpy" -m pip); else pip=("$vpy" "$pipwhl/pip"); fi
  if [ $complete = 1 ]; then
    # Requirements resolved from .whl/ alone: a list that misses one fails here.
    if "${pip[@]}" install -q --no-index --no-cache-dir --find-links .whl -r $wheels >>"$out/pip.log" 2>&1; then
      say "environment: $(grep -Evc '^\s*(#|$)' $wheels) wheels from .whl/, offline"
    else
      say "environment: installing .whl/ offline failed: $(grep -E 'ERROR' "$out/pip.log" | tail -n 1)"
    fi
  # --ignore-installed: a wheel here wins over another version the python
  # has (numba 0.68 cannot compile kernels against numpy 2.5, for one).
  elif "${pip[@]}" install -q --no-index --no-cache-dir --no-deps --ignore-installed .whl/*.whl >>"$out/pip.log" 2>&1; then
    say "environment: $(ls .whl/*.whl | wc -l) wheels from .whl/ over what $py has installed, offline"
  else
    say "environment: installing .whl/ offline failed: $(grep -E 'ERROR' "$out/pip.log" | tail -n 1)"
  fi
else
  say "environment: no .whl/ here; using what $py has installed (make wheels brings the rest)"
fi
# The project, from this checkout the way pyproject maps it (leverctl/, and
# kernels/ as leverctl_kernels), through links on a .pth path: nothing to
# build, nothing to download.
mkdir -p "$venv/src"
ln -sfn "$PWD/leverctl" "$venv/src/leverctl"
ln -sfn "$PWD/kernels" "$venv/src/leverctl_kernels"
echo "$venv/src" >"$site/_leverctl_checkout.pth"

# -- 2. one line per missing piece ---------------------------------------------------
if ! "$vpy" -m leverctl.bench.preflight --wheels $wheels >>"$summary" 2>&1; then
  grep '^leverctl: preflight' "$summary"
  exit 2
fi
tail -n 1 "$summary"
command -v nvidia-smi >/dev/null && nvidia-smi >"$out/nvidia-smi.txt" 2>&1
{ "$vpy" -m pip list 2>/dev/null || "$vpy" "${pipwhl:-}/pip" list 2>/dev/null; } \
  | grep -iE '^(numba|numba-cuda|numpy|llvmlite|cuda-bindings|cuda-core|nvidia-[a-z0-9-]+|cuda-toolkit|torch) ' >"$out/versions.txt"

# -- 2b. the tensor-core primitives on the hardware --------------------------------------
# The simulator twins of mma.sync, wgmma and the conversions, and the GEMMs
# built on them, were written from the PTX ISA: their tests, run here on
# the GPU against the same float64 references, say whether the hardware
# agrees (fragment layouts, descriptors, rounding). First, and short: a
# disagreement explains any FAIL the bench then shows.
if [ "$device" = gpu ]; then
  tc_budget=${GPU_TC_BUDGET:-90}
  say "== tensor-core primitives on the GPU, ${tc_budget}s"
  # Several workers, each with its own CUDA context: an illegal address in
  # one test ends only its worker's context (on the first H200 run, a
  # serial run lost every test after the first fault), and the compiles
  # share the machine's cores.
  workers=(); "$vpy" -c 'import xdist' 2>/dev/null && workers=(-n "${GPU_TC_WORKERS:-8}")
  # GPU_TC_TESTS: other test paths (and pytest options) instead, e.g.
  # "tests/kernels --ignore-glob=*_ptx.py" for every kernel test on the GPU.
  # -v: one line per finished test, so a run cut at the budget keeps them.
  tc_tests=${GPU_TC_TESTS:-tests/kernels/common/test_mma.py tests/kernels/common/test_wgmma.py tests/kernels/common/test_cvt.py
    tests/kernels/w4a16/test_w4a16_wgmma.py tests/kernels/w4a16/test_w4a16_gemm_tc.py
    tests/kernels/common/test_swizzle.py tests/kernels/common/test_cp_async.py tests/kernels/common/test_tma.py tests/kernels/common/test_dynsmem.py
    tests/kernels/common/test_gemm_wgmma_async.py tests/kernels/common/test_gemm_mma_sync.py
    tests/kernels/common/test_gemm_grouped.py tests/kernels/w4a16/test_w4a16_mma.py}
  # shellcheck disable=SC2086  # a list of paths and options, split on purpose
  LEVERCTL_TEST_DEVICE=gpu timeout -k 10 "$tc_budget" "$vpy" -m pytest -v -rfE -p no:cacheprovider "${workers[@]}" \
    $tc_tests >"$out/pytest-tc.log" 2>&1
  trc=$?
  say "tensor-core primitives: exit $trc ($(tail -n 1 "$out/pytest-tc.log"); $(grep -c ' PASSED ' "$out/pytest-tc.log") passed, $(grep -c ' FAILED ' "$out/pytest-tc.log") failed as they finished)"
  [ $trc -ne 0 ] && status=1
fi

# -- 3. the bench: every recipe, one process ---------------------------------------------
rm -f "$out/records.jsonl" "$out"/bench-*.json "$out"/bench-*.md "$out/left.txt"
kernels=(); for k in ${GPU_BENCH_KERNELS:-}; do kernels+=(--kernel "$k"); done
campaign() {  # campaign BUDGET [RECIPE...]
  local b=$1; shift
  # The campaign keeps to its budget; timeout is the last resort (SIGTERM:
  # the finished records are on disk, the recipe in flight is written).
  timeout -k 20 $((b + 90)) "$vpy" -m leverctl.bench.campaign "$out" "$@" --device "$device" --budget "$b" \
    --left "$out/left.txt" "${kernels[@]}" 2>&1 | tee -a "$out/campaign.log" | grep --line-buffered -E '^leverctl'
  return "${PIPESTATUS[0]}"
}
perseq_budget=${GPU_PERSEQ_BUDGET:-60}
tiles_budget=${GPU_TILES_BUDGET:-90}
reserved=$((test_budget + ${GPU_NCU_BUDGET:-90} + perseq_budget + tiles_budget))  # the steps after the campaign
bench_budget=$((budget - reserved - SECONDS))
# A slow install must not leave the bench nothing: it gets a minute at least.
[ $bench_budget -lt 60 ] && bench_budget=60
say "== bench: every recipe in one process, ${bench_budget}s"
campaign "$bench_budget"
rc=$?
# A lost CUDA context ends that process; a fresh one continues with the rest.
if [ -s "$out/left.txt" ] && [ $((budget - reserved - SECONDS)) -ge 60 ]; then
  mapfile -t rest <"$out/left.txt"
  rm -f "$out/left.txt"
  say "bench: the CUDA context was lost; a fresh process runs ${rest[*]}"
  campaign $((budget - reserved - SECONDS)) "${rest[@]}"
  rc2=$?; [ $rc2 -gt $rc ] && rc=$rc2
fi
case $rc in
  0) what="all pass" ;;
  1) what="some FAIL or stopped early" ;;
  2) what="could not start (see the line above)" ;;
  124|137) what="killed at the time limit" ;;
  130) what="interrupted" ;;
  *) what="error (see campaign.log)" ;;
esac
# The device figures (copy, FP32, the BF16 and FP8 tensor-core peaks, cuBLAS),
# measured once by the first campaign process, then each recipe's counts.
grep -m 1 -E '^leverctl campaign: device figures' "$out/campaign.log" >>"$summary"
grep -E '^leverctl campaign: [^ ]+: [0-9]+ pass' "$out/campaign.log" >>"$summary"
say "bench: exit $rc, $what; $(wc -l <"$out/records.jsonl" 2>/dev/null || echo 0) records in records.jsonl"
[ $rc -ne 0 ] && status=1
cat "$out"/bench-*.md >"$out/ALL.md" 2>/dev/null

# -- 3b. profiles and hardware counters on a handful of paths ------------------------------
# bench --profile --ncu: each record's machine-code and simulated memory
# figures beside Nsight Compute's counters for the same variant (when ncu is
# on PATH; one line says so when it is not), so this run checks the
# simulator's sector and bank figures against the hardware's. ncu's raw CSV
# per variant goes to OUTDIR/ncu/. SIGTERM at the budget keeps the finished
# records in bench-ncu.json.
if [ $rc -ne 2 ]; then
  ncu_budget=${GPU_NCU_BUDGET:-90}
  ncu_kernels=(); for k in ${GPU_NCU_KERNELS:-w4a16.gemv gdn.decode}; do ncu_kernels+=(--kernel "$k"); done
  say "== bench --profile --ncu ${GPU_NCU_KERNELS:-w4a16.gemv gdn.decode}, ${ncu_budget}s"
  LEVERCTL_NCU_LOGS="$out/ncu" timeout -k 10 "$ncu_budget" "$vpy" -m leverctl bench --device "$device" \
    "${ncu_kernels[@]}" --profile --ncu -o "$out/bench-ncu.json" >"$out/ncu.log" 2>&1
  nrc=$?
  say "bench --profile --ncu: exit $nrc; $(grep -E -- '--ncu|wrote' "$out/ncu.log" | tail -n 1)"
fi

# -- 3c. the per-sequence decode against the batched one ----------------------------------
# No recipe turns Metrale's per-sequence decode levers on, so the campaign
# measures decode.per_sequence batched only. Here both models' steps run
# once per sequence (hc_perseq_decode on, and hc_mult = 1 for the run: no
# recipe's model has hyper-connections) against the defaults' batched step:
# the launch cost the batch amortises, per record (8 sequences: 8 times the
# launches; a short budget, so both runs finish).
if [ $rc -ne 2 ]; then
  say "== bench decode.per_sequence, per_sequence against batched, ${perseq_budget}s"
  timeout -k 10 "$perseq_budget" "$vpy" -m leverctl bench -e metrale --no-env --device "$device" \
    --kernel decode.per_sequence --set METRALE_HC_PERSEQ_DECODE=1 --axis hc_mult=1 --axis n=8 --against defaults \
    --time-cap 0.5 -o "$out/bench-per-sequence.json" >"$out/per-sequence.log" 2>&1
  src=$?
  say "bench decode.per_sequence: exit $src; $(grep -E 'wrote|pass' "$out/per-sequence.log" | tail -n 1)"
fi

# -- 3d. the GEMM engine's 64-row tile on one warpgroup against two ---------------------------
# The dense GEMMs' 64-row tiles run two warpgroups, one on each column half
# (half the accumulators and staging a thread, an instruction half as wide);
# both layouts of bf16_v1's GEMM at a Qwen3-8B FFN shape, each with its
# activations copied by TMA and by cp.async (four kernels to compile, then
# ~3 s of samples each), timed alike, their outputs compared: which layout
# and which copies the engine should keep.
if [ "$device" = gpu ] && [ $rc -ne 2 ]; then
  say "== GEMM tiles: one warpgroup against two on the 64-row tile, ${tiles_budget}s"
  timeout -k 10 "$tiles_budget" "$vpy" scripts/gemm-tile-ab.py -o "$out/gemm-tiles.json" >"$out/gemm-tiles.log" 2>&1
  say "gemm tiles: exit $?"
  cat "$out/gemm-tiles.log" >>"$summary"
fi

# -- 4. the GPU-only tests -------------------------------------------------------------------
if [ "$device" = gpu ] && [ $rc -ne 2 ]; then
  t=$((budget - SECONDS)); [ $t -lt 60 ] && t=60
  say "== pytest -m gpu, ${t}s"
  LEVERCTL_TEST_DEVICE=gpu timeout -k 10 "$t" "$vpy" -m pytest -q -m gpu -p no:cacheprovider \
    >"$out/pytest-gpu.log" 2>&1
  prc=$?
  say "pytest -m gpu: exit $prc ($(tail -n 1 "$out/pytest-gpu.log"))"
  [ $prc -ne 0 ] && status=1
fi

say "done in ${SECONDS}s; exit $status"
# The whole of OUTDIR as one file, for copying off the machine.
tar czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null \
  && echo "packed: $out.tar.gz"
exit $status
