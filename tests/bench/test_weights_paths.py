"""The attention projections and ``mamba2.prefill_proj`` on a model file's
weights (their ``WeightUse``): what each path reads as the file stores it,
what it re-encodes, its shapes, and a run in the simulator on a
safetensors file's FP8 matrix as stored."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import safetensors_files as sf
from cli_result import use_paths

pytest.importorskip("safetensors")
pytest.importorskip("ml_dtypes")


@pytest.fixture(scope="module")
def st_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("st") / "model.safetensors"
    return path, sf.write(path)


def _read(path, name):
    from leverctl.bench import checkpoint

    (t,) = checkpoint.select(checkpoint.open_file(path), name, None, {}).tensors.values()
    return t


def _on(path_obj, tensor):
    return path_obj.extra["weights"].apply(path_obj, {tensor.role: tensor})


def test_proj_bf16_tc_reads_a_files_nvfp4_as_stored_and_encodes_the_rest(st_file):
    from leverctl_kernels.attention.proj_bf16_tc import naive
    from leverctl_kernels.attention.proj_bf16_tc.spec import PATH
    from leverctl_kernels.common import bits

    path, held = st_file
    o = _read(path, sf.O_NVFP4)
    on = _on(PATH, o)
    (shape,) = on.shapes("smoke", None)
    assert shape.label == f"{sf.O_NVFP4} smoke m21 n40 k32" and (shape["n"], shape["k"]) == (40, 32)
    inputs = on.make_inputs(shape, np.random.default_rng(0))
    assert np.array_equal(inputs["w_packed"], held[sf.O_NVFP4])
    assert np.array_equal(inputs["w_scales"], held[sf.O_NVFP4 + "_scale"].view(np.uint8))
    assert inputs["w_ts"][0] == held[sf.O_NVFP4 + "_scale_2"]
    ref = naive.nvfp4_weights(inputs["w_packed"], inputs["w_scales"], inputs["w_ts"])
    assert np.array_equal(ref.astype(np.float32), o.values)  # the reference reads the file's NVFP4

    q = _read(path, sf.Q_BF16)
    inputs = _on(PATH, q).make_inputs(_on(PATH, q).shapes("smoke", None)[0], np.random.default_rng(0))
    packed, scales, ts = bits.nvfp4_encode_np(q.values)
    assert np.array_equal(inputs["w_packed"], packed) and np.array_equal(inputs["w_scales"], scales)


def test_proj_fp8_reads_per_channel_and_per_tensor_fp8_as_stored(st_file):
    from leverctl_kernels.attention.proj_fp8.spec import PATH

    path, held = st_file
    k = _read(path, sf.K_FP8_CHANNEL)
    on = _on(PATH, k)
    shapes = on.shapes("smoke", None)
    assert [s["m"] for s in shapes] == [13, 21] and all((s["n"], s["k"]) == (16, 64) for s in shapes)
    inputs = on.make_inputs(shapes[0], np.random.default_rng(0))
    assert np.array_equal(inputs["w8"], held[sf.K_FP8_CHANNEL].view(np.uint8))
    assert np.array_equal(inputs["w_scale"], held[sf.K_FP8_CHANNEL + "_scale"])
    assert inputs["x8"].shape == (13, 64) and inputs["x_scale"].shape == (13,)

    v = _read(path, sf.V_FP8_TENSOR)
    inputs = _on(PATH, v).make_inputs(shapes[0], np.random.default_rng(0))
    assert np.array_equal(inputs["w8"], held[sf.V_FP8_TENSOR].view(np.uint8))
    assert inputs["w_scale"].shape == (16,) and np.all(inputs["w_scale"] == np.float32(2e-4))


def test_proj_fp8_re_encodes_block_scaled_fp8_per_channel(tmp_path):
    """Block scales do not fit the path's per-channel scales: the decoded
    matrix is re-encoded, within E4M3's rounding of it."""
    from leverctl_kernels.attention.proj_fp8.spec import PATH
    from leverctl_kernels.common import bits
    from leverctl_kernels.common.model_weights import ModelTensor

    rng = np.random.default_rng(3)
    codes = bits.f32_to_e4m3_np(rng.standard_normal((20, 64)).astype(np.float32) * 50)
    scale = np.array([[1e-3]], np.float32)
    values = bits.e4m3_to_f32_np(codes) * scale[0, 0]
    t = ModelTensor(
        "f",
        "blk.0.attn_k.weight",
        "attn_k",
        0,
        "F8_E4M3",
        values,
        fp8=codes,
        fp8_scale=scale,
        fp8_scale_kind="block128",
    )
    on = _on(PATH, t)
    inputs = on.make_inputs(on.shapes("smoke", None)[0], np.random.default_rng(0))
    w = bits.e4m3_to_f32_np(inputs["w8"]) * inputs["w_scale"][:, None]
    assert inputs["w_scale"].shape == (20,) and not np.array_equal(inputs["w8"], codes)
    assert np.allclose(w, values, rtol=2**-3, atol=0)


def test_proj_w4a16_quantises_the_matrix_to_int4(st_file):
    from leverctl_kernels.attention.proj_bf16_tc_w4a16.spec import PATH
    from leverctl_kernels.common import int4

    path, _ = st_file
    q = _read(path, sf.Q_BF16)
    on = _on(PATH, q)
    inputs = on.make_inputs(on.shapes("smoke", None)[0], np.random.default_rng(0))
    qweight, scales = int4.quantize_w4(q.values)
    assert np.array_equal(inputs["qweight"], qweight) and np.array_equal(inputs["scales"], scales)


def test_a_projection_whose_k_is_no_multiple_of_16_does_not_fit():
    from leverctl_kernels.attention.proj_fp8.spec import PATH
    from leverctl_kernels.common.model_weights import ModelTensor, WeightMismatch

    t = ModelTensor("f", "blk.0.attn_q.weight", "attn_q", 0, "F32", np.ones((8, 40), np.float32))
    with pytest.raises(WeightMismatch, match="k=40"):
        _on(PATH, t)


def test_mamba2_projections_take_the_in_and_out_matrices_shapes(st_file):
    from leverctl_kernels.common import int4
    from leverctl_kernels.ffn.prefill import formats
    from leverctl_kernels.mamba2.prefill_proj.spec import PATH

    path, _ = st_file
    ssm_in, ssm_out = _read(path, sf.SSM_IN), _read(path, sf.SSM_OUT)
    (s_in,) = _on(PATH, ssm_in).shapes("smoke", None)
    (s_out,) = _on(PATH, ssm_out).shapes("smoke", None)
    assert (s_in["out"], s_in["n"], s_in["k"], s_in["m"]) == (0, 26, 160, 19)
    assert (s_out["out"], s_out["n"], s_out["k"], s_out["m"]) == (1, 19, 256, 5)
    assert s_in.label.startswith(f"{sf.SSM_IN} smoke in_proj") and s_in["fp8_act"] == 19 * 160
    on = _on(PATH, ssm_in)
    inputs = on.make_inputs(s_in, np.random.default_rng(0))
    w4 = formats.w4a16(ssm_in.values)
    assert np.array_equal(inputs["w"], int4.dequantize_w4(w4["qweight"], w4["scales"]))
    assert on.select({**dict(PATH.lever_defaults)}, s_in).variant in PATH.variants


@pytest.mark.sim
def test_bench_runs_proj_fp8_on_the_files_fp8_as_stored(st_file, monkeypatch, capsys):
    """One variant (m16) of one path at the smoke rows, on a ModelOpt FP8
    matrix: it passes, and its record names the file, tensor and layer."""
    from leverctl.cli import common as cli_common
    from leverctl.cli.app import main
    from leverctl_kernels.attention.proj_fp8.spec import PATH

    one = dataclasses.replace(PATH, variants={"m16": PATH.variants["m16"]})
    use_paths(monkeypatch, [one])
    path, _ = st_file
    argv = ["bench", "--no-env", "-e", "metrale", "--device", "sim", "--shapes", "smoke", "--weights", str(path)]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--tensor", sf.K_FP8_CHANNEL, "-f", "json"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    recs = json.loads(out)["results"]
    assert [r["shape"]["label"] for r in recs] == [
        f"{sf.K_FP8_CHANNEL} smoke m13 n16 k64",
        f"{sf.K_FP8_CHANNEL} smoke m21 n16 k64",
    ]
    from test_records_doc import _compare, key_paths, section

    _compare(key_paths({"weights": recs[0]["weights"]}), section("The weights block"), "the weights block")
    for r in recs:
        assert r["status"] == "pass" and r["error"]["rel"] < 1e-5, r
        assert r["weights"] == {
            "file": str(path),
            "tensors": [sf.K_FP8_CHANNEL],
            "layer": 0,
            "roles": ["attn_k"],
            "stored": ["F8_E4M3"],
        }
