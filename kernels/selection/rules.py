"""The rule types every decision table is made of.

A table is a decision list: the first :class:`Rule` whose lever values all
match and whose shape conditions all hold gives the variant. A rule's note
says why the levers did not get what they asked for at that shape (recorded
with the result); ``{unmet}`` in a note stands for the reasons the earlier
rules' shape conditions gave.

Each shape condition is declared once, by one of the makers below
(:func:`compare`, :func:`divisible`, :func:`flag`, :func:`relation`,
:func:`guard`): its text (``T = 17``), its negation (``T != 17``), its test
and the reason it gives at a shape where it fails all come from that one
declaration, so they cannot drift apart.

The value a lever takes where a caller's mapping leaves it out (or holds
None: a tri-state left to the call site) is its default in the engines'
catalogs, read from them (:attr:`Table.assumed`), not restated here.

This module imports neither numba nor numpy.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from types import MappingProxyType
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Choice:
    """What ``select`` decided: the variant, and a note when the levers asked
    for something the shape does not allow (recorded with the result).
    Declared here, not with the kernel-path contract, so that ``explain``
    reads the tables without loading that contract."""

    variant: str
    note: str = ""


Dims = Mapping[str, Any]  # a Shape, or any mapping of its named sizes


def _dims(shape: Dims) -> dict[str, Any]:
    return dict(getattr(shape, "dims", shape))


@dataclass(frozen=True)
class Cond:
    """A condition on the shape, as one of the makers below declares it.
    ``text`` says when it holds and ``negation`` when it does not, in
    symbols; ``why`` says why it failed at one shape, with the shape's
    numbers. ``symbols`` maps the shape keys it reads to the symbols its
    text writes them as (``{"t": "T"}``), which notes use where no shape is
    at hand.

    A *guard* (``negation`` empty, made by :func:`guard`) sends the shapes
    it holds at to a fallback before the levers are asked; that it failed is
    nobody's reason, so notes (``{unmet}``) and explain's wording of later
    rules leave it out. A *quiet* condition (:func:`compare` with
    ``quiet=True``) is the same where it fails: a rule that follows it
    covers what it leaves."""

    text: str
    negation: str
    test: Callable[[Dims], bool]
    why: Callable[[Dims], str]
    symbols: Mapping[str, str] = field(default_factory=dict)


class _Fill(dict):
    """A shape's dims for a reason's template, with the condition's bound
    and the defaults of the keys a shape may leave out."""

    def __init__(self, shape: Dims, defaults: Mapping[str, Any], **more: Any):
        super().__init__(defaults)
        self.update(_dims(shape), **more)


_OPS: Mapping[str, Callable[[Any, Any], bool]] = MappingProxyType(
    {
        "=": operator.eq,
        "!=": operator.ne,
        "<": operator.lt,
        "<=": operator.le,
        ">": operator.gt,
        ">=": operator.ge,
    }
)
_NEGATED = MappingProxyType({"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"})


def compare(
    key: str,
    op: str,
    bound: int,
    *,
    why: str = "",
    symbol: str = "",
    least: int | None = None,
    default: Any = None,
    bound_at: Callable[[Dims], int] | None = None,
    quiet: bool = False,
) -> Cond:
    """``shape[key] op bound``, written ``symbol op bound`` (``symbol``:
    ``key`` unless given). ``least`` is the smallest value the size takes,
    where the negation of ``> least`` reads ``= least`` (``N = 1``, not
    ``N <= 1``). ``default`` is the value of a key a shape may leave out
    (None: the shape must have it). ``bound_at(shape)`` is the bound at a
    shape that sets its own (smoke shapes lower some thresholds); the text
    names ``bound``. ``why`` is the reason at a failing shape, a template of
    the shape's keys and ``{bound}``; a quiet condition gives none."""
    if op not in _OPS:
        raise ValueError(f"compare: unknown operator {op!r}")
    sym = symbol or key
    test_op = _OPS[op]
    bound_of = bound_at or (lambda d: bound)
    defaults = {} if default is None else {key: default}
    value = (lambda d: d[key]) if default is None else (lambda d: d.get(key, default))
    negation = f"{sym} = {bound}" if op == ">" and least == bound else f"{sym} {_NEGATED[op]} {bound}"
    if quiet:
        negation, why = "", ""
    elif not why:
        raise ValueError(f"compare {sym} {op} {bound}: a condition that is not quiet says why it failed")
    return Cond(
        f"{sym} {op} {bound}",
        negation,
        lambda d: test_op(value(d), bound_of(d)),
        lambda d: why.format_map(_Fill(d, defaults, bound=bound_of(d))) if why else "",
        MappingProxyType({key: sym}),
    )


def divisible(key: str, by: int, *, why: str = "", symbol: str = "") -> Cond:
    """``shape[key]`` a multiple of ``by``, written ``k % 16 = 0``; ``why``
    a template of the shape's keys and ``{bound}`` (``by``)."""
    sym = symbol or key
    return Cond(
        f"{sym} % {by} = 0",
        f"{sym} % {by} != 0",
        lambda d: d[key] % by == 0,
        lambda d: why.format_map(_Fill(d, {}, bound=by)),
        MappingProxyType({key: sym}),
    )


def flag(key: str, *, on: str, off: str, why: str, want: bool = True, default: Any = None) -> Cond:
    """The shape's ``key`` set (``want``) or clear (``want=False``): ``on``
    names the shapes where it is set, ``off`` those where it is clear.
    ``default``: the value of a shape that leaves it out (None: required)."""
    value = (lambda d: bool(d[key])) if default is None else (lambda d: bool(d.get(key, default)))
    holds, fails = (on, off) if want else (off, on)
    defaults = {} if default is None else {key: default}
    return Cond(holds, fails, lambda d: value(d) == want, lambda d: why.format_map(_Fill(d, defaults)))


_RELATION = re.compile(r" (!=|<=|>=|=|<|>) ")


def relation(
    text: str,
    test: Callable[[Dims], bool],
    *,
    why: str,
    negation: str = "",
    defaults: Mapping[str, Any] | None = None,
    bound_at: Callable[[Dims], Any] | None = None,
) -> Cond:
    """A relation between sizes that :func:`compare` cannot write
    (``Hv = 2 Hk``). Its negation is ``text`` with its first operator
    negated (``Hv != 2 Hk``) unless given; ``why`` a template of the shape's
    keys (``defaults`` filling those a shape may leave out) and
    ``{bound}`` (``bound_at(shape)``)."""
    if not negation:
        m = _RELATION.search(text)
        if m is None:
            raise ValueError(f"relation {text!r}: no operator to negate; give the negation")
        negation = text[: m.start()] + f" {_NEGATED[m.group(1)]} " + text[m.end() :]
    fill = dict(defaults or {})
    return Cond(
        text, negation, test, lambda d: why.format_map(_Fill(d, fill, **({"bound": bound_at(d)} if bound_at else {})))
    )


def guard(cond: Cond) -> Cond:
    """A guard (see :class:`Cond`) that holds where ``cond`` does not:
    written as ``cond``'s negation."""
    return Cond(cond.negation, "", lambda d: not cond.test(d), lambda d: "", cond.symbols)


@dataclass(frozen=True)
class Rule:
    """``variant`` when every lever in ``levers`` has the given value and
    every condition in ``shape`` holds. ``note`` may name shape sizes
    (``{t}``) and ``{unmet}``."""

    variant: str
    levers: Mapping[str, bool] = field(default_factory=dict)
    shape: tuple[Cond, ...] = ()
    note: str = ""


class _Symbols(dict):
    """Fills a note's placeholders with symbols when no shape is at hand."""

    def __init__(self, symbols: Mapping[str, str], unmet: str):
        super().__init__(symbols, unmet=unmet)

    def __missing__(self, key: str) -> str:
        return key


@lru_cache(maxsize=None)
def _catalog_defaults(engine: str) -> Mapping[str, bool]:
    """Each lever's default in a shipped engine's catalog, as a table reads
    it (an unset tri-state is off). The catalog loader is numba-free; it is
    imported when a table is first asked, not with the tables."""
    from leverctl.levers.catalog import load_catalog

    return MappingProxyType(
        {f: bool(lv.default) if lv.default is not None else False for f, lv in load_catalog(engine).levers.items()}
    )


@dataclass(frozen=True)
class Table:
    path: str  # "gdn.verify"
    summary: str  # the path in one line
    levers: tuple[str, ...]  # the lever fields that choose, in sweep order
    variants: tuple[str, ...]  # in the order the bench lists them
    rules: tuple[Rule, ...]
    # The value a lever takes in an engine whose catalog lacks it (Atlas has
    # no decode_split_silu: its FFN decode is always the fused kernel).
    fixed: Mapping[str, Any] = field(default_factory=dict)
    engines: tuple[str, ...] = ()  # empty: every engine whose catalog has one of `levers`
    # Variants no rule selects, which bench and sweep run beside the selected
    # one for contrast (``KernelPath.baselines``).
    baselines: tuple[str, ...] = ()
    # Levers whose value reaches the run itself rather than choosing the
    # variant (``KernelPath.bind``): lever -> what its value does there.
    binds: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("fixed", "binds"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        if self.rules and (self.rules[-1].levers or self.rules[-1].shape):
            raise ValueError(f"{self.path}: the last rule must match anything")
        for r in self.rules:
            if r.variant not in self.variants:
                raise ValueError(f"{self.path}: rule names unknown variant {r.variant!r}")
            for f in r.levers:
                if f not in self.levers:
                    raise ValueError(f"{self.path}: rule names lever {f!r}, not one of {self.levers}")
        for b in self.baselines:
            if b not in self.variants or any(r.variant == b for r in self.rules):
                raise ValueError(f"{self.path}: baseline {b!r} must be a variant that no rule selects")
        for f in self.binds:
            if f not in self.levers:
                raise ValueError(f"{self.path}: binds lever {f!r}, not one of {self.levers}")

    @property
    def family(self) -> str:
        return self.path.split(".", 1)[0]

    @cached_property
    def symbols(self) -> Mapping[str, str]:
        """Shape key -> the symbol its conditions write it as (``t`` -> ``T``)."""
        out: dict[str, str] = {}
        for r in self.rules:
            for c in r.shape:
                out.update(c.symbols)
        return MappingProxyType(out)

    @cached_property
    def assumed(self) -> Mapping[str, bool]:
        """The value each lever takes when a caller's mapping leaves it out
        or holds None: its default in the catalogs of the engines that have
        the path (an unset tri-state is off), where they agree; a lever the
        engines default differently has no one value to assume and is
        refused."""
        from leverctl.levers.catalog import SHIPPED

        out: dict[str, bool] = {}
        for f in self.levers:
            found = {d[f] for d in map(_catalog_defaults, self.engines or SHIPPED) if f in d}
            if len(found) != 1:
                raise ValueError(
                    f"{self.path}: lever {f!r} has {'no' if not found else 'no single'} default "
                    f"in the engines' catalogs"
                )
            out[f] = found.pop()
        return MappingProxyType(out)

    def value(self, levers: Mapping[str, Any], name: str) -> bool:
        v = levers.get(name)
        return self.assumed[name] if v is None else bool(v)

    def select(self, levers: Mapping[str, Any], shape: Dims) -> Choice:
        """The variant these lever values take at ``shape``."""
        unmet: list[str] = []
        for rule in self.rules:
            if any(self.value(levers, f) != want for f, want in rule.levers.items()):
                continue
            failed = [c for c in rule.shape if not c.test(shape)]
            if failed:
                unmet.extend(w for w in (c.why(shape) for c in failed) if w)
                continue
            # a condition failed by two rules is one reason, said once
            return Choice(rule.variant, rule.note.format(**_dims(shape), unmet=" and ".join(dict.fromkeys(unmet))))
        raise AssertionError(f"{self.path}: no rule matched")  # __post_init__ forbids it

    def cases(self, levers: Mapping[str, Any]) -> tuple[Case, ...]:
        """What these lever values select, shape by shape, in words: the
        rules they reach, in order; the last one holds at every other shape."""
        out: list[Case] = []
        skipped: list[str] = []
        for rule in self.rules:
            if any(self.value(levers, f) != want for f, want in rule.levers.items()):
                continue
            when = {c.text for c in rule.shape}
            if any(set(c.when) <= when for c in out):
                continue  # an earlier case holds wherever this rule would: never reached
            note = rule.note.format_map(_Symbols(self.symbols, " or ".join(skipped))) if rule.note else ""
            out.append(Case(tuple(c.text for c in rule.shape), rule.variant, note))
            if not rule.shape:
                break
            skipped.extend(c.negation for c in rule.shape if c.negation)
        return tuple(out)

    def cond(self, text: str) -> Cond:
        for rule in self.rules:
            for c in rule.shape:
                if c.text == text:
                    return c
        raise KeyError(text)


@dataclass(frozen=True)
class Case:
    """One row of what a setting selects: ``variant`` where every condition
    in ``when`` holds (and no earlier case's did); ``when`` empty: every
    other shape."""

    when: tuple[str, ...]
    variant: str
    note: str = ""

    def holds(self, table: Table, shape: Dims) -> bool:
        return all(table.cond(t).test(shape) for t in self.when)
