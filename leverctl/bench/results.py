"""The former home of the result files' code, now ``leverctl.bench.records``:
the names still imported from this path (tests/slurm), taken from there.
New code imports the records' modules themselves."""
from __future__ import annotations

from .records.read import load_results
from .records.rules import identity
from .records.schema import PLAN_FILE, RESULTS_FILE

__all__ = ["PLAN_FILE", "RESULTS_FILE", "identity", "load_results"]
