"""One GEMM engine: no module outside ``kernels/common/`` issues a
tensor-core instruction, an asynchronous copy, or their fences, commits and
waits of its own (the mainloops and warp products live in
``kernels/common/gemm/``, the instructions in ``common/mma.py``,
``common/wgmma.py``, ``common/cp_async.py`` and ``common/tma.py``), and no
kernel is generated from source text. Read from the sources (AST), no simulator."""

from __future__ import annotations

import ast
import re
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
COMMON = KERNELS / "common"
# what the instruction modules export that issues an instruction
ISSUES = re.compile(
    r"^(mma_(f16|bf16|s8)_\w+|mma_run|ldsm_run|load_a_ldsm|ldmatrix\w*|wgmma_\w+|wait_acc|fence_proxy_async"
    r"|cp_async_\w+|commit_group|wait_group\w*|wait_all|mma_n|mbar_\w+|load_2d|tensormap_acquire)$"
)
PTX = re.compile(
    r"(mma\.sync\.aligned|wgmma\.\w+\.sync|cp\.async\.(ca|cg|commit|wait|bulk)|ldmatrix\.sync|fence\.proxy|mbarrier\.)"
)


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ISSUES.match(node.attr):
            out.append(f"{path.relative_to(KERNELS)}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[-1] in ("mma", "wgmma", "tma"):
            out.extend(
                f"{path.relative_to(KERNELS)}:{node.lineno}: imports {a.name}"
                for a in node.names
                if ISSUES.match(a.name)
            )
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exec", "compile"):
            out.append(f"{path.relative_to(KERNELS)}:{node.lineno}: {node.func.id}()")
    return out


def _ptx_in_strings(path: Path) -> list[str]:
    """Inline PTX in a string literal (docstrings and comments aside)."""
    tree = ast.parse(path.read_text(), str(path))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node) is not None:
            docs.add(id(node.body[0].value))
    return [
        f"{path.relative_to(KERNELS)}:{n.lineno}: {n.value[:60]!r}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in docs
        and PTX.search(n.value)
        and ("{" in n.value or ";" in n.value)
    ]


def _outside_common():
    return [p for p in sorted(KERNELS.rglob("*.py")) if COMMON not in p.parents]


def test_no_module_outside_common_issues_an_mma_copy_fence_commit_or_wait():
    bad = [o for p in _outside_common() for o in _offences(p) + _ptx_in_strings(p)]
    assert not bad, "\n".join(bad)


def test_the_rule_sees_an_offence(tmp_path):
    """The scan finds what it forbids: a family's own mma.sync call, an
    async-copy commit, an inline wgmma statement and its own TMA copy and
    mbarrier wait (one imported by name)."""
    src = tmp_path / "own_loop.py"
    src.write_text(
        "from ..common import mma, cp_async as ca\n"
        "def k(a, b, c):\n"
        "    d = mma.mma_f16_16816(a, b, c)\n"
        "    ca.commit_group()\n"
        "    s = 'wgmma.fence.sync.aligned;'\n"
        "from ..common.tma import mbar_wait\n"
        "def t(tm, x, bar):\n"
        "    tma.load_2d(0, tm, 0, x, 0, 0, bar)\n"
    )
    global KERNELS
    old, KERNELS = KERNELS, tmp_path
    try:
        found = _offences(src) + _ptx_in_strings(src)
    finally:
        KERNELS = old
    assert len(found) == 5, found
