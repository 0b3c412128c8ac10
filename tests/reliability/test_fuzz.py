"""Fuzzing with hypothesis: the decoder, the data-URL/base64 parser, the model config loader
and request validation over the wire. No crash, no hang: every failure is a clean
PreprocessError (in process) or an expected gRPC status (over the wire).

Bounded: a fixed number of examples each and a per-example deadline, so CI time stays
small, and derandomized, so CI sees the same examples every run. To explore instead,
``SGLANG_MM_FUZZ_RANDOM=1`` draws fresh examples, ten times as many.
``scripts/fuzz_atheris.py`` runs coverage-guided fuzzing of the same targets.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import imagegen
import procs
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
from sglang_mm_grpc.config import resolve
from sglang_mm_grpc.core.errors import Code, PreprocessError
from sglang_mm_grpc.media.decode import decode_image
from sglang_mm_grpc.media.sources import classify, decode_base64, describe

EXPLORE = bool(os.environ.get("SGLANG_MM_FUZZ_RANDOM"))


def bounded(examples: int, deadline_ms: int = 5000) -> settings:
    return settings(
        max_examples=examples * (10 if EXPLORE else 1),
        deadline=deadline_ms,
        derandomize=not EXPLORE,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


FUZZ = bounded(400)
MAX_PIXELS = 1 << 20  # small, so a header claiming a large image is refused rather than decoded

SEEDS = {
    "png": imagegen.png(9, 13, seed=1),
    "jpeg": imagegen.jpeg(17, 11, seed=2),
    **{k: v for k, v in imagegen.modes_corpus(7, 9).items()},
}
SEED_LIST = list(SEEDS.values())


@st.composite
def mutated(draw, seeds=SEED_LIST) -> bytes:
    """A valid image with bytes flipped, cut, duplicated or inserted."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "dup", "zero"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[at : at + draw(st.integers(1, 64))]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "dup":
            data[at:at] = data[at : at + draw(st.integers(1, 64))]
        elif op == "zero" and data:
            data[at : at + 4] = b"\xff\xff\xff\x7f"  # a huge size field, wherever it lands
    return bytes(data)


def check_decode(data: bytes) -> None:
    try:
        img = decode_image(data, item=0, max_pixels=MAX_PIXELS)
    except PreprocessError as e:
        event(e.code.value)
        assert e.code in (Code.INVALID_ARGUMENT, Code.RESOURCE_EXHAUSTED), e
        assert e.message.startswith("image 0: ")
        return
    rgb = img.rgb if hasattr(img, "rgb") else img[0]
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3
    assert 0 < rgb.shape[0] * rgb.shape[1] <= MAX_PIXELS


@FUZZ
@given(st.binary(max_size=2048))
def test_decode_random_bytes(data):
    check_decode(data)


@FUZZ
@given(mutated())
def test_decode_mutated_images(data):
    check_decode(data)


# -- sources: data URLs, bare base64, URLs and paths --------------------------------------

B64_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


@st.composite
def source_text(draw) -> str:
    kind = draw(st.sampled_from(["data", "data-noise", "bare", "bare-noise", "url", "text"]))
    payload = base64.b64encode(draw(st.binary(max_size=96))).decode()
    noise = draw(st.text(alphabet=B64_ALPHABET + " \n\t%,;:-_.", max_size=96))
    meta = draw(st.sampled_from(["image/png;base64", "base64", "image/png", "", ";base64", "image/png;charset=x;base64", "IMAGE/PNG;BASE64"]))
    if kind == "data":
        return f"data:{meta},{payload}"
    if kind == "data-noise":
        return f"data:{meta},{noise}"
    if kind == "bare":
        return payload
    if kind == "bare-noise":
        return noise
    if kind == "url":
        scheme = draw(st.sampled_from(["http", "https", "file", "ftp", "HTTP", "data", "javascript", "gopher"]))
        return f"{scheme}:{draw(st.text(max_size=40))}"
    return draw(st.text(max_size=200))


def check_source(raw) -> None:
    shown = describe(raw)
    assert isinstance(shown, str) and shown.isprintable() and len(shown) < 400
    try:
        src = classify(raw)
    except PreprocessError as e:
        assert e.code == Code.INVALID_ARGUMENT, e
        return
    assert src.kind in ("bytes", "base64", "http", "file")
    if src.kind == "base64":
        try:
            data = asyncio.run(decode_base64(src.value))
        except PreprocessError as e:
            assert e.code == Code.INVALID_ARGUMENT, e
            return
        assert len(data) == src.size


@FUZZ
@given(source_text())
def test_source_parser(text):
    check_source(text)


@FUZZ
@given(st.binary(max_size=64))
def test_data_url_round_trip(data):
    for text in (f"data:image/png;base64,{base64.b64encode(data).decode()}", base64.b64encode(data).decode()):
        if not data:
            with pytest.raises(PreprocessError):
                classify(text)
            continue
        src = classify(text)
        if src.kind == "file":  # short base64 starting with "/" reads as a path, by design
            assert text.startswith("/")
            continue
        assert src.kind == "base64" and src.size == len(data)
        assert asyncio.run(decode_base64(src.value)) == data


@FUZZ
@given(st.one_of(st.binary(max_size=64), st.text(max_size=64).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_source_bytes_and_odd_types(raw):
    check_source(raw)
    check_source(bytearray(raw))


# -- the model config loader --------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
PRESET_SOURCES = [resolve(p) for p in (procs.QWEN2, procs.PIXTRAL, procs.LLAVA, procs.QWEN3)]


@st.composite
def model_files(draw) -> dict[str, str]:
    """preprocessor_config.json, config.json (and maybe processor_config.json): a real
    preset's with values replaced, removed or added, or random JSON, or not JSON."""
    src = draw(st.sampled_from(PRESET_SOURCES))
    files = {}
    for name, base in (("preprocessor_config.json", src.preprocessor_config), ("config.json", src.config),
                       ("processor_config.json", src.processor_config)):
        how = draw(st.sampled_from(["mutate", "mutate", "mutate", "random", "garbage", "absent"]))
        if how == "absent":
            continue
        if how == "garbage":
            files[name] = draw(st.text(max_size=40))
            continue
        if how == "random":
            files[name] = json.dumps(draw(JSON))
            continue
        cfg = json.loads(json.dumps(base))
        keys = sorted(cfg)
        for _ in range(draw(st.integers(1, 4))):
            if keys and draw(st.booleans()):
                key = draw(st.sampled_from(keys))
                if draw(st.booleans()):
                    cfg.pop(key, None)
                else:
                    cfg[key] = draw(JSON | st.integers(-3, 3) | st.just(0))
            else:
                cfg[draw(st.text(max_size=8))] = draw(JSON)
        files[name] = json.dumps(cfg)
    return files


@FUZZ
@given(model_files())
def test_config_loader(tmp_path_factory, files):
    d = tmp_path_factory.mktemp("cfg")
    for name, text in files.items():
        (d / name).write_text(text)
    try:
        family = resolve(str(d)).build()
    except PreprocessError as e:
        event(e.code.value)
        assert e.code in (Code.INVALID_ARGUMENT, Code.NOT_FOUND), e
        return
    event("built")
    assert family.image_token_id is not None


# -- request validation over the wire -------------------------------------------------------


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    """A server that may fetch only from 127.0.0.1 (so no URL leaves the machine)."""
    server = procs.Server(
        tmp_path_factory.mktemp("fuzz"),
        "--allow-private-hosts", "--allowed-media-domains", "127.0.0.1", "--fetch-timeout", "1",
        "--max-images", "6", "--log-level", "WARNING",
        models=[procs.QWEN2, procs.PIXTRAL],
    )
    with grpc.insecure_channel(server.target, options=procs.CHANNEL_OPTIONS) as ch:
        yield server, pb_grpc.MultimodalPreprocessorStub(ch)
    server.stop()


ALLOWED = {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED", "PERMISSION_DENIED", "UNAVAILABLE", "DEADLINE_EXCEEDED"}
CLOSED_PORT = procs.free_port()


@st.composite
def media_item(draw) -> pb.MediaItem:
    kind = draw(st.sampled_from(["image", "mutated", "bytes", "empty", "url", "data-url", "local", "remote"]))
    if kind == "image":
        return pb.MediaItem(data=draw(st.sampled_from(SEED_LIST)))
    if kind == "mutated":
        return pb.MediaItem(data=draw(mutated()))
    if kind == "bytes":
        return pb.MediaItem(data=draw(st.binary(min_size=1, max_size=256)))
    if kind == "empty":
        return pb.MediaItem()
    if kind == "url":
        return pb.MediaItem(url=draw(source_text()))
    if kind == "data-url":
        return pb.MediaItem(url="data:image/png;base64," + base64.b64encode(draw(st.sampled_from(SEED_LIST) | mutated())).decode())
    if kind == "local":
        return pb.MediaItem(url=draw(st.sampled_from(["file:///etc/passwd", "/etc/hostname", "file://host/x", "/" + "a" * 5000])))
    host = draw(st.sampled_from([f"127.0.0.1:{CLOSED_PORT}", "127.0.0.1:1", "example.com", "10.0.0.1", "[::1]:9", "localhost"]))
    return pb.MediaItem(url=f"http://{host}/{draw(st.text(alphabet='abc/%?#.', max_size=10))}")


@st.composite
def preprocess_request(draw) -> pb.PreprocessRequest:
    n = draw(st.integers(0, 4))
    if draw(st.integers(0, 9)) < 8:  # mostly a served model, so validation goes past the name
        model = draw(st.sampled_from([procs.QWEN2, procs.PIXTRAL]))
    else:
        model = draw(st.sampled_from(["", "no/such", procs.QWEN2.lower()]) | st.text(max_size=20))
    if draw(st.booleans()):
        ids = []  # the server assumes one placeholder per image
    else:
        token = draw(st.sampled_from([151655, 10, 0, 2**32 - 1]))
        ids = draw(st.lists(st.integers(0, 2**32 - 1) | st.just(token), max_size=24))
    return pb.PreprocessRequest(
        request_id=draw(st.text(max_size=20)),
        model=model,
        input_ids=ids,
        images=[draw(media_item()) for _ in range(n)],
        backend=draw(st.integers(0, 5)),
        keep_handle=draw(st.booleans()),
    )


def check_status(call):
    try:
        resp = call()
        event("OK")
        return "OK", resp
    except grpc.RpcError as e:
        code = e.code().name
        event(code)
        assert code in ALLOWED, (code, e.details())
        assert e.details(), code
        return code, None


@bounded(400, 15000)
@given(preprocess_request())
def test_preprocess_requests(wire, req):
    _, stub = wire
    code, resp = check_status(lambda: stub.Preprocess(req, timeout=10))
    if resp is not None:
        assert len(resp.images) == len(req.images) and resp.input_ids
        if resp.handle:
            stub.Release(pb.ReleaseRequest(handle=resp.handle), timeout=5)


@bounded(100, 10000)
@given(st.text(max_size=40) | st.sampled_from(["", "0" * 32]), st.integers(0, 5), st.booleans())
def test_assemble_and_release_requests(wire, handle, backend, release):
    _, stub = wire
    code, _ = check_status(lambda: stub.Assemble(pb.AssembleRequest(handle=handle, backend=backend, release=release), timeout=5))
    assert code in ("INVALID_ARGUMENT", "NOT_FOUND")
    assert not stub.Release(pb.ReleaseRequest(handle=handle), timeout=5).released


def test_server_fine_after_fuzzing(wire):
    server, stub = wire
    st_ = server.stats()
    assert server.health() == "SERVING"
    assert st_.store.items == 0 and st_.in_flight == 0 and st_.work.busy == 0 and st_.fetch.in_flight == 0
    assert not any(s.code in ("INTERNAL", "UNKNOWN") for s in st_.statuses), list(st_.statuses)
    resp = stub.Preprocess(pb.PreprocessRequest(model=procs.QWEN2, images=[pb.MediaItem(data=SEEDS["png"])]), timeout=10)
    assert len(resp.images) == 1
