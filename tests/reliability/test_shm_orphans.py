"""Shared-memory segments of a dead instance, whatever its owner id: every instance holds a
liveness record (``sglang-mm-live.<owner_id>``, locked while it lives) beside its
segments, and a start removes the segments and record of every owner whose record's lock
can be taken and whose process (pid and start time) is gone, counted as ``startup``.
A live instance's segments are never touched; an owner with no record (an older
version) is left to a restart with its own id.

The first test runs real servers on the real /dev/shm; the others drive ``ShmArena`` in
a private directory, against real processes that hold or drop their records, so their
counts cannot be disturbed by other servers on the machine."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import imagegen
import procs
from sglang_mm_grpc.wire import shm
from sglang_mm_grpc.client import Client, payload_options

SHM_ALL = payload_options(transport="shm", shm_min_bytes=0)
SHM_DIR = "/dev/shm"
RECORD_PREFIX = "sglang-mm-live."  # shm.RECORD_PREFIX, as docs/WIRE_CURRENT.md names it


def files(owner: str, directory: str = SHM_DIR) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith(f"sglang-mm.{owner}."))


def record(owner: str, directory: str = SHM_DIR) -> str:
    return os.path.join(directory, f"{RECORD_PREFIX}{owner}")


def info(server):
    with Client(server.target) as c:
        return c.server_info()


def hold_segments(server, n: int = 2) -> set[str]:
    """One-shot vLLM payloads in shared memory that nobody reads (600 s leases)."""
    names = set()
    with Client(server.target) as c:
        for seed in range(n):
            payload = c.preprocess(procs.QWEN2, [imagegen.png(40, 40, seed=seed)], backend="vllm",
                                   options=SHM_ALL).payload
            names.add(payload.vllm.pixel_values.shm.name)
    return names


def removed_by(server, owner: str) -> int | None:
    m = re.search(rf"removed (\d+) shared-memory segments of owner {re.escape(owner)}, ", server.log_text())
    return int(m.group(1)) if m else None


def test_a_killed_instances_segments_go_at_any_start_and_live_ones_stay(tmp_path):
    tag = f"{os.getpid()}-{secrets.token_hex(2)}"
    a_id, b_id, c_id = f"orphan-a-{tag}", f"orphan-b-{tag}", f"orphan-c-{tag}"
    args = ("--shm-lease", "600", "--log-level", "INFO")
    a = procs.Server(tmp_path, "--shm-owner-id", a_id, *args, models=[procs.QWEN2], name="a")
    c = procs.Server(tmp_path, "--shm-owner-id", c_id, *args, models=[procs.QWEN2], name="c")
    b = None
    link = f"{SHM_DIR}/sglang-mm.{a_id}.{secrets.token_hex(16)}"
    target = tmp_path / "target"
    try:
        a_held, c_held = hold_segments(a), hold_segments(c)  # (besides them, pre-faulted spares come and go)
        assert a_held <= set(files(a_id)) and c_held <= set(files(c_id))

        # a third server while both live: it removes nothing of theirs; its record goes when it stops
        b = procs.Server(tmp_path, "--shm-owner-id", b_id, *args, models=[procs.QWEN2], name="b1")
        assert a_held <= set(files(a_id)) and c_held <= set(files(c_id))
        assert removed_by(b, a_id) is None and removed_by(b, c_id) is None
        assert b.stop() == 0
        assert not os.path.lexists(record(b_id))

        a.signal(signal.SIGKILL)
        a.wait(10)
        a_files = files(a_id)
        assert a_held <= set(a_files)  # outstanding: nobody read them
        target.write_bytes(b"x")
        os.symlink(target, link)  # a link with the dead owner's prefix is not followed or removed

        b = procs.Server(tmp_path, "--shm-owner-id", b_id, *args, models=[procs.QWEN2], name="b2")
        assert files(a_id) == [os.path.basename(link)] and target.read_bytes() == b"x"
        assert c_held <= set(files(c_id))  # the live one keeps everything
        assert not os.path.lexists(record(a_id))  # the dead one's record went with its segments
        assert os.path.isfile(record(c_id)) and os.path.isfile(record(b_id))
        assert not any(n.startswith(RECORD_PREFIX) for n in files(c_id))  # a record is no segment
        n = removed_by(b, a_id)
        if n is None:
            pytest.skip("another server starting on this machine removed the killed instance's segments first")
        assert n == len(a_files)
        assert info(b).shm.removed["startup"] >= len(a_files)
    finally:
        if os.path.lexists(link):
            os.unlink(link)
        for s in (b, c, a):
            if s is not None:
                s.stop()
    assert files(c_id) == [] and not os.path.lexists(record(c_id))


# -- ShmArena in a private directory, against real processes ------------------------------

_HOLDER = textwrap.dedent("""
    import sys, time
    from sglang_mm_grpc.wire import shm
    a = shm.ShmArena(sys.argv[1], budget_bytes=1 << 20, pool_segments=0, directory=sys.argv[2])
    a.remove_previous()
    segments = [a.create(4096) for _ in range(int(sys.argv[3]))]
    print("ready", flush=True)
    time.sleep(600)
""")


class Holder:
    """A process with an arena in ``directory`` holding ``n`` segments, until killed."""

    def __init__(self, owner: str, directory, n: int = 3):
        self.owner = owner
        self.p = subprocess.Popen([sys.executable, "-c", _HOLDER, owner, str(directory), str(n)],
                                  stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().strip() == "ready"

    def kill(self) -> None:
        self.p.kill()
        self.p.wait()
        self.p.stdout.close()


@pytest.fixture
def shm_dir(tmp_path):
    d = tmp_path / "shm"
    d.mkdir()
    return str(d)


def arena(owner: str, directory: str) -> shm.ShmArena:
    return shm.ShmArena(owner, budget_bytes=1 << 20, pool_segments=0, directory=directory)


def test_dead_owner_removed_live_and_recordless_owners_left(shm_dir):
    dead, live = Holder("dead", shm_dir), Holder("live", shm_dir)
    legacy = [f"sglang-mm.legacy.{secrets.token_hex(16)}" for _ in range(2)]  # no record: an older version's
    for name in legacy:
        open(os.path.join(shm_dir, name), "wb").close()
    try:
        dead.kill()
        assert len(files("dead", shm_dir)) == 3
        b = arena("b", shm_dir)
        assert b.remove_previous() == 3 and b.stats()["removed"] == {"startup": 3}
        assert files("dead", shm_dir) == [] and not os.path.exists(record("dead", shm_dir))
        assert len(files("live", shm_dir)) == 3 and os.path.exists(record("live", shm_dir))
        assert files("legacy", shm_dir) == sorted(legacy)
        assert b.names() == [] and os.path.exists(record("b", shm_dir))  # the record is no segment
        b.close()
        assert not os.path.exists(record("b", shm_dir))
    finally:
        live.kill()


def test_an_owner_id_held_by_a_live_instance_is_refused(shm_dir):
    live = Holder("same", shm_dir)
    try:
        with pytest.raises(ValueError, match="in use by a live instance"):
            arena("same", shm_dir).remove_previous()
        assert len(files("same", shm_dir)) == 3
    finally:
        live.kill()
    again = arena("same", shm_dir)  # once it is gone its id is free, and its leftovers go
    assert again.remove_previous() == 3 and files("same", shm_dir) == []
    again.close()


def test_a_reused_pid_is_not_the_owner(shm_dir):
    """A record whose lock is free names a running pid, but with another start time: that
    process is not the owner (its pid was reused), so the owner's segments go; the same
    record with this process's true start time is taken as alive."""
    owner = "reused"
    for _ in range(2):
        open(os.path.join(shm_dir, f"sglang-mm.{owner}.{secrets.token_hex(16)}"), "wb").close()
    real = shm.liveness_record(owner_id=owner)
    path = record(owner, shm_dir)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    shm.write_record(fd, real)  # unlocked, naming this (running) process: treated as alive
    os.close(fd)
    b = arena("b", shm_dir)
    assert b.remove_previous() == 0 and len(files(owner, shm_dir)) == 2
    b.close()
    fd = os.open(path, os.O_RDWR)
    shm.write_record(fd, {**real, "start_time": real["start_time"] - 1})
    os.close(fd)
    b = arena("b", shm_dir)
    assert b.remove_previous() == 2 and files(owner, shm_dir) == [] and not os.path.exists(path)
    b.close()


def test_a_record_never_written_goes_once_old(shm_dir):
    """A process killed between creating its record and writing it leaves an empty file
    whose lock is free: a fresh one may be a creator about to lock it and is left, one
    older than ``RECORD_WAIT_S`` goes with its owner's segments."""
    owner = "unwritten"
    open(os.path.join(shm_dir, f"sglang-mm.{owner}.{secrets.token_hex(16)}"), "wb").close()
    path = record(owner, shm_dir)
    open(path, "wb").close()
    b = arena("b", shm_dir)
    assert b.remove_previous() == 0 and os.path.exists(path)
    b.close()
    old = time.time() - shm.RECORD_WAIT_S - 1
    os.utime(path, (old, old))
    b = arena("b", shm_dir)
    assert b.remove_previous() == 1 and files(owner, shm_dir) == [] and not os.path.exists(path)
    b.close()


def test_process_start_time_names_one_process():
    assert shm.process_start_time(os.getpid()) == shm.process_start_time(os.getpid()) > 0
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert shm.process_start_time(p.pid) is None
