"""The whole run: once every server the tests started has stopped, none of them may have
left a segment in /dev/shm (each removes its own at shutdown, the ones a killed server
left are removed by its successor, and readers remove what they read)."""

from __future__ import annotations

import servers


def pytest_sessionfinish(session, exitstatus):
    left = servers.leftover_segments()
    if left:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"{len(left)} shared-memory segments left in /dev/shm by the servers of this run: {left[:5]}", red=True)
        session.exitstatus = 1
