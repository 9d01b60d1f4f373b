"""A bench document read a piece at a time: the records of its top-level
``results`` list as their JSON texts, and the document without them.

``bench -o results.json`` writes one JSON document; at a million records it
is over a gigabyte, which neither ``json.loads`` (a dict per record, some
9 KB each) nor holding the text whole can afford. :func:`split` walks the
bytes a piece at a time with numpy: a quote that is not escaped (an even
run of backslashes before it) opens or closes a string; outside strings,
``{`` and ``[`` go one level down, ``}`` and ``]`` one up. The records are
the objects one level inside the ``[`` that the top-level key ``results``
opens, which holds nothing else but commas and white space between them;
everything outside that list (schema, device, levers...) is kept, with the
list left empty, for the caller to decode (it is small).

:func:`split_indented` is the fast way for the layout ``bench -o`` writes
(indented by two): since a JSON string holds no raw newline, the top-level
key is the line ``  "results": [``, records are separated by the lines
``    },`` / ``    {`` and the list ends with ``    }`` / ``  ]``, so
``bytes.split`` cuts a piece into records at C speed. It says so (returns
``NOT_INDENTED``) when the document is not laid out that way, and
:func:`split` walks it byte by byte instead.

Both give up (return None) on anything they do not expect: a value of the
list that is not an object, a stray comma, more than one top-level
``results`` list, the text ending inside the list or unbalanced. The caller
then reads the document the standard way, whose parser says exactly what
is wrong. Each record's own text is the caller's to decode (and refuse).
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

_QUOTE, _BACKSLASH, _COMMA = ord('"'), ord("\\"), ord(",")
_STEP = np.zeros(256, np.int8)
_STEP[[ord("{"), ord("[")]] = 1
_STEP[[ord("}"), ord("]")]] = -1
_SPACE = np.zeros(256, np.bool_)
_SPACE[[ord(" "), ord("\t"), ord("\n"), ord("\r")]] = True
_KEY = b'"results"'


NOT_INDENTED = b""  # split_indented's answer for a document not laid out as bench writes it
_START = b'\n  "results": [\n'
_SEP = b"\n    },\n    {"
_END = b"\n    }\n  ]"
_HEAD_LIMIT = 1 << 26  # bytes before the list beyond which a document is not bench's layout


def split_indented(
    pieces: Iterable[bytes], take: Callable[[list], bool], opened: Callable[[bytes], bool] = lambda head: True
) -> bytes | None:
    """:func:`split` for the layout ``bench -o`` writes (module notes); the
    pieces must not have been read yet where it returns ``NOT_INDENTED``
    (only those it took are gone: the caller starts again from the file)."""
    buf = b""
    it = iter(pieces)
    for data in it:  # the text before the list
        buf += data
        at = buf.find(_START)
        if at >= 0:
            break
        if not data or len(buf) > _HEAD_LIMIT:
            return NOT_INDENTED
    else:
        return NOT_INDENTED
    head = buf[: at + len(_START) - 1]  # through the "["
    if not opened(head + b"]}"):
        return None
    pending = buf[at + len(_START) :]
    while len(pending) < 5:
        data = next(it, b"")
        if not data:
            return None
        pending += data
    if not pending.startswith(b"    {"):
        return NOT_INDENTED  # an empty list, or another layout: the byte walk reads it
    pending = pending[len(b"    {") :]
    done = False
    while not done:
        end = pending.find(_END)
        if end >= 0:
            region, tail, done = pending[:end], pending[end + len(b"\n    }") :], True
            bodies = region.split(_SEP)
        else:
            bodies = pending.split(_SEP)
            pending = bodies.pop()
            data = next(it, b"")
            if not data:
                return None  # the text ends inside the list
            pending += data
        if bodies and not take([b"{" + body + b"}" for body in bodies]):
            return None
    rest = [tail]
    for data in it:
        rest.append(data)
    return head + b"".join(rest)


class _State:
    """What one piece hands the next."""

    def __init__(self) -> None:
        self.depth = 0  # nesting after the last byte
        self.in_string = False
        self.backslashes = 0  # the run of backslashes the last piece ended with
        self.tail = b""  # the last bytes before this piece, to find a key split across pieces
        self.inside = False  # within the results list
        self.found = 0  # results lists opened
        self.open = False  # a record has begun and not ended
        self.parts: list[bytes] = []  # the earlier pieces' parts of the open record
        self.records = 0
        self.commas = 0


def split(
    pieces: Iterable[bytes],
    take: Callable[[list], bool],
    opened: Callable[[bytes], bool] = lambda head: True,
    batch: int = 1 << 14,
) -> bytes | None:
    """Walk a bench document given as ``pieces`` of bytes (an empty one
    ends it); hand its records' texts to ``take`` some ``batch`` at a time
    (``take`` returns False to stop: the caller's decoder refused one);
    return the document's text with an empty ``results`` list, or None
    (see the module notes). ``opened`` gets the document's text before the
    list, closed (``...]}``) so that it decodes, when the list opens: what
    the records need of it (the device) comes first in what bench writes;
    it returns False where it cannot tell."""
    st = _State()
    st.opened = opened
    outside: list[bytes] = []
    out: list[bytes] = []
    for data in pieces:
        if not data:
            break
        b = np.frombuffer(data, np.uint8)
        n = len(b)
        pos = np.arange(n)
        bs = b == _BACKSLASH
        last_not = np.maximum.accumulate(np.where(bs, -1, pos))  # the last non-backslash at or before i
        run = pos - last_not  # the backslashes ending at i
        carried = np.where(last_not < 0, st.backslashes, 0)  # a run from the piece's start continues the last's
        before = np.empty(n, np.int64)
        before[0] = st.backslashes
        before[1:] = run[:-1] + carried[:-1]
        quotes = (b == _QUOTE) & (before % 2 == 0)
        parity = np.cumsum(quotes, dtype=np.int64) + int(st.in_string)
        free = (parity - quotes) % 2 == 0  # outside strings (a quote counts as before it)
        step = _STEP[b] * free
        depth = st.depth + np.cumsum(step, dtype=np.int64)
        if n and depth.min() < 0:
            return None
        loose = free & (step == 0) & ~_SPACE[b]  # bytes outside strings that are neither structure nor space
        if not _walk(data, np.flatnonzero(step).tolist(), depth, loose, b, st, outside, out, take, batch):
            return None
        st.tail = (st.tail + data[-64:])[-64:]
        st.depth = int(depth[-1])
        st.in_string = bool(parity[-1] % 2)
        st.backslashes = int(run[-1] + carried[-1])
    if st.inside or st.open or st.depth != 0 or st.found != 1 or st.in_string:
        return None
    if st.commas != max(st.records - 1, 0):
        return None
    if out and not take(out):
        return None
    return b"".join(outside)


def _walk(data: bytes, structural: list, depth, loose, b, st: _State, outside: list, out: list, take, batch) -> bool:
    """One piece's structural bytes, in order: enter and leave the results
    list, cut its records, check what lies between them; keep what lies
    outside the list."""
    start = None if st.inside else 0  # where this piece's outside text resumes
    seg = 0 if st.inside else None  # where this piece's stretch inside the list (between records) starts
    rec = 0 if st.open else None  # where the open record starts in this piece

    def between(lo: int, hi: int) -> bool:
        """Only commas and space between records (``lo .. hi - 1``)."""
        if hi <= lo:
            return True
        gap = loose[lo:hi]
        st.commas += int(np.count_nonzero(b[lo:hi][gap] == _COMMA))
        return bool(np.all(b[lo:hi][gap] == _COMMA))

    for i in structural:
        d = int(depth[i])
        opening = data[i] in (0x7B, 0x5B)  # { [
        if not st.inside:
            if opening and d == 2 and data[i] == 0x5B:
                head = (data[i - 64 : i] if i >= 64 else st.tail + data[:i]).rstrip()
                if head.endswith(b":") and head[:-1].rstrip().endswith(_KEY):
                    if st.found:
                        return False  # a second results list: the standard path decides
                    st.found += 1
                    st.inside = True
                    outside.append(data[start : i + 1])
                    start, seg = None, i + 1
                    if not st.opened(b"".join(outside) + b"]}"):
                        return False
            continue
        if st.open:
            if not opening and d == 2:  # the record closes
                piece = data[rec : i + 1]
                out.append(b"".join([*st.parts, piece]) if st.parts else piece)
                st.parts, st.open, rec, seg = [], False, None, i + 1
                st.records += 1
                if len(out) >= batch:
                    if not take(out):
                        return False
                    out.clear()
            continue
        # between records, one level inside the list
        if opening and d == 3 and data[i] == 0x7B:
            if not between(seg, i):
                return False
            st.open, rec = True, i
        elif not opening and d == 1:  # the list closes
            if not between(seg, i):
                return False
            st.inside, start, seg = False, i, None
        else:
            return False  # a list or a stray bracket where a record belongs
    if st.inside and not st.open and seg is not None and not between(seg, len(data)):
        return False
    if st.open:
        st.parts.append(data[rec if rec is not None else 0 :])
    if not st.inside:
        outside.append(data[start:])
    return True
