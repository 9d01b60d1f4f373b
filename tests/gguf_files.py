"""Small GGUF files written with the ``gguf`` package's own writer, for the
``bench --weights`` tests and their bad-input rows."""

from __future__ import annotations

from pathlib import Path

DOWN = "blk.0.ffn_down.weight"  # Q4_K, n 24, k 256
UP = "blk.0.ffn_up.weight"  # F16, n 20, k 160
GATE_BF16 = "blk.0.ffn_gate.weight"  # BF16, n 12, k 32
Q8 = "blk.1.ffn_down.weight"  # Q8_0: a type --weights does not read
ODD_K = "blk.1.ffn_up.weight"  # F16, k 40: not a multiple of 16
NORM = "blk.0.ffn_norm.weight"  # F32, one dimension
ATTN = "blk.0.attn_q.weight"  # F16 n 8 k 32
GATE_EXPS = "blk.2.ffn_gate_exps.weight"  # F16, experts 3, n 8, k 32 (GGUF ne [32, 8, 3])
UP_EXPS = "blk.2.ffn_up_exps.weight"  # Q4_K, experts 2, n 4, k 256
SSM_IN = "blk.3.ssm_in.weight"  # F16 n 16 k 32: a role only Metrale's paths read


def write(path: Path, seed: int = 3) -> dict:
    """The file, and the Q4_K blocks and float matrices it holds."""
    import gguf
    import numpy as np

    from leverctl_kernels.common import bits, q4k
    from leverctl_kernels.ffn.prefill.spec import weights

    rng = np.random.default_rng(seed)
    down = q4k.quantize(weights(rng, 24, 256))
    up = weights(rng, 20, 160).astype(np.float16)
    gate = bits.f32_to_bf16_np(weights(rng, 12, 32))
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_tensor(DOWN, down, raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    w.add_tensor(UP, up)
    w.add_tensor(GATE_BF16, gate, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.add_tensor(
        Q8,
        gguf.quants.quantize(weights(rng, 4, 64), gguf.GGMLQuantizationType.Q8_0),
        raw_dtype=gguf.GGMLQuantizationType.Q8_0,
    )
    w.add_tensor(ODD_K, weights(rng, 4, 40).astype(np.float16))
    w.add_tensor(NORM, np.ones(32, dtype=np.float32))
    w.add_tensor(ATTN, weights(rng, 8, 32).astype(np.float16))
    gate_exps = weights(rng, 24, 32).reshape(3, 8, 32).astype(np.float16)
    w.add_tensor(GATE_EXPS, gate_exps)
    up_exps = q4k.quantize(weights(rng, 8, 256)).reshape(2, 4, -1)
    w.add_tensor(UP_EXPS, up_exps, raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    w.add_tensor(SSM_IN, weights(rng, 16, 32).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"down": down, "up": up, "gate": gate, "gate_exps": gate_exps, "up_exps": up_exps}
