"""Project-level guards: packaging and the kernels' independence from the environment."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for top, name in (("leverctl", "leverctl"), ("kernels", "leverctl_kernels")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found <= listed, f"packages missing from pyproject: {sorted(found - listed)}"
    assert listed <= found, f"pyproject lists packages that are gone: {sorted(listed - found)}"


def _env_reads(tree: ast.AST) -> list[int]:
    """Lines that reach the process environment: os.environ, os.environb,
    os.getenv, os.putenv, or importing them by name."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "environb", "getenv", "putenv", "unsetenv"):
            hits.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(a.name in ("environ", "environb", "getenv", "putenv") for a in node.names):
                hits.append(node.lineno)
    return hits


def test_kernels_never_read_the_environment():
    offenders = {}
    for py in (ROOT / "kernels").rglob("*.py"):
        hits = _env_reads(ast.parse(py.read_text(), str(py)))
        if hits:
            offenders[str(py.relative_to(ROOT))] = hits
    assert not offenders, f"kernels must get levers as resolved values, not from the environment: {offenders}"


def test_the_environment_guard_catches_each_way_of_reading_it():
    for src in (
        "import os\nx = os.environ['A']",
        "import os\nos.getenv('A')",
        "from os import environ",
        "import os\nos.environb",
    ):
        assert _env_reads(ast.parse(src)), src
    assert not _env_reads(ast.parse("import os\nos.path.join('a')"))


def test_ci_requires_the_slurm_tests_that_a_fresh_machine_skips():
    """tests/slurm skips where Slurm is not installed (the README's set-up);
    .ci/run installs it and must make those tests required, or CI could
    skip them without anyone noticing."""
    ci = (ROOT / ".ci" / "run").read_text()
    conftest = (ROOT / "tests" / "slurm" / "conftest.py").read_text()
    assert "LEVERCTL_REQUIRE_SLURM" in conftest
    lines = [line.strip() for line in ci.splitlines()]
    required = lines.index("export LEVERCTL_REQUIRE_SLURM=1")
    assert required < lines.index("make test")


def test_a_test_that_hangs_fails_at_the_suites_limit_with_its_stack(tmp_path):
    """The suite's own limit (pyproject's ``timeout``) fails a test that
    never returns, saying where it waited, and the run goes on to the next."""
    import subprocess
    import sys

    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["timeout"] >= 300
    (tmp_path / "test_hang.py").write_text(
        "import threading\n\ndef test_waits_forever():\n    threading.Event().wait()\n\ndef test_after():\n    pass\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml")]
        + ["--rootdir", str(tmp_path), "-o", "timeout=2", str(tmp_path / "test_hang.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 failed, 1 passed" in r.stdout and "Timeout (>2.0s)" in r.stdout, r.stdout
    assert "threading.Event().wait()" in r.stdout or "test_hang.py:4" in r.stdout, r.stdout
