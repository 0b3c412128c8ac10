"""Local HTTP servers for the fetch tests: an origin with misbehaving routes, a forward
proxy and a TLS origin. All listen on 127.0.0.1 on free ports; none contacts any other
address."""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import subprocess
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from servers import free_port


def payload(n: int) -> bytes:
    """Deterministic bytes, so a test can check content, not only length."""
    return (bytes(range(256)) * (n // 256 + 1))[:n]


class Log:
    """What a server saw, readable from the test thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests: list[tuple[str, dict]] = []
        self.closed: list[str] = []
        self.closed_event = threading.Event()
        self.holding = threading.Event()  # a /hold response has started
        self.active = 0
        self.max_active = 0
        self.sni: list[str | None] = []

    def add(self, path: str, headers) -> None:
        with self.lock:
            self.requests.append((path, {k.lower(): v for k, v in headers.items()}))

    def paths(self) -> list[str]:
        with self.lock:
            return [p for p, _ in self.requests]

    def enter(self) -> None:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)

    def leave(self) -> None:
        with self.lock:
            self.active -= 1

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.closed.clear()
            self.closed_event.clear()
            self.holding.clear()
            self.max_active = self.active
            self.sni.clear()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # the default 5 drops SYNs under concurrent connects (1 s retransmit)

    def __init__(self, handler, log: Log, stop: threading.Event):
        super().__init__(("127.0.0.1", 0), handler)
        self.log = log
        self.stop = stop


class OriginHandler(BaseHTTPRequestHandler):
    """Routes (path prefix -> behaviour):

    /bytes/N            N bytes with Content-Length
    /slow/S             S seconds, then 10 bytes (tracks concurrency)
    /drip               Content-Length 1000, one byte every 0.1 s
    /hang               never sends headers
    /hold               headers + 10 of 1000 bytes, then waits for the client to close
    /endless            no Content-Length, body until the client goes away
    /endless-chunked    chunked body until the client goes away
    /overclaim          Content-Length 1000, 10 bytes, close
    /underclaim         Content-Length 10, then 100000 bytes
    /huge-cl            Content-Length 10 GiB, then a trickle
    /redirect?to=U&code=C
    /loop               redirects to itself
    /chain/N            N redirects, then 10 bytes
    /status/C           that status with a short body (``?after=hold``: once a /hold
                        response has started, so that one is open when this fails)
    /empty              200 with an empty body
    /echo-host          the Host header as the body
    """

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    @property
    def log(self) -> Log:
        return self.server.log

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _wait_for_close(self, limit: float = 10.0) -> bool:
        end = time.monotonic() + limit
        while time.monotonic() < end and not self.server.stop.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.05)
            if readable:
                try:
                    if self.connection.recv(1) == b"":
                        return True
                except OSError:
                    return True
        return False

    def do_GET(self) -> None:  # noqa: C901 - a route table
        self.log.add(self.path, self.headers)
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        try:
            if path.startswith("/bytes/"):
                self._send(200, payload(int(path.split("/")[2])), {"Content-Type": "image/png"})
            elif path.startswith("/slow/"):
                self.log.enter()
                try:
                    time.sleep(float(path.split("/")[2]))
                finally:
                    self.log.leave()
                self._send(200, payload(10))
            elif path == "/drip":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                for i in range(1000):
                    if self.server.stop.wait(0.1):
                        return
                    self.wfile.write(b"x")
                    self.wfile.flush()
            elif path == "/hang":
                self._wait_for_close()
                self.close_connection = True
            elif path == "/hold":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(payload(10))
                self.wfile.flush()
                self.log.holding.set()
                if self._wait_for_close():
                    with self.log.lock:
                        self.log.closed.append(path)
                    self.log.closed_event.set()
                self.close_connection = True
            elif path in ("/endless", "/endless-chunked"):
                chunked = path == "/endless-chunked"
                self.send_response(200)
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                block = payload(65536)
                while not self.server.stop.is_set():
                    self.wfile.write(b"10000\r\n" + block + b"\r\n" if chunked else block)
                self.close_connection = True
            elif path == "/overclaim":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(payload(10))
                self.close_connection = True
            elif path == "/underclaim":
                self.send_response(200)
                self.send_header("Content-Length", "10")
                self.end_headers()
                self.wfile.write(payload(100010))
                self.close_connection = True
            elif path == "/huge-cl":
                self.send_response(200)
                self.send_header("Content-Length", str(10 << 30))
                self.end_headers()
                for _ in range(50):
                    self.wfile.write(payload(1000))
                    self.wfile.flush()
                    if self.server.stop.wait(0.05):
                        break
                self.close_connection = True
            elif path == "/redirect":
                code = int(query.get("code", ["302"])[0])
                self._send(code, b"", {"Location": query["to"][0]})
            elif path == "/loop":
                self._send(302, b"", {"Location": "/loop"})
            elif path.startswith("/chain/"):
                n = int(path.split("/")[2])
                if n == 0:
                    self._send(200, payload(10))
                else:
                    self._send(301, b"", {"Location": f"/chain/{n - 1}"})
            elif path.startswith("/status/"):
                if query.get("after") == ["hold"]:
                    self.log.holding.wait(10)
                self._send(int(path.split("/")[2]), b"nope")
            elif path == "/empty":
                self._send(200, b"")
            elif path == "/echo-host":
                self._send(200, self.headers.get("Host", "").encode())
            else:
                self._send(404, b"no such route")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True


class ProxyHandler(BaseHTTPRequestHandler):
    """A forward proxy. Absolute-form GET for 127.0.0.1/localhost is forwarded to that
    local port; any other host is answered by the proxy itself with ``proxied:<url>``.
    CONNECT always tunnels to 127.0.0.1. It never opens a connection anywhere else."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.server.log.add(self.path, self.headers)
        target = urlsplit(self.path)
        if target.hostname in ("127.0.0.1", "localhost"):
            conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=10)
            path = target.path + (f"?{target.query}" if target.query else "")
            conn.request("GET", path, headers={"Host": self.headers.get("Host", "")})
            upstream = conn.getresponse()
            body = upstream.read()
            self.send_response(upstream.status)
            for k, v in upstream.getheaders():
                if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            conn.close()
        else:
            body = f"proxied:{self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


    def do_CONNECT(self) -> None:
        """Tunnel to 127.0.0.1 at the requested port, whatever the requested name."""
        self.server.log.add(f"CONNECT {self.path}", self.headers)
        port = int(self.path.rsplit(":", 1)[1])
        upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        client = self.connection
        try:
            while not self.server.stop.is_set():
                readable, _, _ = select.select([client, upstream], [], [], 0.05)
                for src in readable:
                    data = src.recv(65536)
                    if not data:
                        return
                    (upstream if src is client else client).sendall(data)
        except OSError:
            pass
        finally:
            upstream.close()
            self.close_connection = True


@contextmanager
def serve(handler, *, tls: ssl.SSLContext | None = None):
    """Run a server on 127.0.0.1:<free port>; yields (port, log)."""
    log, stop = Log(), threading.Event()
    server = _Server(handler, log, stop)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], log
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def make_cert(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (its own CA), via the openssl CLI."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "2", "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def tls_server_context(cert: Path, key: Path, log_holder: list) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    def on_sni(sock, server_name, context):
        log_holder.append(server_name)

    ctx.sni_callback = on_sni
    return ctx


def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (connections are refused)."""
    return free_port()
