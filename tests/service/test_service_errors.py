"""Failures over the wire: the right status code, a message that helps, and the server
stays SERVING afterwards."""

from __future__ import annotations

import base64
import time

import blake3
import grpc
import pytest
from PIL import Image

import imagegen
from servers import free_port
from service_support import MAX_RECEIVE, QWEN2
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb

GOOD = imagegen.png(40, 60, seed=5)


@pytest.fixture(autouse=True)
def still_serving(client):
    yield
    assert client.health() == "SERVING"


def rpc_error(fn, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        fn(*args, **kwargs)
    return e.value


def test_unknown_model(client):
    e = rpc_error(client.preprocess, "no/such-model", [GOOD])
    assert e.code() == grpc.StatusCode.NOT_FOUND
    assert "no/such-model" in e.details() and QWEN2 in e.details()


def test_bad_image(client):
    e = rpc_error(client.preprocess, QWEN2, [GOOD, b"this is not an image"])
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.details().startswith("image 1:")


def test_the_client_raises_what_the_in_process_api_raises(client, pps):
    """One ``except PreprocessError`` for both APIs: the same code, item and message as
    the in-process call on the same input, and still a grpc.RpcError for grpc code."""
    from sglang_mm_grpc import Code, PreprocessError
    from sglang_mm_grpc.client import RemoteError

    bad = [GOOD, b"this is not an image"]
    with pytest.raises(PreprocessError) as local:
        pps[QWEN2].preprocess(bad)
    with pytest.raises(PreprocessError) as remote:
        client.preprocess(QWEN2, bad)
    e = remote.value
    assert isinstance(e, RemoteError) and isinstance(e, grpc.RpcError)
    assert (e.code, e.item, e.kind) == (local.value.code, 1, "image") == (Code.INVALID_ARGUMENT, 1, "image")
    assert e.code.value == e.code.name == "INVALID_ARGUMENT" and e.code in {Code.INVALID_ARGUMENT}
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.message == e.details() == str(e) == local.value.message
    assert e.detail == local.value.detail and not e.detail.startswith("image")


def test_a_request_level_failure_names_no_item(client):
    from sglang_mm_grpc.client import RemoteError

    e = rpc_error(client.preprocess, "no/such-model", [GOOD])
    assert isinstance(e, RemoteError) and e.item is None and e.message == e.detail == e.details()


def test_an_unreachable_server_is_a_remote_error_too():
    from sglang_mm_grpc import Code, PreprocessError
    from sglang_mm_grpc.client import Client

    with Client(f"127.0.0.1:{free_port()}", timeout=2) as c:
        with pytest.raises(PreprocessError) as e:
            c.list_models()
    assert e.value.code == Code.UNAVAILABLE and e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_placeholder_mismatch(client):
    e = rpc_error(client.preprocess, QWEN2, [GOOD, GOOD], input_ids=[1, 151655, 2])
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "placeholder" in e.details() and "2 image" in e.details()


def test_unknown_handle(client):
    e = rpc_error(client.assemble, "0123456789abcdef", "sglang")
    assert e.code() == grpc.StatusCode.NOT_FOUND
    assert "call Preprocess again" in e.details()


def test_released_handle_says_so(client):
    handle = client.preprocess(QWEN2, [GOOD]).handle
    assert client.release(handle)
    e = rpc_error(client.assemble, handle, "vllm")
    assert e.code() == grpc.StatusCode.NOT_FOUND
    assert "released" in e.details() and "call Preprocess again" in e.details()


def test_oversized_request(client):
    big = b"\0" * (MAX_RECEIVE + (1 << 20))
    e = rpc_error(client.preprocess, QWEN2, [big])
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(MAX_RECEIVE) in e.details()  # "... larger than max (N vs. 4194304)"


def test_no_images(client):
    e = rpc_error(client.preprocess, QWEN2, [])
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "no images" in e.details()


def test_over_the_request_token_budget(client, pps):
    """PreprocessRequest.max_image_tokens: an image over it fails the call, naming its
    count and the budget; 0 (unset) is the model's budget, which ListModels reports."""
    big = imagegen.png(300, 500, seed=6)
    tokens = pps[QWEN2].family.plan(300, 500, 1).token_count
    e = rpc_error(client.preprocess, QWEN2, [GOOD, big], max_image_tokens=tokens - 1)
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert e.details() == (f"image 1: 500x300 image expands into {tokens} tokens, over the budget of {tokens - 1} "
                           "tokens per image (the request's max_image_tokens); not decoded")
    assert client.preprocess(QWEN2, [GOOD, big], max_image_tokens=tokens, backend="trtllm").images[1].token_count == tokens
    assert client.preprocess(QWEN2, [big], max_image_tokens=0, backend="trtllm").images[0].token_count == tokens
    model = pps[QWEN2].max_image_tokens
    assert {m.name: m.max_image_tokens for m in client.list_models()}[QWEN2] == model


def test_empty_media_item(client):
    req = pb.PreprocessRequest(model=QWEN2, images=[pb.MediaItem(data=GOOD), pb.MediaItem()])
    e = rpc_error(client.stub.Preprocess, req, timeout=30)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details().startswith("image 1:")


def test_not_base64(client):
    e = rpc_error(client.preprocess, QWEN2, ["not base64 at all!"])
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details().startswith("image 0:")


def test_assemble_needs_a_backend(client):
    handle = client.preprocess(QWEN2, [GOOD]).handle
    e = rpc_error(client.assemble, handle, None)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "backend" in e.details()
    e = rpc_error(client.assemble, handle, 42)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "backend" in e.details()
    client.release(handle)


def test_deadline(client, server_proc):
    """The server drops the call when its deadline passes (and says so)."""
    # about a second of pixel work in a few hundred KB (flat PNGs compress to almost nothing);
    # 1.3 GB of pixel values, within the handle store (twelve would be refused from their plans)
    raws = [imagegen.encode(Image.new("RGB", (3000, 3000), (s, 90, 200)), "PNG") for s in range(6)]
    e = rpc_error(client.preprocess, QWEN2, raws, timeout=0.3)
    assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    log = server_proc.log
    end = time.monotonic() + 10
    while "preprocess: deadline exceeded" not in log.read_text():
        assert time.monotonic() < end, log.read_text()[-2000:]
        time.sleep(0.05)


def test_data_url_and_base64_are_the_bytes(client):
    """The inline sources resolve to the same encoded bytes (same blake3)."""
    b64 = base64.b64encode(GOOD).decode()
    resp = client.preprocess(QWEN2, [GOOD, f"data:image/png;base64,{b64}", b64], backend="trtllm")
    want = blake3.blake3(GOOD).hexdigest()
    assert [im.hash for im in resp.images] == [want] * 3
    assert list(resp.payload.trtllm.image_data) == [GOOD] * 3
