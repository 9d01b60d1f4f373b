"""Fixtures for the bench's tests; the fake kernel paths live in bench_fakes."""

from __future__ import annotations

import bench_fakes
import pytest


@pytest.fixture
def saxpy():
    return bench_fakes.saxpy_path()


@pytest.fixture
def device():
    return bench_fakes.current_device()
