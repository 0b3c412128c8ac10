"""Nothing of a SIGKILLed ``serve --processes N`` supervisor is left behind: its processes
notice its death (PR_SET_PDEATHSIG), drain and exit, and the last one out removes the
sibling socket directory; when the processes die with it, the next ``serve --processes``
start removes the directory (its liveness record's lock is free and its supervisor gone),
while a live supervisor's directory and one without a record are left alone."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap

import procs


def _children(server) -> list[int]:
    return [int(p) for p in re.findall(r"process \d+ started \(pid (\d+)\)", server.log_text())]


def _socket_dirs(pids) -> set[str]:
    """The directories of the Unix sockets these processes have open (from /proc/net/unix)."""
    inodes = set()
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                continue
            if m:
                inodes.add(m.group(1))
    with open("/proc/net/unix") as f:
        rows = [line.split() for line in f.read().splitlines()[1:]]
    return {os.path.dirname(r[7]) for r in rows if len(r) >= 8 and r[6] in inodes and r[7].endswith(".sock")}


def _gone(pid: int) -> bool:
    """No such process, or a zombie (it has exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return True
    return data[data.rindex(b")") + 2:].split()[0] in (b"Z", b"X")


def _start(tmp_path, name: str):
    server = procs.Server(tmp_path, "--processes", "2", "--cache-bytes", "0", "--drain-delay", "0",
                          models=[procs.QWEN2], name=name)
    children = _children(server)
    directories = _socket_dirs(children)
    assert len(children) == 2 and len(directories) == 1, (children, directories)
    return server, children, directories.pop()


def test_supervisor_killed_leaves_no_directory_and_no_process(tmp_path):
    server, children, directory = _start(tmp_path, "killed")
    try:
        server.signal(signal.SIGKILL)
        server.wait(10)
        assert procs.wait_until(lambda: all(_gone(p) for p in children), 60, 0.1), server.log_text()[-2000:]
        assert procs.wait_until(lambda: not os.path.lexists(directory), 10, 0.1), os.listdir(directory)
    finally:
        for pid in children:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        server.stop()


def test_directory_of_a_replica_killed_whole_goes_at_the_next_start(tmp_path):
    server, children, directory = _start(tmp_path, "whole")
    try:
        for pid in children:  # stopped first, so none of them cleans up when the supervisor dies
            os.kill(pid, signal.SIGSTOP)
        server.signal(signal.SIGKILL)
        server.wait(10)
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        assert procs.wait_until(lambda: all(_gone(p) for p in children), 30, 0.1)
        assert os.path.isdir(directory)  # left by all of them
    finally:
        for pid in children:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        server.stop()
    following = procs.Server(tmp_path, "--processes", "2", "--cache-bytes", "0", models=[procs.QWEN2],
                             name="following", wait=False)
    try:
        assert procs.wait_until(lambda: not os.path.lexists(directory), 60, 0.1), following.log_text()[-2000:]
        procs.wait_serving(following.target, following)  # its processes' starts took the killed ones' records
        assert not set(procs.leftover_segments(procs.shm_owners(["--processes", "2"], server.port)))
    finally:
        following.stop(60)


_LIVE_SUPERVISOR = textwrap.dedent("""
    import tempfile, time
    from sglang_mm_grpc.server import supervisor as processes
    directory, fd = processes.make_directory()
    print(directory, flush=True)
    time.sleep(600)
""")


def test_start_up_sweep_leaves_live_and_recordless_directories(tmp_path):
    from sglang_mm_grpc.server import supervisor as processes

    root = tmp_path / "tmp"
    root.mkdir()
    env = {**os.environ, "TMPDIR": str(root)}
    live = subprocess.Popen([sys.executable, "-c", _LIVE_SUPERVISOR], stdout=subprocess.PIPE, text=True, env=env)
    dead = subprocess.Popen([sys.executable, "-c", _LIVE_SUPERVISOR], stdout=subprocess.PIPE, text=True, env=env)
    try:
        live_dir, dead_dir = live.stdout.readline().strip(), dead.stdout.readline().strip()
        dead.kill()
        dead.wait()
        old = root / "sglang-mm-grpc-older"  # no record: an older version's, left alone
        old.mkdir()
        assert processes.remove_stale_directories(str(root)) == 1
        assert not os.path.lexists(dead_dir) and os.path.isdir(live_dir) and old.is_dir()
    finally:
        for p in (live, dead):
            p.kill()
            p.wait()
            p.stdout.close()
    assert processes.remove_stale_directories(str(root)) == 1 and not os.path.lexists(live_dir)
