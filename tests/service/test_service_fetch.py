"""Image sources the server fetches itself: http(s) and local files under its allowed
root, through the media fetcher and its policy."""

from __future__ import annotations

import blake3
import grpc
import pytest

import imagegen
from service_support import QWEN2


@pytest.fixture(autouse=True)
def still_serving(client):
    yield
    assert client.health() == "SERVING"


def test_http_and_file_sources(client, media_dir, http_media, pps):
    a, b = imagegen.jpeg(80, 120, seed=51), imagegen.png(33, 47, seed=52)
    (media_dir / "a.jpg").write_bytes(a)
    (media_dir / "b.png").write_bytes(b)
    sources = [f"{http_media}/a.jpg", f"file://{media_dir}/b.png", str(media_dir / "a.jpg"), b]
    resp = client.preprocess(QWEN2, sources, backend="sglang")
    raws = [a, b, a, b]
    assert [im.hash for im in resp.images] == [blake3.blake3(r).hexdigest() for r in raws]
    assert list(resp.payload.sglang.image_data) == raws
    want = pps[QWEN2].preprocess(raws)
    assert list(resp.payload.input_ids) == want.input_ids.tolist()
    assert resp.timings.fetch_ms > 0


def test_file_outside_the_root_is_refused(client, tmp_path):
    outside = tmp_path / "x.png"
    outside.write_bytes(imagegen.png(10, 10))
    with pytest.raises(grpc.RpcError) as e:
        client.preprocess(QWEN2, [imagegen.png(10, 10), f"file://{outside}"])
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert e.value.details().startswith("image 1")


def test_http_not_found(client, http_media):
    with pytest.raises(grpc.RpcError) as e:
        client.preprocess(QWEN2, [f"{http_media}/missing.png"])
    assert e.value.code() != grpc.StatusCode.OK
    assert e.value.details().startswith("image 0") and "404" in e.value.details()


def test_decode_errors_name_the_fetched_source(client, media_dir, http_media):
    """A fetched image that fails to decode is named by its (redacted) source, like fetch errors."""
    (media_dir / "not-an-image.png").write_bytes(b"<html>a login page</html>")
    with pytest.raises(grpc.RpcError) as e:
        client.preprocess(QWEN2, [imagegen.png(10, 10), f"{http_media}/not-an-image.png?token=s3cret"])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = e.value.details()
    assert details.startswith(f"image 1: {http_media}/not-an-image.png?") and "not a decodable image" in details
    assert "s3cret" not in details
    with pytest.raises(grpc.RpcError) as e:
        client.preprocess(QWEN2, [b"raw garbage"])
    assert e.value.details().startswith("image 0: not a decodable image")


def test_the_request_is_checked_before_anything_is_fetched(client, media_dir, http_media):
    """Too many images, or placeholders that do not match the images: refused before any
    source is fetched (the fetch counters do not move)."""
    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb

    (media_dir / "c.png").write_bytes(imagegen.png(20, 20))
    started = client.stub.GetStats(pb.GetStatsRequest()).fetch.started
    with pytest.raises(grpc.RpcError) as e:
        client.preprocess(QWEN2, [imagegen.png(4, 4)] * 64 + [f"{http_media}/c.png"])
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "65 images in one request, over the limit of 64" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        client.preprocess(QWEN2, [f"{http_media}/c.png"], input_ids=[1, 2, 3])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "0 image placeholder(s)" in e.value.details()
    assert client.stub.GetStats(pb.GetStatsRequest()).fetch.started == started
    assert len(client.preprocess(QWEN2, [f"{http_media}/c.png"]).images) == 1
    assert client.stub.GetStats(pb.GetStatsRequest()).fetch.started == started + 1
