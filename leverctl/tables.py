"""Tables that stay readable at 80 columns.

Lever names, variables and kernel paths are long words with no spaces
(``ATLAS_NO_GDN_REGRESIDENT``, ``w4a16.gemv_dual``), so a narrow Rich table
either folds them at an arbitrary letter or cuts them short with an ellipsis.
:class:`Wrapped` gives such a cell break opportunities after ``_``, ``,``,
``=`` and ``/``, and after ``.``, ``-`` and ``–`` where no digit follows, as
well as at spaces; :func:`fit` then sizes the columns so that no piece is
split where it need not be. Only a piece wider than its whole column is
folded, so no cell and no column is ever lost.

:func:`new_table` makes a table the same way: cells fold rather than crop,
and headers wrap at the same boundaries.
"""

from __future__ import annotations

import re
from typing import Any

from rich.cells import cell_len
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# Where a line may break: around a run of spaces; after ``_ , = /``; after
# ``. - –`` unless a digit follows (``1.2e-04`` and ``4–4.3`` stay whole,
# ``w4a16.gemv`` and ``m1-n37`` do not).
_BREAK = re.compile(r"(?<=\S)(?=\s)|(?<=\s)(?=\S)|(?<=[_,=/])(?=\S)|(?<=[.\-–])(?=[^\d\s])")


def pieces(text: str) -> list[str]:
    """``text`` cut at every break: ``"gdn_wy17 unset"`` ->
    ``["gdn_", "wy17", " ", "unset"]``. Joined, they are ``text`` again."""
    return [x for x in _BREAK.split(text) if x]


def wrap(text: str, width: int) -> list[str]:
    """Greedy lines of at most ``width`` cells, broken only between pieces;
    a continuation keeps the first line's indent. A piece wider than the
    line stays whole here (the cell folds it)."""
    lines = []
    for para in text.split("\n"):
        indent = para[: len(para) - len(para.lstrip(" "))]
        line = ""
        for piece in pieces(para):
            if line.strip() and cell_len(line + piece.rstrip()) > width:
                lines.append(line.rstrip())
                line = indent + piece.lstrip()
            else:
                line += piece
        lines.append(line.rstrip())
    return lines


class Wrapped:
    """A table cell (or header) that wraps at name boundaries; see the module doc."""

    def __init__(self, text: Any, style: str = "", pad: tuple[int, int] = (0, 0)) -> None:
        self.text = str(text)
        self.style = style
        self.left, self.right = pad  # the table's cell padding, drawn here (see _inline_padding)

    def __str__(self) -> str:
        return self.text

    def __rich_measure__(self, console, options) -> Measurement:
        lines = self.text.split("\n")
        widest = max((cell_len(x) for x in lines), default=0)
        narrowest = max((cell_len(x.rstrip()) for line in lines for x in pieces(line.lstrip())), default=0)
        indent = max((len(x) - len(x.lstrip(" ")) for x in lines), default=0)
        content = Measurement(min(narrowest + indent, widest), widest).clamp(max_width=options.max_width)
        pad = self.left + self.right
        if not pad:
            return content
        if options.max_width - pad < 1:  # as rich.padding.Padding measures
            return Measurement(options.max_width, options.max_width)
        return Measurement(content.minimum + pad, content.maximum + pad).with_maximum(options.max_width)

    def __rich_console__(self, console, options):
        width = options.max_width - self.left - self.right
        lines = wrap(self.text, width)
        if not (self.left or self.right):
            yield Text("\n".join(lines), style=self.style, overflow="fold", no_wrap=False)
            return
        if width < 1 or any(cell_len(x) > width for x in lines):  # a piece to fold: as Rich pads it
            from rich.padding import Padding

            yield Padding(Wrapped(self.text, self.style), (0, self.right, 0, self.left))
            return
        text = Text(overflow="fold")
        for i, line in enumerate(lines):
            if i:
                text.append("\n")
            text.append(" " * self.left)
            text.append(line.ljust(width + len(line) - cell_len(line)), style=self.style)  # filled as Rich fills
            text.append(" " * self.right)
        yield text


def new_table(*headers: str, **kw: Any) -> Table:
    """A table whose headers wrap at name boundaries and whose cells fold
    rather than crop (an ellipsis would lose part of a value)."""
    t = Table(**kw)
    for h in headers:
        t.add_column(Wrapped(h), overflow="fold")
    return t


def _cell_range(cell: Any) -> tuple[int, int]:
    """(narrowest, widest) a cell can be laid out in without splitting a piece."""
    if not isinstance(cell, (Wrapped, str, Text)):
        return 1, 1  # another renderable: Rich measures it
    text = str(getattr(cell, "plain", cell))
    lines = text.split("\n")
    widest = max((cell_len(x) for x in lines), default=0)
    narrowest = max(
        (
            cell_len(line[: len(line) - len(line.lstrip(" "))] + x.strip())
            for line in lines
            for x in pieces(line.lstrip(" "))
        ),
        default=0,
    )
    return min(narrowest, widest), widest


def _overhead(t: Table) -> int:
    return t._extra_width + sum(t._get_padding_width(i) for i in range(len(t.columns)))


def _wrapped(cell: Any) -> Any:
    """A cell as :class:`Wrapped`: a string literally (cells hold data, never
    Rich markup), a plain Text with its style; any other renderable as it is."""
    if isinstance(cell, str):
        return Wrapped(cell)
    if isinstance(cell, Text) and not cell.spans:
        return Wrapped(cell.plain, style=cell.style)
    return cell


def fit(t: Table, width: int | None) -> Table:
    """:func:`_fit`, then the cell padding drawn by the cells themselves."""
    return _inline_padding(_fit(t, width))


def _inline_padding(t: Table) -> Table:
    """Draw the table's horizontal cell padding inside its cells rather than
    through Rich, which wraps every cell in a ``Padding`` that lays out its
    lines a second time: half of what drawing ``show``'s table costs. The
    output is the same: a left-aligned :class:`Wrapped` cell draws the
    spaces itself; any other cell (another renderable, or one in a right- or
    centre-aligned column, where Rich strips trailing spaces) keeps a
    ``Padding`` of its own. Tables with vertical or collapsed padding are
    left as they are."""
    from rich.padding import Padding

    top, right, bottom, left = Padding.unpack(t.padding)
    if top or bottom or t.collapse_padding or not (left or right) or not t.columns:
        return t
    last = len(t.columns) - 1
    for i, c in enumerate(t.columns):
        lp = 0 if (i == 0 and not t.pad_edge) else left
        rp = 0 if (i == last and not t.pad_edge) else right
        if c.width is not None:
            c.width += lp + rp
        inline = c.justify in ("default", "left")

        def pad(cell: Any) -> Any:
            if inline and isinstance(cell, Wrapped):
                return Wrapped(cell.text, cell.style, (lp, rp))
            return Padding(cell, (0, rp, 0, lp)) if (lp or rp) else cell

        c.header = pad(c.header)
        c._cells[:] = [pad(x) for x in c._cells]
    t.padding = (0, 0, 0, 0)
    return t


def _fit(t: Table, width: int | None) -> Table:
    """Make every cell of ``t`` :class:`Wrapped` and folding (never cropped),
    and choose its column widths for ``width`` cells so that no piece of a
    name is split where it need not be (Rich alone shrinks the widest columns
    first, with no regard to what they hold). Each column gets the width of
    its longest piece, and what is left goes to the columns in proportion to
    how much more they would use. When even that does not fit with the frame,
    the table drops its frame and keeps two spaces between columns (else
    one); when that does not fit either, it is left to Rich, which folds cells (never crops
    them, never drops a column)."""
    for c in t.columns:
        c.header = _wrapped(c.header)
        c._cells[:] = [_wrapped(x) for x in c._cells]
        c.no_wrap, c.overflow = False, "fold"
    if not width or not t.columns:
        return t
    ranges = []
    for c in t.columns:
        cells = [c.header, *c._cells]
        lo = max(_cell_range(x)[0] for x in cells)
        hi = max(_cell_range(x)[1] for x in cells)
        ranges.append((lo, hi))
    if sum(hi for _, hi in ranges) + _overhead(t) <= width:
        return t
    if sum(lo for lo, _ in ranges) + _overhead(t) > width:
        from rich import box

        t.box, t.show_edge, t.pad_edge = box.SIMPLE_HEAD, False, False
        for padding in ((0, 1, 0, 0), (0, 0, 0, 0)):  # two spaces between columns, else one
            t.padding = padding
            if sum(lo for lo, _ in ranges) + _overhead(t) <= width:
                break
        else:
            return t
    room = width - _overhead(t) - sum(lo for lo, _ in ranges)
    want = [hi - lo for lo, hi in ranges]
    # A column of names alone (kernel paths, variants: no cell with a space)
    # is kept whole first where the room allows, leftmost first: a name
    # split at its "_" reads worse than a phrase wrapped at a space.
    extra = [0] * len(want)
    whole = {
        i: max(0, max(_cell_range(x)[1] for x in c._cells) - ranges[i][0])
        for i, c in enumerate(t.columns)
        if _names_only(c)
    }  # what the column's names need to stay whole (its header may still wrap)
    for i in sorted(i for i in whole if whole[i]):  # left first: the row's key (a kernel path) leads
        if whole[i] <= room:
            extra[i], room, want[i] = whole[i], room - whole[i], want[i] - whole[i]
    for i, more in enumerate(share(room, want)):
        extra[i] += more
    for c, (lo, hi), more in zip(t.columns, ranges, extra):
        c.width = lo + more
    return t


def _names_only(c: Any) -> bool:
    """Whether every cell of a column (not its header) is one word."""
    return bool(c._cells) and all(" " not in str(x).strip() and "\n" not in str(x) for x in c._cells)


def share(room: int, want: list[int]) -> list[int]:
    """Split ``room`` cells between columns that want ``want`` more: a
    column wanting no more than an equal share gets all it wants (so short
    figures stay on one line), the rest split what is left in proportion."""
    extra = [0] * len(want)
    open_ = set(range(len(want)))
    while open_:
        fair = room // len(open_)
        done = [i for i in open_ if want[i] <= fair]
        if not done:
            break
        for i in done:
            extra[i] = want[i]
            room -= want[i]
            open_.discard(i)
    total = sum(want[i] for i in open_) or 1
    for i in open_:
        extra[i] = room * want[i] // total
    left = room - sum(extra[i] for i in open_)
    for i in sorted(open_, key=lambda i: want[i] - extra[i], reverse=True)[:left]:
        extra[i] += 1
    return [min(e, w) for e, w in zip(extra, want)]
