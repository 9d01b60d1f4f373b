"""Bad output paths: every command that writes a file or a directory refuses
an empty name, a directory where a file goes (or a file where a directory
goes), a file in the way of a folder, and a folder it may not write, before
any work, leaving everything as it was."""

import os
from pathlib import Path

from bad_input import Case


def a_file(tmp: Path) -> None:
    (tmp / "f").write_text("in the way\n")


def read_only(tmp: Path) -> None:
    (tmp / "ro").mkdir()
    os.chmod(tmp / "ro", 0o555)


def a_merged_dir(tmp: Path) -> None:
    (tmp / "m").mkdir()
    (tmp / "m" / "plan.json").write_text("{}\n")


EMPTY = ("an empty name is no",)
# (id prefix, argv before the output option, the option, directory?)
COMMANDS = [
    ("bench", ("bench",), "-o", False),
    ("sweep", ("sweep",), "--out", True),
    ("report-show", ("report", "show", "{tmp}/absent"), "-o", False),
    ("report-merge", ("report", "merge", "{tmp}/absent"), "--out", True),
    ("report-plot", ("report", "plot", "{tmp}/absent"), "-o", False),
    ("recipe-freeze", ("recipe", "freeze"), "-o", False),
]


def _rows() -> list[Case]:
    rows = []
    for name, argv, opt, directory in COMMANDS:
        target = "{tmp}/out" if directory else "{tmp}/out.svg"
        rows += [
            Case(f"{name}-out-empty", (*argv, opt, ""), ("--out", *EMPTY)),
            Case(
                f"{name}-out-under-a-file",
                (*argv, opt, "{tmp}/f/sub/" + target.split("/")[-1]),
                ("{tmp}/f/sub/", "{tmp}/f is a file, not a folder"),
                files=a_file,
                untouched=("{tmp}/f",),
            ),
            Case(
                f"{name}-out-no-permission",
                (*argv, opt, "{tmp}/ro/" + target.split("/")[-1]),
                ("{tmp}/ro/", "no permission to"),
                files=read_only,
                untouched=("{tmp}/ro/out", "{tmp}/ro/out.svg"),
                skip_as_root=True,
            ),
        ]
        if Path("/proc/self").is_dir():  # a file system that refuses a new folder even to root
            rows.append(
                Case(
                    f"{name}-out-on-a-pseudo-file-system",
                    (*argv, opt, "/proc/leverctl-nope/" + target.split("/")[-1]),
                    ("/proc/leverctl-nope",),  # "cannot create a folder in /proc", or "no such folder"
                )
            )
        if directory:
            rows.append(
                Case(
                    f"{name}-out-is-a-file",
                    (*argv, opt, "{tmp}/f"),
                    ("{tmp}/f", "exists and is not a directory"),
                    files=a_file,
                    untouched=("{tmp}/f",),
                )
            )
        else:
            rows.append(
                Case(
                    f"{name}-out-is-a-directory",
                    (*argv, opt, "{tmp}"),
                    ("{tmp}", "is a directory, not a file to write"),
                )
            )
    return rows


CASES = _rows() + [
    Case("sweep-suggest-empty", ("sweep", "--suggest", ""), ("--suggest", *EMPTY)),
    Case(
        "recipe-freeze-out-in-no-such-folder",
        ("recipe", "freeze", "-o", "{tmp}/absent/r.toml"),
        ("{tmp}/absent", "no such folder"),
        untouched=("{tmp}/absent",),
    ),
    Case(
        "report-merge-out-holds-results",
        ("report", "merge", "{tmp}/absent", "--out", "{tmp}/m"),
        ("{tmp}/m", "already holds plan.json"),
        files=a_merged_dir,
        untouched=("{tmp}/m/plan.json",),
    ),
]
