"""Which variant each kernel path takes: the decision tables ``select()`` runs.

One table per kernel path, one module per family (``w4a16``, ``gdn``,
``attention``, ``decode``, ``ffn``, ``lora``, ``mamba2``, ``moe``), the rule types in
``rules``. A path's declaration takes its name, summary, levers, variants,
engines and ``select`` from its table (``common.path.declared_path``), and
``leverctl explain`` words what each lever value selects from the same
rules, so what the tool says a lever does is what the kernels do: there is
no second, hand-written description to drift.

The package is plain data and imports neither numba nor numpy, so the lever
commands (``explain``) read it cheaply. :data:`TABLES` lists every path in
the order the bench and ``leverctl kernels`` list them; the registry finds
each path's declaration at ``kernels/<family>/<path>/spec.py`` from it.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from . import attention, decode, ffn, gdn, lora, mamba2, moe, w4a16
from .rules import Case, Choice, Cond, Rule, Table

FAMILIES = (w4a16, gdn, attention, decode, ffn, lora, mamba2, moe)

TABLES: Mapping[str, Table] = MappingProxyType({t.path: t for fam in FAMILIES for t in fam.TABLES})

__all__ = ["TABLES", "Case", "Choice", "Cond", "Rule", "Table"]
