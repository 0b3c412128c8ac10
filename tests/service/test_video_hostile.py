"""Hostile videos through a real server (a separate process on 127.0.0.1): every file of
``videogen.hostile()`` (truncated and corrupt containers, a header claiming 10^7 frames,
100000 x 100000 frames, a zero frame rate, audio only, a container that makes the decoder
spin, ...) and a 10 GB body from a local HTTP server that streams zeros (with and without
a Content-Length) each get their status quickly; the server's RSS stays bounded, it stays
SERVING, and it preprocesses a good video afterwards. Also: a video for a model without
video, a backend that takes none, sources the media store does not hold, and a server
started without PyAV (``av`` blocked in its interpreter) answering FAILED_PRECONDITION
with how to enable video.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest

pytest.importorskip("av")

import videogen  # noqa: E402
from servers import Server  # noqa: E402
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb  # noqa: E402
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc  # noqa: E402

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
LLAVA = "llava-hf/llava-1.5-7b-hf"
VIDEO_MAX = 16 << 20
TEN_GB = 10 << 30
#: Where the service refuses a file before the decoder sees it, in its own words.
BEFORE_DECODING = {"empty": "empty source"}


class _Zeros(BaseHTTPRequestHandler):
    """/zeros: 10 GB of zeros without a Content-Length (read until cut off); /zeros-cl:
    the same announced by its Content-Length. Counts what it sent."""

    sent = 0

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "video/mp4")
        if self.path == "/zeros-cl":
            self.send_header("Content-Length", str(TEN_GB))
        self.end_headers()
        chunk = bytes(1 << 16)
        try:
            for _ in range(TEN_GB // len(chunk)):
                self.wfile.write(chunk)
                type(self).sent += len(chunk)
        except OSError:
            pass  # the server hung up at its limit

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def zeros():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Zeros)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = Server(tmp_path_factory.mktemp("video-hostile"), "--allow-private-hosts", "--video-max-bytes",
                  str(VIDEO_MAX), "--video-decode-timeout", "5", "--log-level", "WARNING", models=[QWEN2, LLAVA])
    yield proc
    proc.stop()


def call(target: str, *videos: pb.MediaItem, model: str = QWEN2, timeout: float = 60, **fields):
    with grpc.insecure_channel(target) as ch:
        req = pb.PreprocessRequest(model=model, input_ids=[1, *([151652, 151656, 151653] * len(videos)), 2],
                                   videos=list(videos), video_options=pb.VideoOptions(fps=2), **fields)
        return pb_grpc.MultimodalPreprocessorStub(ch).Preprocess(req, timeout=timeout)


def refused(target: str, *videos, **kw) -> tuple[grpc.RpcError, float]:
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as e:
        call(target, *videos, **kw)
    return e.value, time.monotonic() - t0


def test_every_hostile_video_gets_its_status_quickly(server):
    good = videogen.clip(frames=12, fps=24, size=(64, 96))
    assert len(call(server.target, pb.MediaItem(data=good)).videos) == 1  # warm, and the baseline
    rss0 = server.rss_bytes()
    seen = {}
    for name, data in videogen.hostile().items():
        want = videogen.HOSTILE.get(name)
        assert want is not None, f"videogen.hostile() has {name!r} without an expected status"
        err, took = refused(server.target, pb.MediaItem(data=data))
        seen[name] = (err.code().name, round(took, 2))
        assert err.code().name == want[0], (name, err.details())
        assert BEFORE_DECODING.get(name, want[1]) in err.details(), (name, err.details())
        assert err.details().startswith("video 0: "), (name, err.details())
        assert took < 10, (name, took)
        assert server.health() == "SERVING", name
    grown = server.rss_bytes() - rss0
    assert grown < 300 << 20, (grown, seen)
    out = call(server.target, pb.MediaItem(data=good))
    assert out.videos[0].grid == [2, 4, 6] and out.video_token_id == 151656


@pytest.mark.parametrize("path", ["/zeros", "/zeros-cl"])
def test_a_10gb_body_is_cut_off_at_the_video_limit(server, zeros, path):
    rss0 = server.rss_bytes()
    _Zeros.sent = 0
    err, took = refused(server.target, pb.MediaItem(data=videogen.clip(frames=4)), pb.MediaItem(url=zeros + path))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = err.details()
    assert details.startswith("video 1: ") and "video_max_bytes (16 MiB)" in details, details
    if path == "/zeros":  # cut off while streaming: the bytes seen are named
        seen = int(details.rsplit(": ", 1)[1].split()[0])
        assert VIDEO_MAX < seen <= VIDEO_MAX + (1 << 20), details
    else:  # refused from the header, before any body byte is read
        assert f"Content-Length {TEN_GB}" in details
    assert _Zeros.sent < 200 << 20 and took < 10
    assert server.rss_bytes() - rss0 < 200 << 20
    assert server.health() == "SERVING"


def test_a_model_without_video_is_named(server):
    err, _ = refused(server.target, pb.MediaItem(data=videogen.clip(frames=4)), model=LLAVA)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert repr(LLAVA) in err.details() and "takes no video" in err.details() and QWEN2 in err.details()


@pytest.mark.parametrize("backend", [pb.BACKEND_SGLANG, pb.BACKEND_TRTLLM])
def test_a_backend_without_video_refuses_before_fetching(server, zeros, backend):
    _Zeros.sent = 0
    err, _ = refused(server.target, pb.MediaItem(url=zeros + "/zeros"), backend=backend)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "vLLM or TokenSpeed" in err.details()
    assert _Zeros.sent == 0  # nothing was fetched


def test_a_video_not_held_is_listed_under_its_own_key(server):
    err, _ = refused(server.target, pb.MediaItem(media_id="ab" * 32))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "video 0" in err.details()
    assert dict(err.trailing_metadata())["sglang-mm-missing-videos"] == "0"


def test_without_av_a_video_says_how_to_enable_it(tmp_path):
    """``av`` blocked in the server's interpreter (a sitecustomize that puts None in
    sys.modules['av']): images still work, a video is FAILED_PRECONDITION naming the extra."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['av'] = None\n")
    import os

    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    proc = Server(tmp_path, "--log-level", "WARNING", models=[QWEN2], env=env)
    try:
        err, _ = refused(proc.target, pb.MediaItem(data=videogen.clip(frames=4)))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "pip install 'sglang-mm-grpc[video]'" in err.details(), err.details()
        import imagegen

        with grpc.insecure_channel(proc.target) as ch:
            ok = pb_grpc.MultimodalPreprocessorStub(ch).Preprocess(pb.PreprocessRequest(
                model=QWEN2, images=[pb.MediaItem(data=imagegen.jpeg(64, 64, seed=1))]), timeout=60)
        assert len(ok.images) == 1
    finally:
        proc.stop()


def test_the_client_names_the_video_a_failure_belongs_to(server):
    """The client's error carries ``kind`` and ``item`` from the status, as the in-process one does."""
    from sglang_mm_grpc import Code, PreprocessError
    from sglang_mm_grpc.client import Client

    good = videogen.clip(frames=12, fps=24, size=(64, 96))
    with Client(server.target, timeout=60) as c, pytest.raises(PreprocessError) as e:
        c.preprocess(QWEN2, [], input_ids=[1, *[151652, 151656, 151653] * 2, 2],
                     videos=[good, videogen.hostile()["corrupt"]], video_options={"fps": 2})
    assert (e.value.kind, e.value.item, e.value.code) == ("video", 1, Code.INVALID_ARGUMENT)
    assert e.value.message.startswith("video 1: ") and e.value.detail == e.value.message.removeprefix("video 1: ")
