#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the GPU-only tests, then the bench at model
# shapes for every recipe in recipes/ (each engine's defaults recipe included),
# each against its engine's defaults, as JSON and Markdown, into OUTDIR.
#
#   scripts/gpu-bench.sh OUTDIR
#
# Meant for a fresh machine that may have no network: the virtual environment
# sees the packages of the python3 that creates it (numba, numba-cuda, numpy,
# typer, rich, pytest; torch if there, for the optional cuBLAS ratio), wheels
# in .whl/ are installed when that folder exists, and the project itself is
# linked from this checkout (nothing to build or download).
# The whole run is budgeted (GPU_BENCH_BUDGET seconds, default 420) so it
# fits in about eight minutes; a run that would not fit is skipped and said so.
set -uo pipefail

out=${1:?usage: scripts/gpu-bench.sh OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
budget=${GPU_BENCH_BUDGET:-420}
deadline=$((SECONDS + budget))
py=${PYTHON:-python3}
venv=${GPU_VENV:-.venv-gpu}
summary="$out/summary.txt"
: >"$summary"
status=0

say() { echo "$*" | tee -a "$summary"; }

# -- environment ---------------------------------------------------------------
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv --system-site-packages "$venv" || exit 2
  # When python3 is itself a virtual environment, --system-site-packages
  # reaches only its base interpreter: point the new one at its packages too.
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$py" -c 'import site; print("\n".join(site.getsitepackages()))' >"$site/_host_packages.pth"
fi
venv=$(cd "$venv" && pwd)
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# Wheels brought along for packages the machine lacks (it may be offline).
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check .whl/*.whl \
    >"$out/pip.log" 2>&1 || say "pip: installing .whl/ failed (see pip.log)"
fi
# The project, installed from this checkout the way pyproject maps it
# (leverctl/ and kernels/ as leverctl_kernels): links on a .pth path, so
# nothing is built and nothing is downloaded.
mkdir -p "$venv/src"
ln -sfn "$PWD/leverctl" "$venv/src/leverctl"
ln -sfn "$PWD/kernels" "$venv/src/leverctl_kernels"
echo "$venv/src" >"$site/_leverctl_checkout.pth"
"$venv/bin/python" -c 'import numba.cuda, numpy, typer, rich, pytest, leverctl, leverctl_kernels.registry' \
  2>>"$out/pip.log" || { say "missing packages (see pip.log)"; exit 2; }
lev=("$venv/bin/python" -m leverctl)
export PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi >"$out/nvidia-smi.txt" 2>&1
"$venv/bin/python" -m pip list 2>/dev/null | grep -iE '^(numba|numba-cuda|numpy|torch|cuda-bindings) ' >"$out/versions.txt"

left() { echo $((deadline - SECONDS)); }

# -- 1. GPU tests ----------------------------------------------------------------
say "== pytest -m gpu"
LEVERCTL_TEST_DEVICE=gpu timeout 150 "$venv/bin/python" -m pytest -q -m gpu -p no:cacheprovider \
  >"$out/pytest-gpu.log" 2>&1
rc=$?
say "pytest -m gpu: exit $rc ($(tail -n 1 "$out/pytest-gpu.log"))"
[ $rc -ne 0 ] && status=1

# -- 2. the bench at model shapes, per recipe ------------------------------------
# Most interesting first: a recipe that sets levers, then the plain defaults.
recipes=$(ls recipes/*.toml | grep -v -- '-defaults\.toml$'; ls recipes/*-defaults.toml)
n=$(echo "$recipes" | wc -l)
i=0
for recipe in $recipes; do
  i=$((i + 1))
  name=$(basename "$recipe" .toml)
  remaining=$(left)
  runs_left=$((n - i + 1))
  slot=$((remaining / runs_left))
  if [ "$slot" -lt 30 ]; then
    say "bench $name: skipped, ${remaining}s of the budget left"
    status=1
    continue
  fi
  [ "$slot" -gt 150 ] && slot=150
  # --time-cap: per-configuration sampling cap, so every recipe fits.
  timeout "$slot" "${lev[@]}" bench --no-env --recipe "$recipe" --device gpu --shapes model \
    --against defaults --time-cap 0.5 --format json --out "$out/bench-$name.json" 2>"$out/bench-$name.log"
  rc=$?
  case $rc in
    0) what="all pass" ;;
    1) what="some FAIL"; status=1 ;;
    124) what="timed out after ${slot}s"; status=1 ;;
    *) what="error (see bench-$name.log)"; status=1 ;;
  esac
  say "bench $name: exit $rc, $what"
  if [ -s "$out/bench-$name.json" ]; then
    "$venv/bin/python" - "$out/bench-$name.json" >"$out/bench-$name.md" <<'PY'
import json, sys
from leverctl.bench.report import render
print(render(json.load(open(sys.argv[1])), "markdown"), end="")
PY
  fi
done

# One file with every report, for a quick read.
cat "$out"/bench-*.md >"$out/ALL.md" 2>/dev/null
say "done in ${SECONDS}s; exit $status"
exit $status
