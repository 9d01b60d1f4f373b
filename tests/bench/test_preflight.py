"""What a bare GPU machine lacks, one line per missing piece, and the
offline GPU run's files: the wheel list, the script, the Make targets."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from leverctl.bench import preflight as pf

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / "scripts" / "gpu-wheels.txt"


def _missing(name):
    def check():
        raise ModuleNotFoundError(f"No module named '{name}'")

    return check


def test_everything_present_is_no_line():
    assert pf.problems([pf.Need("json", "json", lambda: None)], version=(3, 12, 3), wheels=WHEELS) == []


def test_each_missing_piece_is_one_line_naming_the_wheel_that_brings_it():
    needs = [
        pf.Need("numba", "numba", _missing("numba")),
        pf.Need("json", "json", lambda: None),
        pf.Need("libNVVM", "nvidia-cuda-nvcc-cu12", _missing("nvvm")),
    ]
    lines = pf.problems(needs, version=(3, 12, 3), wheels=WHEELS)
    assert len(lines) == 2
    assert lines[0].startswith("numba is missing: ModuleNotFoundError: No module named 'numba'; it comes from numba==")
    assert "make wheels" in lines[0]
    assert "it comes from nvidia-cuda-nvcc-cu12==12." in lines[1]


def test_an_old_python_is_a_line_of_its_own():
    assert pf.problems([], version=(3, 10, 12)) == ["Python 3.10.12: leverctl needs Python 3.11 or later"]


def test_a_python_the_wheels_were_not_built_for_is_a_line_of_its_own():
    lines = pf.problems([], version=(3, 11, 7), wheels=WHEELS)
    assert lines == [
        f"Python 3.11.7: the wheels {WHEELS} lists are built for Python 3.12; run with that python (PYTHON=python3.12)"
    ]


def test_the_command_prints_each_line_on_stderr_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(
        pf, "NEEDS", (pf.Need("numba", "numba", _missing("numba")), pf.Need("rich", "rich", _missing("rich")))
    )
    assert pf.main([]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" is missing")[0] for line in err] == ["leverctl: preflight: numba", "leverctl: preflight: rich"]


def test_the_preflight_of_this_environment_finds_every_python_package():
    """Here the CUDA libraries may be missing (no GPU toolkit wheels are
    needed for the simulator); every other piece must be found, and whatever
    is missing is one line each."""
    p = subprocess.run([sys.executable, "-m", "leverctl.bench.preflight"], capture_output=True, text=True, timeout=120)
    lines = p.stderr.splitlines()
    assert p.returncode == (2 if lines else 0), p.stderr
    assert all(
        re.match(
            r"leverctl: preflight: (libNVVM|libdevice|nvJitLink|NVRTC) is missing: .*; it comes from "
            r"nvidia-",
            line,
        )
        for line in lines
    ), p.stderr
    if not lines:
        assert p.stdout.startswith("preflight: Python ") and f"all {len(pf.NEEDS)} pieces" in p.stdout


# -- the wheel list: complete, one version each, for the python it says -------


def _pins() -> dict[str, str]:
    return pf.wheel_pins(WHEELS)[1]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_wheel_list_pins_one_version_of_each_wheel_for_python_3_12():
    lines = [ln.split("#")[0].strip() for ln in WHEELS.read_text().splitlines()]
    names = [_norm(ln.split("==")[0]) for ln in lines if ln]
    assert all("==" in ln for ln in lines if ln)
    assert len(names) == len(set(names))
    assert pf.wheel_pins(WHEELS)[0] == (3, 12)


def test_every_dependency_of_the_project_and_its_tests_is_in_the_wheel_list_at_a_version_it_allows():
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["test"]
    pins = _pins()
    for req in map(Requirement, wanted):
        name = _norm(req.name)
        assert name in pins, f"{req} is not in {WHEELS.name}"
        assert req.specifier.contains(pins[name], prereleases=True), f"{WHEELS.name} pins {name}=={pins[name]}: {req}"


def test_every_piece_the_preflight_checks_comes_from_a_listed_wheel_or_the_checkout():
    pins = _pins()
    for need in pf.NEEDS:
        assert need.wheel.startswith("this checkout") or _norm(need.wheel) in pins, need.wheel


# -- the script and the Make targets never reach a package index ---------------


def test_make_gpu_bench_does_not_depend_on_the_venv_that_runs_pip_install():
    make = (ROOT / "Makefile").read_text()
    rule = re.search(r"^gpu-bench:(.*)$", make, re.M)
    assert rule and rule.group(1).strip() == ""
    assert re.search(r"^wheels:", make, re.M) and "fetch-wheels.sh" in make


def test_every_pip_install_of_the_gpu_script_is_offline():
    script = (ROOT / "scripts" / "gpu-bench.sh").read_text()
    installs = [ln for ln in script.splitlines() if re.search(r"pip\S*\s+install", ln)]
    assert installs and all("--no-index" in ln for ln in installs)
    assert "PIP_NO_INDEX=1" in script
    assert not re.search(r"pip\S*\s+download", script)


def test_the_gpu_venv_and_the_wheels_are_ignored_by_git():
    ignored = (ROOT / ".gitignore").read_text().split()
    assert ".venv-gpu/" in ignored and "/.whl/" in ignored


def _script(tmp_path, python: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-bench.sh"), str(tmp_path / "out")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": python, "GPU_VENV": str(tmp_path / "venv")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_gpu_script_stops_at_once_without_its_python(tmp_path):
    p = _script(tmp_path, str(tmp_path / "python3.12"))
    assert p.returncode == 2
    assert p.stdout.splitlines() == [f"preflight: no {tmp_path}/python3.12 on PATH (set PYTHON=python3.12)"]
    assert not (tmp_path / "venv").exists()


def test_the_gpu_script_stops_at_once_with_a_python_too_old(tmp_path):
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\n[ \"$1\" = -V ] && echo 'Python 3.10.12'\nexit 1\n")
    fake.chmod(0o755)
    p = _script(tmp_path, str(fake))
    assert p.returncode == 2
    assert p.stdout.startswith(f"preflight: Python 3.10.12 at {fake}: leverctl needs Python 3.11 or later")
    assert (tmp_path / "out" / "summary.txt").read_text() == p.stdout
    assert not (tmp_path / "venv").exists()


def test_the_wheel_folder_check_names_each_listed_wheel_it_lacks(tmp_path):
    pins = _pins()
    (tmp_path / f"numba-{pins['numba']}-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"")
    (tmp_path / "typer-0.1.0-py3-none-any.whl").write_bytes(b"")  # another version does not count
    lacking = pf.wheels_missing(WHEELS, tmp_path)
    assert f"numba=={pins['numba']}" not in lacking and f"typer=={pins['typer']}" in lacking
    assert len(lacking) == len(pins) - 1
    assert pf.main(["--wheels", str(WHEELS), "--wheel-dir", str(tmp_path)]) == 1
