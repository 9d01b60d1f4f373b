"""Every table stays readable at 80 columns: piped with COLUMNS=80, no line
is wider, no cell is cut short (no ellipsis), and every column's header is
there; long names wrap at ``_``/``.`` boundaries rather than at a letter."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import RECIPES

from leverctl.tables import Wrapped, fit, pieces, wrap

BENCH_DOCS = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH_DOCS))
from test_report import _doc  # noqa: E402  (a bench document with GPU timings)

SHOW = ("field", "value", "source", "raw string", "rule")
KERNELS = ("path", "levers now", "variant", "chosen by", "selected", "summary")
SWEEP = ("kernel", "levers swept (values)", "configurations", "shapes", "runs", "recipe's configuration")
RANKS = ("kernel", "shape", "fastest correct", "variant", "µs", "recipe µs", "speedup", "pass", "fail")
COMPARE = ("verdict", "kernel", "variant", "shape", "levers", "base µs", "new µs", "change", "noise", "note")


def _files(tmp: Path) -> None:
    base = _doc(gpu=True)
    new = copy.deepcopy(base)
    new["results"][0]["timing"]["median_us"] = 3.0
    (tmp / "base.json").write_text(json.dumps(base))
    (tmp / "new.json").write_text(json.dumps(new))


CASES = [
    (("show", "--no-env"), SHOW),
    (("show", "--no-env", "-e", "metrale"), SHOW),
    (("show", "--no-env", "-r", str(RECIPES / "qwen3-next-80b-a3b.toml")), SHOW),
    (
        ("diff", str(RECIPES / "atlas-defaults.toml"), str(RECIPES / "qwen3-next-80b-a3b.toml")),
        ("field", "A: ", "A provenance", "B: ", "B provenance", "steers"),
    ),
    (("kernels", "--no-env", "-e", "metrale"), KERNELS),
    (("sweep", "--no-env", "--dry-run", "-e", "metrale"), SWEEP),
    (("report", "show", "{tmp}/base.json"), RANKS),
    (("compare", "{tmp}/base.json", "{tmp}/new.json"), COMPARE),
]


@pytest.mark.parametrize("argv, headers", CASES, ids=[" ".join(a[:2]) + f"-{i}" for i, (a, _) in enumerate(CASES)])
def test_a_table_piped_at_80_columns_fits_and_keeps_every_column(argv, headers, tmp_path):
    _files(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLAS_", "METRALE_"))}
    env["COLUMNS"] = "80"
    p = subprocess.run(
        [sys.executable, "-m", "leverctl", *(a.replace("{tmp}", str(tmp_path)) for a in argv)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode in (0, 1), p.stderr
    assert_fits(p.stdout, headers, 80)


def assert_fits(text: str, headers, width: int) -> None:
    lines = text.splitlines()
    assert lines, "no output"
    wide = [line for line in lines if len(line) > width]
    assert not wide, f"{len(wide)} line(s) wider than {width}: {wide[0]!r}"
    assert "…" not in text, "a cell was cut short"
    for h in headers:
        for piece in filter(str.strip, pieces(h)):
            assert piece.strip() in text, f"header {h!r} lost its piece {piece!r}"


def test_without_columns_a_piped_table_is_wide_enough_not_to_wrap():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLAS_", "METRALE_")) and k != "COLUMNS"}
    p = subprocess.run(
        [sys.executable, "-m", "leverctl", "show", "--no-env"], env=env, capture_output=True, text=True, timeout=120
    )
    assert any(len(line) > 80 for line in p.stdout.splitlines())
    assert "  gdn_regresident " in p.stdout


def test_the_bench_table_with_every_gpu_column_fits_80_columns():
    from leverctl.bench.report import table

    text = table(_doc(gpu=True, against=True), width=80)
    assert_fits(
        text,
        (
            "kernel",
            "variant",
            "levers",
            "shape",
            "check",
            "median µs",
            "p20–p80 µs",
            "GB/s",
            "% of floor",
            "vs cuBLAS",
            "speedup",
        ),
        80,
    )
    assert "1.2e-04" in text and "m1-n37-" in text  # a figure is never split; a name splits at "-"


def test_the_check_fails_a_table_that_crops_or_overflows():
    from rich.console import Console
    from rich.table import Table

    t = Table()
    for h in ("kernel", "a very long header that will not fit"):
        t.add_column(h, no_wrap=True)
    t.add_row("w4a16.gemv_dual", "x" * 100)
    c = Console(width=80, record=True, file=open(os.devnull, "w"))
    c.print(t)
    with pytest.raises(AssertionError):
        assert_fits(c.export_text(), ("kernel", "a very long header that will not fit"), 80)


def test_names_wrap_after_underscores_and_dots_and_keep_their_indent():
    assert pieces("  decode_ffn_via_gemm") == ["  ", "decode_", "ffn_", "via_", "gemm"]
    assert pieces("w4a16.gemv 1.2e-04 4–4.3") == ["w4a16.", "gemv", " ", "1.2e-04", " ", "4–4.3"]
    assert wrap("  decode_ffn_via_gemm", 12) == ["  decode_", "  ffn_via_", "  gemm"]


def test_fit_keeps_every_piece_whole_when_the_columns_allow_it():
    from rich.console import Console
    from rich.table import Table

    t = Table()
    for h in ("field", "raw string", "rule"):
        t.add_column(h, no_wrap=True)
    t.add_row("  gdn_regresident", "ATLAS_NO_GDN_REGRESIDENT unset", "kill switch: on unless the exact string 1")
    c = Console(width=40, record=True, file=open(os.devnull, "w"))
    c.print(fit(t, 40))
    text = c.export_text()
    assert all(len(line) <= 40 for line in text.splitlines())
    for piece in ("gdn_", "regresident", "ATLAS_", "REGRESIDENT", "unless"):
        assert piece in text
    assert isinstance(t.columns[0]._cells[0], Wrapped)


def _drawn(table, width: int) -> list[tuple[str, object]]:
    """Every character Rich draws for ``table``, with its style (no style
    and the null style being the same)."""
    from rich.console import Console
    from rich.style import Style

    con = Console(width=width, force_terminal=True, file=open(os.devnull, "w"))
    return [(ch, seg.style or Style.null()) for seg in con.render(table) for ch in seg.text]


def _sample(**kw):
    from rich.table import Table

    t = Table(**kw)
    t.add_column("field")
    t.add_column("median (µs)", justify="right")
    t.add_column("note", justify="center")
    t.add_row(Wrapped("ATLAS_NO_GDN_REGRESIDENT", style="bold"), "12.5", "w4a16.gemv_dual n37")
    t.add_row("x", "3", Wrapped("a_piece_far_wider_than_any_column_can_hold_so_it_folds", style="dim"))
    t.add_row("  indented_lever_name", "1e-4", "")
    return t


@pytest.mark.parametrize(
    "kw",
    [{}, {"pad_edge": False}, {"box": None}, {"padding": (0, 2)}],
    ids=["frame", "no-pad-edge", "no-box", "wide-padding"],
)
@pytest.mark.parametrize("width", [24, 40, 60, 200])
def test_cells_that_draw_their_own_padding_look_exactly_as_rich_pads_them(kw, width):
    """fit() moves the cell padding from Rich's per-cell Padding into the
    cells (half the cost of drawing show's table); what is drawn must not
    change, characters and styles alike."""
    from leverctl.tables import _fit

    assert _drawn(fit(_sample(**kw), width), width) == _drawn(_fit(_sample(**kw), width), width)
