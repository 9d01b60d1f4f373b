"""Did-you-mean for every unknown name: lever variables and fields, engines,
kernel paths, recipe keys. One matcher, so a typo gets the same suggestion
whichever command it reaches. Imports nothing of leverctl, so the catalog and
recipe loaders can use it too."""

from __future__ import annotations

from typing import Iterable


def suggestion(name: str, choices: Iterable[str], cutoff: float = 0.7) -> str | None:
    """The nearest known name to a near miss, or None. Case is forgiven, and
    the leading segments both share (``ATLAS_``, ``METRALE_NO_``) are set aside
    before comparing, so names do not look alike merely for a common prefix."""
    from difflib import SequenceMatcher

    best, best_score = None, cutoff
    up = name.upper()
    for choice in choices:
        c = choice.upper()
        if c == up:
            return choice
        sa, sb = up.split("_"), c.split("_")
        while len(sa) > 1 and len(sb) > 1 and sa[0] == sb[0]:
            sa, sb = sa[1:], sb[1:]
        score = SequenceMatcher(None, "_".join(sa), "_".join(sb)).ratio()
        if score > best_score:
            best, best_score = choice, score
    return best


def did_you_mean(name: str, choices: Iterable[str], quote: str = "") -> str:
    """`` (did you mean NAME?)`` for the nearest known name (see
    :func:`suggestion`), or ``""``: the tail of every unknown-name message."""
    near = suggestion(name, choices)
    return f" (did you mean {quote}{near}{quote}?)" if near else ""
