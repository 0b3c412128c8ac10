"""Content-Encoding: the fetcher asks for ``identity``; a server that compresses anyway is
inflated in bounded steps, so a small compressed body cannot expand past
``max_remote_bytes`` in memory (httpx would inflate a whole network read at once: a
64 KiB gzip read of zeros is 64 MiB). Encodings that cannot be bounded are refused.
"""

from __future__ import annotations

import tracemalloc
import zlib
from http.server import BaseHTTPRequestHandler

import pytest

from fetch_helpers import fetch, fetch_error
from media_servers import payload, serve
from sglang_mm_grpc.core.errors import Code
from sglang_mm_grpc.media import FetchPolicy

MiB = 1 << 20


def _compress(blocks, wbits: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return b"".join([c.compress(b) for b in blocks] + [c.flush()])


GZIP_BOMB = _compress((bytes(MiB) for _ in range(256)), 16 + zlib.MAX_WBITS)  # 256 MiB of zeros, ~250 KB
DEFLATE_BOMB = _compress((bytes(MiB) for _ in range(256)), zlib.MAX_WBITS)
CONTENT = payload(300_000)
GZIP_CONTENT = _compress([CONTENT], 16 + zlib.MAX_WBITS)
ROUTES = {
    "/gzip-bomb": ("gzip", GZIP_BOMB),
    "/deflate-bomb": ("deflate", DEFLATE_BOMB),
    "/gzip": ("gzip", GZIP_CONTENT),
    "/x-gzip": ("x-gzip", GZIP_CONTENT),
    "/deflate": ("deflate", _compress([CONTENT], zlib.MAX_WBITS)),
    "/identity": ("identity", CONTENT),
    "/gzip-truncated": ("gzip", GZIP_CONTENT[: len(GZIP_CONTENT) // 2]),
    "/gzip-corrupt": ("gzip", GZIP_CONTENT[:20] + bytes(200) + GZIP_CONTENT[220:]),
    "/br": ("br", b"\x1b\xff\xff\x0f"),
    "/zstd": ("zstd", b"\x28\xb5\x2f\xfd"),
    "/gzip-twice": ("gzip, gzip", _compress([GZIP_CONTENT], 16 + zlib.MAX_WBITS)),
    "/compress": ("compress", b"\x1f\x9d"),
    "/gzip-two-members": ("gzip", GZIP_CONTENT + GZIP_CONTENT),
    "/gzip-whole-steps": ("gzip", _compress([payload(3 * MiB)], 16 + zlib.MAX_WBITS)),  # inflates in whole steps
}


# A deflate stream of empty stored blocks: endless input that never inflates to a byte.
EMPTY_BLOCKS = b"\x00\x00\x00\xff\xff" * 400_000  # 2 MB on the wire, nothing inflated
ROUTES["/deflate-empty-blocks"] = ("deflate", b"\x78\x9c" + EMPTY_BLOCKS)


class Encoded(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):  # the fetcher hung up mid-body, as it should
            pass

    def do_GET(self) -> None:
        encoding, body = ROUTES[self.path]
        self.send_response(200)
        self.send_header("Content-Encoding", encoding)
        if self.path == "/deflate-empty-blocks":  # no length: read until the connection closes
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


@pytest.fixture(scope="module")
def url():
    with serve(Encoded) as (port, _log):
        yield lambda path: f"http://127.0.0.1:{port}{path}"


def _policy(**kw) -> FetchPolicy:
    return FetchPolicy(allow_private_hosts=True, **kw)


def _error_and_peak(url: str, max_remote_bytes: int):
    """The fetch's error, and the peak of memory traced while it ran."""
    tracemalloc.start()
    try:
        err = fetch_error([url], _policy(max_remote_bytes=max_remote_bytes))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return err, peak


@pytest.mark.parametrize("path", ["/gzip-bomb", "/deflate-bomb"])
def test_compression_bomb_stops_at_the_cap_in_memory(url, path):
    err, peak = _error_and_peak(url(path), MiB)
    assert err.code is Code.RESOURCE_EXHAUSTED and "body exceeds max_remote_bytes (1 MiB)" in err.message
    assert peak < 8 * MiB, f"{peak / MiB:.0f} MiB held for a 1 MiB cap"


def test_bomb_under_a_large_cap_holds_little_more_than_the_cap(url):
    """Inflated in small steps: the peak is the kept bytes plus one step, not twice the cap."""
    err, peak = _error_and_peak(url("/gzip-bomb"), 32 * MiB)
    assert err.code is Code.RESOURCE_EXHAUSTED and "(32 MiB)" in err.message
    assert peak < 40 * MiB, f"{peak / MiB:.0f} MiB held for a 32 MiB cap"


def test_wire_bytes_are_capped_even_when_nothing_inflates(url):
    err = fetch_error([url("/deflate-empty-blocks")], _policy(max_remote_bytes=MiB))
    assert err.code is Code.RESOURCE_EXHAUSTED and "body exceeds max_remote_bytes (1 MiB)" in err.message


@pytest.mark.parametrize("path", ["/gzip", "/x-gzip", "/deflate", "/identity"])
def test_encoded_body_is_the_content(url, path):
    assert fetch([url(path)], _policy()) == [CONTENT]


def test_body_of_whole_inflate_steps_is_complete(url):
    assert fetch([url("/gzip-whole-steps")], _policy()) == [payload(3 * MiB)]


def test_budget_is_charged_the_inflated_size(url):
    err = fetch_error([url("/gzip"), url("/gzip")], _policy(request_byte_budget=500_000))
    assert err.code is Code.RESOURCE_EXHAUSTED and "request_byte_budget" in err.message


@pytest.mark.parametrize(
    "path, cause",
    [
        ("/gzip-truncated", "truncated gzip body"),
        ("/gzip-corrupt", "corrupt gzip body"),
        ("/gzip-two-members", "data after the end of the gzip body"),
        ("/br", "unsupported Content-Encoding 'br'"),
        ("/zstd", "unsupported Content-Encoding 'zstd'"),
        ("/gzip-twice", "unsupported Content-Encoding 'gzip, gzip'"),
        ("/compress", "unsupported Content-Encoding 'compress'"),
    ],
)
def test_bad_or_unsupported_encoding_is_unavailable(url, path, cause):
    err = fetch_error([url(path)], _policy())
    assert err.code is Code.UNAVAILABLE and cause in err.message, err.message
