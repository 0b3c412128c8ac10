"""A newcomer's mistakes through a real server and the CLI get a message that says what
to do, with the right code (in-process ones: tests/core/test_mistakes.py)."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys

import grpc
import pytest
from blake3 import blake3

import imagegen
from servers import REPO, Server, run_cli
from service_support import QWEN2
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb

PNG = imagegen.png(28, 28, seed=7)


def status(fn, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        fn(*args, **kwargs)
    return e.value


def test_assemble_without_a_handle_mentions_keep_handle(client):
    resp = client.preprocess(QWEN2, [PNG], backend="vllm")
    assert resp.handle == ""
    err = status(client.assemble, resp.handle, "sglang")
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "handle is empty" in err.details() and "keep_handle" in err.details()


def test_model_names_match_in_any_case_and_near_misses_are_named(client):
    assert client.preprocess(QWEN2.upper(), [PNG]).images[0].token_count == 4
    err = status(client.preprocess, "Qwen/Qwen2-VL-7B", [PNG])
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert f"did you mean {QWEN2!r}?" in err.details()


def test_a_relative_file_name_sent_as_a_url_says_to_send_bytes(client):
    req = pb.PreprocessRequest(model=QWEN2, images=[pb.MediaItem(url="cat.jpg")])
    err = status(client.stub.Preprocess, req, timeout=30)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details().startswith("image 0: cat.jpg: looks like a relative file name") and "bytes" in err.details()


def test_the_cli_sends_any_url_scheme_to_the_server(server):
    r = run_cli("preprocess", "--target", server, "--model", QWEN2, "gopher://127.0.0.1/cat.png")
    assert r.returncode == 1
    assert "unsupported URL scheme 'gopher'" in r.stderr and "No such file" not in r.stderr


def test_call_through_reflection(server, tmp_path):
    r = run_cli("call", "ListModels", "--target", server)
    assert r.returncode == 0, r.stderr
    names = [m["name"] for m in json.loads(r.stdout)["models"]]
    assert QWEN2 in names
    request = tmp_path / "req.json"
    request.write_text(json.dumps({
        "model": QWEN2, "input_ids": [151652, 151655, 151653],
        "images": [{"data": base64.b64encode(PNG).decode()}], "backend": "BACKEND_VLLM"}))
    r = run_cli("call", "Preprocess", f"@{request}", "--target", server, "--out", str(tmp_path / "whole.json"))
    assert r.returncode == 0, r.stderr
    resp = json.loads(r.stdout)
    assert resp["input_ids"] == [151652] + [151655] * 4 + [151653]
    shown = resp["payload"]["vllm"]["pixel_values"]
    assert shown["shape"] == [16, 1176]
    whole = json.loads((tmp_path / "whole.json").read_text())["payload"]["vllm"]["pixel_values"]
    data = base64.b64decode(whole["inline"])
    assert len(data) == 16 * 1176 * 4
    assert shown["inline"] == f"<{len(data)} bytes, blake3 {blake3(data).hexdigest()[:16]}>"
    r = run_cli("call", "Preprocess", f"@{request}", "--target", server, "--full")
    assert json.loads(r.stdout)["payload"]["vllm"]["pixel_values"]["inline"] == whole["inline"]
    r = run_cli("call", "grpc.health.v1.Health/Check", "--target", server)
    assert r.returncode == 0 and json.loads(r.stdout) == {"status": "SERVING"}
    r = run_cli("call", "Preprocesss", "--target", server)
    assert r.returncode == 2 and "has no method 'Preprocesss'" in r.stderr
    r = run_cli("call", "Preprocess", '{"model": 5', "--target", server)
    assert r.returncode == 2 and "not JSON" in r.stderr
    # a misspelt enum value: the values the enum has, as the server's own descriptors name them
    r = run_cli("call", "Assemble", '{"backend": "vllm"}', "--target", server)
    assert r.returncode == 2, r.stderr
    names = ", ".join(pb.Backend.keys())
    assert f"sglang_mm.v1.Backend is one of: {names}" in r.stderr and "BACKEND_VLLM" in names, r.stderr


def test_a_port_in_use_says_what_to_do(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "sglang_mm_grpc.cli", "serve", "--port", str(port),
                            "--model", QWEN2], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode != 0
    assert f"127.0.0.1:{port} is in use; stop the other server or pass --port" in r.stderr


def test_first_start_lines_and_the_ready_line(tmp_path):
    server = Server(tmp_path, models=[QWEN2], name="lines")
    try:
        log = server.log_text()
        assert f"loading {QWEN2} (1 of 1)" in log
        assert f"SERVING on 127.0.0.1:{server.port}: {QWEN2}" in log
    finally:
        server.stop()


def test_version_models_and_help():
    from sglang_mm_grpc import __version__

    assert run_cli("--version").stdout.strip() == f"sglang-mm-grpc {__version__}"
    models = run_cli("models").stdout
    assert "Llama-4-Scout-17B-16E-Instruct\tfamily=llama4\tplaceholder_token_id=200090" in models
    help_text = " ".join(run_cli("serve", "--help").stdout.split())
    assert "built-in presets (served when no --model is given; nothing is downloaded): " in help_text
    assert "llava-hf/llava-1.5-7b-hf" in help_text.replace("- ", "-")  # argparse may wrap after a hyphen


def test_no_broken_pipe_traceback_when_piped_into_head():
    r = subprocess.run(f"{sys.executable} -m sglang_mm_grpc.cli models | head -1", shell=True,
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.stdout.count("\n") == 1 and "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr
