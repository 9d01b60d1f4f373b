"""``decode.per_sequence`` (Metrale's per-sequence decode): the variant for
every combination of its two levers and the two model facts (MLA,
hyper-connections), the levers' spellings, the shapes (Qwen3-Next's
group and DeepSeek-V3's MLA layers, from the recipes), the launch counts,
both variants against the float64 reference and bit for bit against each
other in the simulator at both smoke shapes, per-sequence launches that
pass the batched launches' argument types (so no kernel is compiled twice),
broken per-sequence steps the check must reject (every sequence handed the
first sequence's state slot or block-table row, or the shortest length), and on a GPU
both variants at model shapes with the same bits and no new specialisation.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from leverctl.bench.check import compare, poison
from leverctl.bench.plan import applies, model_lacks, path_levers
from leverctl.levers import load_catalog
from leverctl.levers.recipes import load_recipe
from leverctl_kernels.common.path import Shape
from leverctl_kernels.decode.per_sequence import _step, spec
from leverctl_kernels.decode.per_sequence.spec import PATH, findings
from leverctl_kernels.registry import family_paths
from leverctl_kernels.selection.decode import PER_SEQUENCE as TABLE

LEVERS = ("hc_perseq_decode", "mla_perseq_fallback")
SMOKE = PATH.shapes("smoke", None)
HYBRID, MLA = SMOKE
RECIPES = Path(__file__).resolve().parents[3] / "recipes"


def _facts(mla: int, hc_mult: int) -> Shape:
    return Shape("facts", {**(MLA if mla else HYBRID).dims, "mla": mla, "hc_mult": hc_mult})


# ------------------------------------------------------------- selection


def test_the_path_is_metrales_alone_and_both_levers_steer_it():
    cat = load_catalog("metrale")
    assert family_paths("decode") == (PATH,) and PATH.engines == ("metrale",)
    for f in LEVERS:
        assert "decode.per_sequence" in cat.lever(f).steers
    atlas = load_catalog("atlas")
    assert not applies(PATH, "atlas", atlas.fields) and applies(PATH, "metrale", cat.fields)


@pytest.mark.parametrize("mla,hc_mult", list(itertools.product((0, 1), (0, 1, 2))))
def test_select_for_every_lever_combination_and_model(mla, hc_mult):
    shape = _facts(mla, hc_mult)
    for hc, fallback in itertools.product((False, True), repeat=2):
        got = PATH.select({"hc_perseq_decode": hc, "mla_perseq_fallback": fallback}, shape)
        per_seq = (hc and hc_mult > 0) or (fallback and bool(mla))
        assert got.variant == ("per_sequence" if per_seq else "batched"), (hc, fallback, mla, hc_mult)
        assert (got.note == "") == (not hc and not fallback)
        if hc and hc_mult:
            assert got.note.startswith("hc_perseq_decode on a model with hyper-connections")
            assert "expert-parallel" in got.note
        elif fallback and mla:
            assert got.note.startswith("mla_perseq_fallback on an MLA model")
        elif hc and fallback:
            assert "neither hyper-connections nor MLA attention" in got.note
        elif hc:
            assert got.note == (
                "hc_perseq_decode is on but the model has no hyper-connections (hc_mult = 0): the batch decodes at once"
            )
        elif fallback:
            assert (
                got.note == "mla_perseq_fallback is on but the model's attention is not MLA: the batch decodes at once"
            )


def test_each_lever_on_metrale_takes_only_its_engine_spellings():
    from leverctl.levers import resolve

    cat = load_catalog("metrale")
    cases = [
        ("METRALE_MLA_PERSEQ_FALLBACK", "1", MLA, "per_sequence"),
        ("METRALE_MLA_PERSEQ_FALLBACK", "true", MLA, "per_sequence"),
        ("METRALE_MLA_PERSEQ_FALLBACK", "True", MLA, "batched"),
        ("METRALE_MLA_PERSEQ_FALLBACK", "TRUE", MLA, "batched"),
        ("METRALE_MLA_PERSEQ_FALLBACK", "1", HYBRID, "batched"),
        ("METRALE_HC_PERSEQ_DECODE", "1", HYBRID, "per_sequence"),
        ("METRALE_HC_PERSEQ_DECODE", "true", HYBRID, "batched"),
        ("METRALE_HC_PERSEQ_DECODE", "1", MLA, "batched"),
    ]
    for var, raw, shape, want in cases:
        res = resolve(cat, env={var: raw})
        assert PATH.select(path_levers(PATH, res.values(), cat.fields), shape).variant == want, (var, raw)
    res = resolve(cat, env={})
    assert {PATH.select(path_levers(PATH, res.values(), cat.fields), s).variant for s in SMOKE} == {"batched"}


def test_explain_words_the_same_rules():
    cases = TABLE.cases({"hc_perseq_decode": True})
    assert [(c.when, c.variant) for c in cases] == [(("hc_mult > 0",), "per_sequence"), ((), "batched")]
    assert cases[-1].note == "hc_perseq_decode is on but hc_mult = 0: the batch decodes at once"
    cases = TABLE.cases({"mla_perseq_fallback": True})
    assert [(c.when, c.variant) for c in cases] == [(("the model is MLA",), "per_sequence"), ((), "batched")]
    assert [(c.when, c.variant) for c in TABLE.cases({})] == [((), "batched")]


# ------------------------------------------------------------------ shapes


def test_every_shape_states_both_model_facts_and_the_smoke_shapes_reach_both_levers():
    for preset in ("smoke", "model"):
        for s in PATH.shapes(preset, None):
            assert s["mla"] in (0, 1) and s["hc_mult"] >= 0
    assert [(s["mla"], s["hc_mult"]) for s in SMOKE] == [(0, 1), (1, 0)]
    assert all(s["n"] % 2 for s in SMOKE)  # odd batches


def test_model_shapes_come_from_the_recipes_model_or_both_defaults():
    default = PATH.shapes("model", None)
    assert [(s["mla"], s["n"]) for s in default] == [(1, 1), (1, 8), (1, 32), (0, 1), (0, 8), (0, 32)]
    dsv3 = PATH.shapes("model", load_recipe(RECIPES / "deepseek-v3-metrale.toml").model)
    assert {(s["mla"], s["h"], s["r"], s["p"], s["qk_dim"], s["mla_layers"]) for s in dsv3} == {
        (1, 128, 512, 64, 192, 4)
    }
    assert {s["yarn_factor"] for s in dsv3} == {40}  # the recipe serves past the original context
    qwen = PATH.shapes("model", load_recipe(RECIPES / "qwen3-next-80b-a3b-metrale.toml").model)
    assert {(s["mla"], s["hv"], s["dk"], s["hq"], s["hkv"], s["d"]) for s in qwen} == {(0, 32, 128, 16, 2, 256)}
    assert {(s["gdn_layers"], s["attn_layers"], s["ctx"], s["hc_mult"]) for s in qwen} == {(3, 1, 8192, 0)}
    assert [s["slots"] for s in qwen] == [3, 17, 65]
    hc = PATH.shapes("model", {**load_recipe(RECIPES / "qwen3-next-80b-a3b-metrale.toml").model, "hc_mult": 4})
    assert {s["hc_mult"] for s in hc} == {4}


def test_a_model_with_neither_gdn_nor_mla_does_not_plan_the_path():
    assert model_lacks(PATH, load_recipe(RECIPES / "deepseek-v3-metrale.toml").model) == ""
    assert model_lacks(PATH, load_recipe(RECIPES / "qwen3-next-80b-a3b-metrale.toml").model) == ""
    assert "has no [model.gdn] or [model.mla]" in model_lacks(
        PATH, load_recipe(RECIPES / "nemotron-3-nano-30b-a3b-metrale.toml").model
    )


def test_refining_the_batch_keeps_a_gdn_pool_of_2n_plus_1_slots_and_adds_none_to_mla():
    assert spec.derive({**HYBRID.dims, "n": 7}, {"n"})["slots"] == 15
    assert "slots" not in spec.derive({**MLA.dims, "n": 7}, {"n"})


def test_per_sequence_launches_n_times_the_step_on_the_same_bytes():
    for s in [*SMOKE, *PATH.shapes("model", None)]:
        step = s["mla_layers"] if s["mla"] else s["gdn_layers"] + 2 * s["attn_layers"]
        assert PATH.variant_launches("batched", s) == step
        assert PATH.variant_launches("per_sequence", s) == s["n"] * step
        assert PATH.variant_traffic("batched", s) == PATH.variant_traffic("per_sequence", s)
        assert PATH.launches_vary(s) == (s["n"] > 1)


# ------------------------------------------------------------- simulator


def _bufs(shape: Shape, inputs: dict) -> dict:
    from numba import cuda

    bufs = {n: cuda.to_device(np.ascontiguousarray(a)) for n, a in inputs.items()}
    for n, (s, dt) in PATH.outputs(shape).items():
        if n not in bufs:
            bufs[n] = cuda.to_device(poison(s, dt))
    return bufs


def _run(shape: Shape, inputs: dict, launch) -> tuple[dict, dict]:
    from numba import cuda

    bufs = _bufs(shape, inputs)
    for scratch in getattr(launch, "workspace", {}).values():
        scratch.copy_to_device(np.full(scratch.shape, np.nan, scratch.dtype))
    launch(bufs)
    cuda.synchronize()
    return bufs, {n: bufs[n].copy_to_host() for n in PATH.outputs(shape)}


@pytest.fixture(scope="module", params=SMOKE, ids=lambda s: "mla" if s["mla"] else "gdn+attention")
def drawn(request):
    shape = request.param
    inputs = PATH.make_inputs(shape, np.random.default_rng(7))
    return shape, inputs, PATH.reference(shape, {k: v.copy() for k, v in inputs.items()})


@pytest.mark.sim
def test_both_variants_match_the_reference_and_each_other_bit_for_bit(drawn):
    from numba import cuda

    shape, inputs, ref = drawn
    outs = {}
    for name, v in PATH.variants.items():
        launch = v.build(shape)
        bufs, outs[name] = _run(shape, inputs, launch)
        fig = compare(outs[name], ref, PATH.tolerance)
        assert fig.passed, (name, fig.why())
        assert findings(name, shape, launch, bufs, cuda) == {
            "mla": bool(shape["mla"]),
            "hc_mult": shape["hc_mult"],
            "identical": True,
        }
    for n in outs["batched"]:
        assert np.array_equal(outs["batched"][n].view(np.uint32), outs["per_sequence"][n].view(np.uint32)), n


@pytest.mark.sim
@pytest.mark.simulator_only  # counts and types simulator launches
def test_per_sequence_launches_pass_the_batched_launches_argument_types(drawn, monkeypatch):
    """Every per-sequence launch passes batch-1 views of the same dtypes,
    ranks and C layout as the batched launch of the same kernel: numba
    compiles no second specialisation, and the sm_90 compile test of the
    batched kernels covers what runs."""
    from numba import typeof
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    shape, inputs, _ = drawn
    seen: dict[str, list] = {}
    for name, v in PATH.variants.items():
        launch, bufs = v.build(shape), _bufs(shape, inputs)
        calls: list = []
        monkeypatch.setattr(
            FakeCUDAKernel, "__call__", lambda self, *a, **k: calls.append((self.fn, tuple(map(typeof, a))))
        )
        launch(bufs)
        monkeypatch.undo()
        seen[name] = calls
    assert len(seen["per_sequence"]) == shape["n"] * len(seen["batched"])
    assert set(seen["per_sequence"]) == set(seen["batched"])
    assert all(t.layout == "C" for _, sig in seen["per_sequence"] for t in sig if hasattr(t, "layout"))


@pytest.mark.sim
@pytest.mark.parametrize("table", ["slots", "block_table"])
def test_the_check_rejects_a_per_sequence_step_that_hands_every_sequence_the_first_ones_row(table):
    """A per-sequence step that gives every sequence the first sequence's
    state slot, or its block-table row, everything else right, fails the
    check, and its findings say it does not write the batched bits."""
    from numba import cuda

    inputs = PATH.make_inputs(HYBRID, np.random.default_rng(5))
    ref = PATH.reference(HYBRID, {k: v.copy() for k, v in inputs.items()})
    broken = _step.launcher(HYBRID, per_sequence=True, row_of=lambda t, i: 0 if t == table else i)
    bufs, got = _run(HYBRID, inputs, broken)
    fig = compare(got, ref, PATH.tolerance)
    assert not fig.passed and fig.rel > 1e-2
    f = findings("per_sequence", HYBRID, broken, bufs, cuda)
    assert f["identical"] is False and f["differing"] and "differs from the other variant" in f["note"]


@pytest.mark.sim
def test_a_step_that_hands_every_sequence_the_shortest_length_drops_tokens_and_fails_by_value(drawn):
    """Every sequence given the last (shortest) sequence's length: nothing
    unwritten is read, the outputs are finite, and the check still fails.
    (The first, longest, length would read past a shorter sequence's
    blocks: table entries of -1 and never-written rows.)"""
    shape, inputs, ref = drawn
    last = shape["n"] - 1
    broken = _step.launcher(shape, per_sequence=True, row_of=lambda t, i: last if t == "context_lens" else i)
    _, got = _run(shape, inputs, broken)
    assert all(np.isfinite(a).all() for a in got.values())
    fig = compare(got, ref, PATH.tolerance)
    assert not fig.passed and fig.rel > 1e-2


@pytest.mark.sim
@pytest.mark.simulator_only  # bench --device sim
@pytest.mark.parametrize(
    "setting,want",
    [
        (None, ["batched", "batched"]),
        ("METRALE_HC_PERSEQ_DECODE=1", ["per_sequence", "batched"]),
        ("METRALE_MLA_PERSEQ_FALLBACK=true", ["batched", "per_sequence"]),
    ],
)
def test_bench_checks_what_each_lever_selects_at_both_smoke_models(tmp_path, capsys, setting, want):
    from leverctl.cli.app import main

    out = tmp_path / "bench.json"
    args = ["bench", "-e", "metrale", "--no-env", "--device", "sim", "--shapes", "smoke", "-k", PATH.name]
    with pytest.raises(SystemExit) as e:
        main([*args, *(["--set", setting] if setting else []), "-o", str(out)])
    assert e.value.code == 0, capsys.readouterr().err
    recs = json.loads(out.read_text())["results"]
    assert [r["variant"] for r in recs] == want
    assert all(r["status"] == "pass" and r["findings"]["identical"] for r in recs)
    assert [r["findings"]["mla"] for r in recs] == [False, True]


# ------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.parametrize("mla", [0, 1], ids=["gdn+attention", "mla"])
def test_on_a_gpu_at_model_shapes_both_variants_pass_with_the_same_bits_and_no_new_kernel(mla):
    from numba import cuda

    from leverctl.bench import check as chk
    from leverctl_kernels.attention import _paged
    from leverctl_kernels.attention.mla_decode import _mla
    from leverctl_kernels.gdn.decode import batched as decode_batched

    shape = next(s for s in PATH.shapes("model", None) if s["mla"] == mla and s["n"] == 8)
    if mla:
        kernels = [_mla.make_decode(shape["h"], shape["r"], shape["p"], shape["qk_dim"], False, _mla.mscale2(shape))]
    else:
        t, m = shape["target_ctas"], shape["min_split_blocks"]
        kernels = [
            decode_batched.make_decode_batched(shape["dk"], shape["dv"]),
            _paged.make_split(shape["hkv"], shape["hq"] // shape["hkv"], shape["d"], t, m),
            _paged.make_merge(shape["hkv"], shape["d"], t, m),
        ]
    x = PATH.make_inputs(shape, np.random.default_rng(1))
    outs, compiled = {}, {}
    for name in ("batched", "per_sequence"):
        launch = PATH.variants[name].build(shape)
        bufs, fig = chk.check(PATH, name, shape, launch, x, cuda)
        assert fig.passed, (name, fig.why())
        outs[name] = {n: bufs[n].copy_to_host() for n in PATH.outputs(shape)}
        assert findings(name, shape, launch, bufs, cuda, on_gpu=True)["identical"]
        compiled[name] = [set(k.overloads) for k in kernels]
    for n in outs["batched"]:
        assert np.array_equal(outs["batched"][n].view(np.uint32), outs["per_sequence"][n].view(np.uint32)), n
    assert compiled["per_sequence"] == compiled["batched"]  # the per-sequence launches compiled nothing new


def test_profile_takes_each_model_shapes_argument_types_from_the_smoke_shape_of_its_kind():
    from leverctl.profile.run import _types_shape
    from leverctl_kernels.registry import get_path

    for s in PATH.shapes("model", None):
        assert _types_shape(PATH, s)["mla"] == s["mla"]
        ps = PATH.extra["profile_shape"](s)
        assert (ps["mla"], ps["n"], ps["ctx"]) == (s["mla"], 1, 33)
        assert PATH.variant_launches("per_sequence", ps) == PATH.variant_launches("batched", ps)
    other = get_path("attention.mla_decode")  # no hook: its smallest smoke shape
    assert _types_shape(other, other.shapes("model", None)[0]) == min(
        other.shapes("smoke", None), key=lambda s: other.traffic(s).bytes
    )
