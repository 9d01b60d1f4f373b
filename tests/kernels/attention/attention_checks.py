"""What the attention families' simulator tests share: a shorter switch
interval for their barrier-heavy blocks, and a test-local tolerance check."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from leverctl_kernels.common.path import Tolerance


def compare(got, ref, tol: Tolerance) -> tuple[bool, float, float]:
    """Every element finite, relative L2 and max abs error within ``tol``."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if not np.all(np.isfinite(got)):
        return False, math.inf, math.inf
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    mx = float(np.max(np.abs(got - ref)))
    return rel <= tol.rel and mx <= tol.abs_bound(ref), rel, mx
