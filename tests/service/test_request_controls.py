"""Request controls through real servers on 127.0.0.1: image options, the Plan RPC and
media ids (hit, miss, automatic resend, scoping of client ids to their caller).

Servers: one with Qwen2-VL, Inkling and LLaVA-1.5 (defaults); one with two bearer
tokens (client ids scoped by token); one with client ids off and a 64 KiB media store.
"""

from __future__ import annotations

import functools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import numpy as np
import pytest

import imagegen
from servers import Server, health, run_cli
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc.core.carriers import ImageOptions
from sglang_mm_grpc.client import Client, image_options, media_item, missing_media, payload_arrays
from sglang_mm_grpc.core.hashing import content_hash

QWEN = "Qwen/Qwen2-VL-7B-Instruct"
INKLING = "thinkingmachines/Inkling"
LLAVA = "llava-hf/llava-1.5-7b-hf"
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]  # a Client of its own connection (peer)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # shared: each client (and CLI run) below is a connection of its own, a caller of its own without tokens
    s = Server(tmp_path_factory.mktemp("controls"), "--allow-private-hosts", "--shared-media-store",
               models=[QWEN, INKLING, LLAVA],
               workers=1)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tokens_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("controls-tokens")
    (d / "tokens").write_text("token-alice\ntoken-bob\n")
    s = Server(d, "--auth-token-file", str(d / "tokens"), models=[QWEN], workers=1, name="tokens")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("controls-strict"), "--no-client-media-ids", "--media-store-bytes", "64KiB",
               models=[QWEN], workers=1, name="strict")
    yield s
    s.stop()


def client(target, **kw) -> Client:
    return Client(target, timeout=60, channel_options=OWN_CONNECTION, **kw)


def rpc_error(fn) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        fn()
    return e.value


def media(s: Server) -> pb.MediaStoreStats:
    return s.stats().media


# -- media ids ------------------------------------------------------------------------------


def test_a_hash_names_bytes_the_server_holds(server):
    raw = imagegen.jpeg(480, 640, seed=11)
    digest = content_hash(raw)
    with client(server.target) as c:
        first = c.preprocess(QWEN, [raw], backend="vllm")
        before = media(server)
        again = c.preprocess(QWEN, [pb.MediaItem(media_id=digest)], backend="vllm")
        upper = c.preprocess(QWEN, [pb.MediaItem(media_id=digest.upper())], backend="vllm")
    after = media(server)
    assert after.hits == before.hits + 2 and after.misses == before.misses
    assert again.images[0].hash == upper.images[0].hash == digest
    assert again.images[0].cached and not first.images[0].cached
    assert list(again.input_ids) == list(first.input_ids)
    a, b = payload_arrays(first.payload), payload_arrays(again.payload)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


class _Counting(BaseHTTPRequestHandler):
    requests: list = []

    def do_GET(self):
        self.requests.append(self.path)
        body = imagegen.png(20, 20, seed=1)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def counting_http():
    _Counting.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_miss_names_the_images_to_send_before_fetching_anything(server, counting_http):
    url = f"{counting_http}/a.png"
    with client(server.target) as c:
        assert c.preprocess(QWEN, [url]).images[0].token_count > 0  # the URL itself works
        fetched = len(_Counting.requests)
        unknown = "ab" * 32
        e = rpc_error(lambda: c.preprocess(QWEN, [pb.MediaItem(media_id=unknown), url,
                                                  pb.MediaItem(media_id="never-bound")]))
        plan = rpc_error(lambda: c.plan(QWEN, [url, pb.MediaItem(media_id=unknown)]))
    assert e.code() == grpc.StatusCode.NOT_FOUND
    assert e.details() == (f"2 image(s) not held by this server: image 0 (media_id {unknown[:16]}...), image 2 "
                           "(media_id 'never-bound'); send them again as url or data (bind_id names them for "
                           "later calls)")
    assert missing_media(e) == [0, 2]
    assert plan.code() == grpc.StatusCode.NOT_FOUND and missing_media(plan) == [1]
    assert len(_Counting.requests) == fetched  # nothing fetched
    assert health(server.target) == "SERVING"


def test_the_client_resends_missing_images_automatically(server):
    new = [imagegen.jpeg(300, 200, seed=21), imagegen.png(50, 70, seed=22)]
    with client(server.target, media_ids=True) as c:
        before = media(server)
        first = c.preprocess(QWEN, new)  # both by hash, both missing, both resent as data
        mid = media(server)
        again = c.preprocess(QWEN, new)  # by hash, both held
        plan = c.plan(QWEN, [new[1], imagegen.jpeg(64, 64, seed=23)])  # one held, one new
    end = media(server)
    assert (mid.misses - before.misses, mid.stored - before.stored) == (2, 2)
    # again: 2 hits; the plan: the held image hits twice (its first try and the resend), the new one misses
    assert (end.hits - mid.hits, end.misses - mid.misses) == (4, 1)
    assert [im.hash for im in first.images] == [im.hash for im in again.images] == [content_hash(r) for r in new]
    assert list(first.input_ids) == list(again.input_ids)
    assert [im.cached for im in again.images] == [True, True]
    assert plan.images[0].cached


def test_known_mode_sends_only_what_this_client_sent_before(server):
    raw = imagegen.jpeg(120, 90, seed=31)
    with client(server.target, media_ids="known") as c:
        before = media(server)
        c.preprocess(QWEN, [raw])
        mid = media(server)
        c.preprocess(QWEN, [media_item(raw, options=image_options(detail="low"))])
    end = media(server)
    assert (mid.misses - before.misses, mid.hits - before.hits, mid.stored - before.stored) == (0, 0, 1)
    assert (end.misses - mid.misses, end.hits - mid.hits) == (0, 1)


def test_client_ids_are_scoped_to_their_caller(server):
    cat, dog = imagegen.jpeg(100, 150, seed=41), imagegen.jpeg(150, 100, seed=42)
    with client(server.target) as alice, client(server.target) as mallory:
        alice.plan(QWEN, [media_item(cat, bind_id="pet")])
        assert alice.plan(QWEN, [pb.MediaItem(media_id="pet")]).images[0].hash == content_hash(cat)
        e = rpc_error(lambda: mallory.plan(QWEN, [pb.MediaItem(media_id="pet")]))
        assert e.code() == grpc.StatusCode.NOT_FOUND and missing_media(e) == [0]
        # the other caller's own "pet" is its own
        mallory.preprocess(QWEN, [media_item(dog, bind_id="pet")])
        assert mallory.plan(QWEN, [pb.MediaItem(media_id="pet")]).images[0].hash == content_hash(dog)
        assert alice.plan(QWEN, [pb.MediaItem(media_id="pet")]).images[0].hash == content_hash(cat)
        # rebinding moves the name
        alice.plan(QWEN, [media_item(dog, bind_id="pet")])
        assert alice.plan(QWEN, [pb.MediaItem(media_id="pet")]).images[0].hash == content_hash(dog)
    assert media(server).bound_ids >= 2


def test_client_ids_are_scoped_to_the_token(tokens_server):
    cat = imagegen.jpeg(100, 150, seed=51)
    with client(tokens_server.target, token="token-alice") as alice:
        alice.plan(QWEN, [media_item(cat, bind_id="cat")])
    with client(tokens_server.target, token="token-alice") as alice_again:  # a new connection, the same caller
        assert alice_again.plan(QWEN, [pb.MediaItem(media_id="cat")]).images[0].hash == content_hash(cat)
    with client(tokens_server.target, token="token-bob") as bob:
        e = rpc_error(lambda: bob.plan(QWEN, [pb.MediaItem(media_id="cat")]))
        assert e.code() == grpc.StatusCode.NOT_FOUND
        # nor does alice's hash name her image for bob (it would tell him she sent it) ...
        e = rpc_error(lambda: bob.plan(QWEN, [pb.MediaItem(media_id=content_hash(cat))]))
        assert e.code() == grpc.StatusCode.NOT_FOUND
        # ... until he has sent the bytes himself
        bob.plan(QWEN, [cat])
        assert bob.plan(QWEN, [pb.MediaItem(media_id=content_hash(cat))]).images[0].token_count > 0


@pytest.mark.parametrize("item, message", [
    (pb.MediaItem(data=b"x", bind_id="ab" * 32), "bind_id abababababababab... is 64 hex digits"),
    (pb.MediaItem(data=b"x", bind_id="has space"), "bind_id 'has space' is not a valid id"),
    (pb.MediaItem(data=b"x", bind_id="x" * 129), "is not a valid id: 1-128 printable ASCII"),
    (pb.MediaItem(media_id="cat", bind_id="dog"), "bind_id binds the bytes sent in url or data"),
    (pb.MediaItem(media_id=""), "media_id '' is not a valid id"),
    (pb.MediaItem(), "empty MediaItem: set url, data or media_id"),
])
def test_malformed_ids_are_refused_naming_the_image(server, item, message):
    with client(server.target) as c:
        e = rpc_error(lambda: c.plan(QWEN, [imagegen.png(8, 8), item]))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details().startswith("image 1: ")
    assert message in e.details()


def test_client_ids_off_and_a_small_store(strict_server):
    small, large = imagegen.png(40, 40, seed=61), imagegen.png(300, 300, seed=62)  # 64 KiB store: the large never fits
    assert len(small) < 64 << 10 < len(large)
    with client(strict_server.target) as c:
        e = rpc_error(lambda: c.plan(QWEN, [media_item(small, bind_id="s")]))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "client media ids are off on this server (serve --no-client-media-ids)" in e.details()
        e = rpc_error(lambda: c.plan(QWEN, [pb.MediaItem(media_id="s")]))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
        c.plan(QWEN, [small, large])
        assert c.plan(QWEN, [pb.MediaItem(media_id=content_hash(small))]).images[0].hash == content_hash(small)
        e = rpc_error(lambda: c.plan(QWEN, [pb.MediaItem(media_id=content_hash(large))]))
        assert missing_media(e) == [0]
    with client(strict_server.target, media_ids=True) as c:
        for _ in range(2):  # never held: resent every time, and still answered
            assert c.preprocess(QWEN, [large]).images[0].hash == content_hash(large)
    stats = media(strict_server)
    assert stats.max_bytes == 64 << 10 and stats.bytes <= 64 << 10 and stats.bound_ids == 0


# -- image options ------------------------------------------------------------------------


def test_options_per_request_and_per_image_are_echoed(server):
    raw = imagegen.jpeg(720, 1280, seed=71)
    pp = Preprocessor.from_model(QWEN, cache_bytes=0)
    with client(server.target) as c:
        r = c.preprocess(QWEN, [raw, media_item(raw, options={"detail": "high", "max_tokens": 500})],
                         image_options=image_options(detail="low"), backend="sglang")
    local = pp.preprocess([raw, raw], options=ImageOptions(detail="low"),
                          image_options=[None, ImageOptions(detail="high", max_tokens=500)])
    assert list(r.input_ids) == local.input_ids.tolist()
    for info, im in zip(r.images, local.images):
        assert info.token_count == im.token_count and tuple(info.grid) == im.grid
        assert info.options.min_pixels == im.options.min_pixels and info.options.max_pixels == im.options.max_pixels
    assert r.images[0].options.detail == pb.DETAIL_LOW and not r.images[0].options.HasField("max_tokens")
    assert r.images[1].options.detail == pb.DETAIL_HIGH and r.images[1].options.max_tokens == 500
    assert np.array_equal(payload_arrays(r.payload)["pixel_values"], local.pixel_values)


@pytest.mark.parametrize("model, options, message", [
    (LLAVA, {"detail": "low"}, "image 0: detail low cannot be honoured exactly by the llava family"),
    (INKLING, {"max_tokens": 100}, "image 0: max_tokens 100 cannot be honoured exactly by the inkling family"),
    (QWEN, {"max_pixels": 0}, "image 0: max_pixels must be a positive integer, got 0"),
    (QWEN, {"min_pixels": 9, "max_pixels": 8}, "image 0: min_pixels 9 is above max_pixels 8"),
])
def test_options_a_family_cannot_honour_are_refused(server, model, options, message):
    with client(server.target) as c:
        e = rpc_error(lambda: c.preprocess(model, [imagegen.png(30, 30)], image_options=options))
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details().startswith(message)
        assert c.preprocess(model, [imagegen.png(30, 30)]).images[0].token_count > 0  # still serving


def test_an_unknown_detail_value_is_refused(server):
    req = pb.PreprocessRequest(model=QWEN, images=[pb.MediaItem(data=imagegen.png(8, 8))])
    req.images[0].options.detail = 9
    with grpc.insecure_channel(server.target) as ch:
        stub = ch.unary_unary("/sglang_mm.v1.MultimodalPreprocessor/Plan",
                              request_serializer=pb.PreprocessRequest.SerializeToString,
                              response_deserializer=pb.PlanResponse.FromString)
        e = rpc_error(lambda: stub(req, timeout=30))
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.details() == "image 0: options.detail: unknown value 9 (DETAIL_AUTO, DETAIL_LOW or DETAIL_HIGH)"


# -- Plan -----------------------------------------------------------------------------------


def test_plan_through_the_server_equals_preprocess(server):
    rng = np.random.default_rng(5)
    raws = []
    for k in range(8):
        h, w = (int(v) for v in rng.integers(10, 1500, 2))
        raws.append(imagegen.jpeg(h, w, seed=k) if k % 3 else imagegen.with_exif_orientation(h, w, 6, seed=k))
    ids = [1, 2]
    for _ in raws:
        ids += [151652, 151655, 151653, 7]
    with client(server.target) as c:
        store_before = server.stats().store.items
        for model, options in ((QWEN, None), (QWEN, {"max_tokens": 400}), (INKLING, {"detail": "low"}), (LLAVA, None)):
            ph = c.list_models()
            placeholder = next(m.placeholder_token_id for m in ph if m.name == model)
            model_ids = [placeholder if t == 151655 else t for t in ids]
            plan = c.plan(model, raws, input_ids=model_ids, image_options=options)
            assert server.stats().store.items == store_before  # Plan keeps no handle
            out = c.preprocess(model, raws, input_ids=model_ids, image_options=options)
            c.release(out.handle)
            assert plan.input_ids_length == len(out.input_ids)
            for p, o in zip(plan.images, out.images):
                p.cached = o.cached = False
                assert p == o
            again = c.plan(model, raws, input_ids=model_ids, image_options=options)
            assert all(im.cached for im in again.images)


def test_plan_keeps_the_bytes_for_media_ids(server):
    raw = imagegen.jpeg(333, 444, seed=81)
    with client(server.target) as c:
        c.plan(QWEN, [raw])
        r = c.preprocess(QWEN, [pb.MediaItem(media_id=content_hash(raw))])
    assert r.images[0].hash == content_hash(raw) and not r.images[0].cached


def test_cli_plan_and_preprocess_with_media_ids(server, tmp_path):
    img = tmp_path / "a.jpg"
    img.write_bytes(imagegen.jpeg(480, 640, seed=91))
    plan = run_cli("plan", "--target", server.target, "--model", QWEN, "--detail", "low", str(img))
    assert plan.returncode == 0, plan.stderr
    assert "HxW 480x640 -> " in plan.stdout and "(min_pixels " in plan.stdout and "detail DETAIL_LOW" not in plan.stdout
    assert "detail low" in plan.stdout and "nothing decoded" in plan.stdout
    before = media(server)
    first = run_cli("preprocess", "--target", server.target, "--model", QWEN, "--media-ids", "--max-tokens", "99",
                    str(img))
    assert first.returncode == 0, first.stderr
    assert "max_tokens 99" in first.stdout
    after = media(server)
    assert after.hits == before.hits + 1 and after.misses == before.misses  # planned above: held
    local = run_cli("plan", "--model", LLAVA, "--max-tokens", "5", str(img))
    assert local.returncode == 1 and "max_tokens 5 cannot be honoured exactly by the llava family" in local.stderr
    assert run_cli("preprocess", "--model", QWEN, "--media-ids", str(img)).returncode != 0


def test_the_cli_says_when_an_image_was_cached(server, tmp_path):
    """Two CLI runs are two connections, two callers without tokens: this server shares
    its store and cache across callers (--shared-media-store)."""
    path = tmp_path / "c.png"
    path.write_bytes(imagegen.png(40, 60, seed=99))
    first = run_cli("preprocess", "--target", server.target, "--model", QWEN, str(path))
    again = run_cli("preprocess", "--target", server.target, "--model", QWEN, str(path))
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert "HxW 40x60" in first.stdout and "cached" not in first.stdout
    assert "cached" in again.stdout
