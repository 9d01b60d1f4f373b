"""The memory-bound decode paths' roofline targets, held on the committed
profiles (docs/profiles/ENGINE-sm90a.json, written by ``make profiles``:
``leverctl profile --all-variants --arch sm_90a --summary`` of each engine).

Compiling and tracing every variant takes minutes, too long for every test
run; the committed summaries carry each variant's source digest (every
kernels module its build, inputs and traffic reach), so a test here fails
as soon as a kernel changes without its profile being made again, and the
figures the tests read are always the code's. The README's two profile
tables are the same summaries (``scripts/profile-tables.py``).

The targets, per variant of every memory-bound decode path (sm_90a):

* no spill, stack or local memory in any kernel it launches;
* the kernels that stream its operand issue 128-bit global loads, and keep
  at least what Little's law asks an SM to hold in flight (22 KiB: an
  H200's 4.8 TB/s over ~0.6 us and 132 SMs);
* their streaming loops load at least what the issue rate asks a warp
  instruction to bring (4.6 bytes: 4.8 TB/s over 132 SMs issuing four warp
  instructions a clock at 1.98 GHz; ``machine.stream_loop``), where the
  SASS has such a loop;
* traced at the path's profile shape, >= 90 % global sector efficiency,
  and 128-bit loads carrying >= 90 % of the bytes loaded.

What a variant misses by its design, or by a limit that binds rather than
its implementation, is declared in ``MISSES`` with the reason; a declared
miss that is met fails too, so the list stays true.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "docs" / "profiles"
ENGINES = ("atlas", "metrale")
LITTLE = 22 * 1024  # bytes in flight an SM
SECTORS = WIDE = 0.90
ISSUE = 4.6  # bytes a warp loads per instruction it issues

# Each memory-bound decode path and the kernels that stream its operand.
STREAMING: dict[str, frozenset[str]] = {
    "w4a16.gemv": frozenset({"gemv_sw", "gemv_64t"}),
    "w4a16.gemv_dual": frozenset({"gemv_dual_sw", "gemv_dual_64t"}),
    "w4a16.ffn_decode": frozenset(
        {"gemv_sw", "gemv_64t", "gemv_dual_sw", "gemv_dual_64t", "ffn_fused_silu_down", "gemm_tiled"}
    ),
    "attention.paged_decode": frozenset({"attn_split"}),
    "attention.dflash_contig": frozenset({"dflash_split"}),
    "attention.mla_decode": frozenset({"mla_decode"}),
    "attention.decode_graph": frozenset({"attn_split", "gdn_decode_batched"}),
    "gdn.decode": frozenset({"gdn_decode_one", "gdn_decode_batched"}),
    "gdn.verify": frozenset({"gdn_verify_wy17", "gdn_verify_wyn", "gdn_verify_recurrent"}),
    "gdn.fused_conv": frozenset({"gdn_fused_conv", "gdn_decode_batched"}),
    "gdn.proj_gemv_batch": frozenset({"gemv_batch", "gemv_sw"}),
    "moe.gateup_fp4": frozenset({"gateup_rows"}),
    "moe.down_fp4": frozenset({"down_rows"}),
    "moe.decode_fp8_grouped": frozenset({"gateup_rows", "down_rows", "gemm_grouped"}),
    "moe.decode_multi_seq": frozenset({"gateup_rows", "down_rows"}),
    "moe.decode_via_prefill": frozenset({"gateup_rows", "down_rows", "gemm_grouped"}),
    "lora.proj": frozenset({"proj", "merge"}),
    "lora.proj_pool": frozenset({"proj"}),
}

# (path, variant, figure) -> why the variant misses it. Figures: "sectors",
# "wide" (the 128-bit share), "in flight <kernel>", "128-bit <kernel>",
# "issue <kernel>" (the streaming loop's bytes per issued instruction).
MISSES: dict[tuple[str, str, str], str] = {
    ("gdn.proj_gemv_batch", "batch16", "in flight gemv_batch"): (
        "at 16 rows the tier is bound by its FP32 FMAs, not its loads: 64 flops a weight byte against a ridge "
        "of ~14 (the path's notes); two 16-byte groups a lane in flight, 20 KiB an SM at its 31 % occupancy"
    ),
}


# The streaming loops below what the issue rate asks (``ISSUE``), by kernel
# (in whichever path and variant launches it) -> why. A kernel listed that
# meets the target everywhere it is profiled fails too.
ISSUE_MISSES: dict[str, str] = {
    "gemv_batch": "each weight value meets every staged row, an FFMA a value and row (4 or 16) by design: the "
    "tiers are bound by their FMAs, not their loads (0.7 and 0.2 bytes an instruction; the path's notes)",
    **dict.fromkeys(
        ("gateup_rows", "down_rows"),
        "the per-row expert decode, each load's sum scaled once into the row's, its loop counting and indexing in "
        "32 bits: int4 3.9-4.3 bytes an instruction (the W4A16 GEMVs' subnormal decode, an AND, an FADD and an "
        "FFMA a value, and a step of only two loads to carry the loop's own instructions), NVFP4 3.5-3.6 (a value "
        "placed in an fp16 pair, two instructions, its conversion to float32 and its FFMA); the FP8 kernels meet "
        "it (7.3-7.6). README, What misses, and why",
    ),
}


def _summary(engine: str) -> dict:
    f = PROFILES / f"{engine}-sm90a.json"
    assert f.is_file(), f"{f.relative_to(ROOT)} missing: run `make profiles`"
    return json.loads(f.read_text())


@pytest.fixture(scope="module", params=ENGINES)
def summary(request) -> dict:
    return _summary(request.param)


def test_the_committed_profiles_are_this_codes(summary):
    """Every variant of the engine's paths is in its profile, made from the
    kernels' current source."""
    from leverctl.profile.build import source_digest
    from leverctl_kernels.registry import get_path

    stale = []
    for key, digest in summary["sources"].items():
        name, variant = key.split(" ")
        path = get_path(name)
        if source_digest(path.variants[variant].build, path.make_inputs, path.traffic) != digest:
            stale.append(key)
    assert not stale, f"{summary['engine']}: profiles older than their kernels' source: {stale}; run `make profiles`"
    listed = {(v["path"], v["variant"]) for v in summary["variants"]}
    missing = {
        (p, v) for p in {x[0] for x in listed} & set(STREAMING) for v in get_path(p).variants if (p, v) not in listed
    }
    assert not missing, f"variants absent from the profile: {sorted(missing)}"


def test_every_kernel_of_every_variant_compiled_clean_at_model_shapes(summary):
    """Every variant of every path of the engine, not only the memory-bound
    ones: each kernel compiled for sm_90a at every model shape without a
    spill, stack or local memory, and with no flag (an unbacked tensor-core
    claim, a variant that does not compile or launch, a memory-bound kernel
    below 25 % occupancy)."""
    bad = {
        f"{v['path']} {v['variant']}": v["flags"] or f"{v['spills']} bytes of spills or local memory"
        for v in summary["variants"]
        if v["flags"] or v["spills"] or not v["per_kernel"]
    }
    assert not bad, bad


def test_the_readme_tables_are_the_committed_profiles(summary):
    """The engine's table, once: scripts/profile-tables.py replaces it whole
    (an earlier version replaced its heading alone, leaving every older
    table below the new one)."""
    from leverctl.cli.profile import markdown

    text = (ROOT / "README.md").read_text()
    assert markdown(summary) in text, "run `make profiles` (scripts/profile-tables.py)"
    assert text.count(f"Profile of {summary['engine']} kernels on ") == 1
    assert text.count("\n| path | variant | kernels |") == len(ENGINES), "a profile table the script left behind"


def misses(v: dict) -> dict[str, str]:
    """What variant summary ``v`` misses: figure -> the figures that miss."""
    out = {}
    for name, k in v["per_kernel"].items():
        if k["spills"]:
            out[f"spills {name}"] = f"{k['spills']} bytes"
        if name not in STREAMING[v["path"]]:
            continue
        if 128 not in k["load_bits"]:
            out[f"128-bit {name}"] = f"load bits {k['load_bits']}"
        if (k["in_flight_sm"] or 0) < LITTLE:
            out[f"in flight {name}"] = f"{(k['in_flight_sm'] or 0) / 1024:.1f} KiB/SM"
        if k.get("bytes_per_issue") is not None and k["bytes_per_issue"] < ISSUE:
            out[f"issue {name}"] = f"{k['bytes_per_issue']:.2f} bytes an instruction"
    eff, wide = v["sector_efficiency"], v["wide_load_share"]
    if eff is None or eff < SECTORS:
        out["sectors"] = f"{eff:.1%}" if eff is not None else "not traced"
    if wide is None or wide < WIDE:
        out["wide"] = f"{wide:.1%}" if wide is not None else "not traced"
    return out


def test_every_memory_bound_decode_variant_meets_its_targets_or_says_why(summary):
    variants = [v for v in summary["variants"] if v["path"] in STREAMING]
    assert variants, "no memory-bound decode path in the profile"
    unexplained, met = [], []
    issue_seen: dict[str, bool] = {}  # kernel -> whether any of its loops misses
    for v in variants:
        got = misses(v)
        for fig in list(got):
            if fig.startswith("issue ") and fig[6:] in ISSUE_MISSES:
                issue_seen[fig[6:]] = True
                del got[fig]
        for name, k in v["per_kernel"].items():
            if name in ISSUE_MISSES and name in STREAMING[v["path"]] and k.get("bytes_per_issue") is not None:
                issue_seen.setdefault(name, False)
        unexplained += [f"{v['path']} {v['variant']}: {fig} {val}" for fig, val in got.items() if
                        (v["path"], v["variant"], fig) not in MISSES]  # fmt: skip
        met += [
            f"{p} {var}: {fig}" for (p, var, fig) in MISSES if (p, var) == (v["path"], v["variant"]) and fig not in got
        ]
    met += [f"issue {name} (ISSUE_MISSES)" for name, missed in issue_seen.items() if not missed]
    assert not unexplained, "misses no MISSES or ISSUE_MISSES entry explains:\n" + "\n".join(unexplained)
    assert not met, "declared misses that are met (drop them from MISSES):\n" + "\n".join(met)


def test_the_check_fails_on_a_variant_that_misses_each_target():
    """``misses`` names every figure a variant short of its targets misses."""
    k = {"spills": 8, "load_bits": [16, 32], "in_flight_sm": 4096, "bytes_per_issue": 2.0, "registers": 40}
    v = {
        "path": "w4a16.gemv",
        "variant": "x",
        "per_kernel": {"gemv_sw": k, "helper": {**k, "spills": 0}},
        "sector_efficiency": 0.89,
        "wide_load_share": None,
    }
    want = {"spills gemv_sw", "128-bit gemv_sw", "in flight gemv_sw", "issue gemv_sw", "sectors", "wide"}
    assert set(misses(v)) == want
    good = {"spills": 0, "load_bits": [16, 128], "in_flight_sm": LITTLE, "bytes_per_issue": ISSUE, "registers": 40}
    v.update(per_kernel={"gemv_sw": good}, sector_efficiency=0.9, wide_load_share=0.95)
    assert misses(v) == {}


# Shared-memory bank conflicts: every variant of both engines traced at its
# path's profile shape (the model's rows: ``traced_at`` "profile ...") is
# served in the wavefronts its accesses' widths need, but for these, and why.
# A variant traced at a smoke shape is not held here: its rows are shorter
# than the model's, and so are the strides its bank pattern comes from.
BANK_MISSES: dict[tuple[str, str], str] = {
    ("moe.union_stats", "on"): "the union count is a histogram in shared memory: each lane's atomic goes to the "
    "counter of the expert its id names, so lanes whose experts share a bank wait on each other, as the routing "
    "falls (5 extra wavefronts at the profile shape's routing)",
}


def bank_misses(variants: list[dict]) -> tuple[dict, list]:
    """(conflicts no entry explains, declared ones that are gone) among the
    variants traced at a profile shape."""
    got = {
        (v["path"], v["variant"]): v["extra_wavefronts"]
        for v in variants
        if (v["traced_at"] or "").startswith("profile")
    }
    unexplained = {k: n for k, n in got.items() if n and k not in BANK_MISSES}
    return unexplained, sorted(k for k in BANK_MISSES if got.get(k) == 0)


def test_every_variant_traced_at_the_models_rows_is_free_of_bank_conflicts_or_says_why(summary):
    at_model = [v for v in summary["variants"] if (v["traced_at"] or "").startswith("profile")]
    assert len(at_model) > 20, len(at_model)
    # every path declares a profile shape (the MoE prefill paths' since 2026-12-06): none is traced at a smoke one
    elsewhere = [(v["path"], v["variant"], v["traced_at"]) for v in summary["variants"] if v not in at_model]
    assert not elsewhere, elsewhere
    unexplained, met = bank_misses(summary["variants"])
    assert not unexplained, f"extra shared wavefronts no BANK_MISSES entry explains: {unexplained}"
    assert not met, f"declared bank conflicts that are gone (drop them from BANK_MISSES): {met}"


def test_the_bank_check_sees_an_undeclared_conflict_and_a_declared_one_gone(monkeypatch):
    monkeypatch.setitem(BANK_MISSES, ("gdn.decode", "batched"), "a declared conflict")
    v = {"path": "gdn.verify", "variant": "wy17", "extra_wavefronts": 8, "traced_at": "profile t17"}
    smoke = {**v, "variant": "wyn", "traced_at": "smoke t17"}
    gone = {"path": "gdn.decode", "variant": "batched", "extra_wavefronts": 0, "traced_at": "profile n1"}
    assert bank_misses([v, smoke, gone]) == ({("gdn.verify", "wy17"): 8}, [("gdn.decode", "batched")])
    assert bank_misses([{**v, "extra_wavefronts": 0}, {**gone, "extra_wavefronts": 64}]) == ({}, [])
