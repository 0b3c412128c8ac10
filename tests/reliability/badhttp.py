"""Misbehaving HTTP servers on 127.0.0.1, each in its own thread, that record what the
client did: ``hang`` reads the request and never answers, ``reset`` answers with a TCP
reset, ``dribble`` sends valid headers and then one body byte every ``interval`` s.

``open_connections`` is how many client connections are still open (a fetch that was
cancelled must close its socket, so this returns to 0). ``close`` stops the thread.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time


class BadHttp:
    def __init__(self, mode: str, *, interval: float = 0.2, body_len: int = 1 << 20):
        assert mode in ("hang", "reset", "dribble")
        self.mode, self.interval, self.body_len = mode, interval, body_len
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/image.png"
        self._lock = threading.Lock()
        self.accepted = 0
        self._open = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return self._open

    def close(self) -> None:
        self._stop.set()
        for t in list(self._threads):
            t.join(5)
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            with self._lock:
                self.accepted += 1
                self._open += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            _read_request(conn)
            if self.mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            if self.mode == "dribble":
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
                    + f"Content-Length: {self.body_len}\r\n\r\n".encode()
                )
            while not self._stop.is_set():
                if _peer_closed(conn, self.interval):
                    return
                if self.mode == "dribble":
                    conn.sendall(b"\x89")
        except OSError:
            pass
        finally:
            conn.close()
            with self._lock:
                self._open -= 1


def _read_request(conn: socket.socket) -> None:
    data, end = b"", time.monotonic() + 5
    conn.settimeout(0.2)
    while b"\r\n\r\n" not in data and time.monotonic() < end:
        try:
            chunk = conn.recv(4096)
        except socket.timeout:
            continue
        if not chunk:
            return
        data += chunk


def _peer_closed(conn: socket.socket, wait: float) -> bool:
    readable, _, _ = select.select([conn], [], [], wait)
    if not readable:
        return False
    try:
        return conn.recv(4096) == b""  # anything else the client sends is dropped
    except OSError:
        return True
