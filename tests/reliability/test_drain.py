"""The drain as a router sees it, on a real server and a real SIGTERM: health turns
NOT_SERVING at once; for ``--drain-delay`` seconds every call is still served, on old
and new connections; then new calls get UNAVAILABLE from a port that still answers;
a call in flight across the whole delay finishes; nothing is CANCELLED but a call that
reaches the port in the instant it closes (gRPC core cancels a call it has received but
not yet handed to the server, grpc/grpc#41785: at most one per client, all sent after the
delay, none processed); the process exits 0. Times are taken around the events, with
margins for a loaded machine."""

from __future__ import annotations

import http.server
import io
import signal
import socketserver
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from PIL import Image

import imagegen
import procs
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc

DELAY = 2.0
SLOW_S = 3.5  # the in-flight call's fetch: longer than the delay
OWN = [("grpc.use_local_subchannel_pool", 1)]  # a connection of its own


def _png() -> bytes:
    b = io.BytesIO()
    Image.new("RGB", (56, 56), (10, 200, 30)).save(b, "PNG")
    return b.getvalue()


class _Slow(http.server.BaseHTTPRequestHandler):
    """A valid PNG whose body takes SLOW_S seconds to arrive."""

    body = _png()

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        pieces = 10
        step = -(-len(self.body) // pieces)
        for i in range(pieces):
            time.sleep(SLOW_S / pieces)
            self.wfile.write(self.body[i * step:(i + 1) * step])
            self.wfile.flush()

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_origin():
    httpd = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Slow)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/slow.png"
    httpd.shutdown()
    httpd.server_close()


def test_drain_timeline(tmp_path, slow_origin):
    server = procs.Server(tmp_path, "--drain-delay", str(DELAY), "--grace", "20", "--allow-private-media-hosts",
                          "--allowed-media-domains", "127.0.0.1", "--fetch-timeout", "30", "--cache-bytes", "0",
                          models=[procs.QWEN2], name="drain")
    image = imagegen.jpeg(96, 64, seed=2)
    request = pb.PreprocessRequest(model=procs.QWEN2, images=[pb.MediaItem(data=image)])
    records: list[tuple[float, float, str, str]] = []  # (sent, done, code, details)
    lock = threading.Lock()
    stop = threading.Event()

    def record(sent: float, code: str, details: str) -> None:
        with lock:
            records.append((sent, time.monotonic(), code, details))

    def steady(ch: grpc.Channel) -> None:  # an old connection, calling all along
        stub = pb_grpc.MultimodalPreprocessorStub(ch)
        while not stop.is_set():
            sent = time.monotonic()
            try:
                r = stub.Preprocess(request, timeout=10)
                stub.Release(pb.ReleaseRequest(handle=r.handle), timeout=10)
                record(sent, "OK", "")
            except grpc.RpcError as e:
                record(sent, e.code().name, e.details() or "")
            time.sleep(0.02)

    def fresh() -> None:  # a new connection for every call
        while not stop.is_set():
            sent = time.monotonic()
            with grpc.insecure_channel(server.target, procs.CHANNEL_OPTIONS + OWN) as ch:
                try:
                    pb_grpc.MultimodalPreprocessorStub(ch).ListModels(pb.ListModelsRequest(), timeout=5)
                    record(sent, "OK", "")
                except grpc.RpcError as e:
                    record(sent, e.code().name, e.details() or "")
            time.sleep(0.1)

    try:
        channels = [grpc.insecure_channel(server.target, procs.CHANNEL_OPTIONS + OWN) for _ in range(3)]
        watch_ch = grpc.insecure_channel(server.target, OWN)
        watch = health_pb2_grpc.HealthStub(watch_ch).Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        slow_ch = grpc.insecure_channel(server.target, procs.CHANNEL_OPTIONS + OWN)
        slow = pb_grpc.MultimodalPreprocessorStub(slow_ch).Preprocess.future(
            pb.PreprocessRequest(model=procs.QWEN2, images=[pb.MediaItem(url=slow_origin)]), timeout=60)
        threads = [threading.Thread(target=steady, args=(ch,), daemon=True) for ch in channels]
        threads.append(threading.Thread(target=fresh, daemon=True))
        for t in threads:
            t.start()
        procs.wait_until(lambda: len(records) >= 10, 30)
        time.sleep(0.2)
        t0 = time.monotonic()
        server.signal(signal.SIGTERM)
        status = next(watch).status
        not_serving_after = time.monotonic() - t0
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()

        slow_response = slow.result(timeout=60)  # in flight since before the signal, across the delay
        slow_done = time.monotonic() - t0
        code = server.wait(60)
        exited = time.monotonic() - t0
        stop.set()
        for t in threads:
            t.join(15)
    finally:
        stop.set()
        server.stop()

    assert code == 0, server.log_text()[-3000:]
    assert not_serving_after < 0.5
    assert slow_response.images[0].width == 56 and slow_done > DELAY
    codes = {c for _, _, c, _ in records}
    assert codes <= {"OK", "UNAVAILABLE", "CANCELLED"}, sorted(set((c, d) for _, _, c, d in records))
    cancelled = [r for r in records if r[2] == "CANCELLED"]
    assert len(cancelled) <= len(threads) and all(t0 + DELAY <= sent for sent, _, _, _ in cancelled), cancelled
    during = [r for r in records if t0 <= r[0] and r[1] <= t0 + DELAY - 0.3]
    assert len(during) >= 10 and all(c == "OK" for _, _, c, _ in during), during
    after = [r for r in records if t0 + DELAY + 0.5 <= r[0] and r[1] < t0 + exited]
    assert after, "no call landed between the delay and the exit"
    assert all(c in ("UNAVAILABLE", "CANCELLED") for _, _, c, _ in after), after
    # the port still answered them: the server's own refusal, not a closed port
    assert any("shutting down" in d for _, _, _, d in after), after
    log = server.log_text()
    assert "still answering for 2.0s (--drain-delay)" in log
    assert "ExecuteBatchError" not in log and "Traceback" not in log
