"""The up-front check of an output path (``check_output_path``): what it
refuses, what it lets through, and that it creates nothing."""

from __future__ import annotations

import os

import pytest

from leverctl.errors import UserError
from leverctl.levers.files import check_output_path


def test_a_writable_place_passes_and_nothing_is_created(tmp_path):
    assert check_output_path(str(tmp_path / "r.json"), "--out") == tmp_path / "r.json"
    assert check_output_path(str(tmp_path / "a" / "b" / "r.json"), "-o", make_folder=True)
    assert check_output_path(str(tmp_path / "new" / "dir"), "--out", directory=True)
    assert check_output_path(str(tmp_path), "--out", directory=True) == tmp_path
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize("directory", [False, True])
def test_an_empty_name_is_refused_naming_the_option(directory):
    with pytest.raises(UserError, match="an empty name is no") as e:
        check_output_path("", "--out", directory=directory)
    assert e.value.where == "--out"


def test_a_missing_folder_is_refused_unless_the_command_makes_it(tmp_path):
    with pytest.raises(UserError, match="no such folder"):
        check_output_path(str(tmp_path / "absent" / "r.toml"), "--out")


def test_a_file_in_the_way_is_named(tmp_path):
    (tmp_path / "f").write_text("x")
    for kw in ({}, {"make_folder": True}, {"directory": True}):
        with pytest.raises(UserError, match=f"{tmp_path / 'f'} is a file, not a folder"):
            check_output_path(str(tmp_path / "f" / "a" / "b"), "--out", **kw)


@pytest.mark.parametrize(
    "target, kw, want",
    [
        ("r.json", {}, "no permission to write in its folder"),
        ("a/r.json", {"make_folder": True}, "no permission to create its folder in"),
        (".", {"directory": True}, "no permission to write in this directory"),
        ("new", {"directory": True}, "no permission to create it in"),
    ],
)
def test_a_folder_without_write_permission_is_refused(tmp_path, monkeypatch, target, kw, want):
    # Root may write anywhere, so the permission answer is made up here.
    monkeypatch.setattr(os, "access", lambda p, mode: False)
    with pytest.raises(UserError, match=want):
        check_output_path(str(tmp_path / target), "--out", **kw)
