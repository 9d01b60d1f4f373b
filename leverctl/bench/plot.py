"""Pictures of lever effects: bars in the terminal, and an SVG file.

Each bar is one lever's effect on one kernel path and shape (a speedup, see
``rank.lever_effects``), drawn on a log scale around 1x: right and green when
the lever's value is faster, left and red when slower, so 2x and 0.5x are
the same length. The SVG is written by hand (a few rectangles and labels),
so sharing a chart needs no plotting library.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence
from xml.sax.saxutils import escape

from ..errors import UserError
from ..levers.files import write_atomically
from .rank import Effect

FORMATS = (".svg",)


def _log_span(effects: Sequence[Effect]) -> float:
    return max([abs(math.log2(e.speedup)) for e in effects if e.speedup > 0] + [math.log2(1.1)])


def terminal_bars(effects: Sequence[Effect], half_width: int = 24):
    """A Rich renderable: per kernel and shape, one bar per lever effect."""
    from rich.table import Table
    from rich.text import Text

    span = _log_span(effects)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("kernel / shape")
    table.add_column("lever")
    table.add_column("slower" + " " * (half_width - 6) + "|" + " " * (half_width - 6) + "faster", no_wrap=True)
    table.add_column("speedup", justify="right")
    last = None
    for e in effects:
        where = f"{e.kernel} {e.shape}" if (e.kernel, e.shape) != last else ""
        last = (e.kernel, e.shape)
        n = round(abs(math.log2(e.speedup)) / span * half_width) if e.speedup > 0 else 0
        bar = Text()
        if e.speedup >= 1:
            bar.append(" " * half_width + "|")
            bar.append("█" * n, style="green")
        else:
            bar.append(" " * (half_width - n))
            bar.append("█" * n, style="red")
            bar.append("|")
        style = "green" if e.speedup > 1 else "red" if e.speedup < 1 else ""
        table.add_row(where, e.label, bar, Text(f"{e.speedup:.3f}x", style=style))
    return table


def write_chart(effects: Sequence[Effect], path: Path, title: str) -> None:
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        hint = ""
        if p.suffix.lower() == ".png":
            hint = (
                " (PNG would need a rasterizer, which leverctl does not depend on: write .svg and "
                "convert it, e.g. `rsvg-convert -o chart.png chart.svg`)"
            )
        raise UserError(f"cannot write a {p.suffix or 'extensionless'} chart: use a .svg file{hint}", str(p))
    if not effects:
        raise UserError(
            "no lever effects to plot: the results need passing, timed runs that differ in "
            "one lever (a simulator sweep checks correctness only)"
        )
    write_atomically(p, svg(effects, title))


def svg(effects: Sequence[Effect], title: str) -> str:
    """A horizontal bar chart of ``effects``, grouped by kernel path and shape."""
    row_h, head_h, label_w, half, right_w, pad = 20, 24, 360, 220, 80, 12
    width = pad + label_w + 2 * half + right_w + pad
    groups: list[tuple[str, list[Effect]]] = []
    for e in effects:
        key = f"{e.kernel} · {e.shape}"
        if not groups or groups[-1][0] != key:
            groups.append((key, []))
        groups[-1][1].append(e)
    height = 56 + sum(head_h + row_h * len(g) for _, g in groups) + 28
    span = _log_span(effects)
    x0 = pad + label_w + half  # the 1x line
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{pad}" y="24" font-size="15" font-weight="bold">{escape(title)}</text>',
        f'<text x="{pad}" y="42" fill="#555">speedup of each lever value over its reference '
        f"(median over the other levers' settings; log scale, 1x at the line)</text>",
    ]
    y = 56
    for key, rows in groups:
        out.append(f'<text x="{pad}" y="{y + 16}" font-weight="bold">{escape(key)}</text>')
        y += head_h
        for e in rows:
            n = abs(math.log2(e.speedup)) / span * half if e.speedup > 0 else 0.0
            faster = e.speedup >= 1
            x = x0 if faster else x0 - n
            colour = "#2e7d32" if faster else "#c62828"
            out.append(f'<text x="{pad + 12}" y="{y + 14}">{escape(e.label)}</text>')
            out.append(
                f'<rect x="{x:.1f}" y="{y + 4}" width="{max(n, 0.5):.1f}" height="{row_h - 8}" '
                f'fill="{colour}"><title>{escape(e.label)}: {e.speedup:.3f}x over {e.pairs} '
                f"setting(s)</title></rect>"
            )
            out.append(f'<text x="{x0 + half + 8}" y="{y + 14}" fill="{colour}">{e.speedup:.3f}x</text>')
            y += row_h
    top = 56
    out.append(f'<line x1="{x0}" y1="{top}" x2="{x0}" y2="{y}" stroke="#333" stroke-width="1"/>')
    for mult in (0.5, 2.0):
        dx = math.log2(mult) / span * half
        if abs(dx) <= half:
            xx = x0 + dx
            out.append(f'<line x1="{xx:.1f}" y1="{top}" x2="{xx:.1f}" y2="{y}" stroke="#bbb" stroke-dasharray="3,3"/>')
            out.append(f'<text x="{xx:.1f}" y="{y + 16}" text-anchor="middle" fill="#555">{mult:g}x</text>')
    out.append(f'<text x="{x0}" y="{y + 16}" text-anchor="middle" fill="#555">1x</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
