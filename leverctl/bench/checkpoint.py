"""Model files for ``leverctl bench --weights FILE``: GGUF through the
``gguf`` package (llama.cpp's own reader; the ``leverctl[gguf]`` extra) and
safetensors through the ``safetensors`` package (the ``leverctl[safetensors]``
extra), each memory-mapped, only the tensors asked for read.

A file's tensors are named by a scheme (GGUF's ``blk.N.ffn_down.weight``,
Hugging Face's ``model.layers.N.mlp.down_proj.weight``); :data:`GGUF_ROLES`
and :data:`HF_ROLES` map them onto the roles of
``leverctl_kernels.common.model_weights.ROLES`` (what the tensor is in its
layer), and :func:`tensors_for` reads the ones a bench needs as
:class:`~leverctl_kernels.common.model_weights.ModelTensor`: float32 values,
and where the file stores Q4_K, FP8 E4M3 with its scales or NVFP4 with both
scales, that form as stored.

What each file stores, and how it is read:

=====================  ==========================================================
GGUF                   Q4_K (blocks kept as stored), F16, BF16, F32; 2-D
                       ``ne = [k, n]`` or 3-D experts ``ne = [k, n, e]``
                       (values ``[e, n, k]``)
safetensors            F32, F16, BF16; F8_E4M3 with ``weight_scale_inv``
                       (128 x 128 blocks, DeepSeek-V3 / Hugging Face FP8) or
                       ``weight_scale`` (ModelOpt FP8, one per tensor or per
                       output channel); ModelOpt NVFP4: ``weight`` U8 packed
                       E2M1 ``[n, k/2]``, ``weight_scale`` F8_E4M3
                       ``[n, k/16]``, ``weight_scale_2`` F32 global
=====================  ==========================================================

A checkpoint sharded over several safetensors files is read through its
Hugging Face index (``model.safetensors.index.json``, whose ``weight_map``
names each tensor's shard): every shard's header is read, and a tensor's
scales may lie in another shard than the tensor.

The safetensors package's numpy API gives BF16 only where ``ml_dtypes`` has
taught numpy the type, and FP8 not at all, so those tensors are read as
unsigned integers at the offsets the file's header gives (the package has
validated it first), through a read-only memory map, and decoded by
``leverctl_kernels.common.bits``.

Everything here is bad input or data: a missing extra, a file that is
neither format or is cut short, an absent tensor (with the closest names),
an unknown role, a layer without tensors, a missing scale tensor, or a
stored type this does not read raise ``UserError`` (one line, exit 2).
"""

from __future__ import annotations

import difflib
import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import UserError

# ── naming schemes -> roles ──────────────────────────────────────────────────

# GGUF: ``blk.N.<role>.weight``; the role is GGUF's own name (ROLES are
# spelled as GGUF spells them).
GGUF_NAME = re.compile(r"^blk\.(?P<layer>\d+)\.(?P<part>[a-z0-9_]+)\.weight$")
GGUF_ROLES = (
    "attn_q attn_k attn_v attn_qkv attn_output ffn_gate ffn_up ffn_down ffn_gate_inp ffn_gate_exps ffn_up_exps "
    "ffn_down_exps ffn_gate_shexp ffn_up_shexp ffn_down_shexp ssm_in ssm_out"
).split()

# Hugging Face: ``[prefix.]layers.N.<module>.weight``, the module mapped here.
HF_NAME = re.compile(r"^(?:.+\.)?layers\.(?P<layer>\d+)\.(?P<part>.+)\.weight$")
HF_ROLES: Mapping[str, str] = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.qkv_proj": "attn_qkv",
    "self_attn.o_proj": "attn_output",
    "mixer.q_proj": "attn_q",  # Nemotron-H's attention layers
    "mixer.k_proj": "attn_k",
    "mixer.v_proj": "attn_v",
    "mixer.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "mixer.up_proj": "ffn_up",  # Nemotron-H's MLP layers (no gate)
    "mixer.down_proj": "ffn_down",
    "mlp.gate": "ffn_gate_inp",  # an MoE layer's router (Qwen MoE, DeepSeek)
    "block_sparse_moe.gate": "ffn_gate_inp",  # Mixtral
    "mixer.gate": "ffn_gate_inp",  # Nemotron-H MoE layers
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp",  # Qwen MoE
    "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp",
    "mlp.shared_experts.gate_proj": "ffn_gate_shexp",  # DeepSeek
    "mlp.shared_experts.up_proj": "ffn_up_shexp",
    "mlp.shared_experts.down_proj": "ffn_down_shexp",
    "mixer.in_proj": "ssm_in",  # Mamba2 / Nemotron-H
    "mixer.out_proj": "ssm_out",
    "linear_attn.in_proj_qkvz": "ssm_in",  # Qwen3-Next's gated DeltaNet
    "linear_attn.out_proj": "ssm_out",
}
# One tensor per expert: ``...experts.E.<proj>.weight``, stacked into one
# ``[e, n, k]`` tensor of the expert role.
HF_EXPERT = re.compile(r"^(?P<module>(?:mlp|block_sparse_moe|mixer)\.experts)\.(?P<expert>\d+)\.(?P<proj>\w+)$")
HF_EXPERT_ROLES: Mapping[str, str] = {
    "gate_proj": "ffn_gate_exps",
    "up_proj": "ffn_up_exps",
    "down_proj": "ffn_down_exps",
    "w1": "ffn_gate_exps",  # Mixtral
    "w3": "ffn_up_exps",
    "w2": "ffn_down_exps",
}


@dataclass(frozen=True)
class Named:
    """What a tensor's name says: its role, layer and (one expert's tensor
    of a Hugging Face file) expert."""

    role: str
    layer: int
    expert: int | None = None


def parse_name(name: str) -> Named | None:
    """The role a tensor name gives, in either scheme; None for a tensor
    that is none of :data:`ROLES` (norms, embeddings, scales)."""
    m = GGUF_NAME.match(name)
    if m and m["part"] in GGUF_ROLES:
        return Named(m["part"], int(m["layer"]))
    m = HF_NAME.match(name)
    if m is None:
        return None
    part, layer = m["part"], int(m["layer"])
    if part in HF_ROLES:
        return Named(HF_ROLES[part], layer)
    e = HF_EXPERT.match(part)
    if e and e["proj"] in HF_EXPERT_ROLES:
        return Named(HF_EXPERT_ROLES[e["proj"]], layer, int(e["expert"]))
    return None


# ── the files ────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Entry:
    """A tensor in a file's index: its numpy-order shape and stored type."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # Q4_K, F16, BF16, F32, F8_E4M3, U8, ...


def _one_line(e: BaseException, limit: int = 160) -> str:
    return " ".join(str(e).split())[:limit] or type(e).__name__


def _need(package: str, what: str):
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError:
        raise UserError(
            f"--weights needs the {package} package to read {what}: pip install 'leverctl[{package}]'"
        ) from None


INDEX_SUFFIX = ".safetensors.index.json"


def sniff(file: Path) -> str:
    """``"gguf"``, ``"safetensors"`` or ``"index"`` (a Hugging Face shard
    index) from the file's first bytes (no package needed), else bad input."""
    where = str(file)
    if not file.exists():
        raise UserError("no such file", where)
    if not file.is_file():
        raise UserError("not a regular file (a sharded checkpoint is read through its *.safetensors.index.json)", where)
    try:
        with file.open("rb") as f:
            head = f.read(9)
    except OSError as e:
        raise UserError(f"cannot read it ({e.strerror or e})", where) from None
    if head[:4] == b"GGUF":
        return "gguf"
    size = file.stat().st_size
    if len(head) == 9 and head[8:9] == b"{" and 8 + struct.unpack("<Q", head[:8])[0] <= size:
        return "safetensors"
    if file.name.endswith(INDEX_SUFFIX):
        return "index"
    raise UserError(
        "neither a GGUF file (no GGUF magic) nor a safetensors file (no header length and JSON header)", where
    )


def _shards(index: Path) -> list[Path]:
    """The shard files a Hugging Face index names, each one present."""
    where = str(index)
    try:
        weight_map = json.loads(index.read_text("utf-8"))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        why = f"no weight_map ({_one_line(e)})" if isinstance(e, (KeyError, TypeError)) else _one_line(e)
        raise UserError(f"not a safetensors index: {why}", where) from None
    shards = [index.parent / n for n in names]
    for shard in shards:
        if not shard.is_file():
            raise UserError(f"the index names shard {shard.name}, which is not beside it", where)
    return shards


class Checkpoint:
    """A model file's index (``entries``) and its reader of one tensor."""

    kind = ""

    def __init__(self, file: Path):
        self.file = file
        self.where = str(file)
        self.entries: dict[str, Entry] = {}

    def read_one(self, name: str, named: Named) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def bad(self, message: str) -> UserError:
        return UserError(message, self.where)


class GgufFile(Checkpoint):
    kind = "GGUF"
    TYPES = ("Q4_K", "F16", "BF16", "F32")

    def __init__(self, file: Path):
        super().__init__(file)
        self.gguf = _need("gguf", "a GGUF file")
        try:
            reader = self.gguf.GGUFReader(str(file), "r")
        except Exception as e:  # noqa: BLE001 - whatever the reader refuses, it cannot read the file
            why = _one_line(e)
            if "reshape" in why or "size" in why:
                raise self.bad(f"the GGUF file is cut short or inconsistent ({why})") from None
            raise self.bad(f"not a GGUF file the gguf reader can read ({why})") from None
        self.tensors = {t.name: t for t in reader.tensors}
        for t in reader.tensors:
            self.entries[t.name] = Entry(t.name, tuple(int(x) for x in reversed(list(t.shape))), t.tensor_type.name)

    def read_one(self, name: str, named: Named) -> dict[str, Any]:
        import numpy as np

        t, entry = self.tensors[name], self.entries[name]
        if entry.dtype not in self.TYPES:
            raise self.bad(f"tensor {name} is {entry.dtype}; --weights reads GGUF {', '.join(self.TYPES)}")
        _check_dims(self, entry, named)
        try:
            raw = np.asarray(t.data)
            values = self.gguf.quants.dequantize(raw, t.tensor_type).astype(np.float32).reshape(entry.shape)
        except Exception as e:  # noqa: BLE001 - a truncated or inconsistent tensor
            raise self.bad(f"tensor {name} cannot be decoded ({_one_line(e)})") from None
        out: dict[str, Any] = {"stored": entry.dtype, "values": values}
        if entry.dtype == "Q4_K":
            out["q4k"] = np.ascontiguousarray(raw.view(np.uint8).reshape(*entry.shape[:-1], -1))
        return out


def _check_dims(ck: Checkpoint, entry: Entry, named: Named, dims: int | None = None) -> None:
    from leverctl_kernels.common.model_weights import EXPERT_ROLES

    want = dims or (3 if named.role in EXPERT_ROLES and named.expert is None else 2)
    if len(entry.shape) != want or min(entry.shape) <= 0:
        what = "an [experts, n, k] stack" if want == 3 else "a matrix"
        raise ck.bad(f"tensor {entry.name} has shape {list(entry.shape)}, not {what} ({named.role})")


class SafetensorsFile(Checkpoint):
    """One safetensors file, or the shards a Hugging Face index
    (``model.safetensors.index.json``) maps tensor names to: every shard's
    header is read, no shard's data until a tensor of it is."""

    kind = "safetensors"
    FLOATS = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}

    def __init__(self, file: Path, shards: list[Path] | None = None):
        super().__init__(file)
        st = _need("safetensors", "a safetensors file")
        self.header: dict[str, tuple[Path, int, dict]] = {}  # name -> (shard, data start, its header entry)
        for shard in shards or [file]:
            where = str(shard)
            try:
                with st.safe_open(where, framework="numpy") as f:
                    names = list(f.keys())
            except Exception as e:  # noqa: BLE001 - SafetensorError and OSError alike: it cannot read the file
                why = _one_line(e)
                if "not fully covered" in why or "incomplete" in why:
                    raise UserError(f"the safetensors file is cut short ({why})", where) from None
                raise UserError(f"not a safetensors file the safetensors package can read ({why})", where) from None
            # The header the package has just validated, for the offsets of the
            # types its numpy API cannot give (BF16 without ml_dtypes, FP8).
            with shard.open("rb") as fh:
                (length,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(length))
            for n in names:
                h = header[n]
                self.header[n] = (shard, 8 + length, h)
                self.entries[n] = Entry(n, tuple(int(x) for x in h["shape"]), h["dtype"])

    def raw(self, name: str, dtype: str):
        """The tensor's bytes as ``dtype``, in its shape, memory-mapped."""
        import numpy as np

        shard, base, h = self.header[name]
        start, end = (int(x) for x in h["data_offsets"])
        data = np.memmap(shard, dtype=np.uint8, mode="r", offset=base + start, shape=(end - start,))
        return data.view(dtype).reshape(h["shape"])

    def _scale(self, name: str, base: str, suffix: str, shapes: Iterable[tuple[int, ...]], what: str):
        """The float32 scale tensor ``base + suffix`` of one of ``shapes``."""
        import numpy as np

        from leverctl_kernels.common import bits

        sname = base + suffix
        entry = self.entries.get(sname)
        if entry is None:
            raise self.bad(f"tensor {name} is {what} but its scale tensor {sname} is not in the file")
        shapes = [tuple(s) for s in shapes]
        if entry.shape not in shapes:
            raise self.bad(
                f"scale tensor {sname} has shape {list(entry.shape)}; {what} needs "
                + " or ".join(str(list(x)) for x in shapes)
            )
        if entry.dtype == "F8_E4M3":
            return bits.e4m3_to_f32_np(np.asarray(self.raw(sname, "<u1"))), entry
        if entry.dtype in self.FLOATS:
            return self._float(sname, entry.dtype), entry
        raise self.bad(f"scale tensor {sname} is {entry.dtype}; scales are read as F32, F16, BF16 or F8_E4M3")

    def _float(self, name: str, dtype: str):
        import numpy as np

        from leverctl_kernels.common import bits

        raw = np.asarray(self.raw(name, self.FLOATS[dtype]))
        return bits.bf16_to_f32_np(raw) if dtype == "BF16" else raw.astype(np.float32)

    def read_one(self, name: str, named: Named) -> dict[str, Any]:
        import numpy as np

        from leverctl_kernels.common import bits

        entry = self.entries[name]
        base = name[: -len("weight")]
        if entry.dtype in self.FLOATS:
            _check_dims(self, entry, named)
            return {"stored": entry.dtype, "values": self._float(name, entry.dtype)}
        if entry.dtype == "F8_E4M3":
            _check_dims(self, entry, named)
            n, k = entry.shape[-2:]
            codes = np.ascontiguousarray(self.raw(name, "<u1"))
            e4m3 = bits.e4m3_to_f32_np(codes)
            if base + "weight_scale_inv" in self.entries:
                nb, kb = -(-n // 128), -(-k // 128)
                scale, _ = self._scale(name, base, "weight_scale_inv", [(nb, kb)], "FP8 in 128 x 128 blocks")
                full = np.repeat(np.repeat(scale, 128, axis=0), 128, axis=1)[:n, :k]
                kind = "block128"
            elif base + "weight_scale" in self.entries:
                scale, _ = self._scale(name, base, "weight_scale", [(), (1,), (n,), (n, 1)], "ModelOpt FP8")
                kind = "tensor" if scale.size == 1 else "channel"
                scale = scale.reshape(()) if kind == "tensor" else scale.reshape(n)
                full = scale if kind == "tensor" else scale[:, None]
            else:
                raise self.bad(
                    f"tensor {name} is FP8 E4M3 but neither scale tensor ({base}weight_scale_inv, "
                    f"{base}weight_scale) is in the file"
                )
            values = (e4m3 * full).astype(np.float32)
            return {"stored": "F8_E4M3", "values": values, "fp8": codes, "fp8_scale": scale, "fp8_scale_kind": kind}
        if entry.dtype == "U8":  # ModelOpt NVFP4: E2M1 pairs
            _check_dims(self, entry, named)
            n, half = entry.shape
            k = 2 * half
            if k % 16:
                raise self.bad(f"tensor {name} holds {k} NVFP4 values a row, not a multiple of 16 (a block)")
            scales, sentry = self._scale(name, base, "weight_scale", [(n, k // 16)], "NVFP4 (packed E2M1)")
            if sentry.dtype != "F8_E4M3":
                raise self.bad(f"scale tensor {base}weight_scale is {sentry.dtype}; NVFP4 block scales are F8_E4M3")
            glob, _ = self._scale(name, base, "weight_scale_2", [(), (1,)], "NVFP4 (packed E2M1)")
            packed = np.ascontiguousarray(self.raw(name, "<u1"))
            codes = np.ascontiguousarray(self.raw(base + "weight_scale", "<u1"))
            g = float(glob.reshape(()))
            values = bits.nvfp4_decode_np(packed, codes, g).astype(np.float32)
            return {"stored": "NVFP4", "values": values, "nvfp4": packed, "nvfp4_scale": codes, "nvfp4_global": g}
        raise self.bad(
            f"tensor {name} is {entry.dtype}; --weights reads safetensors F32, F16, BF16, F8_E4M3 with its "
            "scales, and NVFP4 (U8 with weight_scale and weight_scale_2)"
        )


def open_file(file: Path) -> Checkpoint:
    """The file's index, by its first bytes; bad input where it is neither."""
    kind = sniff(file)
    if kind == "gguf":
        return GgufFile(file)
    return SafetensorsFile(file, _shards(file) if kind == "index" else None)


# ── selection ────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Selection:
    """The tensors read, by role; ``focus`` the role (``--tensor ROLE``)
    whose groups alone run; ``named`` true for a full ``--tensor NAME``."""

    file: str
    layer: int | None
    tensors: Mapping[str, Any]  # role -> ModelTensor
    focus: str | None = None
    named: bool = False


def _did_you_mean(name: str, among: Iterable[str], n: int = 3) -> str:
    close = difflib.get_close_matches(name, list(among), n=n, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def by_layer(ck: Checkpoint) -> dict[int, dict[str, list[tuple[str, Named]]]]:
    """layer -> role -> [(name, what it says)] (an expert role's one name per expert)."""
    out: dict[int, dict[str, list[tuple[str, Named]]]] = {}
    for name in ck.entries:
        named = parse_name(name)
        if named is not None:
            out.setdefault(named.layer, {}).setdefault(named.role, []).append((name, named))
    return out


def _tensor(ck: Checkpoint, names: list[tuple[str, Named]]):
    """One ModelTensor of these names: one tensor, or one expert's tensors
    stacked in expert order."""
    import numpy as np

    from leverctl_kernels.common.model_weights import ModelTensor

    first = names[0][1]
    if len(names) == 1 and first.expert is None:
        name = names[0][0]
        read = ck.read_one(name, first)
    else:
        names = sorted(names, key=lambda t: t[1].expert)
        experts = [t[1].expert for t in names]
        if experts != list(range(len(names))) and len(names) > 1:
            raise ck.bad(f"layer {first.layer}'s {first.role} experts are not numbered 0..{len(names) - 1}: {experts}")
        parts = [ck.read_one(n, named) for n, named in names]
        shapes = {p["values"].shape for p in parts}
        stored = {p["stored"] for p in parts}
        if len(shapes) > 1 or len(stored) > 1:
            raise ck.bad(
                f"layer {first.layer}'s {first.role} experts differ in shape or type: {sorted(map(str, shapes))}"
            )
        read = {"stored": parts[0]["stored"], "values": np.stack([p["values"] for p in parts])}
        for key in ("q4k", "fp8", "fp8_scale", "nvfp4", "nvfp4_scale"):
            if parts[0].get(key) is not None:
                read[key] = np.stack([p[key] for p in parts])
        if parts[0].get("fp8_scale_kind"):
            read["fp8_scale_kind"] = parts[0]["fp8_scale_kind"]
        if parts[0].get("nvfp4_global") is not None:
            # one global scale per expert, as ModelOpt writes each expert's weight_scale_2
            read["nvfp4_global"] = np.array([p["nvfp4_global"] for p in parts], np.float32)
        first_name = names[0][0]
        name = first_name if len(names) == 1 else first_name.replace(".experts.0.", f".experts.0-{experts[-1]}.")
    values = read.pop("values")
    if not np.all(np.isfinite(values)):
        raise ck.bad(f"tensor {name} holds non-finite values")
    return ModelTensor(
        file=ck.where, name=name, role=first.role, layer=first.layer, values=np.ascontiguousarray(values), **read
    )


def select(
    ck: Checkpoint, tensor: str | None, layer: int | None, used_roles: Mapping[str, frozenset[str]]
) -> Selection:
    """Read what ``--tensor`` / ``--layer`` name.

    ``used_roles``: role -> every role read with it (the groups of the
    paths being benched that hold it). ``--tensor NAME`` reads that tensor
    alone; ``--layer N`` the layer's tensors of every role some path uses;
    with ``--tensor ROLE`` too, that role and the roles of its groups."""
    from leverctl_kernels.common.model_weights import ROLES

    if tensor is not None and "." in tensor:  # a full name
        if layer is not None:
            raise UserError(f"--tensor {tensor} is a full tensor name; with --layer give a role (ffn_down)")
        entry = ck.entries.get(tensor)
        if entry is None:
            raise ck.bad(
                f"--tensor {tensor}: no such tensor"
                + (_did_you_mean(tensor, ck.entries) or f" ({len(ck.entries)} tensors)")
            )
        named = parse_name(tensor)
        if named is None:
            raise ck.bad(
                f"tensor {tensor} is none of the roles --weights knows (a layer's projections: "
                f"{', '.join(ROLES)}; see leverctl bench --help)"
            )
        t = _tensor(ck, [(tensor, named)])
        return Selection(ck.where, named.layer, {named.role: t}, named.role, named=True)
    if tensor is not None and tensor not in ROLES:
        raise UserError(
            f"--tensor {tensor}: unknown role (and no tensor name: it has no '.')"
            + (_did_you_mean(tensor, ROLES) or f"; roles: {', '.join(ROLES)}")
        )
    if layer is None:
        raise UserError(f"--tensor {tensor} is a role: give the layer too (--layer N), or a full tensor name")
    layers = by_layer(ck)
    here = layers.get(layer)
    if not here:
        have = sorted(layers)
        span = f"its layers are {have[0]}..{have[-1]}" if have else "it has no tensor of a role --weights knows"
        raise ck.bad(f"--layer {layer}: no tensors of layer {layer} in the file ({span})")
    if tensor is not None:
        if tensor not in here:
            raise ck.bad(f"layer {layer} has no {tensor} tensor (it has {', '.join(sorted(here))})")
        wanted = {tensor} | set(used_roles.get(tensor, ()))
    else:
        wanted = {r for r in here if r in used_roles}
    wanted &= set(here)
    if not wanted:
        raise ck.bad(
            f"no kernel path being benched reads layer {layer}'s tensors ({', '.join(sorted(here))}); "
            f"the paths read {', '.join(sorted(used_roles)) or 'no model weights'}"
        )
    tensors = {r: _tensor(ck, here[r]) for r in sorted(wanted)}
    return Selection(ck.where, layer, tensors, tensor)
