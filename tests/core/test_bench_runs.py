"""The benchmark script (``python scripts/bench.py``) runs and writes its JSON (what it
measures is not asserted: speed is reported by benchmarks, never tested)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"


def test_inprocess_section_runs_against_the_hf_reference(tmp_path):
    out = tmp_path / "bench.json"
    res = subprocess.run(
        [sys.executable, str(BENCH), "--sections", "inprocess",
         "--model", "Qwen/Qwen2-VL-7B-Instruct", "--images", "96x64", "96x64:png", "--repeat", "2",
         "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())["inprocess"]
    assert [r["image"] for r in rows] == ["96x64", "96x64:png"]
    for r in rows:
        assert r["output"] == [24, 1176]  # 64x96 -> 56x84: 4x6 patches of 14, 3*2*14*14 values each
        for key in ("decode_ms", "write_ms", "ours_ms", "post_decode_ms", "hf_pil_ms", "ours_over_floor"):
            assert r[key] > 0, key


def test_bench_is_not_a_cli_subcommand():
    """The package ships no benchmark: it needs test-only packages (transformers, torch)."""
    from sglang_mm_grpc import cli

    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["bench"])
