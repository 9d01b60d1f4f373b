"""Small safetensors files written with the ``safetensors`` package's own
writer (BF16 and FP8 arrays typed by ``ml_dtypes``), in Hugging Face's
naming, for the ``bench --weights`` tests and their bad-input rows."""

from __future__ import annotations

from pathlib import Path

P = "model.layers"
Q_BF16 = f"{P}.0.self_attn.q_proj.weight"  # BF16 [24, 64]
K_FP8_CHANNEL = f"{P}.0.self_attn.k_proj.weight"  # FP8, ModelOpt per-channel weight_scale [16]
V_FP8_TENSOR = f"{P}.0.self_attn.v_proj.weight"  # FP8, ModelOpt per-tensor weight_scale []
O_NVFP4 = f"{P}.0.self_attn.o_proj.weight"  # NVFP4 U8 [40, 16] (k 32)
GATE_FP8_BLOCK = f"{P}.0.mlp.gate_proj.weight"  # FP8 [200, 160], weight_scale_inv [2, 2]
UP_F16 = f"{P}.0.mlp.up_proj.weight"  # F16 [20, 160]
DOWN_F32 = f"{P}.0.mlp.down_proj.weight"  # F32 [24, 48]
EXPERT_GATE = f"{P}.1.mlp.experts.{{e}}.gate_proj.weight"  # BF16 [8, 32], experts 0..2
EXPERT_UP = f"{P}.1.mlp.experts.{{e}}.up_proj.weight"
SHARED_GATE = f"{P}.1.mlp.shared_expert.gate_proj.weight"  # BF16 [8, 32]
SSM_IN = f"{P}.2.mixer.in_proj.weight"  # BF16 [26, 160]
SSM_OUT = f"{P}.2.mixer.out_proj.weight"  # BF16 [19, 256]
NO_SCALE = f"{P}.3.mlp.gate_proj.weight"  # FP8 without a scale tensor
NORM = f"{P}.0.input_layernorm.weight"  # F32 [64]: no role
EMBED = "model.embed_tokens.weight"  # no role
EXPERTS = 3


def write(path: Path, seed: int = 5) -> dict:
    """The file, and what it holds (codes, scales and float arrays by name)."""
    import ml_dtypes
    import numpy as np
    from safetensors.numpy import save_file

    from leverctl_kernels.common import bits

    rng = np.random.default_rng(seed)
    e4m3 = ml_dtypes.float8_e4m3fn

    def normal(*shape, std=0.05):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def fp8(n, k):
        return np.clip(normal(n, k, std=100.0), -448, 448).astype(e4m3)

    held: dict = {}
    t = held
    t[Q_BF16] = normal(24, 64).astype(ml_dtypes.bfloat16)
    t[K_FP8_CHANNEL] = fp8(16, 64)
    t[K_FP8_CHANNEL + "_scale"] = (rng.random(16) * 1e-3 + 1e-4).astype(np.float32)
    t[V_FP8_TENSOR] = fp8(16, 64)
    t[V_FP8_TENSOR + "_scale"] = np.array(2e-4, dtype=np.float32)
    packed, scales, ts = bits.nvfp4_encode_np(normal(40, 32))
    t[O_NVFP4] = packed
    t[O_NVFP4 + "_scale"] = scales.view(e4m3)
    t[O_NVFP4 + "_scale_2"] = np.array(ts, dtype=np.float32)
    t[GATE_FP8_BLOCK] = fp8(200, 160)
    t[GATE_FP8_BLOCK + "_scale_inv"] = (rng.random((2, 2)) * 1e-3 + 1e-4).astype(np.float32)
    t[UP_F16] = normal(20, 160).astype(np.float16)
    t[DOWN_F32] = normal(24, 48)
    for e in range(EXPERTS):
        t[EXPERT_GATE.format(e=e)] = normal(8, 32).astype(ml_dtypes.bfloat16)
        t[EXPERT_UP.format(e=e)] = normal(8, 32).astype(ml_dtypes.bfloat16)
    t[SHARED_GATE] = normal(8, 32).astype(ml_dtypes.bfloat16)
    t[SSM_IN] = normal(26, 160).astype(ml_dtypes.bfloat16)
    t[SSM_OUT] = normal(19, 256).astype(ml_dtypes.bfloat16)
    t[NO_SCALE] = fp8(16, 32)
    t[NORM] = np.ones(64, dtype=np.float32)
    t[EMBED] = normal(50, 64).astype(ml_dtypes.bfloat16)
    save_file(dict(held), str(path))
    return held
