"""The correctness check at model shapes, where the simulator is far too
slow to run a kernel: each path's reference outputs are computed in NumPy
at the first model shapes (Qwen3-Next-80B-A3B's), and the check is given

* what a correct kernel returns -- the same arithmetic in float32 with the
  family's fp16 roundings -- which must pass, and
* the reference broken the ways kernels break -- a dropped scale group, a
  dropped row, a token skipped, one head's decay wrong, a wrong q/k group,
  NaN, a region never written -- each of which must fail.

At these sizes a norm-wise relative bound is diluted over millions of
elements: one element of a 1024-token prefill's ``o`` that lost part of its
reduction passes it, and passed GDN's former fixed absolute bound (a tenth
of the largest output); only an absolute bound that follows each output's
scale (``abs_of_max``) catches it. The coarser breakages fail either way.
The same check runs real broken kernels at smoke shapes in the family tests.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import pytest

from leverctl.bench import check as chk
from leverctl_kernels.common.int4 import GROUP, dequantize_w4
from leverctl_kernels.gdn import naive
from leverctl_kernels.gdn.decode.spec import PATH as DECODE
from leverctl_kernels.gdn.fused_conv.spec import PATH as FUSED_CONV
from leverctl_kernels.gdn.prefill.spec import PATH as PREFILL
from leverctl_kernels.gdn.verify.spec import PATH as VERIFY
from leverctl_kernels.w4a16 import naive as w4a16_naive
from leverctl_kernels.w4a16.ffn_decode.spec import PATH as FFN_DECODE
from leverctl_kernels.w4a16.gemm.spec import PATH as GEMM
from leverctl_kernels.w4a16.gemv.spec import PATH as GEMV
from leverctl_kernels.w4a16.gemv_dual.spec import PATH as GEMV_DUAL

F16 = np.float16


def model_shape(path, **match):
    """The first model shape of ``path`` whose dims include ``match``."""
    shapes = path.shapes("model", None)
    return next(s for s in shapes if all(s[k] == v for k, v in match.items()))


def compare(path, got, ref):
    return chk.compare(got, ref, path.tolerance)


def poisoned(a: np.ndarray, index) -> np.ndarray:
    """``a`` as the kernel's output dtype with ``index`` left holding the
    check's poison (never written)."""
    out = a.copy()
    out[index] = chk.poison(np.shape(out[index]), out.dtype)
    return out


# ── W4A16 ────────────────────────────────────────────────────────────────────


def _w(qw, s) -> np.ndarray:
    return dequantize_w4(qw, s)  # exact float32


def gemv32(qw, s, x) -> np.ndarray:
    """A correct kernel's product: fp32 sums of the exact weights."""
    return _w(qw, s) @ np.asarray(x, np.float32)


@lru_cache(maxsize=None)
def w4a16_case(name: str):
    """(path, shape, inputs, float64 reference, correct fp16 outputs)."""
    path = {"gemv": GEMV, "gemv_dual": GEMV_DUAL, "ffn_decode": FFN_DECODE, "gemm": GEMM}[name]
    shape = model_shape(path, m=16) if name == "gemm" else path.shapes("model", None)[0]
    x = path.make_inputs(shape, np.random.default_rng(0))
    ref = path.reference(shape, x)
    if name == "gemv":
        got = {"y": gemv32(x["qweight"], x["scales"], x["x"]).astype(F16)}
    elif name == "gemv_dual":
        got = {
            "gate": gemv32(x["qw_gate"], x["s_gate"], x["x"]).astype(F16),
            "up": gemv32(x["qw_up"], x["s_up"], x["x"]).astype(F16),
        }
    elif name == "ffn_decode":  # the split variant's roundings: gate, up, h in fp16
        g = gemv32(x["qw_gate"], x["s_gate"], x["x"]).astype(F16).astype(np.float32)
        u = gemv32(x["qw_up"], x["s_up"], x["x"]).astype(F16).astype(np.float32)
        h = (g / (1 + np.exp(-g)) * u).astype(F16)
        got = {"y": gemv32(x["qw_down"], x["s_down"], h).astype(F16)}
    else:
        got = {"c": (x["a"].astype(np.float32) @ _w(x["qweight"], x["scales"]).T).astype(F16)}
    return path, shape, x, ref, got


W4A16_NAMES = ["gemv", "gemv_dual", "ffn_decode", "gemm"]


@pytest.mark.parametrize("name", W4A16_NAMES)
def test_a_correct_w4a16_kernel_passes_at_model_shapes(name):
    path, shape, _, ref, got = w4a16_case(name)
    fig = compare(path, got, ref)
    assert fig.passed, f"{shape.label}: {fig.why()}"
    assert fig.max_abs < 0.5 * fig.tol_abs  # with room to spare


def _dropped_group(name, x, ref, out):
    """One scale group (128 inputs) missing from the last row's dot product."""
    y = ref[out].copy()
    g = 1
    cols = slice(g * GROUP, (g + 1) * GROUP)
    if name == "gemm":
        w = _w(x["qweight"], x["scales"])
        y[0, -1] -= float(np.asarray(x["a"][0, cols], np.float64) @ w[-1, cols])
    elif name == "ffn_decode":
        gate, up = w4a16_naive.naive_gemv_dual(x["qw_gate"], x["s_gate"], x["qw_up"], x["s_up"], x["x"])
        h = w4a16_naive.naive_silu_mul(gate, up)
        y[-1] -= float(h[cols] @ _w(x["qw_down"], x["s_down"])[-1, cols])
    else:
        qw, s = (x["qweight"], x["scales"]) if name == "gemv" else (x["qw_" + out], x["s_" + out])
        y[-1] -= float(np.asarray(x["x"][cols], np.float64) @ _w(qw, s)[-1, cols])
    return y


def w4a16_breakages(name):
    path, shape, x, ref, got = w4a16_case(name)
    out = next(iter(ref))
    y = got[out]
    last = (0, -1) if y.ndim == 2 else -1
    cases = {
        "dropped scale group": _dropped_group(name, x, ref, out).astype(F16),
        "dropped row (written as 0)": _set(y, last, 0.0),
        "last row 10 % off": _set(y, last, float(y[last]) * 1.1),
        "NaN": _set(y, 0 if y.ndim == 1 else (0, 0), np.nan),
        "last 8 rows never written": poisoned(y, (slice(None), slice(-8, None)) if y.ndim == 2 else slice(-8, None)),
    }
    return path, ref, got, out, cases


def _set(a, index, value):
    b = a.copy()
    b[index] = value
    return b


@pytest.mark.parametrize("name", W4A16_NAMES)
def test_each_way_a_w4a16_kernel_breaks_fails_the_check_at_model_shapes(name):
    path, ref, got, out, cases = w4a16_breakages(name)
    for what, broken in cases.items():
        fig = compare(path, {**got, out: broken}, ref)
        assert not fig.passed, f"{path.name}: {what} passed ({fig})"


def test_the_w4a16_absolute_bound_follows_the_output_where_the_old_constant_exceeded_all_of_it():
    # The FFN's smoke output is a few thousandths: W4A16's former fixed
    # bound, 1e-2, let any element be anything of that size.
    shape = FFN_DECODE.shapes("smoke", None)[0]
    ref = FFN_DECODE.reference(shape, FFN_DECODE.make_inputs(shape, np.random.default_rng(0)))["y"]
    scale = float(np.max(np.abs(ref)))
    assert scale < 1e-2
    assert FFN_DECODE.tolerance.abs_bound(ref) == pytest.approx(2e-3 * scale)


# ── GDN ──────────────────────────────────────────────────────────────────────


def recurrent32(q, k, v, g, beta, state):
    """The recurrence in float32, as a correct fp32 kernel computes it."""
    f = np.float32

    def l2(a):
        a = a.astype(f)
        return a / np.sqrt((a * a).sum(-1, keepdims=True) + f(naive.L2_EPS))

    hv, hk, dk = v.shape[1], q.shape[-2], q.shape[-1]
    idx = np.arange(hv) // (hv // hk)
    qh, kh = l2(q)[..., idx, :] / f(math.sqrt(dk)), l2(k)[..., idx, :]
    S = state.astype(f).copy()
    v = v.astype(f)
    o = np.zeros(v.shape, f)
    for t in range(v.shape[0]):
        S *= np.exp(g[t].astype(f))[:, None, None]
        delta = beta[t][:, None] * (v[t] - np.einsum("hkv,hk->hv", S, kh[t]))
        S += kh[t][:, :, None] * delta[:, None, :]
        o[t] = np.einsum("hkv,hk->hv", S, qh[t])
    return o, S


def one_head(x, h, **changes):
    """The float64 recurrence of value head ``h`` alone (its q/k head by the
    grouping, or ``kh`` when given), with inputs changed by ``changes``:
    ``g``/``beta`` replace the head's columns."""
    group = x["v"].shape[1] // x["q"].shape[1]
    kh = changes.pop("kh", h // group)
    g = changes.pop("g", x["g"][:, h])
    beta = changes.pop("beta", x["beta"][:, h])
    return naive.naive_recurrent(
        x["q"][:, [kh]], x["k"][:, [kh]], x["v"][:, [h]], g[:, None], beta[:, None], x["state"][[h]]
    )


@lru_cache(maxsize=None)
def token_case(name: str):
    path = {"prefill": PREFILL, "verify": VERIFY}[name]
    shape = path.shapes("model", None)[0]  # prefill: 1024 tokens; verify: 17
    x = path.make_inputs(shape, np.random.default_rng(0))
    ref = path.reference(shape, {k: v.copy() for k, v in x.items()})
    o, s = recurrent32(x["q"], x["k"], x["v"], x["g"], x["beta"], x["state"])
    return path, shape, x, ref, {"o": o, "state": s}


def token_breakages(name):
    path, shape, x, ref, got = token_case(name)
    t_mid, h = shape["t"] // 2, 5
    group = shape["hv"] // shape["hk"]

    def head_replaced(o_h, s_h):
        o, s = ref["o"].copy(), ref["state"].copy()
        o[:, h], s[h] = o_h[:, 0], s_h[0]
        return {"o": o.astype(np.float32), "state": s.astype(np.float32)}

    # One output element lost one of the four partial sums of its reduction
    # over the key dims (a missing barrier at one block, say).
    group_kh = h // group
    _, s_t = one_head({k: (v if k == "state" else v[: t_mid + 1]) for k, v in x.items()}, h)
    q = naive.l2norm(x["q"][t_mid, group_kh]) / math.sqrt(shape["dk"])
    rows = 3 * shape["dk"] // 4
    lost_part = {**got, "o": _set(got["o"], (t_mid, h, 0), s_t[0][:rows, 0] @ q[:rows])}

    g_skip, b_skip = x["g"][:, h].copy(), x["beta"][:, h].copy()
    g_skip[t_mid], b_skip[t_mid] = 0.0, 0.0
    cases = {
        "one token skipped in one head": head_replaced(*one_head(x, h, g=g_skip, beta=b_skip)),
        "one head decays by 2**g, not e**g": head_replaced(*one_head(x, h, g=x["g"][:, h] * math.log(2.0))),
        "one head reads the next q/k group": head_replaced(*one_head(x, h, kh=(h // group + 1) % shape["hk"])),
        "one output element lost a quarter of its reduction": lost_part,
        "NaN in the state": {**got, "state": _set(got["state"], (h, 0, 0), np.nan)},
        "the last token's output never written": {**got, "o": poisoned(got["o"], (-1, h))},
    }
    return path, ref, got, cases


@pytest.mark.parametrize("name", ["prefill", "verify"])
def test_a_correct_gdn_kernel_passes_at_model_shapes(name):
    path, shape, _, ref, got = token_case(name)
    fig = compare(path, got, ref)
    assert fig.passed, f"{shape.label}: {fig.why()}"
    assert fig.max_abs < 0.05 * fig.tol_abs


@pytest.mark.parametrize("name", ["prefill", "verify"])
def test_each_way_a_gdn_kernel_breaks_fails_the_check_at_model_shapes(name):
    path, ref, _, cases = token_breakages(name)
    for what, broken in cases.items():
        fig = compare(path, broken, ref)
        assert not fig.passed, f"{path.name}: {what} passed ({fig})"


def test_the_old_fixed_absolute_bound_missed_an_element_that_lost_part_of_its_reduction():
    # GDN's former prefill tolerance: its 1e-2 is a tenth of the largest
    # output, and one element among four million is nothing to the norm.
    path, ref, _, cases = token_breakages("prefill")
    broken = cases["one output element lost a quarter of its reduction"]
    assert chk.compare(broken, ref, type(path.tolerance)(rel=1e-3, abs=1e-2)).passed
    assert not chk.compare(broken, ref, path.tolerance).passed


@lru_cache(maxsize=None)
def decode_case(name: str):
    path = {"decode": DECODE, "fused_conv": FUSED_CONV}[name]
    shape = model_shape(path, n=8)
    x = path.make_inputs(shape, np.random.default_rng(0))
    ref = path.reference(shape, {k: v.copy() for k, v in x.items()})
    return path, shape, x, ref


def fp32_rounded(ref: dict, outputs: dict) -> dict:
    """The reference as a correct kernel stores it: in each output's dtype,
    fp32 ones a few ulps off (what the simulator's kernels show)."""
    rng = np.random.default_rng(1)
    got = {}
    for name, (_, dtype) in outputs.items():
        r = ref[name]
        if dtype == "float32":
            r = r * (1 + 4 * np.finfo(np.float32).eps * rng.standard_normal(r.shape))
        got[name] = r.astype(dtype)
    return got


def decode_breakages(name):
    path, shape, x, ref = decode_case(name)
    outputs = path.outputs(shape)
    got = fp32_rounded(ref, outputs)
    n, h = 3, 5
    slot = int(x["slots"][n])
    first = next(iter(outputs))  # "o" or "out"
    stale = {**got, "state": got["state"].copy()}
    stale["state"][slot, h] = x["state"][slot, h]  # one head of one sequence not stepped
    wrong_decay = {**got, "state": got["state"].copy()}
    wrong_decay["state"][slot, h] *= np.float32(np.exp2(x["g"][n, h]) / np.exp(x["g"][n, h]))
    cases = {
        "one sequence's head not stepped": stale,
        "one head decays by 2**g, not e**g": wrong_decay,
        "NaN": {**got, first: _set(got[first], (n, h, 0), np.nan)},
        "the last sequence never written": {**got, first: poisoned(got[first], -1)},
    }
    if name == "fused_conv":
        cs = got["conv_state"].copy()
        cs[slot] = x["conv_state"][slot]  # the conv window not shifted
        cases["one conv state not shifted"] = {**got, "conv_state": cs}
    return path, ref, got, cases


@pytest.mark.parametrize("name", ["decode", "fused_conv"])
def test_correct_gdn_decode_outputs_pass_at_model_shapes(name):
    path, ref, got, _ = decode_breakages(name)
    fig = compare(path, got, ref)
    assert fig.passed, fig.why()


@pytest.mark.parametrize("name", ["decode", "fused_conv"])
def test_each_way_a_gdn_decode_kernel_breaks_fails_the_check_at_model_shapes(name):
    path, ref, _, cases = decode_breakages(name)
    for what, broken in cases.items():
        fig = compare(path, broken, ref)
        assert not fig.passed, f"{path.name}: {what} passed ({fig})"
