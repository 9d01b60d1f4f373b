"""Env files as people feed them: `env`, `export -p` and `declare -x` output,
hand-written `export KEY=VALUE` files, standard input."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from leverctl.errors import UserError
from leverctl.levers.sources import parse_env_text

NASTY = {
    "ATLAS_TAB": "a\tb",
    "ATLAS_NEWLINE": "x\ny",
    "ATLAS_QUOTES": 'it\'s \\ "q" `x` $y #z',
    "ATLAS_SPACES": " 1 ",
    "ATLAS_EMPTY": "",
    "ATLAS_UNICODE": "ünï",
}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("listing", ["export -p", "declare -x", "set -o posix; export -p"])
def test_what_bash_lists_of_its_exported_variables_reads_back_exactly(listing):
    env = {k.encode(): v.encode() for k, v in NASTY.items()}
    env[b"ATLAS_BYTES"] = b"\xff\x80z"
    listed = subprocess.run(["bash", "-c", listing], env=env, capture_output=True, check=True).stdout
    got = parse_env_text(listed, "f")
    assert {k: got[k] for k in NASTY} == NASTY
    assert got["ATLAS_BYTES"] == b"\xff\x80z", "bytes that are not UTF-8 stay bytes"


def test_comments_blank_and_indented_lines_and_quotes_are_read_as_a_shell_reads_them():
    text = b"""# a comment
   export ATLAS_A=1   # a comment after a value is not part of it

\tATLAS_B='0 # kept'
declare -x ATLAS_C="two words"
ATLAS_D=$'\\x41\\101\\n'
ATLAS_E=a#b
export ATLAS_F ATLAS_G=g
declare -rx ATLAS_H=h
"""
    assert parse_env_text(text, "f") == {
        "ATLAS_A": "1",
        "ATLAS_B": "0 # kept",
        "ATLAS_C": "two words",
        "ATLAS_D": "AA\n",
        "ATLAS_E": "a#b",
        "ATLAS_G": "g",
        "ATLAS_H": "h",
    }


def test_a_name_exported_without_a_value_is_not_set():
    assert parse_env_text(b"declare -x OLDPWD\nexport ATLAS_X\n", "f") == {}


def test_an_unset_line_removes_an_earlier_assignment():
    assert parse_env_text(b"ATLAS_A=1\nATLAS_B=2\nunset ATLAS_A\n", "f") == {"ATLAS_B": "2"}


def test_env_output_that_is_not_shell_is_read_as_env_printed_it():
    text = b"SSH_CLIENT=10.0.0.1 5555 22\nLESSOPEN=| /usr/bin/lesspipe %s\nATLAS_GDN_WY17= 0\nX=it's\n"
    assert parse_env_text(text, "f") == {
        "SSH_CLIENT": "10.0.0.1 5555 22",
        "LESSOPEN": "| /usr/bin/lesspipe %s",
        "ATLAS_GDN_WY17": " 0",
        "X": "it's",
    }


def test_env_output_with_an_exported_shell_function_skips_the_function_and_reads_the_rest():
    text = b'A=1\nBASH_FUNC_module%%=() {  eval $(lmod bash "$@");\n echo }\n}\nATLAS_GDN_WY17=0\nB=2\n'
    assert parse_env_text(text, "f") == {"A": "1", "ATLAS_GDN_WY17": "0", "B": "2"}
    assert parse_env_text(b"BASH_FUNC_f%%=() {  :\n}\n", "f") == {}


def test_a_crlf_file_reads_like_an_lf_file():
    assert parse_env_text(b"ATLAS_A=1\r\nexport ATLAS_B='2'\r\n", "f") == {"ATLAS_A": "1", "ATLAS_B": "2"}


def test_the_parser_records_the_line_of_each_variable_even_after_a_value_across_lines():
    lines: dict[str, int] = {}
    parse_env_text(b"# c\nexport A=$'x\\ny'\nexport B=\"1\n2\"\nC=3\n", "f", lines)
    assert lines == {"A": 2, "B": 3, "C": 5}


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        (b"ATLAS_A=1\nATLAS_B\n", 2, "is not VAR=VALUE"),
        (b'\n\nexport ATLAS_A="1\n', 3, "never closes"),
        (b"export ATLAS_A=$HOME\n", 1, "would need a shell to expand it"),
        (b'export ATLAS_A="$(id)"\n', 1, "would need a shell to expand it"),
        (b"export ATLAS_A=1; rm -rf x\n", 1, "shell syntax"),
        (b"declare -- ATLAS_A=1\n", 1, "without -x does not export"),
        (b"export -n ATLAS_A\n", 1, "removes the export"),
        (b"unset ATLAS_A=1\n", 1, "unset takes names"),
        (b"export\n", 1, "sets nothing"),
        (b"1ATLAS=2\n", 1, "is not VAR=VALUE"),
    ],
)
def test_a_line_it_cannot_read_is_bad_input_naming_its_number(text, line, fragment):
    with pytest.raises(UserError) as e:
        parse_env_text(text, "f.env")
    assert e.value.where == f"f.env:{line}"
    assert fragment in e.value.message
