"""Sequences made as they are read: records, ranking rows and comparison
entries held as columns (``columns``) and made one at a time where a
caller asks for one. This module imports neither numba nor numpy."""

from __future__ import annotations

from typing import Any, Iterator, Sequence


class Made(Sequence):
    """A sequence whose elements are made as they are asked for (from
    columns): a subclass gives ``__len__`` and ``made(i)``. It equals a list
    (or another of its kind) of the same elements."""

    def made(self, i: int) -> Any:
        raise NotImplementedError

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self.made(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.made(i)

    def __iter__(self) -> Iterator[Any]:
        return map(self.made, range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (list, Made)) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]
