"""What the lever commands read: env files from standard input, inputs that
must not block, counts inside the engine's types, conflicts refused or shown
with their precedence."""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
import tomllib

import pytest
from cli_helpers import RECIPES, assert_one_line_error

from leverctl.errors import UserError
from leverctl.levers import load_catalog, resolve
from leverctl.levers.files import read_input_file


class _Stdin:
    """A stand-in for sys.stdin with a binary buffer."""

    def __init__(self, data: bytes):
        self.buffer = io.BytesIO(data)


def test_an_env_file_of_dash_is_standard_input_and_its_findings_name_stdin_and_line(cli, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Stdin(b"# pasted\nexport ATLAS_GDN_WY17='0'\nATLAS_K4_DIAG=true\n"))
    r = cli("lint", "--env-file", "-", "-f", "json")
    doc = json.loads(r.out)
    assert any(f["where"] == "stdin:3" and f["var"] == "ATLAS_K4_DIAG" for f in doc["findings"]), doc


def test_show_reads_export_p_output_from_standard_input(cli, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Stdin(b'declare -x ATLAS_GDN_WY17="0"\ndeclare -x HOME="/root"\n'))
    r = cli("show", "--env-file", "-", "-f", "json")
    assert r.code == 0, r.err
    lv = json.loads(r.out)["levers"]["gdn_wy17"]
    assert lv["value"] is False and lv["source"] == "env"


def test_a_diff_side_of_env_dash_is_standard_input(cli, monkeypatch):
    monkeypatch.setattr(sys, "stdin", _Stdin(b"export ATLAS_GDN_WY17=0\n"))
    r = cli("diff", "env:-", "defaults", "-f", "json")
    assert r.code == 1 and [d["field"] for d in json.loads(r.out)["differences"]] == ["gdn_wy17"]


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_reading_a_special_file_neither_blocks_nor_reads_it(tmp_path, special):
    path = tmp_path / "f"
    if special == "fifo":
        os.mkfifo(path)
    else:
        path = special
    done = []

    def read() -> None:
        try:
            read_input_file(path, "recipe file")
        except UserError as e:
            done.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # release the reader so the test can end
        if special == "fifo":
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading blocked on a special file")
    assert done and ("FIFO" in done[0].message or "character device" in done[0].message)


def test_an_input_at_the_cap_is_read_and_one_byte_more_is_refused(tmp_path):
    p = tmp_path / "r.toml"
    p.write_bytes(b"#" * 2**20)
    assert len(read_input_file(p, "recipe file")) == 2**20
    p.write_bytes(b"#" * (2**20 + 1))
    with pytest.raises(UserError, match="larger than 1 MiB"):
        read_input_file(p, "recipe file")


# ── counts inside the engine's types ────────────────────────────────────────

USIZE_MAX = str(2**64 - 1)
BEYOND = str(2**64)


@pytest.mark.parametrize(
    "engine, var, field, value, want",
    [
        # shadow_topk: unparseable is 0 (off), capped at 8. Rust's parse::<usize>
        # rejects a count beyond usize, so the engine reads off, not the cap.
        ("atlas", "ATLAS_MTP_SHADOW_TOPK", "shadow_topk", USIZE_MAX, 8),
        ("atlas", "ATLAS_MTP_SHADOW_TOPK", "shadow_topk", BEYOND, 0),
        ("atlas", "ATLAS_MTP_SHADOW_TOPK", "shadow_topk", "99999999999999999999999999", 0),
        ("metrale", "METRALE_MTP_SHADOW_TOPK", "shadow_topk", BEYOND, 0),
        # moe_prefill_max_load_factor: unset, unparseable or 0 is None.
        ("metrale", "METRALE_MOE_PREFILL_MAX_LOAD_FACTOR", "moe_prefill_max_load_factor", USIZE_MAX, 2**64 - 1),
        ("metrale", "METRALE_MOE_PREFILL_MAX_LOAD_FACTOR", "moe_prefill_max_load_factor", BEYOND, None),
        ("metrale", "METRALE_MOE_PREFILL_MAX_LOAD_FACTOR", "moe_prefill_max_load_factor", "-1", None),
    ],
)
def test_a_count_beyond_usize_reads_as_the_engine_reads_an_unparseable_value(engine, var, field, value, want):
    assert resolve(load_catalog(engine), sets=[(var, value)])[field].value == want


@pytest.mark.parametrize("n", [1, 2**32 - 1])
def test_max_batch_size_takes_every_u32_from_one(n):
    assert resolve(load_catalog("atlas"), max_batch_size=n)["max_decode_seqs"].value == n


@pytest.mark.parametrize("n", [0, -1, 2**32, 2**64])
def test_max_batch_size_outside_the_engines_u32_is_bad_input(n):
    with pytest.raises(UserError, match="4294967295"):
        resolve(load_catalog("atlas"), max_batch_size=n)


def test_freeze_of_the_largest_counts_writes_a_recipe_every_toml_reader_accepts(cli):
    r = cli(
        "recipe",
        "freeze",
        "--no-env",
        "-e",
        "metrale",
        "--max-batch-size",
        str(2**32 - 1),
        "--set",
        f"METRALE_MOE_PREFILL_MAX_LOAD_FACTOR={BEYOND}",
        "--set",
        f"METRALE_MTP_SHADOW_TOPK={USIZE_MAX}",
    )
    assert r.code == 0, r.err
    doc = tomllib.loads(r.out)
    assert doc["serve"]["max_batch_size"] == 2**32 - 1
    # Lever values stay the strings the engine sees, whatever their size.
    assert doc["levers"]["METRALE_MOE_PREFILL_MAX_LOAD_FACTOR"] == BEYOND


# ── conflicts: refused, or a precedence explain states ──────────────────────


def test_explain_states_that_max_batch_size_takes_precedence_over_the_recipe(cli):
    r = cli("explain", "max_decode_seqs")
    assert r.code == 0
    text = " ".join(r.out.split())
    assert "--max-batch-size N -> N, which takes precedence over the recipe's [serve] max_batch_size" in text
    assert "outside 1..4294967295" in text


def test_explain_states_what_a_count_beyond_usize_means(cli):
    text = " ".join(cli("explain", "ATLAS_MTP_SHADOW_TOPK").out.split())
    assert "beyond 18446744073709551615" in text and "means off (0), not the cap" in text


def test_a_recipe_given_with_a_shipped_catalog_of_its_engine_is_fine(cli):
    # A catalog file of the recipe's own engine is no conflict: it describes the levers.
    from importlib import resources

    path = resources.files("leverctl.catalogs").joinpath("atlas.toml")
    r = cli("show", "--no-env", "--catalog", str(path), "-r", RECIPES / "qwen3-next-80b-a3b.toml", "-f", "json")
    assert r.code == 0, r.err
    other = cli("show", "--no-env", "--catalog", str(path), "-r", RECIPES / "qwen3-8b.toml")
    assert_one_line_error(other, "recipe is for engine 'metrale', but the catalog is 'atlas'")


def test_lint_refuses_a_variable_in_both_set_and_unset_as_bad_input(cli):
    assert_one_line_error(
        cli("lint", "--set", "ATLAS_KV_POISON=1", "--unset", "ATLAS_KV_POISON"), "contradict each other"
    )


def test_a_recipe_with_a_real_build_default_still_resolves(cli, tmp_path):
    cat = load_catalog("metrale")
    builds = [f for f, lv in cat.levers.items() if lv.kind == "build_default"]
    assert builds, "the Metrale catalog has build defaults"
    p = tmp_path / "r.toml"
    p.write_text(f'engine = "metrale"\n[build]\n{builds[0]} = false\n')
    r = cli("show", "--no-env", "-r", p, "-f", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["levers"][builds[0]]["value"] is False


def test_resolving_reads_no_input_twice_so_stdin_can_be_the_env_file(cli, monkeypatch):
    calls = []
    monkeypatch.setattr(sys, "stdin", _Stdin(b"ATLAS_GDN_WY17=0\n"))
    import leverctl.levers.sources as sources

    real = sources.read_input_file
    monkeypatch.setattr(sources, "read_input_file", lambda *a, **k: calls.append(a) or real(*a, **k))
    start = time.monotonic()
    r = cli("show", "--env-file", "-")
    assert r.code == 0 and len(calls) == 1 and time.monotonic() - start < 30


# ── file names that are not UTF-8 ───────────────────────────────────────────


def test_a_recipe_name_that_is_not_utf8_is_labelled_with_escapes_in_json_and_frozen_recipes(cli, tmp_path):
    name = tmp_path / "\udcff.toml"  # the file name holds the byte 0xff
    name.write_bytes((RECIPES / "atlas-defaults.toml").read_bytes())
    r = cli("show", "--no-env", "-r", name, "-f", "json")
    assert r.code == 0, r.err
    json.loads(r.out.encode("utf-8"))  # strict UTF-8: no lone surrogate escaped into it
    assert json.loads(r.out)["recipe"] == str(tmp_path) + "/\\xff.toml"
    out = tmp_path / "\udcfe-frozen.toml"
    r = cli("recipe", "freeze", "--no-env", "-r", name, "-o", out)
    assert r.code == 0, r.err
    assert r.err.strip() == f"leverctl: wrote {tmp_path}/\\xfe-frozen.toml"
    assert tomllib.loads(out.read_text("utf-8"))["description"] == f"frozen from {tmp_path}/\\xff.toml"
