"""The benchmark command runs and writes its JSON (what it measures is not asserted:
speed is reported by benchmarks, never tested)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_inprocess_section_runs_against_the_hf_reference(tmp_path):
    out = tmp_path / "bench.json"
    res = subprocess.run(
        [sys.executable, "-m", "sglang_mm_grpc.cli", "bench", "--sections", "inprocess",
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
