"""``preprocess --target`` for TokenSpeed and in a narrower wire dtype: the .npz holds what
the payload carries (bfloat16 widened exactly to float32)."""

from __future__ import annotations

import numpy as np

import imagegen
from servers import run_cli as cli
from service_support import QWEN2, item_rows
from sglang_mm_grpc.kernels import bf16


def test_remote_preprocess_tokenspeed_bfloat16(server, pps, tmp_path):
    img = tmp_path / "a.png"
    img.write_bytes(imagegen.png(60, 90, seed=5))
    out = tmp_path / "p.npz"
    r = cli("preprocess", "--target", server, "--model", QWEN2, "--backend", "tokenspeed", "--pixel-dtype", "bfloat16",
            "--out", str(out), str(img))
    assert r.returncode == 0, r.stderr
    assert "tokenspeed payload" in r.stdout
    got = np.load(out)
    want = pps[QWEN2].preprocess([img.read_bytes()])
    rows = item_rows(want, pps[QWEN2].field_layout, "pixel_values", want.pixel_values, 0)
    assert np.array_equal(got["items.0.encoder_input"], bf16.round_bf16(rows))
    assert np.array_equal(got["items.0.image_grid_thw"], want.tensors["image_grid_thw"])


def test_remote_preprocess_refusal_is_reported(server, tmp_path):
    img = tmp_path / "a.png"
    img.write_bytes(imagegen.png(60, 90, seed=5))
    r = cli("preprocess", "--target", server, "--model", QWEN2, "--backend", "sglang", "--pixel-dtype", "bfloat16",
            str(img))
    assert r.returncode == 1 and "FAILED_PRECONDITION" in r.stderr and "float32" in r.stderr
