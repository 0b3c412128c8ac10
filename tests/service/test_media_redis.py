"""Media ids across replicas (``serve --media-store-redis``): real servers sharing one real
redis-server on 127.0.0.1 (persistence off, ``tests/redis_server.py``).

Replicas A and B scope ids by bearer token (alice, bob); C shares its store across callers
(``--shared-media-store``) and reads the same namespace, its URL from the environment. An id sent to A resolves on B for
its caller alone; bytes changed in Redis are refused; Redis stopped costs NOT_FOUND, never
INTERNAL, and a restarted Redis serves again.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

import imagegen
from redis_server import Redis, redis
from servers import Server, free_port, run_cli, wait_serving, wait_until
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc.cli.remote import _media_redis_problem
from sglang_mm_grpc.client import Client, media_item, missing_media
from sglang_mm_grpc.core.hashing import content_hash
from sglang_mm_grpc.server.app import ServerConfig
from sglang_mm_grpc.service import media_remote
from sglang_mm_grpc.service.media_remote import RemoteMedia

QWEN = "Qwen/Qwen2-VL-7B-Instruct"
NAMESPACE = "tests"
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
METRICS_PORT = free_port()  # B's
REMOTE = ("hits", "misses", "errors", "invalid", "written", "dropped")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Redis, then A, B (scoped) and C (shared), started together."""
    d = tmp_path_factory.mktemp("media-redis")
    (d / "tokens").write_text("token-alice\ntoken-bob\n")
    store = Redis(d)
    common = ("--auth-token-file", str(d / "tokens"), "--media-store-redis-namespace", NAMESPACE,
              "--media-store-redis-ttl", "600")
    url = ("--media-store-redis", store.url)
    # C reads the URL from its environment, as a secret is given
    servers = {name: Server(d, *common, *extra, models=[QWEN], workers=1, name=name, wait=False, env=env)
               for name, extra, env in (
                   ("a", url, None), ("b", (*url, "--metrics-port", str(METRICS_PORT)), None),
                   ("c", ("--shared-media-store", "--media-store-redis-env", "MEDIA_REDIS"),
                    {"MEDIA_REDIS": store.url}))}
    try:
        for s in servers.values():
            wait_serving(s.target, s)
        yield servers["a"], servers["b"], servers["c"], store
    finally:
        for s in servers.values():
            s.stop()
        store.stop()


def client(server: Server, who: str) -> Client:
    return Client(server.target, token=f"token-{who}", timeout=30, channel_options=OWN_CONNECTION)


def media(server: Server) -> pb.MediaStoreStats:
    with client(server, "alice") as c:
        return c.stats()[server.target].media


def send(server: Server, who: str, raw: bytes, bind_id: str = "") -> str:
    """Plan with the bytes (A keeps them and queues them for Redis); their hash once written."""
    before = media(server).remote_written
    with client(server, who) as c:
        c.plan(QWEN, [media_item(raw, bind_id=bind_id or None)])
    writes = 2 if bind_id else 1
    assert wait_until(lambda: media(server).remote_written >= before + writes, 10), media(server)
    return content_hash(raw)


def by_id(server: Server, who: str, media_id: str) -> pb.PlanResponse:
    with client(server, who) as c:
        return c.plan(QWEN, [pb.MediaItem(media_id=media_id)])


def redis_output_bytes(store: Redis) -> int:
    """What Redis has sent to its clients so far (its INFO counter)."""
    return int(redis.Redis(port=store.port).info("stats")["total_net_output_bytes"])


def not_found(server: Server, who: str, media_id: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        by_id(server, who, media_id)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value.details()
    assert missing_media(e.value) == [0]
    return e.value


def test_an_id_sent_to_one_replica_resolves_on_another_for_its_caller_alone(stack):
    a, b, _, _ = stack
    cat, dog = imagegen.jpeg(100, 150, seed=61), imagegen.jpeg(150, 100, seed=62)
    cat_hash = send(a, "alice", cat, bind_id="cat")
    dog_hash = send(a, "alice", dog)
    before = media(b)
    assert by_id(b, "alice", "cat").images[0].hash == cat_hash  # the binding, then the bytes
    assert by_id(b, "alice", dog_hash).images[0].hash == dog_hash
    after = media(b)
    assert (after.remote_hits - before.remote_hits, after.stored - before.stored) == (2, 2)
    # bob sent neither: alice's hash and alice's name mean nothing to him, on B as on A,
    # and his probes pull none of her bytes out of Redis ...
    sent_before = redis_output_bytes(stack[3])
    not_found(b, "bob", cat_hash)
    not_found(b, "bob", "cat")
    assert redis_output_bytes(stack[3]) - sent_before < len(cat) // 2
    not_found(a, "bob", dog_hash)
    assert media(b).remote_misses - after.remote_misses == 2
    # ... until he sends the bytes himself (to A), and then on B too
    send(a, "bob", dog)
    assert by_id(b, "bob", dog_hash).images[0].hash == dog_hash


def test_a_shared_store_resolves_hashes_across_callers_and_names_per_caller(stack):
    a, _, c, _ = stack
    bird = imagegen.jpeg(120, 90, seed=63)
    bird_hash = send(a, "alice", bird, bind_id="bird")
    assert by_id(c, "bob", bird_hash).images[0].hash == bird_hash
    not_found(c, "bob", "bird")  # a client id stays its caller's
    assert by_id(c, "alice", "bird").images[0].hash == bird_hash


def test_bytes_changed_in_redis_are_not_found_and_counted(stack):
    a, b, _, store = stack
    fish, other = imagegen.jpeg(90, 120, seed=64), imagegen.jpeg(90, 120, seed=65)
    fish_hash = send(a, "alice", fish)
    key = f"sglang-mm:media:v1:{NAMESPACE}:b:{fish_hash}"
    client = redis.Redis(port=store.port)
    assert client.get(key) == fish
    client.set(key, other, keepttl=True)
    before = media(b).remote_invalid
    not_found(b, "alice", fish_hash)
    assert media(b).remote_invalid == before + 1
    client.set(key, fish, keepttl=True)  # intact again: found
    assert by_id(b, "alice", fish_hash).images[0].hash == fish_hash


# Keeps Redis busy (every other client waits) for ARGV[1] seconds.
BUSY = """local t0 = redis.call('TIME')
repeat local t = redis.call('TIME') until (t[1] - t0[1]) + (t[2] - t0[2]) / 1e6 > tonumber(ARGV[1])
return 1"""


def test_a_slow_redis_costs_a_short_timeout(stack):
    a, b, _, store = stack
    lamb = imagegen.jpeg(100, 90, seed=69)
    lamb_hash = send(a, "alice", lamb)
    busy = threading.Thread(target=lambda: redis.Redis(port=store.port).eval(BUSY, 0, 1.5))
    before = media(b).remote_errors
    busy.start()
    try:
        time.sleep(0.2)  # the script runs
        t0 = time.monotonic()
        not_found(b, "alice", lamb_hash)
        assert time.monotonic() - t0 < 1.0
        assert media(b).remote_errors == before + 1
    finally:
        busy.join()
    assert wait_until(lambda: _resolves(b, "alice", lamb_hash), 10)


def test_redis_down_answers_not_found_promptly_and_serves_again_once_back(stack):
    a, b, _, store = stack
    goat, horse = imagegen.jpeg(100, 100, seed=66), imagegen.jpeg(110, 100, seed=67)
    goat_hash = send(a, "alice", goat)
    store.stop()
    try:
        before = media(b).remote_errors
        for _ in range(3):  # the first lookup fails at once (refused), the next are skipped
            t0 = time.monotonic()
            not_found(b, "alice", goat_hash)
            assert time.monotonic() - t0 < 2.0
        assert media(b).remote_errors >= before + 3
        with client(b, "alice") as c:  # bytes still work, and so do its own ids
            assert c.plan(QWEN, [media_item(horse, bind_id="horse")]).images[0].hash == content_hash(horse)
        assert by_id(b, "alice", "horse").images[0].hash == content_hash(horse)
    finally:
        store.start()  # the same port, empty (no persistence)
    # A's writer and B's reader reconnect by themselves
    zebra = imagegen.jpeg(100, 120, seed=68)
    zebra_hash = content_hash(zebra)
    with client(a, "alice") as c:
        c.plan(QWEN, [zebra])
    assert wait_until(lambda: _resolves(b, "alice", zebra_hash), 10)


def test_writes_past_the_queue_are_dropped_and_counted_while_redis_is_busy(stack):
    """The writer queue is bounded: while Redis holds the writer (a script runs), writes
    past ``QUEUE_ITEMS`` are dropped at once and counted, and the rest are written after."""
    store = stack[3]
    remote = RemoteMedia(store.url, max_item_bytes=1 << 20, namespace="queue-test")
    busy = threading.Thread(target=lambda: redis.Redis(port=store.port).eval(BUSY, 0, 1.0))
    try:
        busy.start()
        time.sleep(0.2)  # the script runs
        remote.bind("alice", "first", "0" * 64)
        assert wait_until(lambda: not remote._queue, 5)  # the writer took it and waits on Redis
        t0 = time.monotonic()
        for n in range(media_remote.QUEUE_ITEMS + 100):
            remote.bind("alice", f"id{n}", "0" * 64)
        assert time.monotonic() - t0 < 0.5  # never blocks the caller
        assert remote.dropped == 100
        busy.join()
        assert wait_until(lambda: remote.written == media_remote.QUEUE_ITEMS + 1, 20), remote.counts()
    finally:
        busy.join()
        asyncio.run(remote.aclose())


def test_prometheus_counts_the_shared_tier_as_get_stats_does(stack):
    _, b, _, _ = stack
    request = urllib.request.Request(f"http://127.0.0.1:{METRICS_PORT}/metrics",
                                     headers={"Authorization": "Bearer token-alice"})
    text = urllib.request.urlopen(request, timeout=5).read().decode()
    samples = {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}
    stats = media(b)
    seen = {k: samples[f"sglang_mm_media_remote_{k}_total"] for k in REMOTE}
    assert seen == {k: getattr(stats, f"remote_{k}") for k in REMOTE}
    assert all(seen[k] > 0 for k in ("hits", "misses", "errors", "invalid", "dropped")), seen


def _resolves(server: Server, who: str, media_id: str) -> bool:
    try:
        return by_id(server, who, media_id).images[0].hash == media_id
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e.details()
        return False


def test_serve_refuses_media_store_redis_options_that_cannot_work():
    r = run_cli("serve", "--port", "0", "--media-store-redis", "127.0.0.1:6379")
    assert r.returncode == 2 and "redis://, rediss:// or unix:// URL" in r.stderr, r.stderr
    r = run_cli("serve", "--port", "0", "--media-store-redis-env", "SGLANG_MM_TEST_UNSET_VARIABLE")
    assert r.returncode == 2 and "$SGLANG_MM_TEST_UNSET_VARIABLE is not set or empty" in r.stderr, r.stderr
    r = run_cli("serve", "--port", "0", "--media-store-redis", "redis://x/0", "--media-store-redis-env", "HOME")
    assert r.returncode == 2 and "not both" in r.stderr, r.stderr
    url = "redis://127.0.0.1:1/0"
    for config, message in ((ServerConfig(media_store_redis=url, media_store_bytes=0), "needs a media store"),
                            (ServerConfig(media_store_redis=url, media_store_redis_namespace="a b"),
                             "media store namespace 'a b'"),
                            (ServerConfig(media_store_redis=url, media_store_redis_ttl_s=0), "ttl must be positive"),
                            (ServerConfig(media_store_redis=url, media_store_redis_timeout_s=0),
                             "timeout must be positive")):
        assert message in _media_redis_problem(config)
    assert _media_redis_problem(ServerConfig(media_store_redis=url)) == ""
