"""An image's item hash in the payload (vLLM ``mm_hashes``, TokenSpeed ``content_hash``)
through a real server and the real stub backends (separate processes on 127.0.0.1).

Preprocessed with the model's default options it is the blake3 of the bytes, as routers
and the gateway compute it; with other effective options (pixel bounds, a token budget,
detail low) it is blake3 over ``image:<bytes hash>:<options>``, so a worker's encoder
cache never hands back the embeddings of the same bytes preprocessed another way.
``ImageInfo.hash`` stays the bytes' hash either way. The expected ids are computed here
from the bytes and the options the response echoes, not by the package.
"""

from __future__ import annotations

import blake3
import pytest

import imagegen
from service_support import QWEN2, generate
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc.client import Client, image_options, media_item

RAW = imagegen.jpeg(480, 640, seed=41)
BYTES_HASH = blake3.blake3(RAW).hexdigest()
_DETAIL = {pb.DETAIL_AUTO: "auto", pb.DETAIL_LOW: "low", pb.DETAIL_HIGH: "high"}


def expected_id(info: pb.ImageInfo) -> str:
    """blake3 of ``image:<hash>:name=value,...`` over the echoed effective options, by name."""
    o = info.options
    fields = {name: getattr(o, name) for name in ("min_pixels", "max_pixels", "max_tokens") if o.HasField(name)}
    if o.detail:
        fields["detail"] = _DETAIL[o.detail]
    key = f"image:{info.hash}:" + ",".join(f"{k}={v}" for k, v in sorted(fields.items()))
    return blake3.blake3(key.encode()).hexdigest()


def ids_seen(stubs, payload, backend: str) -> list[str]:
    """The item ids the stub read: vLLM's mm_hashes, TokenSpeed's content_hash (blake3 of
    the hex id, so the hex id is recovered by comparing against candidates below)."""
    _, report = generate(backend, stubs[backend], payload)
    if backend == "vllm":
        return [item["hash"] for item in report["items"]]
    return [item["content_hash"] for item in report["items"]]


def as_seen(hex_id: str, backend: str) -> str:
    return hex_id if backend == "vllm" else blake3.blake3(hex_id.encode()).hexdigest()


DEFAULTS = {"none": None, "auto": image_options(detail="auto"), "high": image_options(detail="high")}
CHANGED = {"max_pixels": image_options(max_pixels=200_000), "low": image_options(detail="low"),
           "max_tokens": image_options(max_tokens=300)}


@pytest.mark.parametrize("backend", ["vllm", "tokenspeed"])
def test_defaults_keep_the_bytes_hash(server, stubs, backend):
    with Client(server, timeout=60) as c:
        for name, opts in DEFAULTS.items():
            resp = c.preprocess(QWEN2, [RAW], backend=backend, image_options=opts)
            assert resp.images[0].hash == BYTES_HASH, name
            assert ids_seen(stubs, resp.payload, backend) == [as_seen(BYTES_HASH, backend)], name


@pytest.mark.parametrize("backend", ["vllm", "tokenspeed"])
def test_other_options_are_other_items(server, stubs, backend):
    seen = {}
    with Client(server, timeout=60) as c:
        for name, opts in CHANGED.items():
            resp = c.preprocess(QWEN2, [RAW], backend=backend, image_options=opts)
            info = resp.images[0]
            assert info.hash == BYTES_HASH, name  # ImageInfo keeps the bytes' hash
            (seen[name],) = ids_seen(stubs, resp.payload, backend)
            assert seen[name] == as_seen(expected_id(info), backend), name
    assert len({*seen.values(), as_seen(BYTES_HASH, backend)}) == len(CHANGED) + 1


def test_two_phase_and_mixed_images(server, stubs):
    """Assemble from a handle keys the same way, and in one request an image with its own
    options is keyed apart from the same bytes with the defaults beside it."""
    items = [RAW, media_item(RAW, options=image_options(max_pixels=200_000))]
    with Client(server, timeout=60) as c:
        one_shot = c.preprocess(QWEN2, items, backend="vllm")
        kept = c.preprocess(QWEN2, items)
        payloads = {b: c.assemble(kept.handle, b) for b in ("vllm", "tokenspeed")}
        c.release(kept.handle)
    want = [BYTES_HASH, expected_id(kept.images[1])]
    assert want[0] != want[1] and [i.hash for i in kept.images] == [BYTES_HASH, BYTES_HASH]
    assert list(one_shot.payload.vllm.mm_hashes) == want
    for backend, payload in payloads.items():
        assert ids_seen(stubs, payload, backend) == [as_seen(h, backend) for h in want], backend
