"""Shapes from the command line, as nvbench's axes: ``--axis m=1,16,64
--axis k=4096`` refines the preset's shapes (``--shapes smoke|model``).

An axis is one of the names a path's shapes have (``leverctl kernels -k
PATH`` lists them with their preset values: ``m``, ``n``, ``k`` for a GEMV;
``n``, ``hv``, ``dk`` for GDN decode...). Each shape of a path that has the
axis is replaced by one shape per combination of the given values (the
product over the axes given), the path's other dimensions kept; a path
whose shapes lack every axis given keeps its shapes. Shapes the product
makes twice are made once. A refined shape's label is the preset's with the
values it was given (``model m1 n512 k2048 @ m=64,k=4096``).

A path may declare ``extra["derive"](dims, given)``: the dimensions that
follow from others and were not given themselves (GDN's state pool holds
``2 n + 1`` slots for ``n`` sequences).

Values are integers: at least 1, or at least 0 for a dimension some preset
shape of the path already holds at 0 (an on/off condition such as ``down``).
Everything is checked before any kernel runs: a malformed ``--axis``, a
value that is not such an integer, an axis given twice, and a name no path
of the run has are bad input.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Mapping, Sequence

from ..errors import UserError

Axes = tuple[tuple[str, tuple[int, ...]], ...]


def parse_axes(texts: Iterable[str] | None) -> Axes:
    """``["m=1,16", "k=4096"]`` -> ``(("m", (1, 16)), ("k", (4096,)))``."""
    out: dict[str, tuple[int, ...]] = {}
    for text in texts or ():
        name, eq, values = text.partition("=")
        name = name.strip()
        if not eq or not name or not name.isidentifier():
            raise UserError(f"--axis {text!r} needs the form NAME=V1,V2,... (e.g. m=1,16,64)")
        if name in out:
            raise UserError(f"--axis {name} is given twice; give its values once (--axis {name}=A,B)")
        vals = []
        for v in values.split(","):
            v = v.strip()
            try:
                n = int(v, 10)
            except ValueError:
                raise UserError(f"--axis {name}: {v!r} is not an integer") from None
            if n < 0:
                raise UserError(f"--axis {name}: {n} is negative; a shape's dimensions are counts")
            vals.append(n)
        out[name] = tuple(dict.fromkeys(vals))
    return tuple(out.items())


def axes_of(shapes: Sequence[Any]) -> dict[str, list[int]]:
    """Each dimension the shapes have, with the values they hold, in order."""
    out: dict[str, list[int]] = {}
    for s in shapes:
        for k, v in s.dims.items():
            vals = out.setdefault(k, [])
            if v not in vals:
                vals.append(v)
    return out


def check_axes(axes: Axes, shapes_by_path: Mapping[str, Sequence[Any]]) -> None:
    """Bad input, before any kernel runs: a name no path of the run has, or
    a value the dimension cannot hold."""
    if not axes:
        return
    known = {name: axes_of(shapes) for name, shapes in shapes_by_path.items()}
    for axis, values in axes:
        having = [p for p, dims in known.items() if axis in dims]
        if not having:
            names = sorted({d for dims in known.values() for d in dims})
            from ..levers.suggest import did_you_mean

            raise UserError(
                f"--axis {axis}: no kernel path of this run has that dimension{did_you_mean(axis, names)}; "
                f"theirs: {', '.join(names) or 'none'} (leverctl kernels -k PATH lists each path's)"
            )
        zero_ok = any(0 in known[p][axis] for p in having)
        low = min(values)
        if low == 0 and not zero_ok:
            raise UserError(f"--axis {axis}: 0 is no size for {', '.join(having)}; give values of at least 1")


def refine(path: Any, shapes: Sequence[Any], axes: Axes) -> list[Any]:
    """``shapes`` refined by ``axes`` (the module notes)."""
    if not axes:
        return list(shapes)
    from leverctl_kernels.common.path import Shape

    derive = getattr(path, "extra", {}).get("derive")
    out: list[Any] = []
    seen: set = set()
    for s in shapes:
        own = [(n, vals) for n, vals in axes if n in s.dims]
        if not own:
            out.append(s)
            continue
        names = [n for n, _ in own]
        for combo in itertools.product(*(vals for _, vals in own)):
            given = dict(zip(names, combo))
            dims = {**s.dims, **given}
            if derive is not None:
                dims = dict(derive(dims, set(given)))
            key = tuple(sorted(dims.items()))
            if key in seen:
                continue
            seen.add(key)
            label = f"{s.label} @ " + ",".join(f"{n}={v}" for n, v in given.items())
            out.append(Shape(label, dims))
    return out


def axes_text(axes: Axes) -> str:
    """``m=1,16 k=4096``: for headers and records."""
    return " ".join(f"{n}={','.join(map(str, vals))}" for n, vals in axes)
