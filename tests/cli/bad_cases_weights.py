"""Bad-input rows of ``leverctl bench --weights FILE`` (GGUF or
safetensors) with ``--tensor NAME``, ``--layer N`` or both: refused from
the options and the file alone, before any kernel runs."""

import gguf_files
import safetensors_files as sf
from bad_input import Case


def _gguf(tmp):
    gguf_files.write(tmp / "m.gguf")


def _st(tmp):
    sf.write(tmp / "m.safetensors")


def _not_gguf(tmp):
    (tmp / "m.gguf").write_bytes(b"GGML" + bytes(60))


def _truncated_st(tmp):
    _st(tmp)
    data = (tmp / "m.safetensors").read_bytes()
    (tmp / "m.safetensors").write_bytes(data[:-1000])


def _truncated_gguf(tmp):
    _gguf(tmp)
    data = (tmp / "m.gguf").read_bytes()
    (tmp / "m.gguf").write_bytes(data[:-1000])


def _index_without_shard(tmp):
    _st(tmp)
    (tmp / "model.safetensors.index.json").write_text(
        '{"weight_map": {"%s": "m.safetensors", "x": "model-00002-of-00002.safetensors"}}' % sf.UP_F16
    )


def _no_package(name, files):
    def make(tmp):
        fake = tmp / "nopkg" / name
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
        files(tmp)

    return make


_RUN = ("bench", "--no-env", "-e", "metrale", "--device", "sim")
_BENCH = (*_RUN, "--weights", "{tmp}/m.gguf")
_ST = (*_RUN, "--weights", "{tmp}/m.safetensors")

CASES = [
    Case(
        "weights-neither-gguf-nor-safetensors",
        (*_BENCH, "--tensor", gguf_files.DOWN),
        ("{tmp}/m.gguf", "neither a GGUF file", "nor a safetensors file"),
        files=_not_gguf,
    ),
    Case("weights-absent-file", (*_BENCH, "--tensor", gguf_files.DOWN), ("{tmp}/m.gguf", "no such file")),
    Case(
        "weights-missing-tensor",
        (*_BENCH, "--tensor", "blk.0.ffn_dwn.weight"),
        ("--tensor blk.0.ffn_dwn.weight: no such tensor", f"did you mean {gguf_files.DOWN}"),
        files=_gguf,
    ),
    Case(
        "weights-missing-tensor-safetensors",
        (*_ST, "--tensor", "model.layers.0.mlp.up_prj.weight"),
        ("no such tensor", f"did you mean {sf.UP_F16}"),
        files=_st,
    ),
    Case("weights-wrong-type", (*_BENCH, "--tensor", gguf_files.Q8), ("is Q8_0", "Q4_K, F16, BF16"), files=_gguf),
    Case(
        "weights-no-role",
        (*_BENCH, "--tensor", gguf_files.NORM),
        ("tensor blk.0.ffn_norm.weight is none of the roles", "ffn_down"),
        files=_gguf,
    ),
    Case(
        "weights-shape-does-not-fit",
        (*_BENCH, "--tensor", gguf_files.ODD_K),
        (f"tensor {gguf_files.ODD_K} does not fit ffn.prefill", "k=40", "multiple of 16"),
        files=_gguf,
    ),
    Case(
        "weights-unknown-role",
        (*_BENCH, "--layer", "0", "--tensor", "ffn_dwn"),
        ("--tensor ffn_dwn: unknown role", "did you mean ffn_down"),
        files=_gguf,
    ),
    Case(
        "weights-role-without-layer",
        (*_BENCH, "--tensor", "ffn_down"),
        ("--tensor ffn_down is a role", "--layer N"),
        files=_gguf,
    ),
    Case(
        "weights-layer-without-tensors",
        (*_ST, "--layer", "7"),
        ("{tmp}/m.safetensors", "--layer 7: no tensors of layer 7", "layers are 0..3"),
        files=_st,
    ),
    Case(
        "weights-missing-scale-tensor",
        (*_ST, "--tensor", sf.NO_SCALE),
        ("FP8 E4M3 but neither scale tensor", "model.layers.3.mlp.gate_proj.weight_scale_inv"),
        files=_st,
    ),
    Case(
        "weights-truncated-safetensors",
        (*_ST, "--tensor", sf.UP_F16),
        ("{tmp}/m.safetensors", "cut short"),
        files=_truncated_st,
    ),
    Case(
        "weights-truncated-gguf",
        (*_BENCH, "--tensor", gguf_files.DOWN),
        ("{tmp}/m.gguf", "cut short"),
        files=_truncated_gguf,
    ),
    Case(
        "weights-index-without-its-shard",
        (*_RUN, "--weights", "{tmp}/model.safetensors.index.json", "--tensor", sf.UP_F16),
        ("model.safetensors.index.json", "names shard model-00002-of-00002.safetensors", "not beside it"),
        files=_index_without_shard,
    ),
    Case(
        "weights-no-path-reads-the-role",
        (*_RUN, "-k", "w4a16.gemv", "--weights", "{tmp}/m.gguf", "--tensor", gguf_files.ATTN),
        ("no kernel path of metrale being benched runs on", "attention.proj_fp8 reads it but is not being benched"),
        files=_gguf,
    ),
    Case(
        "weights-without-tensor",
        ("bench", "--no-env", "-e", "metrale", "--weights", "{tmp}/m.gguf"),
        ("--weights FILE needs --tensor NAME", "--layer N"),
    ),
    Case(
        "weights-tensor-without-weights",
        ("bench", "--no-env", "-e", "metrale", "--layer", "0"),
        ("--layer names what --weights FILE reads",),
    ),
    Case(
        "weights-full-name-with-layer",
        (*_BENCH, "--layer", "0", "--tensor", gguf_files.DOWN),
        ("is a full tensor name", "with --layer give a role"),
        files=_gguf,
    ),
    Case(
        "weights-on-atlas",
        ("bench", "--no-env", "--device", "sim", "--weights", "{tmp}/m.gguf", "--tensor", gguf_files.SSM_IN),
        ("no kernel path of atlas", "mamba2.prefill_proj reads it in metrale", "--engine metrale"),
        files=_gguf,
    ),
    Case(
        "weights-without-the-gguf-package",
        (*_BENCH, "--tensor", gguf_files.DOWN),
        ("--weights needs the gguf package", "leverctl[gguf]"),
        files=_no_package("gguf", _gguf),
        env={"PYTHONPATH": "{tmp}/nopkg"},
    ),
    Case(
        "weights-without-the-safetensors-package",
        (*_ST, "--tensor", sf.UP_F16),
        ("--weights needs the safetensors package", "leverctl[safetensors]"),
        files=_no_package("safetensors", _st),
        env={"PYTHONPATH": "{tmp}/nopkg"},
    ),
]
