"""The benchmark script (``python scripts/bench.py``) runs and writes its JSON (what it
measures is not asserted: speed is reported by benchmarks, never tested)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"


def test_inprocess_section_runs_against_the_hf_reference(tmp_path):
    """The in-process section times HF's processors in a process of its own that never
    imports this package, and checks our output against them on the same bytes."""
    out = tmp_path / "bench.json"
    images = ["96x64", "96x64:png", "96x64:photo92"]
    res = subprocess.run(
        [sys.executable, str(BENCH), "--sections", "inprocess",
         "--model", "Qwen/Qwen2-VL-7B-Instruct", "--images", *images, "--repeat", "2",
         "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    results = json.loads(out.read_text())
    rows = results["inprocess"]
    assert [r["image"] for r in rows] == images
    for r in rows:
        assert r["output"] == [24, 1176]  # 64x96 -> 56x84: 4x6 patches of 14, 3*2*14*14 values each
        for key in ("decode_ms", "write_ms", "ours_ms", "post_decode_ms", "hf_pil_ms", "ours_over_floor",
                    "floor_bench_ms", "floor_hf_ms", "hf_pil_over_decode"):
            assert r[key] > 0, key
        assert r["floor_ms"] == min(r["floor_bench_ms"], r["floor_hf_ms"])
        assert r["exact_vs"] == "hf_pil" and r["exact"] is True
        assert len(r["samples_ms"]["ours"]) == len(r["samples_ms"]["hf_pil"]) == 2  # one each per round
    hf = results["inprocess_hf_process"]
    assert hf["hf_pid"] != hf["bench_pid"]
    assert hf["hf_imported_package"] is False and hf["hf_imported_package_at_exit"] is False
    assert results["inprocess_summary"]["Qwen/Qwen2-VL-7B-Instruct"]["images"] == ["96x64:photo92"]
    missing = hf["hf_missing"]["Qwen/Qwen2-VL-7B-Instruct"]
    assert "hf_pil" not in missing and "no hf_pil column" not in res.stdout  # only empty columns are explained
    if importlib.util.find_spec("torch") and importlib.util.find_spec("torchvision"):
        assert "hf_tv" not in missing and all(r["hf_tv_ms"] > 0 for r in rows)
    else:  # the empty torchvision column says why, and how to fill it
        assert "torch is not importable" in missing["hf_tv"] and "pip install torch torchvision" in missing["hf_tv"]
        assert "no hf_tv column: torch is not importable" in res.stdout
        assert all("hf_tv_ms" not in r for r in rows)


def _interpreter_with(tmp_path: Path, packages: list[str]) -> Path:
    """A real interpreter (this one, without its site-packages) that can import only
    ``packages`` (and the libraries their wheels bundle) besides the standard library."""
    site = Path(np.__file__).resolve().parents[1]
    only = tmp_path / "site"
    only.mkdir()
    for name in packages:
        for entry in site.glob(f"{name}*"):
            if entry.name == name or entry.name.endswith(".libs"):
                (only / entry.name).symlink_to(entry)
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={only} exec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.parametrize("packages, missing", [(["numpy", "PIL", "pillow"], "transformers"), ([], "numpy and Pillow")])
def test_empty_hf_columns_say_which_import_failed(tmp_path, packages, missing):
    """HF's interpreter lacking transformers (or even numpy and Pillow): ours is still
    timed, and the empty columns name the failed import and what to install."""
    python = _interpreter_with(tmp_path, packages)
    out = tmp_path / "bench.json"
    res = subprocess.run(
        [sys.executable, str(BENCH), "--sections", "inprocess", "--model", "Qwen/Qwen2-VL-7B-Instruct",
         "--images", "96x64:photo92", "--repeat", "2", "--hf-python", str(python), "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    results = json.loads(out.read_text())
    (row,) = results["inprocess"]
    assert row["ours_ms"] > 0 and "hf_pil_ms" not in row and "hf_tv_ms" not in row
    install = "pip install transformers" if missing == "transformers" else "pip install numpy pillow"
    for key in ("hf_pil", "hf_tv"):
        why = results["inprocess_hf_process"]["hf_missing"]["Qwen/Qwen2-VL-7B-Instruct"][key]
        assert why.startswith(f"{missing} are not importable" if " and " in missing else f"{missing} is not importable")
        assert "not importable by " in why and install in why
        assert f"no {key} column: {why}" in res.stdout
    # the floor is timed in the HF process whenever it has numpy and Pillow
    assert ("floor_hf_ms" in row) == bool(packages)


def test_stages_section_splits_the_call_into_its_kernels(tmp_path):
    """The per-stage profile runs each model's kernels one by one (checked equal to the
    family's own process_item) and writes every stage's time (not asserted on)."""
    out = tmp_path / "bench.json"
    models = ["Qwen/Qwen2-VL-7B-Instruct", "llava-hf/llava-v1.6-mistral-7b-hf",
              "meta-llama/Llama-4-Scout-17B-16E-Instruct"]
    res = subprocess.run(
        [sys.executable, str(BENCH), "--sections", "stages", *(a for m in models for a in ("--model", m)),
         "--stage-images", "700x500:photo92", "--repeat", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())["stages"]
    assert [r["model"] for r in rows] == models
    for r in rows:
        assert r["staged_equals_process_item"] is True
        names = list(r["stages"])
        assert names[:4] == ["hash (blake3)", "header + plan", "decode into RGBX (Pillow)", "allocate pixel_values"]
        assert names[-1] == "rest" and any("resize" in n for n in names) and any("normalize" in n for n in names)
        assert all(set(t) == {"wall_ms", "cpu_ms"} for t in r["stages"].values())


def test_bench_is_not_a_cli_subcommand():
    """The package ships no benchmark: it needs test-only packages (transformers, torch)."""
    from sglang_mm_grpc.cli import commands as cli

    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["bench"])
