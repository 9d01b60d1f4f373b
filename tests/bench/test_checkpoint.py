"""``leverctl.bench.checkpoint``: GGUF and safetensors files written by
their packages' own writers, read back tensor by tensor. Every decoding is
checked against ``ml_dtypes`` (an independent implementation of BF16,
E4M3 and E2M1), and each comparison is shown to fail on a wrong decoding;
a file's other tensors are never read (peak memory of a child process)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import gguf_files
import numpy as np
import pytest
import safetensors_files as sf

ml_dtypes = pytest.importorskip("ml_dtypes")
pytest.importorskip("safetensors")


@pytest.fixture(scope="module")
def st_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("st") / "model.safetensors"
    return path, sf.write(path)


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    return path, gguf_files.write(path)


def _one(path: Path, name: str):
    from leverctl.bench import checkpoint

    ck = checkpoint.open_file(path)
    sel = checkpoint.select(ck, name, None, {})
    (t,) = sel.tensors.values()
    return t


@pytest.mark.parametrize(
    "name, role, layer, expert",
    [
        ("blk.3.attn_q.weight", "attn_q", 3, None),
        ("blk.0.ffn_gate_exps.weight", "ffn_gate_exps", 0, None),
        ("blk.12.ffn_down_shexp.weight", "ffn_down_shexp", 12, None),
        ("blk.1.ssm_in.weight", "ssm_in", 1, None),
        ("model.layers.7.self_attn.q_proj.weight", "attn_q", 7, None),
        ("model.layers.7.self_attn.o_proj.weight", "attn_output", 7, None),
        ("model.layers.0.mlp.gate_proj.weight", "ffn_gate", 0, None),
        ("model.layers.2.mlp.experts.5.down_proj.weight", "ffn_down_exps", 2, 5),
        ("model.layers.2.block_sparse_moe.experts.1.w3.weight", "ffn_up_exps", 2, 1),
        ("model.layers.2.mlp.shared_expert.up_proj.weight", "ffn_up_shexp", 2, None),
        ("model.layers.2.mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp", 2, None),
        ("blk.5.ffn_gate_inp.weight", "ffn_gate_inp", 5, None),
        ("model.layers.5.mlp.gate.weight", "ffn_gate_inp", 5, None),
        ("model.layers.5.block_sparse_moe.gate.weight", "ffn_gate_inp", 5, None),
        ("backbone.layers.4.mixer.in_proj.weight", "ssm_in", 4, None),
        ("backbone.layers.4.mixer.out_proj.weight", "ssm_out", 4, None),
        ("model.layers.0.linear_attn.in_proj_qkvz.weight", "ssm_in", 0, None),
        ("language_model.model.layers.9.self_attn.k_proj.weight", "attn_k", 9, None),
    ],
)
def test_each_naming_scheme_maps_onto_its_role(name, role, layer, expert):
    from leverctl.bench.checkpoint import Named, parse_name

    assert parse_name(name) == Named(role, layer, expert)


@pytest.mark.parametrize(
    "name",
    [
        "blk.0.ffn_norm.weight",
        "model.embed_tokens.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight_scale",
        "model.layers.0.mlp.experts.0.gate_proj.weight_scale_inv",
        "blk.0.attn_q.bias",
    ],
)
def test_norms_embeddings_and_scales_have_no_role(name):
    from leverctl.bench.checkpoint import parse_name

    assert parse_name(name) is None


def test_safetensors_floats_decode_as_ml_dtypes_does(st_file):
    path, held = st_file
    q = _one(path, sf.Q_BF16)
    assert q.stored == "BF16" and q.values.dtype == np.float32 and (q.role, q.layer) == ("attn_q", 0)
    assert np.array_equal(q.values, held[sf.Q_BF16].astype(np.float32))
    # The comparison sees a wrong BF16 decoding (the other half of each word).
    wrong = (held[sf.Q_BF16].view(np.uint16).astype(np.uint32)).view(np.float32)
    assert not np.array_equal(q.values, wrong)
    assert np.array_equal(_one(path, sf.UP_F16).values, held[sf.UP_F16].astype(np.float32))
    assert np.array_equal(_one(path, sf.DOWN_F32).values, held[sf.DOWN_F32])


def _e4m3(codes) -> np.ndarray:
    return np.asarray(codes).view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def test_modelopt_fp8_keeps_its_codes_and_scale_per_channel_or_tensor(st_file):
    path, held = st_file
    k = _one(path, sf.K_FP8_CHANNEL)
    scale = held[sf.K_FP8_CHANNEL + "_scale"]
    assert (k.stored, k.fp8_scale_kind) == ("F8_E4M3", "channel")
    assert np.array_equal(k.fp8, held[sf.K_FP8_CHANNEL].view(np.uint8)) and np.array_equal(k.fp8_scale, scale)
    want = _e4m3(held[sf.K_FP8_CHANNEL]) * scale[:, None]
    assert np.array_equal(k.values, want)
    assert not np.allclose(k.values, _e4m3(held[sf.K_FP8_CHANNEL]) * scale[::-1, None])  # scales out of order

    v = _one(path, sf.V_FP8_TENSOR)
    assert v.fp8_scale_kind == "tensor" and v.fp8_scale.shape == ()
    assert np.array_equal(v.values, _e4m3(held[sf.V_FP8_TENSOR]) * np.float32(2e-4))


def test_block_scaled_fp8_scales_each_128_square_with_its_own_scale(st_file):
    """n = 200, k = 160: partial blocks on both sides."""
    path, held = st_file
    g = _one(path, sf.GATE_FP8_BLOCK)
    s = held[sf.GATE_FP8_BLOCK + "_scale_inv"]
    assert (g.stored, g.fp8_scale_kind, g.fp8_scale.shape) == ("F8_E4M3", "block128", (2, 2))
    e = _e4m3(held[sf.GATE_FP8_BLOCK])
    want = np.empty_like(e)
    for i in range(2):
        for j in range(2):
            want[128 * i : 128 * (i + 1), 128 * j : 128 * (j + 1)] = (
                e[128 * i : 128 * (i + 1), 128 * j : 128 * (j + 1)] * s[i, j]
            )
    assert np.array_equal(g.values, want)
    wrong = e * np.repeat(np.repeat(s.T, 128, 0), 128, 1)[:200, :160]  # the scale grid transposed
    assert not np.allclose(g.values, wrong)


def _nvfp4_by_ml_dtypes(packed, scales, glob) -> np.ndarray:
    """E2M1 nibbles, low one first, each x its block's E4M3 scale x the global."""
    fp4 = ml_dtypes.float4_e2m1fn
    lo, hi = packed & 0x0F, packed >> 4
    nib = np.stack([lo, hi], axis=-1).reshape(packed.shape[0], -1)
    vals = nib.astype(np.uint8).view(fp4).astype(np.float32)
    return vals * np.repeat(_e4m3(scales), 16, axis=1) * np.float32(glob)


def test_modelopt_nvfp4_is_kept_as_stored_and_decodes_as_ml_dtypes_does(st_file):
    path, held = st_file
    o = _one(path, sf.O_NVFP4)
    packed, scales, glob = held[sf.O_NVFP4], held[sf.O_NVFP4 + "_scale"], held[sf.O_NVFP4 + "_scale_2"]
    assert (o.stored, o.n, o.k) == ("NVFP4", 40, 32)
    assert np.array_equal(o.nvfp4, packed) and np.array_equal(o.nvfp4_scale, scales.view(np.uint8))
    assert o.nvfp4_global == float(glob)
    assert np.allclose(o.values, _nvfp4_by_ml_dtypes(packed, scales, glob), rtol=1e-6, atol=0)
    swapped = ((packed & 0x0F) << 4) | (packed >> 4)  # high nibble first: a wrong order
    assert not np.allclose(o.values, _nvfp4_by_ml_dtypes(swapped, scales, glob))


def test_hugging_face_experts_are_stacked_in_expert_order(st_file):
    from leverctl.bench import checkpoint

    path, held = st_file
    ck = checkpoint.open_file(path)
    sel = checkpoint.select(ck, "ffn_gate_exps", 1, {"ffn_gate_exps": frozenset({"ffn_gate_exps", "ffn_up_exps"})})
    assert set(sel.tensors) == {"ffn_gate_exps", "ffn_up_exps"} and sel.focus == "ffn_gate_exps"
    gate = sel.tensors["ffn_gate_exps"]
    assert gate.values.shape == (3, 8, 32) and gate.experts == 3
    want = np.stack([held[sf.EXPERT_GATE.format(e=e)].astype(np.float32) for e in range(3)])
    assert np.array_equal(gate.values, want)
    assert gate.name == "model.layers.1.mlp.experts.0-2.gate_proj.weight"


def test_gguf_expert_stacks_and_q4k_blocks_are_read_as_stored(gguf_file):
    import gguf

    path, held = gguf_file
    g = _one(path, gguf_files.GATE_EXPS)
    assert (g.role, g.layer, g.values.shape) == ("ffn_gate_exps", 2, (3, 8, 32))  # GGUF ne [32, 8, 3]
    assert np.array_equal(g.values, held["gate_exps"].astype(np.float32))
    u = _one(path, gguf_files.UP_EXPS)
    assert u.stored == "Q4_K" and np.array_equal(u.q4k, held["up_exps"])
    flat = gguf.quants.dequantize(held["up_exps"].reshape(8, -1), gguf.GGMLQuantizationType.Q4_K)
    assert np.array_equal(u.values, flat.reshape(2, 4, 256))


def test_layer_reads_only_the_roles_a_path_uses(st_file):
    from leverctl.bench import checkpoint

    path, _ = st_file
    ck = checkpoint.open_file(path)
    sel = checkpoint.select(ck, None, 0, {"ffn_down": frozenset({"ffn_down"}), "attn_q": frozenset({"attn_q"})})
    assert set(sel.tensors) == {"ffn_down", "attn_q"} and sel.layer == 0 and not sel.named


# ── memory: a large file, one small tensor read ──────────────────────────────

BIG = 4  # other tensors
BIG_MB = 50  # each
SMALL = (512, 1024)  # F16: 1 MiB

_CHILD = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path
    from leverctl.bench import checkpoint
    import leverctl_kernels.common.bits  # every import before the baseline
    import numpy as np
    ck = checkpoint.open_file(Path(sys.argv[1]))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sel = checkpoint.select(ck, sys.argv[2], None, {})
    (t,) = sel.tensors.values()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"before_kb": before, "after_kb": after, "sum": float(t.values.sum()), "shape": t.values.shape}))
    """
)


def _run_child(code: str, path: Path, name: str) -> dict:
    """Run ``code`` in a grandchild forked by a shell that stays (``; exit``
    keeps it from exec-ing in its place): a process exec'd straight from
    this one starts with this one's peak in its ``ru_maxrss``."""
    out = subprocess.run(
        ["sh", "-c", '"$0" "$@"; exit $?', sys.executable, "-c", code, str(path), name],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return json.loads(out)


def _peak_growth(path: Path, name: str) -> dict:
    return _run_child(_CHILD, path, name)


def _check_memory(path: Path, name: str, small: np.ndarray) -> None:
    size_mb = path.stat().st_size / 2**20
    assert size_mb > BIG * BIG_MB
    r = _peak_growth(path, name)
    grew_mb = (r["after_kb"] - r["before_kb"]) / 1024
    print(f"{path.name}: {size_mb:.0f} MiB file, peak RSS grew {grew_mb:.1f} MiB reading a 1 MiB tensor")
    assert tuple(r["shape"]) == SMALL and r["sum"] == pytest.approx(float(small.astype(np.float64).sum()), rel=1e-4)
    # The tensor (1 MiB stored, 2 MiB decoded) and its copies: far below the file.
    assert grew_mb < 16, f"reading a 1 MiB tensor of a {size_mb:.0f} MiB file grew the peak by {grew_mb:.1f} MiB"


def _arrays():
    rng = np.random.default_rng(0)
    small = rng.standard_normal(SMALL).astype(np.float16)
    big = np.ones((BIG_MB * 2**20 // 2 // 1024, 1024), dtype=np.float16)
    return small, big


def test_a_safetensors_file_is_read_one_tensor_at_a_time(tmp_path):
    from safetensors.numpy import save_file

    small, big = _arrays()
    tensors = {f"model.layers.{i}.mlp.up_proj.weight": big for i in range(1, BIG + 1)}
    tensors["model.layers.0.mlp.up_proj.weight"] = small
    path = tmp_path / "big.safetensors"
    save_file(tensors, str(path))
    del tensors
    _check_memory(path, "model.layers.0.mlp.up_proj.weight", small)


def test_a_gguf_file_is_read_one_tensor_at_a_time(tmp_path):
    import gguf

    small, big = _arrays()
    path = tmp_path / "big.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for i in range(1, BIG + 1):
        w.add_tensor(f"blk.{i}.ffn_up.weight", big)
    w.add_tensor("blk.0.ffn_up.weight", small)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _check_memory(path, "blk.0.ffn_up.weight", small)


def test_the_memory_check_fails_a_reader_that_reads_the_whole_file(tmp_path):
    """The same measurement on a child that touches every byte of the file
    grows by the file's size: the check above can fail."""
    from safetensors.numpy import save_file

    small, big = _arrays()
    tensors = {f"model.layers.{i}.mlp.up_proj.weight": big for i in range(1, BIG + 1)}
    tensors["model.layers.0.mlp.up_proj.weight"] = small
    path = tmp_path / "big.safetensors"
    save_file(tensors, str(path))
    greedy = _CHILD.replace(
        "sel = checkpoint.select(", "whole = Path(sys.argv[1]).read_bytes()\nsel = checkpoint.select("
    )
    r = _run_child(greedy, path, "model.layers.0.mlp.up_proj.weight")
    assert (r["after_kb"] - r["before_kb"]) / 1024 > BIG * BIG_MB


def test_bench_help_names_every_role(capsys):
    from leverctl.cli.app import main
    from leverctl_kernels.common.model_weights import ROLES

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.replace("│", " ").split())
    missing = [r for r in ROLES if r not in text]
    assert missing == [], f"bench --help does not name the roles {missing}"


def test_a_sharded_checkpoint_is_read_through_its_index(tmp_path):
    """Two shards and Hugging Face's index; an FP8 tensor's scale in the
    other shard than the tensor."""
    from safetensors.numpy import save_file

    from leverctl.bench import checkpoint

    rng = np.random.default_rng(4)
    q = (rng.standard_normal((16, 32)) * 0.05).astype(ml_dtypes.bfloat16)
    k = np.clip(rng.standard_normal((16, 32)) * 100, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    scale = (rng.random(16) * 1e-3).astype(np.float32)
    qn, kn = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight"
    save_file({qn: q, kn: k}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({kn + "_scale": scale}, str(tmp_path / "model-00002-of-00002.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    shard = {qn: "model-00001-of-00002.safetensors", kn: "model-00001-of-00002.safetensors"}
    index.write_text(json.dumps({"weight_map": {**shard, kn + "_scale": "model-00002-of-00002.safetensors"}}))
    ck = checkpoint.open_file(index)
    sel = checkpoint.select(ck, None, 0, {"attn_q": frozenset({"attn_q"}), "attn_k": frozenset({"attn_k"})})
    assert np.array_equal(sel.tensors["attn_q"].values, q.astype(np.float32))
    assert sel.tensors["attn_k"].fp8_scale_kind == "channel"
    assert np.array_equal(sel.tensors["attn_k"].values, _e4m3(k) * scale[:, None])
    assert sel.file == str(index) and sel.tensors["attn_q"].file == str(index)
