"""Lever kinds: the closed set of parsing rules the engines use.

Each rule is a small pure function of what the engine can observe about its
variables: ``value(var)`` (the string, or ``None`` when the variable is unset
*or not valid UTF-8*, as Rust's ``std::env::var(..).ok()`` makes it) and
``present(var)`` (set at all, whatever the bytes, as ``var_os(..).is_some()``).
Values are compared as exact strings and never trimmed: ``" 1"`` is not ``"1"``.

A catalog entry names its kind; adding an engine is adding data, not code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

USIZE_MAX = 2**64 - 1


@dataclass(frozen=True)
class Drafter:
    """The MTP drafter context policy: one value because the halves are coupled
    (carrying context without prefilling it is meaningless; prefill without
    carry is a known loss)."""

    prefill: bool
    carry: bool

    def to_json(self) -> dict[str, bool]:
        return {"prefill": self.prefill, "carry": self.carry}

    def __str__(self) -> str:
        if self.prefill and self.carry:
            return "both"
        if self.prefill:
            return "prefill-only"
        return "off"


DRAFTER_BOTH = Drafter(True, True)
DRAFTER_PREFILL_ONLY = Drafter(True, False)
DRAFTER_OFF = Drafter(False, False)


@dataclass(frozen=True)
class Observed:
    """What a rule may look at. ``build`` holds the recipe's build defaults and
    ``config`` the serve settings; only the build-default and config rules read
    them."""

    value: Callable[[str], str | None]
    present: Callable[[str], bool]
    build: Mapping[str, Any]
    config: Mapping[str, Any]


# ── the string rules, one line each ──────────────────────────────────────────


def opt_in(v: str | None) -> bool:
    return v == "1"


def opt_out(v: str | None) -> bool:
    return v != "0"


def kill_switch(v: str | None) -> bool:
    return v != "1"


def truthy_ci(v: str | None) -> bool:
    # ASCII-only case folding, as Rust's eq_ignore_ascii_case: "TRUE" matches,
    # a Turkish dotted capital I or a fullwidth letter does not.
    return v is not None and (v == "1" or (v.isascii() and v.lower() == "true"))


def truthy_cs(v: str | None) -> bool:
    return v in ("1", "true")


def tristate(v: str | None) -> bool | None:
    return True if v == "1" else False if v == "0" else None


def parse_usize(v: str | None) -> int | None:
    """Rust's ``usize::from_str`` (64-bit): ASCII digits with one optional
    leading ``+``; no whitespace, underscores, ``-`` or non-ASCII digits; an
    overflow fails. Returns None where Rust returns Err."""
    if v is None:
        return None
    digits = v[1:] if v.startswith("+") else v
    if not digits or not all("0" <= c <= "9" for c in digits):
        return None
    n = int(digits)
    return n if n <= USIZE_MAX else None


def count_opt(v: str | None) -> int | None:
    n = parse_usize(v)
    return None if n in (None, 0) else n


def count_clamped(v: str | None, cap: int) -> int:
    n = parse_usize(v)
    return 0 if n is None else min(n, cap)


# ── kinds: how a catalog entry's variables become its field's value ──────────


@dataclass(frozen=True)
class Kind:
    name: str
    nvars: int  # how many variables the rule reads
    title: str  # the rule in a few words
    values: tuple[tuple[str, str], ...]  # (what you write, what happens)
    traps: tuple[str, ...]
    reads_env: bool = True
    # A lint hint: the values a user most likely means as "on" / "off".
    on_value: str | None = "1"
    off_value: str | None = None


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "opt_in",
            1,
            "opt-in: on only for the exact string 1",
            (("1", "on"), ("anything else, or unset", "off")),
            ("'true', 'yes', 'on' and ' 1' are all ignored: only the exact string 1 turns it on",),
            off_value=None,
        ),
        Kind(
            "opt_out",
            1,
            "opt-out: on unless the exact string 0",
            (("0", "off"), ("anything else, or unset", "on")),
            ("'false', 'no', 'off' and '' keep it ON: only the exact string 0 turns it off",),
            on_value=None,
            off_value="0",
        ),
        Kind(
            "kill_switch",
            1,
            "kill switch: on unless the exact string 1",
            (("1", "off (the kill switch fires)"), ("anything else, or unset", "on")),
            (
                "'true' or '0' do not fire the kill switch: only the exact string 1 turns the path off",
                "the variable's name says NO_, so 1 means off: the field is stored positively",
            ),
            on_value=None,
            off_value="1",
        ),
        Kind(
            "truthy_ci",
            1,
            "truthy: 1 or true, true in any ASCII case",
            (("1, true, TRUE, TrUe", "on"), ("anything else, or unset", "off")),
            ("'yes' and 'on' are ignored", "surrounding whitespace is not trimmed: ' true' is off"),
        ),
        Kind(
            "truthy_cs",
            1,
            "truthy, case-sensitive: exactly 1 or true",
            (("1 or true", "on"), ("TRUE, True, anything else, or unset", "off")),
            ("'True' and 'TRUE' are ignored: the match is case-sensitive",),
        ),
        Kind(
            "presence",
            1,
            "presence: set at all turns it on, whatever the value",
            (("any value, '' and 0 included", "on"), ("unset", "off")),
            ("'=0' and '=false' turn it ON: only unsetting the variable turns it off",),
            on_value="1",
            off_value=None,
        ),
        Kind(
            "presence_kill",
            1,
            "presence kill switch: on unless the variable is present",
            (("any value, '' and 0 included", "off"), ("unset", "on")),
            ("'=0' turns the path OFF: any value counts, only unsetting restores it",),
            on_value=None,
            off_value="1",
        ),
        Kind(
            "tristate",
            1,
            "tri-state: 1 on, 0 off, anything else unset (the call site decides)",
            (("1", "on"), ("0", "off"), ("anything else, or unset", "unset: the call site's own default")),
            ("'true' and 'false' mean unset, not on or off",),
            on_value="1",
            off_value="0",
        ),
        Kind(
            "count_opt",
            1,
            "optional count: a positive integer; 0 or unparseable means unset",
            (
                ("a decimal count like 4 or +4, up to 18446744073709551615 (usize)", "that count"),
                ("0, unparseable (a count beyond usize included), or unset", "unset"),
            ),
            (
                "parsed strictly: ' 4', '4 ', '4.0', '1_000' and '-1' all mean unset",
                "a count beyond 18446744073709551615 does not fit a usize: Rust's parse rejects it, so it means "
                "unset, not the largest count",
            ),
            on_value=None,
        ),
        Kind(
            "count_clamped",
            1,
            "clamped count: unset or unparseable is 0 (off), capped",
            (("a decimal count k", "k, capped at the lever's maximum"), ("unparseable, or unset", "0 (off)")),
            (
                "values above the cap are silently clamped",
                "' 3' (leading space) is unparseable and means off",
                "a count beyond 18446744073709551615 does not fit a usize: Rust's parse rejects it, so it means "
                "off (0), not the cap",
            ),
            on_value=None,
        ),
        Kind(
            "drafter",
            2,
            "drafter context: an off switch, then a prefill-only switch, each exact 1",
            (
                ("first variable = 1", "off: no prefill, no carry"),
                ("second variable = 1 (first not 1)", "prefill without carry"),
                ("neither is 1", "both prefill and carry"),
            ),
            ("prefill without carry is a measured loss of about 0.9 s per turn", "'true' is ignored by both variables"),
        ),
        Kind(
            "build_default",
            1,
            "build default: the build's default, turned off by the variable's presence",
            (("unset", "the build default (on where the build does not declare it)"), ("any value, 0 included", "off")),
            ("'=0' turns it OFF: presence is what counts",),
            on_value=None,
            off_value="1",
        ),
        Kind(
            "opt_in_vetoed",
            2,
            "opt-in (exact 1) that a second variable vetoes by presence",
            (
                ("first = 1 and second unset", "on"),
                ("second set to anything", "off, whatever the first says"),
                ("first anything but 1", "off"),
            ),
            ("setting the second variable, even to 0, overrides the first",),
        ),
        Kind(
            "config",
            0,
            "configuration: from the serve settings, never from the environment",
            (
                ("--max-batch-size N", "N, which takes precedence over the recipe's [serve] max_batch_size"),
                ("the recipe's [serve] max_batch_size = N", "N"),
                ("neither", "1"),
                ("N outside 1..4294967295 (the engine's u32)", "refused as bad input"),
            ),
            ("exporting a variable for it has no effect",),
            reads_env=False,
            on_value=None,
        ),
    )
}


def evaluate(
    kind: str, vars: Sequence[str], obs: Observed, *, field: str, default: Any, cap: int | None = None
) -> tuple[Any, str | None]:
    """The field's value and the variable that decided it (None when the
    default, build or config decided)."""
    v = obs.value
    p = obs.present
    if kind == "config":
        return obs.config.get(field, default), None
    var = vars[0]
    if kind == "opt_in":
        return opt_in(v(var)), var
    if kind == "opt_out":
        return opt_out(v(var)), var
    if kind == "kill_switch":
        return kill_switch(v(var)), var
    if kind == "truthy_ci":
        return truthy_ci(v(var)), var
    if kind == "truthy_cs":
        return truthy_cs(v(var)), var
    if kind == "presence":
        return p(var), var
    if kind == "presence_kill":
        return not p(var), var
    if kind == "tristate":
        return tristate(v(var)), var
    if kind == "count_opt":
        return count_opt(v(var)), var
    if kind == "count_clamped":
        return count_clamped(v(var), cap if cap is not None else USIZE_MAX), var
    if kind == "drafter":
        off_var, prefill_var = vars
        if v(off_var) == "1":
            return DRAFTER_OFF, off_var
        if v(prefill_var) == "1":
            return DRAFTER_PREFILL_ONLY, prefill_var
        return DRAFTER_BOTH, None
    if kind == "build_default":
        if p(var):
            return False, var
        return bool(obs.build.get(field, default)), None
    if kind == "opt_in_vetoed":
        on_var, veto_var = vars
        if p(veto_var):
            return False, veto_var
        return opt_in(v(on_var)), on_var
    raise ValueError(f"unknown lever kind {kind!r}")
