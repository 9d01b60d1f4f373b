"""Every kernel path: one per decision table (``selection.TABLES``), in its
order, declared as ``PATH`` in ``kernels/<family>/<path>/spec.py``, so a
path's name is where it lives (``gdn.verify``: ``kernels/gdn/verify/``).

Importing a path's spec imports numba, which must happen after the bench
has chosen between a real GPU and the CUDA simulator.
"""

from __future__ import annotations

import importlib

from .common.path import KernelPath
from .selection import TABLES


def spec_module(name: str) -> str:
    """The module that declares path ``name``."""
    return f"{__package__}.{name}.spec"


def _declared(name: str) -> KernelPath:
    return importlib.import_module(spec_module(name)).PATH


def all_paths() -> tuple[KernelPath, ...]:
    return tuple(_declared(name) for name in TABLES)


def family_paths(family: str) -> tuple[KernelPath, ...]:
    """The paths of one family (``"gdn"``), in the tables' order."""
    return tuple(p for p in all_paths() if p.family == family)


def get_path(name: str) -> KernelPath:
    if name not in TABLES:
        raise KeyError(name)
    return _declared(name)
