"""``leverctl bench --weights FILE.gguf --tensor NAME``: one FFN weight
matrix read from a GGUF file, on which every dense-FFN prefill arm is run.

The file is read with the ``gguf`` package's reader (the one llama.cpp's
Python tools use; the ``leverctl[gguf]`` extra), so leverctl parses no GGUF
itself. The tensor must be an FFN projection (its name holds ``ffn_gate``,
``ffn_up`` or ``ffn_down``: ``down`` follows the name), two-dimensional
(GGUF's ``ne = [k, n]``: rows of ``k`` inputs) with ``k`` a multiple of 16
(the NVFP4 arms' block), and stored as Q4_K, F16, BF16 or F32. The Q4_K arm
reads Q4_K blocks as stored; every other format is made from the decoded
matrix (``leverctl_kernels.ffn.prefill.spec.with_weights``).

Everything here is bad input or data: :func:`read` raises ``UserError``
(one line, exit 2) for a missing extra, a file that is not GGUF, an absent
tensor (with the names closest to it) or one of the wrong type or shape,
before any kernel is loaded.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError

PATH = "ffn.prefill"
TYPES = ("Q4_K", "F16", "BF16", "F32")
BLOCK = 16  # the NVFP4 block: the arms' common multiple of k (Q4_K's 256 is the Q4_K arm's alone)


@dataclass(frozen=True)
class FfnWeights:
    """One FFN matrix: ``values`` float32 ``[n, k]`` as decoded by ``gguf``,
    and ``q4k`` its Q4_K blocks as stored (uint8 ``[n, k / 256 * 144]``)
    when the file holds Q4_K."""

    name: str
    file: str
    type: str
    down: bool
    values: Any
    q4k: Any = None

    @property
    def n(self) -> int:
        return int(self.values.shape[0])

    @property
    def k(self) -> int:
        return int(self.values.shape[1])


def _projection(name: str, where: str) -> bool:
    """True for the down projection; bad input unless ``name`` is an FFN one."""
    if "ffn_down" in name:
        return True
    if "ffn_gate" in name or "ffn_up" in name:
        return False
    raise UserError(
        f"tensor {name!r} is not a dense-FFN projection (its name holds none of ffn_gate, ffn_up, ffn_down)", where
    )


def read(file: Path, name: str) -> FfnWeights:
    try:
        import gguf
        import numpy as np
    except ImportError:
        raise UserError("--weights needs the gguf package: pip install 'leverctl[gguf]'") from None
    where = str(file)
    if not file.exists():
        raise UserError("no such file", where)
    if not file.is_file():
        raise UserError("not a regular file", where)
    try:
        with file.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise UserError(f"cannot read it ({e.strerror or e})", where) from None
    if magic != b"GGUF":
        raise UserError("not a GGUF file (it does not start with the GGUF magic)", where)
    try:
        reader = gguf.GGUFReader(str(file))
    except Exception as e:  # noqa: BLE001 - whatever the reader refuses, the file is not GGUF it can read
        why = " ".join(str(e).split())[:120] or type(e).__name__
        raise UserError(f"not a GGUF file the gguf reader can read ({why})", where) from None
    tensors = {t.name: t for t in reader.tensors}
    t = tensors.get(name)
    if t is None:
        close = difflib.get_close_matches(name, list(tensors), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f" ({len(tensors)} tensors)"
        raise UserError(f"--tensor {name}: no such tensor{hint}", where)
    kind = t.tensor_type.name
    if kind not in TYPES:
        raise UserError(f"tensor {name} is {kind}; --weights reads {', '.join(TYPES)}", where)
    shape = [int(x) for x in t.shape]
    if len(shape) != 2 or min(shape) <= 0:
        raise UserError(f"tensor {name} has shape {shape}, not a matrix", where)
    down = _projection(name, where)
    k, n = shape  # GGUF lists the fastest dimension first
    if k % BLOCK:
        raise UserError(f"tensor {name} has rows of k={k} inputs, not a multiple of {BLOCK} (an NVFP4 block)", where)
    try:
        raw = np.asarray(t.data)
        values = gguf.quants.dequantize(raw, t.tensor_type).astype(np.float32).reshape(n, k)
    except Exception as e:  # noqa: BLE001 - a truncated or inconsistent tensor
        raise UserError(f"tensor {name} cannot be decoded ({' '.join(str(e).split())[:120]})", where) from None
    if not np.all(np.isfinite(values)):
        raise UserError(f"tensor {name} holds non-finite values", where)
    q4k = np.ascontiguousarray(raw.view(np.uint8).reshape(n, -1)) if kind == "Q4_K" else None
    return FfnWeights(name, where, kind, down, np.ascontiguousarray(values), q4k)


def path_and_items(path, weights: FfnWeights, levers: dict, preset: str, model):
    """``(the path on these weights, one plan item per arm)``: each arm at
    the lever values nearest the resolved ones that select it (fewest levers
    changed), so its record names how to get it; an arm no lever setting
    selects at a shape (Q4_K where k % 256 != 0) is left out."""
    import itertools

    from leverctl_kernels.ffn.prefill.spec import with_weights

    from .plan import PlanItem

    fpath = with_weights(path, weights.name, weights.values, weights.q4k, weights.down)
    bools = [f for f in fpath.levers if isinstance(levers.get(f), bool)]
    combos = sorted(
        (dict(zip(bools, vs)) for vs in itertools.product((False, True), repeat=len(bools))),
        key=lambda c: sum(c[f] != levers[f] for f in bools),
    )
    items, skipped = [], []
    for shape in fpath.shapes(preset, model):
        for variant in fpath.variants:
            for combo in combos:
                lv = {**levers, **combo}
                choice = fpath.select(lv, shape)
                if choice.variant == variant:
                    changed = sorted(f for f in bools if combo[f] != levers[f])
                    note = "levers as resolved" if not changed else f"levers changed to select it: {', '.join(changed)}"
                    items.append(
                        PlanItem(fpath, variant, lv, shape, note + (f"; {choice.note}" if choice.note else ""))
                    )
                    break
            else:
                skipped.append((shape.label, variant))
    return fpath, items, skipped
