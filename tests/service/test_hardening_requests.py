"""Every request bounded before work; handles and media the caller's own; memory given
back after a burst. Real servers in separate processes on 127.0.0.1.

Each test is a finding of a probe run as an outside attacker would run it: on the code
before these fixes, 25M ids were parsed into GBs of lists, a too-large response was
refused only after its pixels were made, another token could Assemble or Release a
handle, a caller could tell from a hash lookup whether another had sent an image, a
100,000-character handle came back whole in the error, and RSS after a burst stayed at
its peak.
"""

from __future__ import annotations

import threading
import time

import blake3
import grpc
import numpy as np
import pytest

import imagegen
from hostile import proc_status, reset_peak
from servers import Server
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc.client import Client

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
TOKENS = ("token-of-a", "token-of-b")
MAX_IDS = 4096
IDS = [151652, 151655, 151653]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """Two tokens (two callers), a small id limit and a 3 MB send limit."""
    d = tmp_path_factory.mktemp("guarded")
    (d / "tokens").write_text("\n".join(TOKENS) + "\n")
    proc = Server(d, "--auth-token-file", str(d / "tokens"), "--max-input-ids", str(MAX_IDS),
                  "--max-send-bytes", str(3 << 20), "--log-level", "WARNING", models=[QWEN2])
    yield proc
    proc.stop()


def client(server, token: str) -> Client:
    return Client(server.target, timeout=60, token=token)


def decoded(c: Client) -> int:
    """Images the server decoded (its WorkStats)."""
    (stats,) = c.stats().values()
    return stats.work.images_decoded


def raw_call(target: str, method: str, data: bytes, token: str, response):
    """``method`` with a request given as its serialized bytes."""
    opts = [("grpc.max_send_message_length", -1), ("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(target, opts) as ch:
        call = ch.unary_unary(f"/sglang_mm.v1.MultimodalPreprocessor/{method}", request_serializer=lambda b: b,
                              response_deserializer=response.FromString)
        return call(data, timeout=60, metadata=[("authorization", f"Bearer {token}")])


def packed_ids_request(count: int) -> bytes:
    """A PreprocessRequest for QWEN2 of ``count`` ids (151655, three varint bytes each),
    built from bytes (a Python list of 25M ints would take the client GBs)."""
    head = pb.PreprocessRequest(model=QWEN2).SerializeToString()
    one = np.frombuffer(bytes([0xA7, 0xA0, 0x09]), np.uint8)  # varint of 151655
    body = np.tile(one, count).tobytes()
    return head + bytes([3 << 3 | 2]) + _varint(len(body)) + body


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


@pytest.mark.parametrize("method,response", [("Preprocess", pb.PreprocessResponse), ("Plan", pb.PlanResponse)])
def test_25m_ids_refused_from_their_count(guarded, method, response):
    data = packed_ids_request(25_000_000)
    reset_peak(guarded.p.pid)
    before = proc_status(guarded.p.pid)
    with pytest.raises(grpc.RpcError) as e:
        raw_call(guarded.target, method, data, TOKENS[0], response)
    after = proc_status(guarded.p.pid)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"25000000 token ids, over the limit of {MAX_IDS} (serve --max-input-ids)" in e.value.details()
    # the 75 MB request itself, not its ids as lists (GBs before)
    assert after["VmHWM"] - before["VmRSS"] < 300 << 20, (before, after)


def test_expanded_ids_refused_before_any_pixel_work(guarded):
    ids = [1] * (MAX_IDS - 10) + IDS
    image = imagegen.jpeg(300, 400, seed=1)  # 150 tokens: the expansion passes the limit
    with client(guarded, TOKENS[0]) as c:
        steps = decoded(c)
        with pytest.raises(grpc.RpcError) as e:
            c.preprocess(QWEN2, [image], ids)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "the expanded input_ids would hold" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            c.plan(QWEN2, [image], ids)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert c.plan(QWEN2, [image], ids[-60:]).input_ids_length > 0  # a short prompt is fine
        assert decoded(c) == steps


def test_response_size_refused_before_any_pixel_work(guarded):
    image = imagegen.jpeg(720, 1280, seed=2)  # 22.5 MB of float32 pixels, 5.6 MB raw: over 3 MB
    with client(guarded, TOKENS[0]) as c:
        steps = decoded(c)
        for backend in ("vllm", "sglang"):
            with pytest.raises(grpc.RpcError) as e:
                c.preprocess(QWEN2, [image], IDS, backend=backend)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "over this server's send limit" in e.value.details() and "not decoded" in e.value.details()
        assert decoded(c) == steps
        c.preprocess(QWEN2, [image], IDS, backend="trtllm")  # the encoded image only: within the limit


def test_a_handle_is_its_callers_alone(guarded):
    image = imagegen.jpeg(90, 140, seed=3)
    with client(guarded, TOKENS[0]) as a, client(guarded, TOKENS[1]) as b:
        handle = a.preprocess(QWEN2, [image], IDS).handle
        with pytest.raises(grpc.RpcError) as e:
            b.assemble(handle, "vllm")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert "call Preprocess again" in e.value.details()
        assert b.release(handle) is False
        assert a.assemble(handle, "vllm").vllm.pixel_values.shape  # still there, for its caller
        assert a.release(handle) is True


def test_a_long_handle_is_not_echoed(guarded):
    with client(guarded, TOKENS[0]) as c:
        for handle in ("h" * 100_000, "x" * 50 + "@" + "r" * 100_000 + ":0"):
            with pytest.raises(grpc.RpcError) as e:
                c.assemble(handle, "vllm")
            assert e.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION)
            assert len(e.value.details()) < 400


def test_hash_lookups_and_cached_are_per_caller(guarded):
    image = imagegen.jpeg(100, 120, seed=4)
    digest = blake3.blake3(image).hexdigest()
    by_id = pb.MediaItem(media_id=digest)
    with client(guarded, TOKENS[0]) as a, client(guarded, TOKENS[1]) as b:
        with pytest.raises(grpc.RpcError) as e:
            b.plan(QWEN2, [by_id], IDS)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert not a.preprocess(QWEN2, [image], IDS, backend="trtllm").images[0].cached
        assert a.preprocess(QWEN2, [image], IDS, backend="trtllm").images[0].cached  # its own repeat
        assert a.plan(QWEN2, [by_id], IDS).images[0].cached
        # B learns nothing of A's upload: its hash is still not held, nor the result cached, for B
        with pytest.raises(grpc.RpcError) as e:
            b.plan(QWEN2, [by_id], IDS)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert not b.plan(QWEN2, [image], IDS).images[0].cached
        assert not b.preprocess(QWEN2, [image], IDS, backend="trtllm").images[0].cached
        assert b.plan(QWEN2, [by_id], IDS).images[0].cached  # once B has sent it, for B


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """No tokens (each connection a caller), the media store shared."""
    proc = Server(tmp_path_factory.mktemp("shared"), "--shared-media-store", "--log-level", "WARNING",
                  models=[QWEN2])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def uncached(tmp_path_factory):
    """No preprocessing cache, whose 1 GiB would be steady-state memory of its own."""
    proc = Server(tmp_path_factory.mktemp("uncached"), "--cache-bytes", "0", "--log-level", "WARNING",
                  models=[QWEN2])
    yield proc
    proc.stop()


def test_a_shared_store_answers_every_caller(shared):
    image = imagegen.jpeg(100, 120, seed=5)
    digest = blake3.blake3(image).hexdigest()
    with Client(shared.target, timeout=60) as a:
        a.preprocess(QWEN2, [image], IDS, backend="trtllm")
    with Client(shared.target, timeout=60) as b:  # another connection: another caller
        info = b.plan(QWEN2, [pb.MediaItem(media_id=digest)], IDS).images[0]
        assert info.cached and info.hash == digest


def test_memory_is_given_back_after_a_burst(uncached):
    photo = imagegen.jpeg(1080, 1920, seed=6)
    pid = uncached.p.pid
    with Client(uncached.target, timeout=120) as c:
        for k in range(4):  # steady state: calls one at a time, its RSS as it serves them
            c.preprocess(QWEN2, [photo + bytes([k])], IDS, backend="vllm")
        steady = proc_status(pid)["VmRSS"]
        errors: list = []

        def client_thread(t: int) -> None:
            with Client(uncached.target, timeout=120) as own:
                for k in range(4):
                    try:
                        own.preprocess(QWEN2, [photo + bytes([t, k, 7])], IDS, backend="vllm")
                    except grpc.RpcError as e:
                        if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:  # busy is fine
                            errors.append(e)

        threads = [threading.Thread(target=client_thread, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        peak = proc_status(pid)["VmHWM"]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and proc_status(pid)["VmRSS"] > 1.25 * steady:
            time.sleep(0.25)
        after = proc_status(pid)["VmRSS"]
    assert peak > 1.25 * steady  # the burst did take more
    assert after <= 1.25 * steady, (steady >> 20, peak >> 20, after >> 20)
