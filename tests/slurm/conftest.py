"""The real Slurm cluster, one per test session (see slurm_cluster.py)."""
from __future__ import annotations

import pytest


def pytest_configure(config):
    # pytest-xdist's own marker: the Slurm tests share one cluster, so they
    # run in one worker (--dist loadgroup). Declared here too, for runs without xdist.
    config.addinivalue_line("markers", "xdist_group(name): run these tests in one xdist worker")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """munged, slurmctld and slurmd for this session, stopped afterwards by
    the process ids started, however the tests end. Packages that are not
    installed fail the tests with that reason: .ci/run installs them."""
    from slurm_cluster import Cluster, SlurmUnavailable

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
