# Two entry points for a fresh machine: `make show` and `make test` create the
# virtual environment on first use, so nothing has to be installed by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The CUDA simulator is slow: simulator tests use tiny odd shapes, and pytest
# runs them after the fast tests (see tests/conftest.py); the slowest 15 are
# listed at the end so a test that grows is seen before the suite outgrows CI.
# One pytest-xdist worker per core, each taking whole files (module fixtures
# run once) in the order tests/conftest.py sorts them (no reordering by size).
PYTEST_WORKERS ?= auto
XDIST := -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
PYTEST_ARGS ?=

.PHONY: show lint test test-fast docs profiles bench sweep gpu-bench wheels wheels-lean clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

show: $(STAMP)
	$(BIN)/leverctl show

# Lint and formatting first (seconds), then the suite.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest -q $(XDIST) --durations=15 $(PYTEST_ARGS)

# The generated lever references (tests/catalog/test_reference.py fails when they are stale).
docs: $(STAMP)
	$(BIN)/leverctl catalog doc -e atlas -f markdown -o docs/levers-atlas.md
	$(BIN)/leverctl catalog doc -e metrale -f markdown -o docs/levers-metrale.md

# ptxas, libNVVM, nvdisasm and cuobjdump from NVIDIA's wheels (the profile extra):
# the committed profiles name the releases they were made with.
$(VENV)/.profile-tools: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,profile]'
	touch $@

# The committed profiles the roofline tests hold (tests/profile/test_roofline.py
# fails when a kernel's source no longer matches them): every variant of both
# engines compiled for sm_90a and traced, then the README's tables from them.
# Minutes from cold (the compiles and traces are cached), seconds warm.
profiles: $(VENV)/.profile-tools
	$(BIN)/leverctl profile -e atlas --all-variants --arch sm_90a --summary -f json -o docs/profiles/atlas-sm90a.json
	$(BIN)/leverctl profile -e metrale --all-variants --arch sm_90a --summary -f json -o docs/profiles/metrale-sm90a.json
	$(BIN)/python scripts/profile-tables.py

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m "not sim and not gpu" $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/leverctl bench

# Resumable: a second `make sweep` runs only what the first left undone. The
# sweep refuses --resume where there is nothing to resume (no plan.json), so
# the first run starts it without.
SWEEP_OUT ?= results/sweep-smoke
sweep: $(STAMP)
	$(BIN)/leverctl sweep --device sim --shapes smoke --out $(SWEEP_OUT) \
	  $(if $(wildcard $(SWEEP_OUT)/plan.json),--resume)

# On a machine with an NVIDIA GPU: the bench at model shapes for every recipe,
# then the GPU-only tests; everything lands under $(GPU_OUT). It needs no
# network and not the .venv above (whose stamp runs pip against an index):
# the script makes .venv-gpu from this python3 and the wheels in .whl/.
GPU_OUT ?= results/gpu
gpu-bench:
	bash scripts/gpu-bench.sh $(GPU_OUT)

# On a machine with a network, before copying the checkout to a GPU machine
# that has none: every wheel scripts/gpu-wheels.txt lists, for CPython 3.12
# on x86-64 Linux, into .whl/ (git-ignored), checked complete.
wheels:
	PYTHON=$(PY) bash scripts/fetch-wheels.sh .whl

# The same for a GPU machine whose python3 has numba, numba-cuda and the CUDA
# libraries already (scripts/gpu-wheels-lean.txt says which): 19 MB, not 285.
wheels-lean:
	rm -rf .whl && WHEEL_LIST=scripts/gpu-wheels-lean.txt PYTHON=$(PY) bash scripts/fetch-wheels.sh .whl

clean:
	rm -rf $(VENV) .venv-gpu build *.egg-info .pytest_cache .hypothesis
