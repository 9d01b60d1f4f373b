#!/usr/bin/env python3
"""Two small model files to try `leverctl bench --weights` on, written with
the `gguf` and `safetensors` packages' own writers:

    .venv/bin/python scripts/make-weight-files.py [DIR]    # default: .

* ``DIR/demo.gguf`` (GGUF names): layer 0's attention (F16, BF16) and FFN
  (Q4_K gate, F16 up, F32 down), layer 1's experts (3-D, F16), layer 2's
  Mamba2 projections (BF16);
* ``DIR/demo.safetensors`` (Hugging Face names): layer 0's attention (BF16 q,
  ModelOpt FP8 k per channel and v per tensor, ModelOpt NVFP4 o) and MLP
  (block-scaled FP8 gate, BF16 up and down), layer 1's experts one tensor
  each and a shared expert, layer 2's ``mixer.in_proj``/``out_proj``.

Shapes are tiny so that the simulator runs every variant in a minute or
two; the values are random (normal, 0.05). Then, for example:

    leverctl bench -e metrale --device sim --shapes smoke --weights DIR/demo.safetensors --layer 0
    leverctl bench -e metrale --device sim --shapes smoke --weights DIR/demo.gguf --tensor blk.0.ffn_gate.weight
"""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

from leverctl_kernels.common import bits, q4k

rng = np.random.default_rng(0)
E4M3 = ml_dtypes.float8_e4m3fn


def normal(*shape, std=0.05) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(np.float32)


def fp8(n: int, k: int) -> np.ndarray:
    return np.clip(normal(n, k, std=100.0), -448, 448).astype(E4M3)


def write_gguf(path: Path) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("blk.0.attn_q.weight", normal(32, 64).astype(np.float16))
    w.add_tensor("blk.0.attn_k.weight", normal(16, 64).astype(np.float16))
    w.add_tensor("blk.0.attn_v.weight", bits.f32_to_bf16_np(normal(16, 64)), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.add_tensor("blk.0.attn_output.weight", normal(64, 32).astype(np.float16))
    w.add_tensor("blk.0.ffn_gate.weight", q4k.quantize(normal(24, 256)), raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    w.add_tensor("blk.0.ffn_up.weight", normal(24, 256).astype(np.float16))
    w.add_tensor("blk.0.ffn_down.weight", normal(32, 48))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(64, dtype=np.float32))
    for part, (n, k) in {"gate": (16, 64), "up": (16, 64), "down": (64, 16)}.items():
        w.add_tensor(f"blk.1.ffn_{part}_exps.weight", normal(4, n, k).astype(np.float16))
        w.add_tensor(f"blk.1.ffn_{part}_shexp.weight", normal(n, k).astype(np.float16))
    w.add_tensor("blk.1.ffn_gate_inp.weight", normal(4, 64))
    w.add_tensor("blk.2.ssm_in.weight", bits.f32_to_bf16_np(normal(26, 160)), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.add_tensor("blk.2.ssm_out.weight", bits.f32_to_bf16_np(normal(19, 256)), raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_safetensors(path: Path) -> None:
    p = "model.layers"
    t: dict[str, np.ndarray] = {}
    t[f"{p}.0.self_attn.q_proj.weight"] = normal(32, 64).astype(ml_dtypes.bfloat16)
    t[f"{p}.0.self_attn.k_proj.weight"] = fp8(16, 64)
    t[f"{p}.0.self_attn.k_proj.weight_scale"] = (rng.random(16) * 1e-3 + 1e-4).astype(np.float32)
    t[f"{p}.0.self_attn.v_proj.weight"] = fp8(16, 64)
    t[f"{p}.0.self_attn.v_proj.weight_scale"] = np.array(2e-4, dtype=np.float32)
    packed, scales, ts = bits.nvfp4_encode_np(normal(64, 32))
    t[f"{p}.0.self_attn.o_proj.weight"] = packed
    t[f"{p}.0.self_attn.o_proj.weight_scale"] = scales.view(E4M3)
    t[f"{p}.0.self_attn.o_proj.weight_scale_2"] = np.array(ts, dtype=np.float32)
    t[f"{p}.0.mlp.gate_proj.weight"] = fp8(24, 160)
    t[f"{p}.0.mlp.gate_proj.weight_scale_inv"] = np.array([[4e-4, 3e-4]], dtype=np.float32)
    t[f"{p}.0.mlp.up_proj.weight"] = normal(24, 160).astype(ml_dtypes.bfloat16)
    t[f"{p}.0.mlp.down_proj.weight"] = normal(32, 48).astype(ml_dtypes.bfloat16)
    t[f"{p}.0.input_layernorm.weight"] = np.ones(64, dtype=np.float32)
    for e in range(4):  # ModelOpt NVFP4 experts: gate and up share each expert's global scale
        w = {
            proj: normal(n, k)
            for proj, (n, k) in {"gate_proj": (16, 64), "up_proj": (16, 64), "down_proj": (64, 16)}.items()
        }
        gu = float(np.abs(np.concatenate([w["gate_proj"], w["up_proj"]])).max() / (448 * 6))
        for proj, v in w.items():
            packed, scales, ts = bits.nvfp4_encode_np(v, gu if proj != "down_proj" else None)
            t[f"{p}.1.mlp.experts.{e}.{proj}.weight"] = packed
            t[f"{p}.1.mlp.experts.{e}.{proj}.weight_scale"] = scales.view(E4M3)
            t[f"{p}.1.mlp.experts.{e}.{proj}.weight_scale_2"] = np.array(ts, dtype=np.float32)
    for proj, (n, k) in {"gate_proj": (16, 64), "up_proj": (16, 64), "down_proj": (64, 16)}.items():
        t[f"{p}.1.mlp.shared_expert.{proj}.weight"] = normal(n, k).astype(ml_dtypes.bfloat16)
    t[f"{p}.1.mlp.gate.weight"] = normal(4, 64).astype(ml_dtypes.bfloat16)
    t[f"{p}.2.mixer.in_proj.weight"] = normal(26, 160).astype(ml_dtypes.bfloat16)
    t[f"{p}.2.mixer.out_proj.weight"] = normal(19, 256).astype(ml_dtypes.bfloat16)
    t["model.embed_tokens.weight"] = normal(100, 64).astype(ml_dtypes.bfloat16)
    save_file(t, str(path))


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
    out.mkdir(parents=True, exist_ok=True)
    write_gguf(out / "demo.gguf")
    write_safetensors(out / "demo.safetensors")
    print(f"wrote {out / 'demo.gguf'} and {out / 'demo.safetensors'}")


if __name__ == "__main__":
    main()
