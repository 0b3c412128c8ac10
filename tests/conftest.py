"""The whole run: once every server the tests started has stopped, none of them may have
left a segment or a liveness record in /dev/shm (each removes its own at shutdown, the
ones a killed server left are removed by the next start, and readers remove what they
read).

One compiled-kernel cache for the whole run: ``$NUMBA_CACHE_DIR`` (default: the
checkout's ``kernels/__pycache__``, where the in-process kernels cache anyway) is set
here for every process the tests start, so a server, a wheel install or a clone of the
same kernel sources loads what another compiled instead of compiling again.

Tiers: every test is marked with its folder (``core``, ``kernels``, ``media``,
``parity``, ``video``, ``service``, ``reliability``, ``sidecar``) and ``slow`` when it belongs to the
full tier: the service and reliability folders, the packaging, fresh-clone, docs, deploy,
type-check and sidecar-with-Redis tests, and the inputs marked ``slow`` where they are. ``-m "not slow"``
runs the fast tier.

``--amx``: this test process asks for AMX tiles as the server does, so the in-process
parity suites check the resize kernels' tile path (without it they check AVX-512's)."""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent
os.environ.setdefault("NUMBA_CACHE_DIR", str(TESTS.parent / "kernels" / "__pycache__"))

import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

import servers  # noqa: E402  (after the cache directory is set: it imports the package)

#: Folders and top-level files whose tests are all in the full tier.
SLOW_FOLDERS = {"service", "reliability"}
SLOW_FILES = {"test_packaging.py", "test_fresh_clone.py", "test_docs_examples.py", "test_deploy.py", "test_types.py",
              "test_sidecar_redis.py"}
#: Started first (the longest: a venv install, then every preset served), the rest beside it.
FIRST = "test_fresh_clone.py"


def pytest_addoption(parser):
    parser.addoption("--amx", action="store_true", help="run the kernels on AMX tiles in this process (as serve does)")


def pytest_configure(config):
    if config.getoption("--amx"):
        from sglang_mm_grpc.kernels import amx

        if not amx.request():
            raise SystemExit("--amx: this CPU or kernel gives no AMX tiles")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: Path(str(item.fspath)).name != FIRST)  # stable: the rest keep their order
    for item in items:
        where = Path(str(item.fspath)).relative_to(TESTS).parts
        if len(where) > 1:
            item.add_marker(where[0])
        if where[0] in SLOW_FOLDERS or where[-1] in SLOW_FILES:
            item.add_marker("slow")


#: The run's background compile of every preset's kernels (started by the controller).
_compiling: subprocess.Popen | None = None


#: A run of at least this many tests compiles every preset's kernels in the background
#: (fewer, e.g. one file: each test compiles what it needs, and the run waits for nothing more).
BACKGROUND_COMPILE_MIN_TESTS = 500


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """With parallel workers, on a run of ``BACKGROUND_COMPILE_MIN_TESTS`` tests or more,
    the controller compiles every preset's kernels in a process of its own while the
    workers run: a test needing a kernel not yet in the cache compiles it, or waits for
    the process compiling it (``kernels/compile_locks``), and no worker waits for the
    whole compile. Not when the cache already has kernels."""
    global _compiling
    if _compiling is None and len(ids) >= BACKGROUND_COMPILE_MIN_TESTS:
        from sglang_mm_grpc import kernels

        if not kernels.cached():
            _compiling = subprocess.Popen([sys.executable, "-c", COMPILE_EVERY_PRESET])


COMPILE_EVERY_PRESET = ("from sglang_mm_grpc.config import preset_names; "
                        "from sglang_mm_grpc.server.precompile import compile_kernels; "
                        "compile_kernels(preset_names(), processes=1)")


#: The servers' shared-memory owners of the run's xdist workers (reported as they finish).
_WORKERS_OWNERS: set[str] = set()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _WORKERS_OWNERS.update(getattr(node, "workeroutput", {}).get("shm_owners", ()))


@pytest.hookimpl(trylast=True)  # after the session's fixtures (and their servers) are torn down
def pytest_sessionfinish(session, exitstatus):
    if _compiling is not None and _compiling.wait() != 0:
        session.exitstatus = 1
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller checks once all are down
        workeroutput["shm_owners"] = sorted(servers.SHM_OWNERS)
        return
    left = servers.leftover_segments(servers.SHM_OWNERS | _WORKERS_OWNERS)
    if left:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"{len(left)} shared-memory files left in /dev/shm by the servers of this run: {left[:5]}", red=True)
        session.exitstatus = 1
