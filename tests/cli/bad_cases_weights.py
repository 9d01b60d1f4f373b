"""Bad-input rows of ``leverctl bench --weights FILE.gguf --tensor NAME``:
refused from the file alone, before any kernel is loaded."""

import gguf_files
from bad_input import Case


def _gguf(tmp):
    gguf_files.write(tmp / "m.gguf")


def _not_gguf(tmp):
    (tmp / "m.gguf").write_bytes(b"GGML" + bytes(60))


def _no_gguf_package(tmp):
    fake = tmp / "nogguf" / "gguf"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('gguf is not installed here')\n")
    _gguf(tmp)


_BENCH = ("bench", "--no-env", "-e", "metrale", "--device", "sim", "--weights", "{tmp}/m.gguf")

CASES = [
    Case(
        "weights-not-gguf", (*_BENCH, "--tensor", gguf_files.DOWN), ("{tmp}/m.gguf", "not a GGUF file"), files=_not_gguf
    ),
    Case("weights-absent-file", (*_BENCH, "--tensor", gguf_files.DOWN), ("{tmp}/m.gguf", "no such file")),
    Case(
        "weights-missing-tensor",
        (*_BENCH, "--tensor", "blk.0.ffn_dwn.weight"),
        ("--tensor blk.0.ffn_dwn.weight: no such tensor", f"did you mean {gguf_files.DOWN}"),
        files=_gguf,
    ),
    Case("weights-wrong-type", (*_BENCH, "--tensor", gguf_files.Q8), ("is Q8_0", "Q4_K, F16, BF16"), files=_gguf),
    Case("weights-not-a-matrix", (*_BENCH, "--tensor", gguf_files.NORM), ("shape [32], not a matrix",), files=_gguf),
    Case(
        "weights-k-not-nvfp4-blocks", (*_BENCH, "--tensor", gguf_files.ODD_K), ("k=40", "multiple of 16"), files=_gguf
    ),
    Case(
        "weights-not-an-ffn-tensor",
        (*_BENCH, "--tensor", gguf_files.ATTN),
        ("not a dense-FFN projection",),
        files=_gguf,
    ),
    Case(
        "weights-without-tensor",
        ("bench", "--no-env", "-e", "metrale", "--weights", "{tmp}/m.gguf"),
        ("--weights FILE.gguf and --tensor NAME go together",),
    ),
    Case(
        "weights-on-atlas",
        ("bench", "--no-env", "--weights", "{tmp}/m.gguf", "--tensor", gguf_files.DOWN),
        ("ffn.prefill", "--engine metrale"),
    ),
    Case(
        "weights-without-the-gguf-package",
        (*_BENCH, "--tensor", gguf_files.DOWN),
        ("--weights needs the gguf package", "leverctl[gguf]"),
        files=_no_gguf_package,
        env={"PYTHONPATH": "{tmp}/nogguf"},
    ),
]
