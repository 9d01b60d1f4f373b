"""Compare two runs, record by record, against their measured noise: a gate
that CI can fail on.

Records match on their identity ``(kernel, shape label, config)`` (``by
variant``), or on ``(kernel, shape label)`` alone (``by path``): the lever
A/B, where NEW ran with other levers than BASE and a path's variant or lever
set changed with them, so the same kernel path at the same shape is what
pairs. ``by="auto"`` takes path matching when every kernel path and shape
appears once on each side and the two sides' levers differ for some of them
(two ``bench`` runs, one with ``--set``), else variant matching (sweeps,
``--all-variants``); the comparison says which (``matched_by`` and a note).
For a pair that passed on both sides and carries timings:

* each side's *spread* is ``(p80 - p20) / median`` of its samples (or its
  recorded ``noise`` when the percentiles are absent);
* the *change* is ``new_median / base_median - 1`` (positive: slower);
* **SAME** when ``|change|`` is within the larger spread (the difference is
  inside the noise) or within the threshold (too small to care about);
* else **NOISY** when either spread exceeds twice the threshold and the
  change is within twice that spread: the runs cannot tell, rerun them on a
  quieter machine (a change beyond twice even a large spread is real: a
  kernel three times slower fails however noisy the runs);
* else **FASTER** or **SLOWER**. A SLOWER pair is a regression: it is beyond
  both the threshold and the noise.

Status changes come first: pass -> fail is **NEW FAIL** (gates like a
regression), fail -> pass **FIXED**, fail -> fail **STILL FAILS**. Two
simulator records carry no timings; then only statuses are compared
(**PASS**), and the result says so. A passing pair whose timing is unusable
on either side (a GPU record without one, NaN, infinite, negative, or a
simulator record against a GPU one) is **UNTIMED**, a failure: the gate
never turns a pair it cannot time into a silent pass.

Pairs that both carry a profile (``bench --profile``, made for the same
architecture) are compared like timings (:func:`leverctl.profile.block.regressions`):
new or more spills or local memory, lower occupancy, global sector
efficiency down by more than 5 points, or more shared-memory bank
conflicts is a **profile regression**, named by its kernel and figure.

The gate: exit 1 when anything regressed, newly failed or is UNTIMED; on a
profile regression; when a
BASE record has no counterpart in NEW (a kernel or configuration vanished;
``allow_missing`` opts out); when a configuration only NEW has fails; or when
the runs have nothing in common. Else 0. Entries only NEW has are listed.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Sequence

from ..errors import UserError
from .records.columns import Records, Tables, identity_keys
from .records.made import Made
from .records.read import ResultSet, load_all
from .records.rules import median_us, ran_on_gpu, spread, timed, timing_problem
from .records.schema import IDENTITY

DEFAULT_THRESHOLD = 5.0  # percent
NOISY_FACTOR = 2.0  # a spread beyond this many thresholds makes a pair NOISY
_EPS = 1e-9  # edges are inclusive: a change exactly at the noise is SAME

# Display and sort order: what a reviewer must see first.
VERDICTS = ("NEW FAIL", "SLOWER", "UNTIMED", "STILL FAILS", "FIXED", "NOISY", "FASTER", "SAME", "PASS")
GATING = ("NEW FAIL", "SLOWER", "UNTIMED")


class Entry(NamedTuple):  # one per matched record: a million, at cluster scale (a tuple is made fastest)
    kernel: str
    variant: str
    base_variant: str
    shape: str
    config: str
    verdict: str
    base_status: str
    new_status: str
    base_us: float | None = None
    new_us: float | None = None
    change: float | None = None  # new/base - 1
    base_spread: float | None = None
    new_spread: float | None = None
    note: str = ""
    base_config: str = ""  # BASE's lever set ("" or the config: the same)

    @property
    def regressed(self) -> bool:
        return self.verdict in GATING

    def row(self) -> tuple:
        """The entry's JSON values in the order of ``_TABLE_KEYS`` (``base_variant`` None where it is the variant)."""
        (
            kernel,
            variant,
            base_variant,
            shape,
            config,
            verdict,
            base_status,
            new_status,
            base_us,
            new_us,
            change,
            base_spread,
            new_spread,
            note,
            base_config,
        ) = self
        return (
            kernel,
            variant,
            shape,
            config,
            verdict,
            base_status,
            new_status,
            base_us,
            new_us,
            None if change is None else round(100 * change, 3),
            None if base_spread is None else round(100 * base_spread, 3),
            None if new_spread is None else round(100 * new_spread, 3),
            base_variant if base_variant != variant else None,
            note,
            base_config if base_config and base_config != config else None,
        )

    def to_json(self) -> dict[str, Any]:
        from ..jsontext import Table

        return Table(_TABLE_KEYS, _TABLE_KINDS, [self.row()]).as_list()[0]


_TABLE_KEYS = (
    "kernel",
    "variant",
    "shape",
    "config",
    "verdict",
    "base_status",
    "new_status",
    "base_us",
    "new_us",
    "change_pct",
    "base_spread_pct",
    "new_spread_pct",
    "base_variant",
    "note",
    "base_config",
)
_TABLE_KINDS = ("str",) * 7 + ("num",) * 5 + ("str?", "str", "str?")


_FIGURES = ("base_us", "new_us", "change", "base_spread", "new_spread")
_NAMES = {
    "kernel": "kernels",
    "shape": "shapes",
    "config": "configs",
    "variant": "variants",
    "base_variant": "variants",
    "base_config": "configs",
}


class Entries(Made):
    """The matched pairs' entries, in display order (by verdict, in
    ``VERDICTS``' order, then kernel, shape and configuration), held as
    columns: a million pairs at cluster scale. Indexing makes an
    :class:`Entry`. ``cols``: ``kernel``, ``shape``, ``config``, ``variant``,
    ``base_variant`` (numbers in ``tables``), ``verdict`` (a place in
    VERDICTS), the figures (NaN: none), ``base_status`` and ``new_status``
    (True: pass) and ``note`` (a list of strings)."""

    def __init__(self, tables: Any, cols: dict):
        self.tables = tables
        self.cols = cols

    def __len__(self) -> int:
        return len(self.cols["verdict"])

    def made(self, i: int) -> Entry:
        c, t = self.cols, self.tables
        figs = [float(c[k][i]) for k in _FIGURES]
        return Entry(
            *(getattr(t, _NAMES[k]).values[c[k][i]] for k in ("kernel", "variant", "base_variant", "shape", "config")),
            VERDICTS[c["verdict"][i]],
            _status(c["base_status"][i]),
            _status(c["new_status"][i]),
            *(None if x != x else x for x in figs),
            c["note"][i],
            t.configs.values[c["base_config"][i]],
        )

    def counts(self) -> dict[str, int]:
        import numpy as np

        got = np.bincount(self.cols["verdict"], minlength=len(VERDICTS)).tolist()
        return {v: n for v, n in zip(VERDICTS, got) if n}

    def any_timed(self) -> bool:
        c = self.cols
        return bool(((c["base_us"] == c["base_us"]) & (c["new_us"] == c["new_us"])).any())

    def select(self, verdicts: Sequence[str]) -> "Entries":
        """The entries of these verdicts, in order."""
        import numpy as np

        keep = np.isin(self.cols["verdict"], [VERDICTS.index(v) for v in verdicts])
        return self.take(np.flatnonzero(keep))

    def take(self, idx: Any) -> "Entries":
        note = self.cols["note"]
        return Entries(
            self.tables, {k: ([note[i] for i in idx.tolist()] if k == "note" else v[idx]) for k, v in self.cols.items()}
        )

    def json_rows(self) -> "_EntryRows":
        return _EntryRows(self)

    @classmethod
    def of_pairs(
        cls, B: Records, N: Records, bi: Any, ni: Any, threshold: float, kinds: tuple[str | None, str | None]
    ) -> "Entries":
        """The entries of the pairs (``B`` record ``bi[k]``, ``N`` record
        ``ni[k]``; ``columns.Records`` numbered in one ``Tables``)."""
        import numpy as np

        cb, cn = B.cols, N.cols
        n = len(bi)
        bu, nu = cb["median"][bi], cn["median"][ni]
        usual = (
            cb["passed"][bi]
            & cn["passed"][ni]
            & (bu == bu)
            & (nu == nu)
            & B.ran_on_gpu(bi, kinds[0])
            & N.ran_on_gpu(ni, kinds[1])
        )
        bsp, nsp = B.spreads(bi), N.spreads(ni)
        verdict_code, change = verdicts(bu, nu, bsp, nsp, threshold)
        out = {
            "kernel": cb["kernel"][bi],
            "shape": cb["shape"][bi],
            "config": cn["config"][ni],
            "base_config": cb["config"][bi],
            "variant": cn["variant"][ni],
            "base_variant": cb["variant"][bi],
            "verdict": verdict_code,
            "base_us": bu,
            "new_us": nu,
            "change": change,
            "base_spread": bsp,
            "new_spread": nsp,
            "base_status": np.ones(n, np.bool_),
            "new_status": np.ones(n, np.bool_),
        }
        note = [""] * n
        changed = np.flatnonzero(usual & (out["variant"] != out["base_variant"]))
        vnames = B.tables.variants.values
        for k in changed.tolist():
            note[k] = f"variant changed: {vnames[out['base_variant'][k]]} -> {vnames[out['variant'][k]]}"
        for k in np.flatnonzero(~usual).tolist():  # every other pair, record by record
            e = _entry(B.record(int(bi[k])), N.record(int(ni[k])), threshold, kinds)
            out["verdict"][k] = VERDICTS.index(e.verdict)
            out["base_status"][k] = e.base_status == "pass"
            out["new_status"][k] = e.new_status == "pass"
            for f in _FIGURES:
                x = getattr(e, f)
                out[f][k] = math.nan if x is None else x
            note[k] = e.note
        # Display order: verdict, then kernel, shape and configuration by their text.
        ranks = [_text_rank(getattr(B.tables, _NAMES[k]).values)[out[k]] for k in ("config", "shape", "kernel")]
        order = np.lexsort((*ranks, out["verdict"]))
        out = {k: v[order] for k, v in out.items()}
        out["note"] = list(map(note.__getitem__, order.tolist()))
        return cls(B.tables, out)


def _status(passed: Any) -> str:
    return "pass" if passed else "fail"


def _text_rank(names: list[str]) -> Any:
    """Each name's place among them in text order."""
    import numpy as np

    rank = np.empty(len(names), np.int64)
    rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    return rank


def verdicts(base_us: Any, new_us: Any, base_spread: Any, new_spread: Any, threshold_pct: float) -> tuple:
    """The verdict of each pair of timed, passing records (the rule in the
    module notes), on arrays: its place in VERDICTS, and the change."""
    import numpy as np

    with np.errstate(invalid="ignore", divide="ignore"):
        change = new_us / base_us - 1.0
    noise = np.maximum(base_spread, new_spread)
    thr = threshold_pct / 100.0
    mag = np.abs(change)
    same = (mag <= noise + _EPS) | (mag <= thr + _EPS)
    noisy = ~same & (noise > NOISY_FACTOR * thr + _EPS) & (mag <= NOISY_FACTOR * noise + _EPS)
    code = np.where(change > 0, VERDICTS.index("SLOWER"), VERDICTS.index("FASTER"))
    code = np.where(noisy, VERDICTS.index("NOISY"), code)
    code = np.where(same, VERDICTS.index("SAME"), code).astype(np.int8)
    return code, change


class _EntryRows:
    """The entries' JSON rows (``Entry.row``), made a slice at a time, column by column."""

    def __init__(self, entries: Entries):
        self._e = entries

    def __len__(self) -> int:
        return len(self._e)

    def __getitem__(self, i: slice) -> list[tuple]:
        c, t = self._e.cols, self._e.tables

        def texts(k: str) -> list:
            return list(map(getattr(t, _NAMES[k]).values.__getitem__, c[k][i].tolist()))

        def us(k: str) -> list:
            return [None if x != x else x for x in c[k][i].tolist()]

        def pct(k: str) -> list:
            return [None if x != x else round(100 * x, 3) for x in c[k][i].tolist()]

        variant, base_variant = texts("variant"), texts("base_variant")
        config, base_config = texts("config"), texts("base_config")
        return list(
            zip(
                texts("kernel"),
                variant,
                texts("shape"),
                config,
                map(VERDICTS.__getitem__, c["verdict"][i].tolist()),
                map(_status, c["base_status"][i].tolist()),
                map(_status, c["new_status"][i].tolist()),
                us("base_us"),
                us("new_us"),
                pct("change"),
                pct("base_spread"),
                pct("new_spread"),
                [None if b == v else b for b, v in zip(base_variant, variant)],
                c["note"][i],
                [None if b == v else b for b, v in zip(base_config, config)],
            )
        )


class ProfileRegression(NamedTuple):
    kernel: str
    variant: str
    shape: str
    config: str
    what: str  # "gemv_sw: occupancy 75% -> 50% (registers)"

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class OneSided(NamedTuple):
    kernel: str
    variant: str
    shape: str
    config: str
    status: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "variant": self.variant,
            "shape": self.shape,
            "config": self.config,
            "status": self.status,
        }


@dataclass(frozen=True)
class Comparison:
    base: str
    new: str
    base_device: str | None
    new_device: str | None
    threshold: float  # percent
    timed: bool  # False: no matched pair carries timings on both sides, statuses only
    entries: Entries  # the matched pairs
    only_base: list[OneSided]  # BASE records NEW lacks
    only_new: list[OneSided]
    notes: list[str] = field(default_factory=list)
    allow_missing: bool = False  # BASE records missing from NEW do not gate
    profiles_compared: int = 0  # matched pairs that both carry a profile for one architecture
    profile_regressions: list[ProfileRegression] = field(default_factory=list)
    matched_by: str = "variant"  # "path": (kernel, shape); "variant": (kernel, shape, levers)

    @property
    def regressions(self) -> list[Entry]:
        return list(self.entries.select(GATING))

    @property
    def new_failures_only_new(self) -> list[OneSided]:
        return [o for o in self.only_new if o.status == "fail"]

    def gate_reasons(self) -> list[str]:
        """Why the comparison fails, one phrase each; empty when it passes."""
        out = []
        c = self.counts()
        for v in GATING:
            if c.get(v):
                out.append(f"{c[v]} {v}")
        if self.profile_regressions:
            out.append(f"{len(self.profile_regressions)} profile regressions")
        if self.new_failures_only_new:
            out.append(f"{len(self.new_failures_only_new)} failing only in NEW")
        if self.only_base and not self.allow_missing:
            out.append(f"{len(self.only_base)} missing from NEW")
        if not self.entries:
            out.append("nothing in common")
        return out

    @property
    def gated(self) -> bool:
        return bool(self.gate_reasons())

    @property
    def exit_code(self) -> int:
        return 1 if self.gated else 0

    def counts(self) -> dict[str, int]:
        return self.entries.counts()

    def to_json(self, lazy: bool = False) -> dict[str, Any]:
        """The comparison as JSON; ``lazy``: the entries are made as
        :mod:`leverctl.jsontext` writes them, not all at once."""
        from ..jsontext import Table

        return {
            "schema": "leverctl.compare/1",
            "base": {"source": self.base, "device": self.base_device},
            "new": {"source": self.new, "device": self.new_device},
            "threshold_pct": self.threshold,
            "timed": self.timed,
            "allow_missing": self.allow_missing,
            "matched_by": self.matched_by,
            "notes": list(self.notes),
            "matched": len(self.entries),
            "counts": self.counts(),
            "regressed": self.gated,
            "gate": self.gate_reasons(),
            "entries": Table(_TABLE_KEYS, _TABLE_KINDS, self.entries.json_rows())
            if lazy
            else [e.to_json() for e in self.entries],
            "only_base": [o.to_json() for o in self.only_base],
            "only_new": [o.to_json() for o in self.only_new],
            "profile": {
                "compared": self.profiles_compared,
                "regressions": [p.to_json() for p in self.profile_regressions],
            },
        }


def verdict(
    base_us: float, new_us: float, base_spread: float, new_spread: float, threshold_pct: float
) -> tuple[str, float]:
    """The verdict for one pair of timed, passing records, and the change:
    :func:`verdicts` of the one pair."""
    import numpy as np

    code, change = verdicts(
        *(np.array([x], np.float64) for x in (base_us, new_us, base_spread, new_spread)), threshold_pct
    )
    return VERDICTS[int(code[0])], float(change[0])


def check_devices(base: ResultSet, new: ResultSet, allow_different: bool) -> str | None:
    """A UserError when the runs come from different devices (unless allowed);
    else a note when they do and it was allowed, or None."""
    bk, nk = base.device_kind, new.device_kind
    bn, nn = base.device_name, new.device_name
    if bk and nk and bk != nk:
        why = (
            f"BASE ran on {bn or bk} ({bk}), NEW on {nn or nk} ({nk}): "
            "a simulator run has no timings to compare with a GPU's"
        )
    elif bn and nn and bn != nn:
        why = f"BASE ran on {bn}, NEW on {nn}: timings from different devices are not comparable"
    else:
        return None
    if not allow_different:
        raise UserError(f"{why} (pass --allow-different-device to compare anyway)")
    return why


def compare(
    base: ResultSet,
    new: ResultSet,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    allow_different_device: bool = False,
    allow_missing: bool = False,
    by: str = "auto",
) -> Comparison:
    """Match ``base`` and ``new`` record by record, on their columns
    (``new``'s numbered in ``base``'s tables first where they are not),
    ``by`` variant, path or ``auto`` (the module notes).

    The usual pair, two records that passed on a GPU with their timing
    figures, is judged on arrays, a million at once (:func:`verdicts`, the
    rule of :func:`verdict`); every other pair by :func:`_entry`, record by
    record."""
    import numpy as np

    _check_threshold(threshold)
    notes: list[str] = []
    dev_note = check_devices(base, new, allow_different_device)
    if dev_note:
        notes.append(dev_note)
    names = (base.device_name, new.device_name)
    kinds = (base.device_kind, new.device_kind)
    B, N = base.records, new.records
    if N.tables is not B.tables:
        N = B.tables.adopt(N)
    n_b = len(B)
    cols = {k: np.concatenate([B.cols[k], N.cols[k]]) for k in IDENTITY}
    by, bk, nk = _match_keys(cols, n_b, by, notes)
    # Each BASE record's counterpart in NEW (identities are unique on each side).
    order = np.argsort(nk, kind="stable")
    at = np.searchsorted(nk[order], bk)
    at[at >= len(nk)] = 0
    hit = nk[order][at] == bk if len(nk) else np.zeros(n_b, np.bool_)
    bi = np.flatnonzero(hit)
    ni = order[at[hit]]
    matched_new = np.zeros(len(N), np.bool_)
    matched_new[ni] = True
    only_base = [_one(B.record(i)) for i in np.flatnonzero(~hit).tolist()]
    only_new = [_one(N.record(j)) for j in np.flatnonzero(~matched_new).tolist()]
    entries = Entries.of_pairs(B, N, bi, ni, threshold, kinds)
    compared, regressed = _profiles(B, N, bi, ni, notes)
    c = _comparison(base, new, names, threshold, entries, only_base, only_new, notes, allow_missing)
    return dataclasses.replace(c, profiles_compared=compared, profile_regressions=regressed, matched_by=by)


BY = ("auto", "path", "variant")


def _match_keys(cols: dict, n_b: int, by: str, notes: list[str]) -> tuple[str, Any, Any]:
    """``(by, BASE keys, NEW keys)``: the matching chosen (``by``, or for
    ``auto`` what the records imply) and each record's key under it."""
    import numpy as np

    _check_by(by)
    variant_keys = identity_keys(cols)
    path_keys = identity_keys({**cols, "config": np.zeros_like(cols["config"])})
    pb, pn = path_keys[:n_b], path_keys[n_b:]
    unique = [len(np.unique(k)) == len(k) for k in (pb, pn)]
    if by == "path" and not all(unique):
        side = "BASE" if not unique[0] else "NEW"
        raise UserError(
            f"--by path: {side} holds several records of one kernel path and shape (several variants or "
            "lever sets, as a sweep or --all-variants makes): they cannot pair by path; use --by variant"
        )
    if by == "auto":
        by = "variant"
        if all(unique):
            common, ib, inn = np.intersect1d(pb, pn, return_indices=True)
            cb, cn = cols["config"][:n_b][ib], cols["config"][n_b:][inn]
            if (cb != cn).any():
                by = "path"
    if by == "path":
        notes.append(
            "matched by kernel path and shape (--by path): the runs set different levers, so each pair "
            "shows both sides' variant and levers; --by variant matches the lever sets too"
        )
        return by, pb, pn
    return by, variant_keys[:n_b], variant_keys[n_b:]


def _profiles(B: Records, N: Records, bi: Any, ni: Any, notes: list[str]) -> tuple[int, list[ProfileRegression]]:
    """The matched pairs' profiles compared: how many pairs carried one on
    both sides for one architecture, and what regressed."""
    if not B.extras or not N.extras:
        return 0, []
    from ..profile.block import regressions

    compared, out, archs = 0, [], set()
    for i, j in zip(bi.tolist(), ni.tolist()):
        b, n = (B.extras.get(i) or {}).get("profile"), (N.extras.get(j) or {}).get("profile")
        if not b or not n:
            continue
        if b["arch"] != n["arch"]:
            archs.add((b["arch"], n["arch"]))
            continue
        compared += 1
        rec = N.record(j)
        for what in regressions(b, n):
            out.append(ProfileRegression(rec["kernel"], rec["variant"], rec["shape"]["label"], rec["config"], what))
    for ba, na in sorted(archs, key=str):
        notes.append(f"profiles made for {ba} in BASE and {na} in NEW are not compared")
    return compared, out


def compare_paths(
    base: Any,
    new: Any,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    allow_different_device: bool = False,
    allow_missing: bool = False,
    by: str = "auto",
) -> tuple[Comparison, ResultSet, ResultSet]:
    """:func:`compare` of two result paths, and the two result sets read
    (for what reading them tolerated), as columns numbered alike."""
    _check_threshold(threshold)
    _check_by(by)
    b, n = load_all([base, new], Tables())
    for got in (b, n):
        if isinstance(got, UserError):
            raise got
    return (
        compare(
            b,
            n,
            threshold=threshold,
            allow_different_device=allow_different_device,
            allow_missing=allow_missing,
            by=by,
        ),
        b,
        n,
    )


def _check_by(by: str) -> None:
    if by not in BY:
        raise UserError(f"--by must be one of {', '.join(BY)}, not {by!r}")


def _check_threshold(threshold: float) -> None:
    if not threshold >= 0:
        raise UserError(f"--threshold must be a percentage of at least 0, not {threshold}")


def _comparison(
    base: ResultSet,
    new: ResultSet,
    names: tuple,
    threshold: float,
    entries: "Entries",
    only_base: list[OneSided],
    only_new: list[OneSided],
    notes: list[str],
    allow_missing: bool,
) -> Comparison:
    if entries.counts().get("PASS"):
        notes.append("no timings on either side (simulator runs): statuses compared only")
    return Comparison(
        base.source,
        new.source,
        names[0],
        names[1],
        threshold,
        entries.any_timed(),
        entries,
        only_base,
        only_new,
        notes,
        allow_missing,
    )


def _one(rec: Mapping[str, Any]) -> OneSided:
    return OneSided(rec["kernel"], rec["variant"], rec["shape"]["label"], rec["config"], rec["status"])


def _entry(b: Mapping[str, Any], n: Mapping[str, Any], threshold: float, kinds: tuple[str | None, str | None]) -> Entry:
    """The entry of a pair that is not the usual one (see :meth:`Entries.of_pairs`), by its records."""
    common = dict(
        kernel=n["kernel"],
        variant=n["variant"],
        base_variant=b["variant"],
        shape=n["shape"]["label"],
        config=n["config"],
        base_config=b["config"],
        base_status=b["status"],
        new_status=n["status"],
    )
    bs, ns = b["status"], n["status"]
    if bs == "pass" and ns == "fail":
        return Entry(verdict="NEW FAIL", note=n.get("note", "") or _err(n), **common)
    if bs == "fail" and ns == "pass":
        return Entry(verdict="FIXED", **common)
    if bs == "fail" and ns == "fail":
        return Entry(verdict="STILL FAILS", note=n.get("note", "") or _err(n), **common)
    if not ran_on_gpu(b, kinds[0]) and not ran_on_gpu(n, kinds[1]):
        return Entry(verdict="PASS", **common)  # two simulator records: nothing to time
    problems = [
        f"{side}: {why}"
        for side, rec, kind in (("BASE", b, kinds[0]), ("NEW", n, kinds[1]))
        if (why := _untimed(rec, kind))
    ]
    if problems:
        return Entry(verdict="UNTIMED", note="; ".join(problems), **common)
    return _timed(b, n, median_us(b), median_us(n), spread(b), spread(n), threshold)


def _timed(
    b: Mapping[str, Any], n: Mapping[str, Any], bu: float, nu: float, bsp: float, nsp: float, threshold: float
) -> Entry:
    """The entry of a pair that passed on both sides with usable timings
    (``b`` the BASE record, ``n`` NEW's: the same kernel and shape)."""
    v, change = verdict(bu, nu, bsp, nsp, threshold)
    variant = n["variant"]
    note = f"variant changed: {b['variant']} -> {variant}" if b["variant"] != variant else ""
    return Entry(
        b["kernel"],
        variant,
        b["variant"],
        b["shape"]["label"],
        n["config"],
        v,
        "pass",
        "pass",
        bu,
        nu,
        change,
        bsp,
        nsp,
        note,
        b["config"],
    )


def _untimed(rec: Mapping[str, Any], kind: str | None) -> str | None:
    """Why a passing record has no usable timing, or None."""
    why = timing_problem(rec, kind)
    if why or timed(rec):
        return why
    return "no timing (a simulator record)" if not ran_on_gpu(rec, kind) else "no timing"


def _err(rec: Mapping[str, Any]) -> str:
    e = rec.get("error")
    if isinstance(e, dict) and e.get("rel") is not None:
        return f"rel error {e['rel']:.3g} (tolerance {e.get('tol_rel', '?')})"
    return ""


def summary_line(c: Comparison) -> str:
    """One line: the gate's answer, what was matched and what was not."""
    counts = ", ".join(f"{v} {k}" for k, v in c.counts().items())
    matched = f"{len(c.entries)} matched" + (f" ({counts})" if counts else "")
    only_base = f"{len(c.only_base)} only in BASE"
    if c.only_base:
        only_base += " (missing from NEW" + (", allowed by --allow-missing)" if c.allow_missing else ")")
    only_new = f"{len(c.only_new)} only in NEW"
    if c.new_failures_only_new:
        only_new += f" ({len(c.new_failures_only_new)} failing)"
    reasons = c.gate_reasons()
    if not reasons:
        gate = "no regression"
    elif any(r.endswith((" SLOWER", " NEW FAIL", " profile regressions")) for r in reasons):
        gate = "REGRESSED"
    else:
        gate = "FAILED"
    why = f" [fails on: {', '.join(reasons)}]" if reasons else ""
    basis = f" (threshold {c.threshold:g} %)" if c.timed else " (statuses only: no timings)" if c.entries else ""
    prof = f"; {c.profiles_compared} profiles compared" if c.profiles_compared else ""
    return f"{gate}: {matched}; {only_base}; {only_new}{prof}{basis}{why}"
