"""httpcore's connection pools, without the connection slot a cancelled request can leak.

httpcore 1.0.9 (encode/httpcore#1093, open): a request cancelled after the pool gave it
a new connection and before it sent anything on it (while dialing, or just after)
leaves that connection in the pool, owned by no request and never used. It is neither
idle, closed nor expired, so the pool keeps it, and it counts against
``max_connections`` for good. A fetch is cancelled whenever its RPC is (a client
leaves, a deadline passes), so each slot lost was one fewer concurrent fetch, until
every fetch waited out its timeout. These pools close such connections whenever they
assign requests, as the later upstream fixes do: a connection that is not idle and that
no request owns is one nothing will ever use.
"""

from __future__ import annotations

import httpcore


class _Reclaiming:
    _connections: list
    _requests: list

    def _assign_requests_to_connections(self) -> list:  # under the pool's lock; returns what to close
        owned = {id(r.connection) for r in self._requests if r.connection is not None}
        orphans = [c for c in self._connections if id(c) not in owned and not (c.is_idle() or c.is_closed())]
        for c in orphans:
            self._connections.remove(c)
        return orphans + super()._assign_requests_to_connections()  # type: ignore[misc]


class ConnectionPool(_Reclaiming, httpcore.AsyncConnectionPool):
    """Direct connections."""


class ProxyPool(_Reclaiming, httpcore.AsyncHTTPProxy):
    """Connections through an http(s) proxy."""
