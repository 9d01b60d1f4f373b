"""The real Slurm cluster, one per test session (see slurm_cluster.py).

The README's set-up does not install Slurm, so on a machine without it these
tests skip with one reason. ``.ci/run`` installs Debian's ``slurm-wlm`` and
``munge`` and sets ``LEVERCTL_REQUIRE_SLURM=1``: there a missing or broken
Slurm fails them, so CI can never skip them silently.
"""

from __future__ import annotations

import os

import pytest

REQUIRED = os.environ.get("LEVERCTL_REQUIRE_SLURM") == "1"


def pytest_configure(config):
    # pytest-xdist's own marker: the Slurm tests share one cluster, so they
    # run in one worker (--dist loadgroup). Declared here too, for runs without xdist.
    config.addinivalue_line("markers", "xdist_group(name): run these tests in one xdist worker")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """munged, slurmctld and slurmd for this session, stopped afterwards by
    the process ids started, however the tests end. Without the packages
    the tests skip, saying which commands are missing, unless
    ``LEVERCTL_REQUIRE_SLURM=1`` (.ci/run) makes them fail instead."""
    from slurm_cluster import Cluster, SlurmUnavailable, missing_commands

    missing = missing_commands()
    if missing and not REQUIRED:
        pytest.skip(
            f"needs a real Slurm, and these are not installed: {', '.join(missing)} "
            "(apt-get install slurm-wlm munge, as .ci/run does)"
        )

    root = tmp_path_factory.mktemp("slurm")
    cluster = Cluster(root)
    try:
        cluster.start()
    except SlurmUnavailable as e:
        cluster.stop()
        pytest.fail(f"no Slurm to test against: {e}", pytrace=False)
    except BaseException:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()
