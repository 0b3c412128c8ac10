"""The README's two commands, on a fresh clone, as a newcomer runs them.

``./scripts/test`` makes the clone's own ``.venv`` and runs pytest in it (here on one
small test file, in one process: the whole suite is what CI itself runs through the same command);
``./scripts/serve`` then reuses that venv, reports SERVING with every built-in preset,
and exits 0 on SIGTERM. The clone is of what is committed.

The server shares the run's kernel cache (entries are keyed by the kernel sources, not
their paths): it compiles only what the run (tests/conftest.py) has not compiled yet, waiting for
what is being compiled. With ``--processes 2`` process 1 starts once process 0 is warm
and only loads.
"""


from __future__ import annotations

import os
import signal
import subprocess

from servers import REPO, Proc, free_port, wait_serving


def test_the_two_commands_on_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "NUMBA_CACHE_DIR")}

    tested = subprocess.run([str(clone / "scripts" / "test"), "-q", "-p", "no:cacheprovider", "-n", "0",
                             "tests/test_layering.py"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert " passed" in tested.stdout.splitlines()[-1]
    assert "installing sglang-mm-grpc[test,video]" in tested.stderr and "Editable installation" not in tested.stderr
    assert (clone / ".venv" / "bin" / "sglang-mm-grpc").exists()

    port = free_port()
    served = Proc([str(clone / "scripts" / "serve"), "--port", str(port), "--processes", "2"], tmp_path / "serve.log",
                  env={"VIRTUAL_ENV": None, "NUMBA_DEBUG_CACHE": "1", "PYTHONUNBUFFERED": "1"})
    try:
        wait_serving(f"127.0.0.1:{port}", served, timeout=1200)
        log = served.log_text()
        assert "installing sglang-mm-grpc" not in log  # ./scripts/test set the venv up already
        assert f"SERVING on 127.0.0.1:{port}" in log
    finally:
        served.signal(signal.SIGTERM)
        code = served.wait(120)
    assert code == 0, served.log_text()[-3000:]
    lines = served.log_text().splitlines()
    second = next(i for i, line in enumerate(lines) if "process 1 started" in line)
    before, after = lines[:second], lines[second:]
    assert sum("[cache] data loaded" in line for line in before) > 0  # the run's entries, found from the clone
    assert sum("[cache] data saved" in line for line in after) == 0
    assert sum("[cache] data loaded" in line for line in after) > 0
