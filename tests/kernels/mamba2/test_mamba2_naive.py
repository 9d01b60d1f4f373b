"""The Mamba2 float64 references against each other (NumPy only, no
kernels): the vectorised recurrence the variants are checked against
equals the plain element-by-element loop, and the chunked SSD form equals
the recurrence at chunk lengths that divide the prompt and that do not,
with the state carried out of one call into the next. The comparison is
shown to see a wrong decay and a chunk's state not carried into the next."""

from __future__ import annotations

import numpy as np
import pytest

from leverctl_kernels.common.path import Shape
from leverctl_kernels.mamba2.prefill_scan import naive, spec

ARGS = naive.SCAN_ARGS


def inputs(t=11, h=4, p=3, n=5, g=2, seed=0):
    shape = Shape("t", dict(t=t, h=h, p=p, n=n, g=g, chunk=4))
    return spec.scan_inputs(shape, np.random.default_rng(seed))


def args(x):
    return [x[a] for a in ARGS]


def close(a, b, rtol=1e-12):
    return np.allclose(a, b, rtol=rtol, atol=rtol * np.abs(b).max())


def test_the_reference_equals_the_plain_token_by_token_loop():
    x = inputs()
    y, s = naive.naive_mamba2_scan(*args(x))
    y0, s0 = naive.naive_scan_loop(*args(x))
    assert close(y, y0) and close(s, s0)


def test_the_reference_differs_from_a_loop_with_a_wrong_decay():
    x = inputs()
    y, _ = naive.naive_mamba2_scan(*args(x))
    wrong = {**x, "A": x["A"] * np.float32(0.5)}
    y0, _ = naive.naive_scan_loop(*args(wrong))
    assert not close(y, y0, rtol=1e-3)


@pytest.mark.parametrize("chunk", [1, 4, 5, 11, 16], ids=lambda c: f"chunk{c}")
def test_the_chunked_form_equals_the_recurrence_whether_or_not_the_chunk_divides_the_prompt(chunk):
    x = inputs(t=20, seed=chunk)
    y, s = naive.naive_mamba2_scan(*args(x))
    yc, sc = naive.naive_ssd_scan(*args(x), chunk=chunk)
    assert close(yc, y, 1e-10) and close(sc, s, 1e-10)


def test_a_state_carried_across_two_calls_gives_the_single_call():
    x = inputs(t=13)
    y, s = naive.naive_mamba2_scan(*args(x))
    first = {k: (v[:6] if k in ("x", "dt_raw", "B", "C") else v) for k, v in x.items()}
    y1, s1 = naive.naive_ssd_scan(*args(first), chunk=4)
    second = {k: (v[6:] if k in ("x", "dt_raw", "B", "C") else v) for k, v in x.items()}
    y2, s2 = naive.naive_ssd_scan(*args({**second, "state": s1}), chunk=4)
    assert close(np.concatenate([y1, y2]), y, 1e-10) and close(s2, s, 1e-10)


def test_the_comparison_sees_a_chunk_state_not_carried_into_the_next():
    x = inputs(t=12)
    y, _ = naive.naive_mamba2_scan(*args(x))
    parts = []
    for t0 in range(0, 12, 4):  # every chunk from the carried-in state, none from the chunk before
        part = {k: (v[t0 : t0 + 4] if k in ("x", "dt_raw", "B", "C") else v) for k, v in x.items()}
        parts.append(naive.naive_ssd_scan(*args(part), chunk=4)[0])
    assert not close(np.concatenate(parts), y, 1e-3)


def test_heads_read_the_b_and_c_of_their_own_group():
    x = inputs(h=4, g=2)  # heads 0, 1: group 0; heads 2, 3: group 1
    y, _ = naive.naive_mamba2_scan(*args(x))
    B = x["B"].copy()
    B[:, 1] = 0
    y1, _ = naive.naive_mamba2_scan(*args({**x, "B": B}))
    assert close(y1[:, :2], y[:, :2]) and not close(y1[:, 2:], y[:, 2:], 1e-3)


def test_softplus_is_stable_and_exact_where_it_is_linear():
    assert naive.softplus(np.array([1000.0]))[0] == 1000.0
    assert abs(naive.softplus(np.array([0.0]))[0] - np.log(2.0)) < 1e-15
