"""How a top-k routing is checked against the float64 reference.

Selected experts cannot be compared id for id: two experts whose logits
are nearly tied may come out in either order, or swap across the k-th
place, under any rounding of the gate. So the check asks two questions of
each row, and the bench compares their answers (``extra["align"]``):

* ``beyond_tie``: how many of the row's selected experts are not a valid
  top-k choice: an expert whose float64 logit lies more than the tie margin
  below the float64 k-th largest (``TIE_MARGIN`` times the row's largest
  logit magnitude, four times the rounding of a bf16 logit), an id out of
  range or repeated, or a slot never written. Must be 0.
* ``weights``: the row's weights against the float64 softmax of the
  *selected* experts' logits, renormalised over them, with the variant's
  tolerance. A router that skips renormalising, or takes the softmax in the
  wrong base, fails here whatever it selects.

``findings`` says, beside, how many selected experts differ from the float64
top-k at all (``differ``: near-ties included) and the weights' errors.
"""

from __future__ import annotations

import numpy as np

TIE_MARGIN = 2.0**-6


def _selected(logits: np.ndarray, ids: np.ndarray, top_k: int):
    ids = np.asarray(ids).astype(np.int64)
    experts = logits.shape[1]
    valid = (ids >= 0) & (ids < experts)
    safe = np.where(valid, ids, 0)
    srt = np.sort(ids, axis=1)
    repeated = np.zeros_like(valid)
    repeated[:, 1:] = srt[:, 1:] == srt[:, :-1]
    dup_rows = repeated.any(axis=1)
    mine = np.take_along_axis(logits, safe, axis=1)
    kth = np.sort(logits, axis=1)[:, -top_k][:, None]
    margin = TIE_MARGIN * np.abs(logits).max(axis=1, keepdims=True)
    beyond = ~valid | (mine < kth - margin) | dup_rows[:, None]
    return valid, mine, beyond


def weights_of_selection(logits: np.ndarray, ids: np.ndarray, top_k: int) -> np.ndarray:
    """float64 renormalised softmax weights of the experts ``ids`` selects."""
    valid, mine, _ = _selected(logits, ids, top_k)
    mine = np.where(valid, mine, -np.inf)
    p = np.exp(mine - mine.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def align(logits: np.ndarray, top_k: int, got: dict, ref: dict) -> tuple[dict, dict]:
    """(got, ref) for the comparison: ``weights`` of the kernel's selection and
    the float64 weights of that selection; ``beyond_tie`` per row against 0.
    Other outputs pass through."""
    logits = np.asarray(logits, np.float64)
    ids = np.asarray(got["ids"])
    valid, _, beyond = _selected(logits, ids, top_k)
    w = np.asarray(got["weights"], np.float64)
    w = np.where(valid, w, np.nan)
    g = {k: v for k, v in got.items() if k not in ("ids", "weights")}
    r = {k: v for k, v in ref.items() if k not in ("ids", "weights")}
    g["weights"], r["weights"] = w, weights_of_selection(logits, ids, top_k)
    g["beyond_tie"] = beyond.sum(axis=1).astype(np.float64)
    r["beyond_tie"] = np.zeros(ids.shape[0])
    return g, r


def findings(logits: np.ndarray, top_k: int, ids: np.ndarray, weights: np.ndarray) -> dict:
    """The record's ``findings["routing"]``."""
    logits = np.asarray(logits, np.float64)
    ids = np.asarray(ids).astype(np.int64)
    ref_ids = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
    differ = sum(len(set(a.tolist()) - set(b.tolist())) for a, b in zip(ids, ref_ids))
    _, _, beyond = _selected(logits, ids, top_k)
    wref = weights_of_selection(logits, ids, top_k)
    d = np.asarray(weights, np.float64) - wref
    return {
        "rows": int(ids.shape[0]),
        "slots": int(ids.size),
        "differ": int(differ),
        "beyond_tie": int(beyond.sum()),
        "tie_margin": TIE_MARGIN,
        "weights_rel": float(f"{np.linalg.norm(d) / np.linalg.norm(wref):.4g}"),
        "weights_max_abs": float(f"{np.abs(d).max():.4g}"),
    }
