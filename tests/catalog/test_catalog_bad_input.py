"""Bad input to `leverctl catalog`: one line on stderr, exit 2, never a traceback;
and the commands that read levers never load the Rust parser."""

from __future__ import annotations

import subprocess
import sys

import pytest
from catalog_helpers import assert_one_line_error

RUST_WITHOUT_LEVERS = "pub struct Point {\n    pub x: f32,\n}\n\nfn main() {}\n"


@pytest.mark.parametrize("command", [["check"], ["draft", "--prefix", "ATLAS_"]])
@pytest.mark.parametrize(
    "name, content, fragment",
    [
        ("garbage.rs", b"}}}} this is not rust {{ (((\n", "syntax error"),
        ("notes.txt", b"Remember to buy milk.\nAnd eggs.\n", "syntax error"),
        ("empty.rs", b"", "is empty"),
        ("blank.rs", b"\n  \n", "is empty"),
        ("plain.rs", RUST_WITHOUT_LEVERS.encode(), "no lever struct"),
        ("binary.rs", b"\x7fELF\x00\x01", "binary"),
        ("latin1.rs", "pub struct ModelLevers { pub caf\xe9: bool }\n".encode("latin-1"), "UTF-8"),
    ],
)
def test_a_file_that_is_not_a_lever_source_is_bad_input(cli, tmp_path, command, name, content, fragment):
    path = tmp_path / name
    path.write_bytes(content)
    r = cli("catalog", *command, path, *(["-o", tmp_path / "out.toml"] if command[0] == "draft" else []))
    assert_one_line_error(r, name, fragment)
    assert not (tmp_path / "out.toml").exists()


def test_a_missing_file_and_a_directory_are_bad_input(cli, tmp_path):
    assert_one_line_error(cli("catalog", "check", tmp_path / "nope.rs"), "no such Rust source file")
    assert_one_line_error(cli("catalog", "check", tmp_path), "directory")


def test_engine_and_catalog_together_are_a_conflict(cli, rust_file):
    r = cli("catalog", "check", "-e", "atlas", "--catalog", "x.toml", rust_file("atlas"))
    assert_one_line_error(r, "--engine", "--catalog")


def test_an_unknown_engine_and_a_source_with_no_known_prefix_are_bad_input(cli, rust_file, tmp_path):
    assert_one_line_error(cli("catalog", "check", "-e", "nova", rust_file("atlas")), "unknown engine")
    src = tmp_path / "nova.rs"
    src.write_text("pub struct NovaLevers {\n    /// `NOVA_FAST=1`: fast.\n    pub fast: bool,\n}\n")
    assert_one_line_error(cli("catalog", "check", src), "-e ENGINE or --catalog FILE")


def test_a_prefix_with_spaces_or_an_engine_name_that_is_not_one_is_bad_input(cli, rust_file):
    assert_one_line_error(cli("catalog", "draft", rust_file("atlas"), "--prefix", "AT LAS"), "--prefix")
    assert_one_line_error(cli("catalog", "draft", rust_file("atlas"), "--prefix", "9X_"), "--name")


CHECK_IMPORTS = """
import sys
from leverctl.cli.app import main
for argv in (["show", "--no-env"], ["diff", "defaults", "defaults"], ["explain", "ATLAS_GDN_WY17"],
             ["lint", "--no-env"]):
    try:
        main(argv)
    except SystemExit:
        pass
loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('tree_sitter', 'tree_sitter_rust'))
sys.stderr.write('LOADED=' + ','.join(loaded) + '\\n')
"""


def test_the_lever_commands_never_load_the_rust_parser():
    p = subprocess.run(
        [sys.executable, "-c", CHECK_IMPORTS], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}
    )
    assert [line for line in p.stderr.splitlines() if line.startswith("LOADED=")] == ["LOADED="], p.stderr[-2000:]


def test_as_a_process_a_clean_check_exits_0_and_garbage_exits_2_with_one_line(rust_file, tmp_path):
    garbage = tmp_path / "model_levers.rs"
    garbage.write_text("}}}} fn (((\n")
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "100"}
    ok = subprocess.run(
        [sys.executable, "-m", "leverctl", "catalog", "check", rust_file("atlas")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert ok.returncode == 0, ok.stderr
    assert "agrees with the source" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "leverctl", "catalog", "check", garbage],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert len(bad.stderr.splitlines()) == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith(f"leverctl: {garbage}:1: is not Rust source")
