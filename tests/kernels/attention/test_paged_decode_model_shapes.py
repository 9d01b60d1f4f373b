"""The paged decode attention check at a model shape (Qwen3-Next, one
sequence of 32765 tokens), where the simulator is far too slow to run the
kernel: the float64 reference against

* what a correct kernel returns -- the split-K algorithm in float32 with the
  pinned split count (128 splits of 256 tokens at max_decode_seqs 1) --
  which must pass, and
* that result broken the ways a paged decode breaks -- the newest token
  dropped, one split left out of the merge, a query head reading the wrong
  KV head, one NaN -- each of which must fail.

One token of 32K moves an output by almost 1e-2 of its largest magnitude,
while float32 arithmetic stays near 3e-7 of it: ``abs_of_max`` = 1e-4
sits between them with a margin of two orders of magnitude each way.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from leverctl.bench import check as chk
from leverctl_kernels.attention import _paged, naive
from leverctl_kernels.attention.paged_decode import spec
from leverctl_kernels.attention.paged_decode.spec import PATH
from leverctl_kernels.common.bits import bf16_to_f32_np


@lru_cache(maxsize=None)
def case():
    shape = next(s for s in PATH.shapes("model", None) if s["n"] == 1 and s["ctx"] == 32768)
    shape = spec.bind({"max_decode_seqs": 1, "kv_poison": True}, shape, "atlas")
    x = PATH.make_inputs(shape, np.random.default_rng(5))
    return shape, x, PATH.reference(shape, x)["o"]


def split_k32(shape, x, *, drop_token=False, drop_split=None, wrong_group_head=None) -> np.ndarray:
    """The kernels' algorithm in float32: per split, online softmax over its
    tokens; the splits merged in order."""
    hq, hkv, d = shape["hq"], shape["hkv"], shape["d"]
    g = hq // hkv
    length = int(x["context_lens"][0]) - (1 if drop_token else 0)
    splits, per = _paged.num_splits(
        int(x["context_lens"][0]), shape["max_decode_seqs"], hkv, shape["target_ctas"], shape["min_split_blocks"]
    )
    k = naive.gather(x["k_cache"], x["block_table"][0], length).astype(np.float32)  # [L, Hkv, D]
    v = naive.gather(x["v_cache"], x["block_table"][0], length).astype(np.float32)
    q = bf16_to_f32_np(x["q"][0]).astype(np.float32)
    out = np.empty((1, hq, d), np.float32)
    scale = np.float32(1.0 / np.sqrt(d))
    for h in range(hq):
        kvh = h // g if h != wrong_group_head else (h // g + 1) % hkv
        ms, ls, accs = [], [], []
        for s in range(splits):
            if s == drop_split:
                continue
            lo, hi = s * per * 16, min((s + 1) * per * 16, length)
            sc = (k[lo:hi, kvh] @ q[h]) * scale
            m = sc.max()
            p = np.exp(sc - m, dtype=np.float32)
            ms.append(m), ls.append(p.sum(dtype=np.float32)), accs.append(p @ v[lo:hi, kvh])
        m_all = max(ms)
        w = np.exp(np.array(ms, np.float32) - m_all)
        out[0, h] = (w @ np.array(accs)) / np.float32(w @ np.array(ls))
    return out


def test_the_float32_split_k_algorithm_passes_at_the_model_shape():
    shape, x, ref = case()
    assert _paged.num_splits(int(x["context_lens"][0]), 1, 2, spec.TARGET_CTAS, spec.MIN_SPLIT_BLOCKS)[0] == 128
    fig = chk.compare({"o": split_k32(shape, x)}, {"o": ref}, PATH.tolerance)
    assert fig.passed, fig.why()
    assert fig.max_abs < 0.05 * fig.tol_abs  # far inside: the bound is not a coin toss


@pytest.mark.parametrize("broken", ["drop_token", "drop_split", "wrong_group", "nan"])
def test_each_way_a_paged_decode_breaks_fails_the_check_at_the_model_shape(broken):
    shape, x, ref = case()
    if broken == "drop_token":
        got = split_k32(shape, x, drop_token=True)
    elif broken == "drop_split":
        got = split_k32(shape, x, drop_split=77)
    elif broken == "wrong_group":
        got = split_k32(shape, x, wrong_group_head=5)
    else:
        got = split_k32(shape, x)
        got[0, 3, 100] = np.nan
    fig = chk.compare({"o": got}, {"o": ref}, PATH.tolerance)
    assert not fig.passed, (broken, fig.to_json())
