"""Fixtures for the fetch tests: one origin server and one forward proxy for the session."""

from __future__ import annotations

import pytest

from fetch_helpers import Server
from media_servers import OriginHandler, ProxyHandler, serve


@pytest.fixture(scope="session")
def _origin_server():
    with serve(OriginHandler) as (port, log):
        yield Server(port, log)


@pytest.fixture
def origin(_origin_server) -> Server:
    _origin_server.log.reset()
    return _origin_server


@pytest.fixture(scope="session")
def _proxy_server():
    with serve(ProxyHandler) as (port, log):
        yield Server(port, log)


@pytest.fixture
def proxy(_proxy_server) -> Server:
    _proxy_server.log.reset()
    return _proxy_server
