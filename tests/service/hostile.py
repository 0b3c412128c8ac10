"""The hostile-input table and its harness, shared by ``test_hostile_table.py`` and
``scripts/hostile_rss.py``.

Two real server processes and one process of local HTTP servers (``hostile_http.py``):

``strict``  the defaults an internet-facing deployment runs with: private addresses
            refused, no local files, 64 images, 1.25 GiB, 64 MiB, 10 redirects; a
            fetch timeout of 3 s from ``--fetch-timeout`` (room for the 64 MiB bodies to
            pass the proxy on a loaded machine). It reaches the origin only
            through the forward proxy, as the "public" host ``PUBLIC``
            (``HTTP_PROXY`` set; ``NO_PROXY=localhost,127.0.0.1``, so those go direct
            and are refused at the socket's address check).
``open``    a trusted-network deployment with every limit set small from its flags:
            ``--allow-private-media-hosts``, ``--allowed-media-domains 127.0.0.1
            localhost``, ``--allowed-local-media-path ROOT``, 8 images, 4 MiB budget,
            2 MiB per fetch, 3 redirects, 2 fetches in flight, 4M pixels; the fetch
            timeout (2 s) from ``REQUEST_TIMEOUT``. ``HTTP_PROXY`` is set with
            ``NO_PROXY=127.0.0.1``: 127.0.0.1 goes direct, localhost through the proxy.

Nothing here opens a connection anywhere but 127.0.0.1: every other address in the
table is refused before any connection, and the only way out of either server is the
local proxy, whose log the cases check.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import stat
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence
from urllib.parse import urlsplit

import grpc
import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _p in (str(REPO / "tests"), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import imagegen  # noqa: E402
from hostile_http import PUBLIC, png_header  # noqa: E402
from servers import Server, free_port, health, wait_serving  # noqa: E402
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb  # noqa: E402
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc  # noqa: E402

QWEN2 = "Qwen/Qwen2-VL-7B-Instruct"
IMAGE_PAD = 151655
GOOD = imagegen.png(40, 60, seed=5)
MiB = 1 << 20
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * MiB),
    ("grpc.max_send_message_length", 64 * MiB),
    ("grpc.enable_http_proxy", 0),  # the test's own calls never go through a proxy
]
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "request_timeout")

STRICT_ARGS = ["--fetch-timeout", "3"]
OPEN_BUDGET = 4 * MiB
OPEN_MAX_REMOTE = 2 * MiB
OPEN_PIXELS = 4_000_000


# -- hostile images -------------------------------------------------------------------------


def _encode(im: Image.Image, fmt: str, **save) -> bytes:
    b = io.BytesIO()
    im.save(b, fmt, **save)
    return b.getvalue()


def jpeg_claiming(width: int, height: int) -> bytes:
    """A valid 16x16 JPEG whose SOF header is patched to claim width x height."""
    data = bytearray(_encode(Image.new("RGB", (16, 16), (10, 20, 30)), "JPEG"))
    i = 2
    while i < len(data):
        marker, seglen = data[i + 1], int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            data[i + 5 : i + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
            return bytes(data)
        i += 2 + seglen
    raise AssertionError("no SOF marker")


def gif_claiming(width: int, height: int) -> bytes:
    """A 4x4 GIF whose logical screen and frame claim width x height."""
    data = bytearray(_encode(Image.new("P", (4, 4)), "GIF"))
    data[6:10] = width.to_bytes(2, "little") + height.to_bytes(2, "little")
    j = data.index(b"\x2c", 13)  # image descriptor
    data[j + 5 : j + 9] = width.to_bytes(2, "little") + height.to_bytes(2, "little")
    return bytes(data)


def webp_claiming(width: int, height: int) -> bytes:
    """An extended WebP whose VP8X canvas claims width x height, holding a 4x4 image."""
    vp8l = _encode(Image.new("RGB", (4, 4)), "WEBP", lossless=True)[12:]
    vp8x = b"VP8X" + (10).to_bytes(4, "little") + bytes(4)
    vp8x += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    body = b"WEBP" + vp8x + vp8l
    return b"RIFF" + len(body).to_bytes(4, "little") + body


def bmp_claiming(width: int, height: int) -> bytes:
    data = bytearray(_encode(Image.new("RGB", (4, 4)), "BMP"))
    data[18:26] = width.to_bytes(4, "little", signed=True) + height.to_bytes(4, "little", signed=True)
    return bytes(data)


def png16_gray() -> bytes:
    return _encode(Image.fromarray(np.arange(35, dtype=np.uint16).reshape(5, 7) * 1000), "PNG")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- the table ------------------------------------------------------------------------------


@dataclass
class Env:
    """What cases need to build their sources: ports and the local media layout."""

    origin: int
    proxy: int
    root: Path  # the open server's --allowed-local-media-path
    outside: Path  # a directory beside it, outside the root
    closed_port: int

    def o(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.origin}{path}"


EMPTY_ITEM = object()  # a MediaItem with neither url nor data set
ANY = "any"

Text = "str | Callable[[Env], str]"


@dataclass(frozen=True)
class Case:
    id: str
    server: str  # "strict" or "open"
    sources: Callable[[Env], list]
    code: str  # grpc.StatusCode name
    phrases: tuple = ()  # each (str or Env -> str) must be in the message
    # The message starts with "image {item}: "; None: a request-level failure (no image
    # named); ANY: some image (which one depends on which concurrent fetch fails first).
    item: "int | None | str" = 0
    absent: tuple = ()  # must not be in the message (credentials, query strings)
    input_ids: list | None = None
    model: str = QWEN2
    proxy_never_to: tuple = ()  # hosts no request through the proxy may target
    origin_never_got: tuple = ()  # paths the origin must not have been asked for
    proxy_got: tuple = ()  # hosts some request through the proxy must have targeted


def S(id, sources, code, *phrases, **kw) -> Case:
    return Case(id, "strict", sources if callable(sources) else (lambda e, s=sources: s), code, phrases, **kw)


def O(id, sources, code, *phrases, **kw) -> Case:
    return Case(id, "open", sources if callable(sources) else (lambda e, s=sources: s), code, phrases, **kw)


INVALID, EXHAUSTED, DENIED = "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "PERMISSION_DENIED"
DEADLINE, UNAVAILABLE, NOT_FOUND = "DEADLINE_EXCEEDED", "UNAVAILABLE", "NOT_FOUND"
BOMB = ("pixels, over the limit of 67108864 (max_image_pixels)",)

CASES: list[Case] = [
    # -- bytes that are not (acceptable) images ----------------------------------------------
    S("garbage_bytes", [GOOD, b"this is not an image"], INVALID, "not a decodable image", item=1),
    S("empty_bytes", [b""], INVALID, "empty source"),
    S("empty_url", [""], INVALID, "empty source"),
    S("empty_media_item", [GOOD, EMPTY_ITEM], INVALID, "empty MediaItem", item=1),
    S("truncated_png", [GOOD, GOOD, GOOD[: len(GOOD) // 2]], INVALID, "truncated", item=2),
    S("truncated_jpeg", [imagegen.jpeg(64, 64)[:400]], INVALID, "not a decodable image"),
    S("png_16bit_rgb", [imagegen.sixteen_bit_png_rgb()], INVALID, "more than 8 bits"),
    S("png_16bit_gray", [png16_gray()], INVALID, "mode I;16", "more than 8 bits"),
    S("png_zero_width", [png_header(0, 10)], INVALID, "not a decodable image"),
    S("tiff_not_accepted", [_encode(Image.new("RGB", (8, 8)), "TIFF")], INVALID, "format TIFF is not accepted"),
    S("ppm_not_accepted", [b"P6 4 4 255\n" + bytes(48)], INVALID, "format PPM is not accepted"),
    S("svg", [b'<svg xmlns="http://www.w3.org/2000/svg" width="99999" height="99999"/>'], INVALID, "not a decodable image"),
    # -- decompression bombs: headers claiming huge sizes, tiny bodies ------------------------
    S("bomb_png_100k", [GOOD, png_header(100_000, 100_000)], EXHAUSTED, "10000000000 pixels", *BOMB, item=1),
    S("bomb_png_2g", [png_header(2**31 - 1, 2**31 - 1)], EXHAUSTED, *BOMB),
    S("bomb_jpeg_65500", [jpeg_claiming(65500, 65500)], EXHAUSTED, "4290250000 pixels", *BOMB),
    S("bomb_gif_65535", [gif_claiming(65535, 65535)], EXHAUSTED, *BOMB),
    S("bomb_webp_16k", [webp_claiming(16384, 16384)], EXHAUSTED, "268435456 pixels", *BOMB),
    S("bomb_bmp_100k", [bmp_claiming(100_000, -100_000)], EXHAUSTED, *BOMB),
    S("bomb_jpeg_9000_ours", [jpeg_claiming(9000, 9000)], EXHAUSTED, "9000x9000 = 81000000", *BOMB),
    S("bomb_as_data_url", ["data:image/png;base64," + b64(png_header(100_000, 100_000))], EXHAUSTED, *BOMB),
    O("over_configured_pixels", [png_header(2100, 2000)], EXHAUSTED, f"over the limit of {OPEN_PIXELS} (max_image_pixels)"),
    S("aspect_ratio_over_200", [imagegen.png(1, 300)], INVALID, "aspect ratio"),
    # -- malformed inline sources -----------------------------------------------------------
    S("data_url_not_base64", ["data:image/png,\x89PNG"], INVALID, "only ';base64' data URLs"),
    S("data_url_bad_padding", ["data:image/png;base64,iVBORw0KGgo"], INVALID, "bad padding"),
    S("data_url_missing_comma", ["data:image/png;base64"], INVALID, "no ','"),
    S("data_url_bad_alphabet", ["data:image/png;base64,@@@@"], INVALID, "invalid base64"),
    S("data_url_padding_inside", ["data:image/png;base64,ab==cdef"], INVALID, "padding before the end"),
    S("data_url_meta_with_crlf", ["data:image/png\r\nX-Forged: 1;base64,AAA"], INVALID,
      "data:image/png\\r\\nX-Forged: 1;base64,", "bad padding", absent=("\r", "\n")),
    S("bare_base64_garbage", ["not base64 at all!"], INVALID, "not a URL, an absolute path or valid base64"),
    S("base64_of_text", [b64(b"hello, world! not an image")], INVALID, "not a decodable image"),
    # -- schemes and unparseable URLs -------------------------------------------------------
    S("scheme_ftp", ["ftp://127.0.0.1/a.png"], INVALID, "unsupported URL scheme 'ftp'"),
    S("scheme_gopher", ["gopher://127.0.0.1:70/_GET%20/"], INVALID, "unsupported URL scheme 'gopher'"),
    S("scheme_javascript", ["javascript:alert(1)"], INVALID, "unsupported URL scheme 'javascript'"),
    S("scheme_dict", ["dict://127.0.0.1:11211/stats"], INVALID, "unsupported URL scheme 'dict'"),
    S("url_without_host", ["http://"], INVALID, "no host"),
    S("url_bad_ipv6", ["http://[::1/x.png"], INVALID, "invalid URL"),
    # -- local files ------------------------------------------------------------------------
    S("file_url_without_flag", ["file:///etc/passwd"], DENIED, "no --allowed-local-media-path"),
    S("abs_path_without_flag", ["/etc/hostname"], DENIED, "local files are not allowed"),
    S("path_with_newline", ["/tmp/x\n2026-01-01 00:00:00 ERROR forged log line"], DENIED,
      "/tmp/x\\n2026-01-01", "local files are not allowed", absent=("\n",)),
    S("dev_zero_without_flag", ["/dev/zero"], DENIED, "local files are not allowed"),
    O("traversal_file_url", lambda e: [f"file://{e.root}/../outside/secret.png"], DENIED, "outside the allowed local media path"),
    O("traversal_path", lambda e: [GOOD, f"{e.root}/sub/../../outside/secret.png"], DENIED, "outside the allowed", item=1),
    O("symlink_escape", lambda e: [f"{e.root}/escape.png"], DENIED, "outside the allowed local media path"),
    O("symlink_to_etc_passwd", lambda e: [f"file://{e.root}/passwd"], DENIED, "outside the allowed local media path"),
    O("dev_zero", ["/dev/zero"], DENIED, "outside the allowed local media path"),
    O("symlink_to_dev_zero", lambda e: [f"{e.root}/zero"], DENIED, "outside the allowed local media path"),
    O("fifo", lambda e: [f"{e.root}/fifo"], DENIED, "not a regular file"),
    O("directory", lambda e: [f"{e.root}/sub"], DENIED, "not a regular file"),
    O("missing_file", lambda e: [f"{e.root}/missing.png"], NOT_FOUND, "no such file"),
    O("empty_file", lambda e: [f"{e.root}/empty.png"], INVALID, "file is empty"),
    O("sparse_100g_file", lambda e: [f"{e.root}/huge.png"], EXHAUSTED, "request_byte_budget (4 MiB)"),
    O("file_url_with_host", ["file://evil.example/etc/passwd"], INVALID, "must not name a host"),
    O("file_url_with_query", lambda e: [f"file://{e.root}/good.png?x=1"], INVALID, "must not have a query"),
    O("path_with_nul", lambda e: [f"{e.root}/good.png\x00.txt"], INVALID, "NUL byte"),
    # -- request limits -----------------------------------------------------------------------
    S("images_65_default", [GOOD] * 65, EXHAUSTED, "65 images", "limit of 64", item=None),
    O("images_9_flag", [GOOD] * 9, EXHAUSTED, "9 images", "limit of 8", item=None),
    O("budget_by_bytes", [GOOD, bytes(5 * MiB)], EXHAUSTED, "request_byte_budget (4 MiB) exceeded", item=1),
    O("budget_by_base64", [b64(bytes(5 * MiB))], EXHAUSTED, "request_byte_budget (4 MiB) exceeded"),
    O("budget_shared", [bytes(3 * MiB), "data:image/png;base64," + b64(bytes(2 * MiB))], EXHAUSTED, "request_byte_budget", item=1),
    O("budget_by_fetches", lambda e: [e.o("/bytes/1572864")] * 3, EXHAUSTED, "request_byte_budget (4 MiB)", item=ANY),
    # -- remote trouble (open server: loopback allowed, 127.0.0.1/localhost only) -----------
    O("http_404", lambda e: [e.o("/status/404")], UNAVAILABLE, "HTTP 404"),
    O("http_500", lambda e: [GOOD, e.o("/status/500")], UNAVAILABLE, "HTTP 500", item=1),
    O("redirect_loop", lambda e: [e.o("/loop")], UNAVAILABLE, "redirect loop"),
    O("too_many_redirects", lambda e: [e.o("/chain/4")], EXHAUSTED, "more than max_redirects (3)"),
    O("slow_drip", lambda e: [e.o("/drip")], DEADLINE, "timed out after 2 s (fetch_timeout_s (2 s))"),
    O("no_headers", lambda e: [e.o("/hang")], DEADLINE, "timed out after 2 s"),
    O("endless_body", lambda e: [e.o("/endless")], EXHAUSTED, "body exceeds max_remote_bytes (2 MiB)"),
    O("endless_chunked", lambda e: [e.o("/endless-chunked")], EXHAUSTED, "max_remote_bytes (2 MiB)"),
    O("content_length_10g", lambda e: [e.o("/huge-cl")], EXHAUSTED, "Content-Length 10737418240 exceeds max_remote_bytes"),
    O("content_length_lies_long", lambda e: [e.o("/overclaim")], UNAVAILABLE, "connection error while reading"),
    O("content_length_lies_short", lambda e: [e.o("/short-png")], INVALID, "truncated"),
    O("content_length_lies_tiny", lambda e: [e.o("/underclaim")], INVALID, "not a decodable image (10 bytes)"),
    O("content_length_not_a_number", lambda e: [e.o("/bad-cl")], UNAVAILABLE, "Content-Length"),
    O("empty_body", lambda e: [e.o("/empty")], UNAVAILABLE, "empty body"),
    O("html_body", lambda e: [e.o("/html")], INVALID, "not a decodable image"),
    O("gzip_bomb", lambda e: [e.o("/gzip-bomb")], EXHAUSTED, "body exceeds max_remote_bytes (2 MiB)"),
    O("content_encoding_br", lambda e: [e.o("/br")], UNAVAILABLE, "unsupported Content-Encoding 'br'"),
    O("bomb_over_http", lambda e: [e.o("/img/bomb.png")], EXHAUSTED, f"over the limit of {OPEN_PIXELS} (max_image_pixels)"),
    O("connection_refused", lambda e: [f"http://127.0.0.1:{e.closed_port}/a.png"], UNAVAILABLE, "connection failed"),
    O("domain_not_allowed", ["http://images.example/a.png"], DENIED, "host images.example is not in allowed_media_domains"),
    O("redirect_to_other_domain", lambda e: [e.o("/redirect?to=http://evil.example/x.png")], DENIED,
      "redirect 1 to http://evil.example/x.png", "not in allowed_media_domains"),
    O("redirect_to_ftp", lambda e: [e.o("/redirect?to=ftp://127.0.0.1/a.png")], DENIED, "redirect 1 to a 'ftp' URL"),
    O("redirect_to_file", lambda e: [e.o("/redirect?to=file:///etc/passwd")], DENIED, "redirect 1 to a 'file' URL"),
    O("credentials_and_query_redacted",
      lambda e: [e.o("/status/404?token=secret", host="user:hunter2@127.0.0.1")], UNAVAILABLE,
      lambda e: f"http://***@127.0.0.1:{e.origin}/status/404?…: HTTP 404", absent=("hunter2", "secret", "token", "user")),
    O("proxied_502_no_proxy_miss", lambda e: [e.o("/status/502", host="localhost")], UNAVAILABLE,
      lambda e: f"http://localhost:{e.origin}/status/502: HTTP 502", proxy_got=("localhost",)),
    # -- SSRF: refused before any connection (strict server) ---------------------------------
    S("loopback_literal", lambda e: [e.o("/img/good.png")], DENIED, "127.0.0.1 is a loopback address",
      origin_never_got=("/img/good.png",)),
    S("loopback_v6", lambda e: [f"http://[::1]:{e.origin}/img/good.png"], DENIED, "is a loopback address"),
    S("private_10", ["http://10.0.0.1/a.png"], DENIED, "10.0.0.1 is a private address"),
    S("private_192_168", ["https://192.168.1.1/a.png"], DENIED, "192.168.1.1 is a private address"),
    S("private_172_16", ["http://172.16.5.4:8080/a.png"], DENIED, "is a private address"),
    S("metadata_ip", ["http://169.254.169.254/latest/meta-data/"], DENIED, "169.254.169.254 is a link-local address"),
    S("metadata_ipv4_mapped", ["http://[::ffff:169.254.169.254]/latest/meta-data/"], DENIED, "link-local (IPv4-mapped)"),
    S("link_local_v6", ["http://[fe80::1%25eth0]/a.png"], DENIED, "link-local"),
    S("cgnat", ["http://100.64.0.1/a.png"], DENIED, "shared (CGNAT)"),
    S("multicast", ["http://224.0.0.1/a.png"], DENIED, "multicast"),
    S("unspecified", ["http://0.0.0.0/a.png"], DENIED, "unspecified"),
    S("reserved", ["http://240.0.0.1/a.png"], DENIED, "reserved"),
    S("ula_v6", ["http://[fd00::1]/a.png"], DENIED, "private"),
    S("six_to_four_loopback", ["http://[2002:7f00:1::]/a.png"], DENIED, "loopback (6to4)"),
    S("decimal_ip_loopback", lambda e: [f"http://2130706433:{e.origin}/img/good.png"], DENIED,
      "2130706433 resolves to 127.0.0.1, a loopback address", proxy_never_to=("2130706433",)),
    S("hex_ip_loopback", lambda e: [f"http://0x7f.1:{e.origin}/img/good.png"], DENIED, "resolves to 127.0.0.1",
      proxy_never_to=("0x7f.1",)),
    S("localhost_no_proxy_direct", lambda e: [e.o("/img/good.png", host="localhost")], DENIED,
      "localhost resolves to", "loopback", origin_never_got=("/img/good.png",)),
    S("redirect_to_metadata", [f"http://{PUBLIC}/redirect?to=http://169.254.169.254/latest/meta-data/iam"], DENIED,
      "redirect 1 to http://169.254.169.254/latest/meta-data/iam: 169.254.169.254 is a link-local address",
      proxy_never_to=("169.254.169.254",), proxy_got=(PUBLIC,)),
    S("redirect_to_loopback", lambda e: [f"http://{PUBLIC}/redirect?to=http://127.0.0.1:{e.origin}/img/good.png"], DENIED,
      "redirect 1 to", "loopback", origin_never_got=("/img/good.png",), proxy_never_to=("127.0.0.1",)),
    S("redirect_to_localhost_name", lambda e: [f"http://{PUBLIC}/redirect?to=http://localhost:{e.origin}/img/good.png"],
      DENIED, "redirect 1 to", "localhost resolves to", origin_never_got=("/img/good.png",),
      proxy_never_to=("localhost",)),
    S("redirect_secrets_redacted",
      [f"http://{PUBLIC}/redirect?to=http://admin:s3cret@169.254.169.254/x?sig=abc%26token=t0k"], DENIED,
      "redirect 1 to http://***@169.254.169.254/x?…", absent=("s3cret", "admin", "sig", "t0k"),
      proxy_never_to=("169.254.169.254",)),
    # -- remote trouble at the strict server's default limits, through the proxy ------------
    S("proxied_slow_drip", [f"http://{PUBLIC}/drip"], DEADLINE, "timed out after 3 s (fetch_timeout_s (3 s))"),
    S("proxied_endless_64mib", [f"http://{PUBLIC}/endless"], EXHAUSTED, "body exceeds max_remote_bytes (64 MiB)"),
    S("proxied_gzip_bomb_128mib", [f"http://{PUBLIC}/gzip-bomb"], EXHAUSTED, "body exceeds max_remote_bytes (64 MiB)"),
    S("proxied_content_length_10g", [f"http://{PUBLIC}/huge-cl"], EXHAUSTED, "exceeds max_remote_bytes (64 MiB)"),
    S("proxied_11_redirects", [f"http://{PUBLIC}/chain/11"], EXHAUSTED, "more than max_redirects (10)"),
    S("proxied_redirect_loop", [f"http://{PUBLIC}/loop"], UNAVAILABLE, "redirect loop"),
    S("proxied_404", [f"http://{PUBLIC}/status/404"], UNAVAILABLE, f"http://{PUBLIC}/status/404: HTTP 404"),
    # -- request-level mistakes ---------------------------------------------------------------
    S("unknown_model", [GOOD], NOT_FOUND, "unknown model 'no/such-model'", model="no/such-model", item=None),
    S("placeholder_mismatch", [GOOD, GOOD], INVALID, "placeholder", "2 image(s)", input_ids=[1, IMAGE_PAD, 2], item=None),
    S("no_images", [], INVALID, "no images", item=None),
]


# -- running a case -------------------------------------------------------------------------


def _text(value, env: Env) -> str:
    return value(env) if callable(value) else value


def _proxied_host(line: str) -> str:
    """The target host of a proxy log line (absolute-form URL or ``CONNECT host:port``)."""
    if line.startswith("CONNECT "):
        return line[8:].rsplit(":", 1)[0].strip("[]")
    return urlsplit(line).hostname or ""


def request_for(case: Case, env: Env) -> pb.PreprocessRequest:
    items = []
    for src in case.sources(env):
        if src is EMPTY_ITEM:
            items.append(pb.MediaItem())
        elif isinstance(src, (bytes, bytearray)):
            items.append(pb.MediaItem(data=bytes(src)))
        else:
            items.append(pb.MediaItem(url=src))
    return pb.PreprocessRequest(model=case.model, images=items, input_ids=case.input_ids or [])


def run_case(case: Case, stub, env: Env, timeout: float = 30.0) -> tuple[str, str]:
    """(status code name, details) of one call; ("OK", "") if it succeeded."""
    try:
        stub.Preprocess(request_for(case, env), timeout=timeout)
    except grpc.RpcError as e:
        return e.code().name, e.details() or ""
    return "OK", ""


def check_case(case: Case, code: str, details: str, env: Env, http_log: dict | None = None) -> None:
    """AssertionError with the whole story if the answer is not the expected one."""
    problems = []
    if code != case.code:
        problems.append(f"code {code}, expected {case.code}")
    if case.item is None:
        if details.startswith("image "):
            problems.append("names an image for a request-level failure")
    elif case.item == ANY:
        if not re.match(r"image \d+: ", details):
            problems.append("does not name the image")
    elif not details.startswith(f"image {case.item}: "):
        problems.append(f"does not start with 'image {case.item}: '")
    for phrase in case.phrases:
        if _text(phrase, env) not in details:
            problems.append(f"missing {_text(phrase, env)!r}")
    for secret in case.absent:
        if secret in details:
            problems.append(f"leaks {secret!r}")
    if http_log is not None:
        proxied = [_proxied_host(p) for p in http_log["proxy"]]
        for host in case.proxy_never_to:
            if host in proxied:
                problems.append(f"the proxy was asked for {host}: {http_log['proxy']}")
        for host in case.proxy_got:
            if host not in proxied:
                problems.append(f"the proxy was not asked for {host}: {http_log['proxy']}")
        asked = [urlsplit(p).path for p in http_log["origin"]]
        for path in case.origin_never_got:
            if path in asked:
                problems.append(f"the origin was asked for {path}: {http_log['origin']}")
    if problems:
        raise AssertionError(f"{case.id}: {'; '.join(problems)}\n  details: {details!r}")


# -- the processes --------------------------------------------------------------------------


def make_media(base: Path) -> tuple[Path, Path]:
    """The open server's allowed root and a directory beside it, with the hostile files."""
    root, outside = base / "root", base / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.png").write_bytes(GOOD)
    (root / "good.png").write_bytes(GOOD)
    (root / "empty.png").write_bytes(b"")
    with open(root / "huge.png", "wb") as f:
        f.truncate(100 << 30)  # sparse: claims 100 GiB, occupies nothing
    os.mkfifo(root / "fifo")
    (root / "escape.png").symlink_to(outside / "secret.png")
    (root / "passwd").symlink_to("/etc/passwd")
    (root / "zero").symlink_to("/dev/zero")
    assert stat.S_ISFIFO(os.stat(root / "fifo").st_mode)
    return root, outside


def _server_env(**extra: str) -> dict:
    """This environment's proxy variables unset (None), then ``extra``."""
    return {k: None for k in os.environ if k.lower() in _PROXY_VARS} | extra


class _NoDirectDial:
    """The fetcher's socket layer for direct (unproxied) connections: refuses any but 127.0.0.1."""

    def __init__(self):
        import httpcore

        self._real = httpcore.AnyIOBackend()
        self.dialled: list[tuple[str, int]] = []

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        self.dialled.append((host, port))
        if host != "127.0.0.1":
            raise AssertionError(f"the fetcher dialled {host}:{port} directly instead of through the proxy")
        return await self._real.connect_tcp(host, port, timeout=timeout)

    async def sleep(self, seconds):
        await self._real.sleep(seconds)


def public_only_via_proxy(proxy: str, **env: str) -> None:
    """The strict server reaches ``PUBLIC`` only through the local proxy. Prove it with the
    same fetcher code in-process, on a socket layer that cannot dial anything else, before
    a server process with that proxy environment is started: a regression in proxy
    selection then fails here instead of sending a packet off this machine."""
    import asyncio

    from sglang_mm_grpc.media import FetchPolicy, MediaFetcher

    backend = _NoDirectDial()

    async def run():
        fetcher = MediaFetcher(FetchPolicy(fetch_timeout_s=10), network_backend=backend,
                               environ={"HTTP_PROXY": proxy, **env})
        try:
            return await fetcher.fetch_all([f"http://{PUBLIC}/img/good.png"])
        finally:
            await fetcher.aclose()

    body = asyncio.run(run())[0]
    # Proxied connections do not use the pinned socket layer; a direct one would have.
    if not body or backend.dialled:
        raise AssertionError(f"expected the body through the proxy and no direct dial: {backend.dialled}")


class Harness:
    """The HTTP servers process and the two gRPC server processes. ``start`` returns once
    both report SERVING; ``stop`` always leaves every child dead."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.servers: dict[str, Server] = {}
        self.targets: dict[str, str] = {}
        self.logs: dict[str, Path] = {}
        self.http: subprocess.Popen | None = None
        self.env: Env | None = None
        self._channels: dict[str, grpc.Channel] = {}

    def start(self) -> "Harness":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.http = subprocess.Popen(
            [sys.executable, str(HERE / "hostile_http.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.workdir / "http.log", "wb"),
        )
        ports = json.loads(self.http.stdout.readline() or b"{}")
        if "origin" not in ports:
            raise RuntimeError(f"HTTP servers did not start: {(self.workdir / 'http.log').read_text()[-2000:]}")
        root, outside = make_media(self.workdir / "media")
        self.env = Env(ports["origin"], ports["proxy"], root, outside, free_port())
        proxy = f"http://127.0.0.1:{ports['proxy']}"
        public_only_via_proxy(proxy, NO_PROXY="localhost,127.0.0.1")  # before any server may dial it
        self._spawn("strict", STRICT_ARGS, _server_env(HTTP_PROXY=proxy, NO_PROXY="localhost,127.0.0.1"))
        self._spawn(
            "open",
            [
                "--allow-private-media-hosts",
                "--allowed-local-media-path", str(root),
                "--allowed-media-domains", "127.0.0.1", "localhost",
                "--max-images", "8",
                "--request-byte-budget", "4MiB",
                "--max-remote-bytes", "2MiB",
                "--max-redirects", "3",
                "--max-concurrent-fetches", "2",
                "--max-image-pixels", str(OPEN_PIXELS),
            ],
            _server_env(REQUEST_TIMEOUT="2", HTTP_PROXY=proxy, NO_PROXY="127.0.0.1"),
        )
        for server in self.servers.values():
            wait_serving(server.target, server)

    def _spawn(self, name: str, args: list[str], env: dict) -> None:
        server = Server(self.workdir, *args, models=[QWEN2], name=name, env=env, wait=False)
        self.servers[name], self.targets[name], self.logs[name] = server, server.target, server.log

    def log_text(self, name: str) -> str:
        return self.servers[name].log_text()[-4000:]

    def channel(self, name: str) -> grpc.Channel:
        if name not in self._channels:
            self._channels[name] = grpc.insecure_channel(self.targets[name], options=CHANNEL_OPTIONS)
        return self._channels[name]

    def stub(self, name: str) -> pb_grpc.MultimodalPreprocessorStub:
        return pb_grpc.MultimodalPreprocessorStub(self.channel(name))

    def health(self, name: str, timeout: float = 5.0) -> str:
        return health(self.targets[name], timeout, self.channel(name))

    def good_request(self, name: str) -> pb.PreprocessResponse:
        """A request that must succeed: the server is still fine."""
        req = pb.PreprocessRequest(model=QWEN2, images=[pb.MediaItem(data=GOOD)], backend=pb.BACKEND_SGLANG)
        return self.stub(name).Preprocess(req, timeout=30)

    def http_log(self) -> dict:
        return _get_json(f"http://127.0.0.1:{self.env.origin}/_log")

    def http_reset(self) -> None:
        _get_json(f"http://127.0.0.1:{self.env.origin}/_reset", raw=True)

    def pid(self, name: str) -> int:
        return self.servers[name].pid

    def run(self, case: Case) -> tuple[str, str]:
        return run_case(case, self.stub(case.server), self.env)

    def stop(self) -> None:
        for ch in self._channels.values():
            ch.close()
        self._channels.clear()
        for server in self.servers.values():
            server.stop()
        if self.http is not None:
            try:
                self.http.stdin.close()
            except OSError:
                pass
            _terminate(self.http)


def _terminate(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _get_json(url: str, raw: bool = False):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
    with opener.open(url, timeout=10) as r:
        body = r.read()
    return body if raw else json.loads(body)


# -- memory ---------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def reset_peak(pid: int) -> bool:
    """Reset VmHWM to the current RSS (``clear_refs`` 5); False where not permitted."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def mb(n: int) -> str:
    return f"{n / MiB:.1f} MiB"


def servers_used(cases: Sequence[Case]) -> list[str]:
    return sorted({c.server for c in cases})
