#!/usr/bin/env bash
# On a machine WITH a network: download every wheel scripts/gpu-wheels.txt
# lists, for CPython 3.12 on x86-64 Linux, into .whl/ (git-ignored), so that
# the checkout can be copied to a GPU machine that has no package index.
# Then prove the set complete: resolve it for that target from .whl/ alone,
# as scripts/gpu-bench.sh will install it there.
#
#   scripts/fetch-wheels.sh [WHEEL_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.whl}
list=${WHEEL_LIST:-scripts/gpu-wheels.txt}
py=${PYTHON:-python3}
pyver=$(sed -n 's/^# python: *//p' "$list")
# Each manylinux tag pip should accept; pip matches these exactly.
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux2010_x86_64
           --platform manylinux_2_12_x86_64 --platform any)
target=(--only-binary=:all: --python-version "$pyver" --implementation cp "${platforms[@]}")

mkdir -p "$dir"
# --no-deps: exactly the listed set, nothing the resolver would add on its own.
"$py" -m pip download -q --disable-pip-version-check --no-deps "${target[@]}" -d "$dir" -r "$list"
# Wheels of other versions, left by an older list, would make two of a name.
"$py" - "$dir" "$list" <<'PY'
import pathlib, re, sys
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
lines = pathlib.Path(sys.argv[2]).read_text().splitlines()
wanted = {norm(a) + "==" + b for a, b in (l.split("#")[0].strip().split("==") for l in lines if l.split("#")[0].strip())}
for whl in pathlib.Path(sys.argv[1]).glob("*.whl"):
    name, version = whl.name.split("-")[:2]
    if norm(name) + "==" + version not in wanted:
        print(f"removing {whl.name} (not in {sys.argv[2]})")
        whl.unlink()
PY
# The proof: every requirement, and every requirement of a requirement,
# resolves from .whl/ alone for the target.
# A partial list (scripts/gpu-wheels-lean.txt) leans on the GPU machine's own
# packages for the rest, so only its own entries are checked, not their needs.
if grep -q '^# partial:' "$list"; then
  n=$(ls "$dir"/*.whl | wc -l)
  echo "$dir: $n wheels, $(du -sh "$dir" | cut -f1), the partial set $list names"
else
  "$py" -m pip install -q --disable-pip-version-check --dry-run --ignore-installed --no-index --find-links "$dir" \
    "${target[@]}" --target "$(mktemp -d)" -r "$list"
  n=$(ls "$dir"/*.whl | wc -l)
  echo "$dir: $n wheels, $(du -sh "$dir" | cut -f1), complete for CPython $pyver on x86-64 Linux"
fi
want=$(grep -Evc '^\s*(#|$)' "$list")
[ "$n" -eq "$want" ] || { echo "$dir: $n wheels but $list names $want"; exit 1; }
