"""One small model in a GGUF and a safetensors file, written with each
library's own writer, holding a tensor of every role a kernel path reads
(``kernels/common/model_weights.py``): the ``bench --weights`` tests run
every weight-bearing path on them.

Layer 0 is attention (q, k, v of 128 rows: one head of the rotation's head
dim 128) and a dense FFN; layer 1 an MoE layer (router, 3 experts, a shared
expert); layer 2 a Mamba2 / linear-attention layer. Hidden size 48 and
intermediate 32: multiples of NVFP4's 16 and of int4's 8, not of the
kernels' 64-input step or of int4's 128-input group. The GGUF file stores
F16, BF16 and F32; the safetensors file BF16, ModelOpt FP8 (per channel) for
the attention and ModelOpt NVFP4 for the experts (gate and up sharing each
expert's global scale, as a fused checkpoint does).
"""

from __future__ import annotations

from pathlib import Path

H, I, E = 48, 32, 3
LAYERS = {"attention": 0, "moe": 1, "ssm": 2}

# role -> (layer, [experts,] n, k)
SHAPES = {
    "attn_q": (0, 128, H),
    "attn_k": (0, 128, H),
    "attn_v": (0, 128, H),
    "attn_output": (0, H, 128),
    "ffn_gate": (0, I, H),
    "ffn_up": (0, I, H),
    "ffn_down": (0, H, I),
    "ffn_gate_inp": (1, E, H),
    "ffn_gate_exps": (1, E, I, H),
    "ffn_up_exps": (1, E, I, H),
    "ffn_down_exps": (1, E, H, I),
    "ffn_gate_shexp": (1, I, H),
    "ffn_up_shexp": (1, I, H),
    "ffn_down_shexp": (1, H, I),
    "ssm_in": (2, 80, H),
    "ssm_out": (2, H, 64),
}

HF = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ssm_in": "linear_attn.in_proj_qkvz",
    "ssm_out": "linear_attn.out_proj",
}
HF_EXPERT = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}


def values(seed: int = 11) -> dict:
    """role -> float32 weights (normal x 0.05, one in 64 six times larger)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for role, (_, *shape) in SHAPES.items():
        w = rng.standard_normal(shape).astype(np.float32) * np.float32(0.05)
        flat = w.reshape(-1)
        flat[rng.choice(flat.size, size=max(1, flat.size // 64), replace=False)] *= np.float32(6.0)
        out[role] = w
    return out


def write_gguf(path: Path, seed: int = 11) -> None:
    import gguf
    import numpy as np

    from leverctl_kernels.common import bits

    bf16 = {"attn_v", "ffn_up", "ssm_in", "ffn_up_exps"}
    f32 = {"ffn_gate_inp", "ffn_down"}
    w = gguf.GGUFWriter(str(path), "qwen3moe")
    for role, v in values(seed).items():
        name = f"blk.{SHAPES[role][0]}.{role}.weight"
        if role in bf16:
            w.add_tensor(name, bits.f32_to_bf16_np(v), raw_dtype=gguf.GGMLQuantizationType.BF16)
        elif role in f32:
            w.add_tensor(name, v)
        else:
            w.add_tensor(name, v.astype(np.float16))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(H, dtype=np.float32))  # no role
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_safetensors(path: Path, seed: int = 11) -> None:
    import ml_dtypes
    import numpy as np
    from safetensors.numpy import save_file

    from leverctl_kernels.common import bits

    e4m3 = ml_dtypes.float8_e4m3fn
    out: dict = {}
    vals = values(seed)
    for role, v in vals.items():
        layer = SHAPES[role][0]
        if role in HF_EXPERT:
            continue
        name = f"model.layers.{layer}.{HF[role]}.weight"
        if role in ("attn_k", "attn_v"):  # ModelOpt FP8, one scale per output channel
            scale = (np.abs(v).max(axis=1) / 448.0).astype(np.float32)
            out[name] = (v / scale[:, None]).astype(e4m3)
            out[name + "_scale"] = scale
        else:
            out[name] = v.astype(ml_dtypes.bfloat16)
    for e in range(E):
        gu = np.concatenate([vals["ffn_gate_exps"][e], vals["ffn_up_exps"][e]])
        shared_global = float(np.abs(gu).max() / (448.0 * 6.0))
        for role, proj in HF_EXPERT.items():
            name = f"model.layers.1.mlp.experts.{e}.{proj}.weight"
            glob = shared_global if role != "ffn_down_exps" else None
            packed, scales, ts = bits.nvfp4_encode_np(vals[role][e], glob)
            out[name] = packed
            out[name + "_scale"] = scales.view(e4m3)
            out[name + "_scale_2"] = np.array(ts, dtype=np.float32)
    save_file(out, str(path))
