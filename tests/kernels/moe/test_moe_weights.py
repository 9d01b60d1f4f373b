"""The MoE paths on a model file's expert tensors (``WeightUse``): each
takes the tensors' own sizes and all of the file's experts (the label
says how many), reads NVFP4 (packed E2M1, E4M3 block scales, global
scale) and FP8 in 128 x 128 blocks as stored where its arms read that
format, and makes every other format from the decoded values as for
drawn weights; every variant passes the bench's check on them in the
simulator, a reference on other weights fails it, and tensors that do not
fit are a one-line ``WeightMismatch``.

The tensors: 3 experts, hidden 48, intermediate 32 (NVFP4's 16 divides
both; neither is a multiple of the kernels' 64-input step or of int4's
128-input group), encoded by ``weight_forms`` (``ml_dtypes``).
"""

from __future__ import annotations

import numpy as np
import pytest
from weight_forms import bf16, check_against, f16, fp8, nvfp4, q4k, run_check, weights

from leverctl_kernels.common import bits, int4
from leverctl_kernels.common.model_weights import WeightMismatch
from leverctl_kernels.common.path import Shape
from leverctl_kernels.registry import get_path

E, H, I, S = 3, 48, 32, 16
RNG = np.random.default_rng(2028)
_G, _U, _D = weights(RNG, E, I, H), weights(RNG, E, I, H), weights(RNG, E, H, I)
# NVFP4 experts without outliers for the paths whose reference is the int4
# re-encoding of the file's values: with one value in 64 six times the
# rest, int4's uniform grid over 128 inputs costs gate/up's SiLU product
# 20-40 % (NumPy, 50 seeds at these sizes; about 34 % at hidden 2048). The
# FP4 stage paths take an NVFP4 file's own values as the reference
# (test_an_nvfp4_file_is_the_reference_of_the_fp4_stages).
_Gn, _Un, _Dn = (weights(RNG, *s, outliers=False) for s in ((E, I, H), (E, I, H), (E, H, I)))
# gate and up share each expert's global scale, as a fused gate/up checkpoint does
_GU_GLOBAL = float(np.abs(np.concatenate([_Gn, _Un], axis=1)).max() / (448 * 6))


def _layer(form, layer: int = 1, g=_G, u=_U, d=_D, **kw) -> dict:
    name = lambda r: f"blk.{layer}.{r}.weight"  # noqa: E731
    gu = {"global_scale": _GU_GLOBAL} if form is nvfp4 else kw
    return {
        "ffn_gate_exps": form(name("ffn_gate_exps"), "ffn_gate_exps", g, **gu),
        "ffn_up_exps": form(name("ffn_up_exps"), "ffn_up_exps", u, **gu),
        "ffn_down_exps": form(name("ffn_down_exps"), "ffn_down_exps", d, **kw),
    }


LAYERS = {"BF16": _layer(bf16), "NVFP4": _layer(nvfp4, g=_Gn, u=_Un, d=_Dn), "FP8": _layer(fp8)}
SHARED = {
    "ffn_up_shexp": bf16("blk.1.ffn_up_shexp.weight", "ffn_up_shexp", weights(RNG, S, H)),
    "ffn_down_shexp": nvfp4("blk.1.ffn_down_shexp.weight", "ffn_down_shexp", weights(RNG, H, S)),
}

# path -> (the file's form it runs on here, group, the inputs holding weights)
CASES = {
    "moe.gateup_fp4": ("NVFP4", ("ffn_gate_exps", "ffn_up_exps"), ("wgu_int4", "wgu_nvfp4")),
    "moe.down_fp4": ("NVFP4", ("ffn_down_exps",), ("wd_int4", "wd_nvfp4")),
    "moe.decode_fp8_grouped": ("FP8", ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"), ("wgu_fp8", "wd_fp8")),
    "moe.decode_multi_seq": ("BF16", ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"), ("wgu_int4", "wd_int4")),
    "moe.decode_via_prefill": ("BF16", ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"), ("wgu_int4", "wd_int4")),
    "moe.prefill_grouped": ("NVFP4", ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"), ("up", "dn")),
    "moe.prefill_sorted": ("BF16", ("ffn_up_exps", "ffn_down_exps"), ("up", "dn")),
    "moe.shared_expert": ("mixed", ("ffn_up_shexp", "ffn_down_shexp"), ("up", "dn")),
}


def _tensors(name: str, form: str | None = None) -> dict:
    form = form or CASES[name][0]
    if name == "moe.shared_expert":
        return dict(SHARED)
    return {r: LAYERS[form][r] for r in CASES[name][1]}


def _on(name: str, tensors=None):
    path = get_path(name)
    return path.extra["weights"].apply(path, tensors if tensors is not None else _tensors(name))


def _weight_keys(name: str, inputs: dict) -> list[str]:
    return [k for k in inputs if any(k.startswith(f"{w}_") for w in CASES[name][2])]


def test_the_groups_are_the_roles_each_path_computes():
    for name, (_, group, _) in CASES.items():
        assert get_path(name).extra["weights"].groups == (group,), name
    # the router reads its gate; the union statistics read no model weights
    assert get_path("moe.router").extra["weights"].groups == (("ffn_gate_inp",),)
    assert "weights" not in get_path("moe.union_stats").extra


@pytest.mark.parametrize("name", sorted(CASES))
def test_shapes_are_the_tensors_with_all_the_files_experts(name):
    path = _on(name)
    model = {"hidden": 4096, "moe": {"experts": 64, "top_k": 8, "expert_intermediate": 1024}}
    for preset in ("smoke", "model"):
        shapes = path.shapes(preset, model)
        assert shapes
        for s in shapes:
            for t in _tensors(name).values():
                assert t.name in s.label
            if name == "moe.shared_expert":
                assert (s["h"], s["s"]) == (H, S)
                continue
            assert f"{E} experts" in s.label
            dims = (s["h"], s["i"], s["e"], s["k"]) if "h" in s.dims else (s["hidden"], s["inter"], s["experts"])
            assert dims[:3] == (H, I, E)
            top_k = s["k"] if "h" in s.dims else s["top_k"]
            assert top_k <= E and (preset == "smoke" or top_k == E)  # the recipe's 8, capped at the file's 3


def test_the_labels_say_what_is_read_as_stored_and_what_is_re_encoded():
    gateup = _on("moe.gateup_fp4").shapes("smoke", None)[0].label
    assert "[NVFP4: int4 re-encoded, nvfp4 as stored] 3 experts" in gateup
    fp8_label = _on("moe.decode_fp8_grouped").shapes("smoke", None)[0].label
    # gate (32 rows) and up stacked straddle a 128-row block: re-encoded; down as stored
    assert "ffn_up_exps.weight[F8_E4M3: fp8 re-encoded] + blk.1.ffn_down_exps.weight[F8_E4M3: fp8 as stored]" in (
        fp8_label
    )
    grouped = _on("moe.prefill_grouped", _layer(bf16)).shapes("smoke", None)[0].label
    assert "ffn_down_exps.weight[BF16: nvfp4 re-encoded, fp8 re-encoded]" in grouped


def _touched(inputs) -> list[int]:
    return sorted(int(e) for e in np.unique(inputs["ids"]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_inputs_hold_the_tensors_weights(name):
    path = _on(name)
    shape = path.shapes("smoke", None)[0]
    inputs = path.make_inputs(shape, np.random.default_rng(1))
    tensors = _tensors(name)
    hit = _touched(inputs) if "ids" in inputs else [0]
    for which in CASES[name][2]:
        if which.startswith("wgu") or which == "up":
            parts = [tensors[r] for r in CASES[name][1] if r != "ffn_down_exps" and "down" not in r]
        else:
            parts = [tensors[r] for r in CASES[name][1] if "down" in r]
        for e in hit:
            _assert_expert(which, inputs, parts, e)


def _stack(parts, attr, e):
    return np.concatenate([np.asarray(getattr(t, attr))[e] if t.values.ndim == 3 else getattr(t, attr) for t in parts])


def _assert_expert(which: str, inputs: dict, parts, e: int) -> None:
    values = _stack(parts, "values", e)
    if which.endswith("int4"):
        q, s = inputs[f"{which}_a"][e], inputs[f"{which}_b"][e]
        step = np.repeat(s.astype(np.float32), 128, axis=1)[:, : values.shape[1]]
        assert np.all(np.abs(int4.dequantize_w4(q, s) - values) <= step / 2 * (1 + 1e-3) + 1e-7)
    elif which.endswith("nvfp4") or which in ("up", "dn"):
        keys = ("a", "b", "c") if which.endswith("nvfp4") else ("fp4", "sc", "ts")
        sep = "_" if which.endswith("nvfp4") else "_"
        packed, scales, ts = (inputs[f"{which}{sep}{k}"][e] for k in keys)
        if all(t.nvfp4 is not None for t in parts):  # as stored, byte for byte
            assert np.array_equal(packed, _stack(parts, "nvfp4", e))
            assert np.array_equal(scales, _stack(parts, "nvfp4_scale", e))
            assert ts == np.float32(parts[0].nvfp4_global)
            assert np.array_equal(bits.nvfp4_decode_np(packed, scales, ts), values)
        elif which.endswith("nvfp4"):  # re-encoded from the int4 weights, as drawn weights are
            w4 = int4.dequantize_w4(inputs[f"{which[:-5]}int4_a"][e], inputs[f"{which[:-5]}int4_b"][e])
            assert np.array_equal((packed, scales), bits.nvfp4_encode_np(w4)[:2])
        else:  # encoded from the decoded values: close to them
            dec = bits.nvfp4_decode_np(packed, scales, ts)
            assert np.linalg.norm(dec - values) / np.linalg.norm(values) < 0.15
    else:  # FP8
        codes, scales = inputs[f"{which}_a"][e], inputs[f"{which}_b"][e]
        n, k = values.shape
        full = np.repeat(np.repeat(scales, 128, axis=0), 128, axis=1)[:n, :k]
        dec = bits.e4m3_to_f32_np(codes) * full
        if all(t.fp8 is not None and t.fp8_scale_kind == "block128" for t in parts) and (
            len(parts) == 1 or parts[0].n % 128 == 0
        ):
            assert np.array_equal(codes, _stack(parts, "fp8", e))
            assert np.array_equal(scales, _stack(parts, "fp8_scale", e))
            assert np.array_equal(dec, values)
        else:
            assert np.linalg.norm(dec - values) / np.linalg.norm(values) < 0.05


def test_fp8_gate_and_up_on_block_boundaries_are_read_as_stored():
    """Gate of 128 rows: gate's blocks and up's stack into the kernels'
    [2I, H] blocks exactly, so both are the file's bytes and scales."""
    rng = np.random.default_rng(5)
    layer = _layer(fp8, g=weights(rng, 2, 128, 16), u=weights(rng, 2, 128, 16), d=weights(rng, 2, 16, 128))
    path = _on("moe.decode_fp8_grouped", layer)
    shape = path.shapes("smoke", None)[0]
    assert "[F8_E4M3: fp8 as stored] + " in shape.label and "2 experts" in shape.label
    inputs = path.make_inputs(shape, np.random.default_rng(1))
    parts = [layer["ffn_gate_exps"], layer["ffn_up_exps"]]
    for e in _touched(inputs):
        _assert_expert("wgu_fp8", inputs, parts, e)
        _assert_expert("wd_fp8", inputs, [layer["ffn_down_exps"]], e)
        assert np.array_equal(inputs["wgu_fp8_a"][e], _stack(parts, "fp8", e))


def test_q4k_experts_are_decoded_and_re_encoded_to_int4():
    rng = np.random.default_rng(6)
    layer = _layer(q4k, g=weights(rng, 2, 256, 256), u=weights(rng, 2, 256, 256), d=weights(rng, 2, 256, 256))
    path = _on("moe.decode_multi_seq", layer)
    shape = path.shapes("smoke", None)[0]
    assert "[Q4_K: int4 re-encoded]" in shape.label
    inputs = path.make_inputs(shape, np.random.default_rng(1))
    for e in _touched(inputs):
        _assert_expert("wgu_int4", inputs, [layer["ffn_gate_exps"], layer["ffn_up_exps"]], e)


def test_untouched_experts_are_not_encoded_but_kept():
    path = _on("moe.decode_multi_seq")
    shape = path.shapes("smoke", None)[0]
    inputs = path.make_inputs(shape, np.random.default_rng(1))
    assert inputs["wgu_int4_a"].shape[0] == E
    for e in set(range(E)) - set(_touched(inputs)):
        assert not inputs["wgu_int4_a"][e].any()


SIM = [(name, v) for name in CASES for v in get_path(name).variants]


def _few_rows(shape: Shape) -> Shape:
    """The smoke shape on the file's sizes and experts with two routed
    rows (one token or row each routed to one expert): the simulator's
    time goes by the experts a run touches."""
    if "t" in shape.dims:
        fewer = {"t": 2} if "e" not in shape.dims else {"t": 2, "k": 1}
    else:
        fewer = {"rows": min(2, shape["rows"]), "top_k": 1}
    return Shape(shape.label, {**shape.dims, **fewer})


@pytest.mark.sim
@pytest.mark.parametrize("case", SIM, ids=lambda c: f"{c[0]}-{c[1]}")
def test_every_variant_passes_on_the_tensors_and_fails_on_other_weights(case):
    name, variant = case
    path = _on(name)
    shape = _few_rows(path.shapes("smoke", None)[0])
    inputs = path.make_inputs(shape, np.random.default_rng(3))
    fig, got, shape = run_check(path, variant, shape, inputs)
    assert fig.passed, fig.why()
    # Another layer's weights (same sizes, same routing): the reference on
    # them must fail the kernel's outputs.
    rng = np.random.default_rng(4)
    if name == "moe.shared_expert":
        other_t = {
            "ffn_up_shexp": f16("blk.2.ffn_up_shexp.weight", "ffn_up_shexp", weights(rng, S, H)),
            "ffn_down_shexp": f16("blk.2.ffn_down_shexp.weight", "ffn_down_shexp", weights(rng, H, S)),
        }
    else:
        layer = _layer(bf16, 2, weights(rng, E, I, H), weights(rng, E, I, H), weights(rng, E, H, I))
        other_t = {r: layer[r] for r in CASES[name][1]}
    other = _on(name, other_t)
    o = other.make_inputs(_few_rows(other.shapes("smoke", None)[0]), np.random.default_rng(3))
    assert np.array_equal(o.get("ids"), inputs.get("ids"))
    swapped = {**inputs, **{k: o[k] for k in _weight_keys(name, inputs)}}
    assert not check_against(path, variant, shape, got, swapped).passed


def _bad(role: str, *shape: int, form=bf16):
    return form(f"bad.{role}", role, weights(np.random.default_rng(9), *shape))


@pytest.mark.parametrize(
    "name,replace,said",
    [
        (
            "moe.gateup_fp4",
            {"ffn_gate_exps": _bad("ffn_gate_exps", E, I, 40), "ffn_up_exps": _bad("ffn_up_exps", E, I, 40)},
            "k (hidden)=40 is not a multiple of 16",
        ),
        (
            "moe.down_fp4",
            {"ffn_down_exps": _bad("ffn_down_exps", H, I)},
            "bad.ffn_down_exps: shape [48, 32] has rank 2",
        ),
        (
            "moe.gateup_fp4",
            {"ffn_up_exps": _bad("ffn_up_exps", E, 24, H)},
            "bad.ffn_up_exps: n=24 but blk.1.ffn_gate_exps.weight has n=32",
        ),
        ("moe.decode_multi_seq", {"ffn_down_exps": _bad("ffn_down_exps", 4, H, I)}, "bad.ffn_down_exps: experts=4 but"),
        ("moe.prefill_grouped", {"ffn_up_exps": _bad("ffn_up_exps", 2, I, H)}, "bad.ffn_up_exps: experts=2 but"),
        ("moe.prefill_sorted", {"ffn_down_exps": _bad("ffn_down_exps", E, H, 48)}, "bad.ffn_down_exps: k=48 but"),
        ("moe.decode_fp8_grouped", {"ffn_down_exps": _bad("ffn_down_exps", E, 40, I)}, "bad.ffn_down_exps: n=40 but"),
        (
            "moe.shared_expert",
            {"ffn_up_shexp": _bad("ffn_up_shexp", 24, H)},
            "blk.1.ffn_down_shexp.weight: k=16 but bad.ffn_up_shexp has n (intermediate)=24",
        ),
        ("moe.prefill_sorted", {"ffn_down_exps": None}, "no ffn_down_exps tensor"),
    ],
)
def test_tensors_that_do_not_fit_are_a_one_line_mismatch(name, replace, said):
    tensors = {**_tensors(name), **replace}
    tensors = {r: t for r, t in tensors.items() if t is not None}
    with pytest.raises(WeightMismatch) as e:
        _on(name, tensors)
    assert said in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_stored_forms_that_do_not_cover_the_values_are_a_mismatch():
    import dataclasses

    t = LAYERS["NVFP4"]["ffn_down_exps"]
    short = dataclasses.replace(t, nvfp4_scale=t.nvfp4_scale[..., :1])
    with pytest.raises(
        WeightMismatch, match=r"ffn_down_exps.weight: NVFP4 scales have shape \[3, 48, 1\], not \[3, 48, 2\]"
    ):
        _on("moe.down_fp4", {"ffn_down_exps": short})


ROUTER_GATE = {
    "BF16": bf16("blk.1.ffn_gate_inp.weight", "ffn_gate_inp", weights(RNG, 5, 37, scale=0.3)),
    "F16": f16("blk.1.ffn_gate_inp.weight", "ffn_gate_inp", weights(RNG, 5, 37, scale=0.3)),
}


@pytest.mark.parametrize("stored", sorted(ROUTER_GATE))
def test_the_router_runs_on_the_files_gate_in_bf16(stored):
    t = ROUTER_GATE[stored]
    path = _on("moe.router", {"ffn_gate_inp": t})
    model = {"hidden": 4096, "moe": {"experts": 64, "top_k": 8, "expert_intermediate": 1024}}
    for preset, top_k in (("smoke", 2), ("model", 5)):  # the recipe's 8 capped at the file's 5 experts
        for s in path.shapes(preset, model):
            assert (s["experts"], s["hidden"], s["top_k"]) == (5, 37, top_k)
    for s in path.shapes("smoke", None) + path.shapes("model", model):
        how = "as stored" if stored == "BF16" else "re-encoded"
        assert f"{t.name}[{stored}: BF16 {how}]" in s.label
    x = path.make_inputs(path.shapes("smoke", None)[0], np.random.default_rng(1))
    wg = bits.bf16_to_f32_np(x["wg"])
    if stored == "BF16":  # the file's bits as stored
        assert np.array_equal(wg, t.values)
    else:  # rounded once
        assert np.abs(wg - t.values).max() <= np.abs(t.values).max() * 2.0**-8


def test_a_router_gate_that_is_not_a_matrix_is_a_mismatch():
    with pytest.raises(WeightMismatch, match="rank 3"):
        _on("moe.router", {"ffn_gate_inp": _bad("ffn_gate_inp", 2, 5, 37)})


@pytest.mark.sim
@pytest.mark.parametrize("variant", ["bf16", "fp32_routing"])
def test_the_router_passes_on_the_files_gate_and_fails_on_another(variant):
    path = _on("moe.router", {"ffn_gate_inp": ROUTER_GATE["BF16"]})
    shape = path.shapes("smoke", None)[0]
    inputs = path.make_inputs(shape, np.random.default_rng(3))
    fig, got, shape = run_check(path, variant, shape, inputs)
    assert fig.passed, fig.why()
    other = bf16("blk.2.ffn_gate_inp.weight", "ffn_gate_inp", weights(np.random.default_rng(4), 5, 37, scale=0.3))
    swapped = {**inputs, "wg": bits.f32_to_bf16_np(other.values)}
    assert not check_against(path, variant, shape, got, swapped).passed


# _G, _U, _D: one weight in 64 six times the rest; gate and up share a global scale
_OUT_GLOBAL = float(np.abs(np.concatenate([_G, _U], axis=1)).max() / (448 * 6))
OUTLIER_NVFP4 = {
    "ffn_gate_exps": nvfp4("blk.1.ffn_gate_exps.weight", "ffn_gate_exps", _G, global_scale=_OUT_GLOBAL),
    "ffn_up_exps": nvfp4("blk.1.ffn_up_exps.weight", "ffn_up_exps", _U, global_scale=_OUT_GLOBAL),
    "ffn_down_exps": nvfp4("blk.1.ffn_down_exps.weight", "ffn_down_exps", _D),
}


@pytest.mark.parametrize("name", ["moe.gateup_fp4", "moe.down_fp4"])
def test_an_nvfp4_file_is_the_reference_of_the_fp4_stages(name):
    """On an NVFP4 file the model's weights are the file's: the reference
    is their decoded values, the NVFP4 arm (reading them as stored) is held
    to the tensor-core bound and int4, the re-encoded arm, to the
    cross-format one; a file in another format keeps the int4 reference."""
    from leverctl_kernels.moe import family as F

    path = _on(name, {r: OUTLIER_NVFP4[r] for r in CASES[name][1]})
    assert path.variants["nvfp4"].tolerance == F.STAGE_TOLERANCES["int4_tc"]
    assert path.variants["int4"].tolerance == F.STAGE_TOLERANCES["nvfp4_gateup" if "gateup" in name else "nvfp4_down"]
    shape = _few_rows(path.shapes("smoke", None)[0])
    x = path.make_inputs(shape, np.random.default_rng(3))
    ref = next(iter(path.reference(shape, x).values()))
    int4_ref = next(iter(get_path(name).reference(shape, x).values()))
    assert not np.allclose(ref, int4_ref, rtol=0.05)  # the outliers: int4 is far from the file
    drawn = _on(name, {r: LAYERS["BF16"][r] for r in CASES[name][1]})
    assert drawn.reference is get_path(name).reference


@pytest.mark.sim
@pytest.mark.parametrize("name", ["moe.gateup_fp4", "moe.down_fp4"])
def test_the_nvfp4_arm_passes_an_outlier_heavy_nvfp4_file_at_the_tensor_core_bound(name):
    path = _on(name, {r: OUTLIER_NVFP4[r] for r in CASES[name][1]})
    shape = _few_rows(path.shapes("smoke", None)[0])
    inputs = path.make_inputs(shape, np.random.default_rng(3))
    fig, got, shape = run_check(path, "nvfp4", shape, inputs)
    assert fig.passed, fig.why()
    # the int4 reference (the drawn-weight convention) would not hold it to that bound
    assert not check_against(get_path(name), "int4", shape, got, inputs).passed
