"""The hostile table's HTTP servers, run as their own process (``python hostile_http.py``).

An origin with misbehaving routes (``media_servers.OriginHandler`` plus a few image
routes and a ``/_log`` control route) and a forward proxy, both on 127.0.0.1. The
proxy forwards requests for 127.0.0.1/localhost, and for the one public-looking
address ``PUBLIC``, to the origin (streaming, so slow and endless bodies stay slow and
endless); it answers any other host itself and never opens a connection anywhere but
127.0.0.1. ``PUBLIC`` lets a server that refuses private addresses reach the origin
through the proxy, the way it would reach a public host in a proxied network.

Prints one JSON line ``{"origin": port, "proxy": port}`` on stdout, then serves until
stdin closes (its parent exited) or SIGTERM.
"""

from __future__ import annotations

import io
import json
import signal
import socket
import struct
import sys
import threading
import time
import zlib
from pathlib import Path
from urllib.parse import urlsplit

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "media"), str(Path(__file__).resolve().parents[1])]

from media_servers import OriginHandler, ProxyHandler, serve  # noqa: E402

#: A global address (not in any refused range) that only ever reaches the local proxy.
PUBLIC = "93.184.216.34"


def good_png() -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (48, 32), (200, 120, 40)).save(b, "PNG")
    return b.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A valid PNG signature + IHDR claiming width x height, with a tiny body."""

    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


GOOD_PNG = good_png()
STATE: dict = {}  # origin/proxy logs, filled in main()
_BOMB_LOCK = threading.Lock()


def gzip_bomb() -> bytes:
    """128 MiB of zeros as a ~130 KB gzip body (made on first use, then kept)."""
    with _BOMB_LOCK:
        if "gzip_bomb" not in STATE:
            c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            block = bytes(1 << 20)
            STATE["gzip_bomb"] = b"".join([c.compress(block) for _ in range(128)] + [c.flush()])
        return STATE["gzip_bomb"]


class Origin(OriginHandler):
    """OriginHandler's routes plus:

    /img/good.png    a small valid PNG
    /img/bomb.png    a PNG header claiming 100000 x 100000 pixels (69 bytes)
    /short-png       Content-Length shorter than the PNG it is followed by
    /bad-cl          Content-Length: abc
    /html            an HTML page
    /gzip-bomb       Content-Encoding: gzip, 128 MiB of zeros in ~130 KB
    /br              Content-Encoding: br (never requested)
    /_log            JSON: origin paths, proxy paths, closed /hold connections
    """

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/_log":  # not logged itself
            body = json.dumps(
                {
                    "origin": self.server.log.paths(),
                    "proxy": STATE["proxy"].paths(),
                    "closed": list(self.server.log.closed),
                    "max_active": self.server.log.max_active,
                }
            ).encode()
            self._send(200, body, {"Content-Type": "application/json"})
            return
        if path == "/_reset":
            self.server.log.reset()
            STATE["proxy"].reset()
            self._send(200, b"ok")
            return
        if path in ("/img/good.png", "/img/bomb.png", "/short-png", "/bad-cl", "/html", "/gzip-bomb", "/br"):
            self.log.add(self.path, self.headers)
            try:
                if path == "/img/good.png":
                    self._send(200, GOOD_PNG, {"Content-Type": "image/png"})
                elif path == "/img/bomb.png":
                    self._send(200, png_header(100_000, 100_000), {"Content-Type": "image/png"})
                elif path == "/short-png":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(GOOD_PNG) // 2))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(GOOD_PNG)
                    self.close_connection = True
                elif path == "/bad-cl":
                    self.send_response(200)
                    self.send_header("Content-Length", "abc")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(GOOD_PNG)
                    self.close_connection = True
                elif path == "/gzip-bomb":
                    self._send(200, gzip_bomb(), {"Content-Type": "image/png", "Content-Encoding": "gzip"})
                elif path == "/br":
                    self._send(200, b"\x1b\xff\xff\x0f", {"Content-Type": "image/png", "Content-Encoding": "br"})
                else:
                    self._send(200, b"<html><body>not an image</body></html>", {"Content-Type": "text/html"})
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            return
        super().do_GET()


class Proxy(ProxyHandler):
    """ProxyHandler, plus ``PUBLIC`` forwarded (raw, streaming) to the origin."""

    def do_GET(self) -> None:
        target = urlsplit(self.path)
        if target.hostname != PUBLIC:
            super().do_GET()
            return
        self.server.log.add(self.path, self.headers)
        path = target.path + (f"?{target.query}" if target.query else "")
        upstream = socket.create_connection(("127.0.0.1", STATE["origin_port"]), timeout=30)
        try:
            upstream.sendall(f"GET {path} HTTP/1.1\r\nHost: {PUBLIC}\r\nConnection: close\r\n\r\n".encode())
            while not self.server.stop.is_set():
                data = upstream.recv(65536)
                if not data:
                    break
                self.wfile.write(data)
        except OSError:
            pass
        finally:
            upstream.close()
            self.close_connection = True


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with serve(Origin) as (origin_port, origin_log), serve(Proxy) as (proxy_port, proxy_log):
        STATE.update(origin_port=origin_port, proxy=proxy_log)
        print(json.dumps({"origin": origin_port, "proxy": proxy_port}), flush=True)
        threading.Thread(target=lambda: (sys.stdin.read(), signal.raise_signal(signal.SIGTERM)), daemon=True).start()
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
