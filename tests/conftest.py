"""The whole run: once every server the tests started has stopped, none of them may have
left a segment in /dev/shm (each removes its own at shutdown, the ones a killed server
left are removed by its successor, and readers remove what they read).

``--amx``: this test process asks for AMX tiles as the server does, so the in-process
parity suites check the resize kernels' tile path (without it they check AVX-512's)."""

from __future__ import annotations

import servers


def pytest_addoption(parser):
    parser.addoption("--amx", action="store_true", help="run the kernels on AMX tiles in this process (as serve does)")


def pytest_configure(config):
    if config.getoption("--amx"):
        from sglang_mm_grpc.kernels import amx

        if not amx.request():
            raise SystemExit("--amx: this CPU or kernel gives no AMX tiles")


def pytest_sessionfinish(session, exitstatus):
    left = servers.leftover_segments()
    if left:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"{len(left)} shared-memory segments left in /dev/shm by the servers of this run: {left[:5]}", red=True)
        session.exitstatus = 1
