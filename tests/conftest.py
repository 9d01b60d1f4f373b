"""Test session set-up.

Every test runs the kernels in Numba's CUDA simulator unless
LEVERCTL_TEST_DEVICE=gpu, and the simulator must be chosen before anything
imports numba.cuda, so it is decided here, first.
"""

from __future__ import annotations

import os

import pytest

ON_GPU = os.environ.get("LEVERCTL_TEST_DEVICE") == "gpu"
# Tables are as wide as COLUMNS says; pytest-xdist's workers (and a narrow
# terminal) set it. Tests that care about width set their own.
os.environ.pop("COLUMNS", None)
if not ON_GPU:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (LEVERCTL_TEST_DEVICE=gpu)")
    skip_sim = pytest.mark.skip(reason="relies on the simulator itself (its kernel class, a fake driver, --device sim)")
    for item in items:
        if "gpu" in item.keywords and not ON_GPU:
            item.add_marker(skip_gpu)
        if "simulator_only" in item.keywords and ON_GPU:
            item.add_marker(skip_sim)
    # The few tests marked `long` first, so that under pytest-xdist (whose
    # workers take whole files in this order: see the Makefile) they overlap
    # everything else instead of running alone at the end; then the fast
    # tests, where a broken resolver fails in seconds; the simulator last.
    items.sort(key=lambda it: 0 if "long" in it.keywords else 2 if "sim" in it.keywords else 1)


@pytest.fixture(scope="session", autouse=True)
def _simulator_warp_intrinsics():
    """The simulator lacks shfl/ballot/syncwarp; install the emulation once."""
    if not ON_GPU:
        from leverctl_kernels.common import simwarp

        simwarp.install()
    yield
