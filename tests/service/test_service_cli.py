"""``sglang-mm-grpc preprocess --target``: files read locally, URLs passed on, npz out,
failures as a status name and a non-zero exit."""

from __future__ import annotations

import base64
import re

import blake3
import numpy as np

import imagegen
from servers import run_cli as cli
from service_support import QWEN2


def test_remote_preprocess_to_npz(server, pps, tmp_path):
    a, b = imagegen.jpeg(90, 130, seed=41), imagegen.png(64, 48, seed=42)
    path = tmp_path / "a.jpg"
    path.write_bytes(a)
    url = "data:image/png;base64," + base64.b64encode(b).decode()
    out_file = tmp_path / "out.npz"
    r = cli("preprocess", "--target", server, "--model", QWEN2, "--backend", "vllm", "--out", str(out_file), str(path), url)
    assert r.returncode == 0, r.stderr
    assert "vllm payload" in r.stdout and str(out_file) in r.stdout

    want = pps[QWEN2].preprocess([a, b])
    with np.load(out_file) as z:
        assert sorted(z.files) == sorted(["input_ids", "pixel_values", *want.tensors])
        assert np.array_equal(z["input_ids"], want.input_ids)
        assert z["pixel_values"].dtype == np.float32 and z["pixel_values"].tobytes() == want.pixel_values.tobytes()
        for k, v in want.tensors.items():
            assert np.array_equal(z[k], v)


def test_remote_preprocess_trtllm_keeps_original_ids(server, tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(imagegen.png(30, 30, seed=43))
    out_file = tmp_path / "t.npz"
    r = cli("preprocess", "--target", server, "--model", QWEN2, "--backend", "trtllm",
            "--input-ids", "7,151655,8", "--out", str(out_file), str(path))
    assert r.returncode == 0, r.stderr
    with np.load(out_file) as z:
        assert z.files == ["input_ids"] and z["input_ids"].tolist() == [7, 151655, 8]


def test_remote_failure_prints_status(server, tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(imagegen.png(30, 30, seed=44))
    r = cli("preprocess", "--target", server, "--model", "no/such-model", "--backend", "sglang", str(path))
    assert r.returncode != 0
    assert "NOT_FOUND" in r.stderr and "no/such-model" in r.stderr

    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    r = cli("preprocess", "--target", server, "--model", QWEN2, "--backend", "sglang", str(bad))
    assert r.returncode == 1 and f"INVALID_ARGUMENT: image 0 ({bad}): " in r.stderr, r.stderr

    missing = tmp_path / "nosuch.png"
    for command in ("preprocess", "plan"):
        r = cli(command, "--target", server, "--model", QWEN2, str(path), str(missing))
        assert r.returncode == 1 and f"error: image 1 ({missing}): cannot read it: No such file" in r.stderr, r.stderr


def test_remote_request_budget(server, pps, tmp_path):
    """``preprocess --target --max-image-tokens N`` sends the request's budget."""
    path = tmp_path / "b.png"
    path.write_bytes(imagegen.png(300, 500, seed=46))
    tokens = pps[QWEN2].family.plan(300, 500, 0).token_count
    r = cli("preprocess", "--target", server, "--model", QWEN2, "--max-image-tokens", str(tokens - 1), str(path))
    assert r.returncode != 0 and "RESOURCE_EXHAUSTED" in r.stderr
    assert f"{tokens} tokens, over the budget of {tokens - 1}" in r.stderr
    r = cli("preprocess", "--target", server, "--model", QWEN2, "--max-image-tokens", str(tokens), str(path))
    assert r.returncode == 0 and re.search(rf"\b{tokens} tokens\b|\btokens {tokens}\b", r.stdout), r.stderr


def test_urls_are_sent_for_the_server_to_fetch(server, media_dir, tmp_path):
    """file:// names a file on the server's side (here: its allowed media root)."""
    data = imagegen.png(20, 20, seed=45)
    (media_dir / "cli.png").write_bytes(data)
    r = cli("preprocess", "--target", server, "--model", QWEN2, "--backend", "trtllm",
            "--out", str(tmp_path / "u.npz"), f"file://{media_dir}/cli.png")
    assert r.returncode == 0, r.stderr
    assert blake3.blake3(data).hexdigest()[:16] in r.stdout


def test_remote_preprocess_and_plan_take_a_timeout(server, tmp_path):
    """``--timeout`` is the call's deadline, for preprocess as for plan: one far too short
    for a 4000x3000 photo ends the call DEADLINE_EXCEEDED."""
    path = tmp_path / "big.jpg"
    path.write_bytes(imagegen.jpeg(3000, 4000, seed=45))
    for command in ("preprocess", "plan"):
        r = cli(command, "--target", server, "--model", QWEN2, "--timeout", "0.001", str(path))
        assert r.returncode != 0 and "DEADLINE_EXCEEDED" in r.stderr, (command, r.stderr)
