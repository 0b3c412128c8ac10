"""The shared-memory segments (shm.ShmArena), in-process, against the real /dev/shm and the
real reader (smg_grpc_servicer.mm_shm, which unlinks what it reads).

Each test uses its own owner id, and removes what it made."""

from __future__ import annotations

import os
import secrets
import stat
import time

import numpy as np
import pytest
from smg_grpc_proto.generated import vllm_engine_pb2
from smg_grpc_servicer import mm_shm

from sglang_mm_grpc.wire import shm
from sglang_mm_grpc.kernels import wirecast

MiB = 1 << 20


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _closed_after(a: shm.ShmArena):
    yield a
    a.close()
    assert a.names() == []


@pytest.fixture
def arena():
    yield from _closed_after(shm.ShmArena(f"t{secrets.token_hex(4)}", budget_bytes=64 * MiB, lease_s=5,
                                          clock=Clock(), pool_segments=0))


def handle_of(seg_tuple) -> vllm_engine_pb2.TensorData:
    name, offset, nbytes, owner = seg_tuple
    td = vllm_engine_pb2.TensorData(dtype="float32", shape=[nbytes // 4])
    td.shm.name, td.shm.offset, td.shm.nbytes, td.shm.owner_id = name, offset, nbytes, owner
    return td


def test_namespace_id_is_the_servicers():
    assert shm.namespace_id() == mm_shm.shm_namespace_id() != ""


def test_segment_name_mode_and_round_trip(arena):
    data = np.arange(1000, dtype=np.float32)
    seg = arena.create(data.nbytes)
    wirecast.cast_into(data, seg.buffer(), "float32")
    path = f"/dev/shm/{seg.name}"
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert seg.name == mm_shm.validated_shm_name(seg.name)  # one path component
    prefix, owner, rand = seg.name.split(".")
    assert prefix == "sglang-mm" and owner == arena.owner_id and len(rand) == 32 and int(rand, 16) >= 0
    td = handle_of(arena.hand_out(seg))
    assert td.shm.owner_id == arena.owner_id and td.shm.nbytes == data.nbytes
    assert mm_shm.tensor_payload_bytes(td) == data.tobytes()
    assert not os.path.exists(path)  # the reader unlinked it
    arena.reap()
    assert arena.stats()["read"] == 1 and arena.stats()["segments"] == 0 and arena.bytes == 0


def test_configured_mode_is_exact_whatever_the_umask():
    a = shm.ShmArena(f"m{secrets.token_hex(4)}", budget_bytes=MiB, mode=0o640, pool_segments=0)
    old = os.umask(0o077)
    try:
        seg = a.create(16)
        assert stat.S_IMODE(os.lstat(f"/dev/shm/{seg.name}").st_mode) == 0o640
    finally:
        os.umask(old)
        a.close()


def test_lease_removes_what_nobody_read(arena):
    seg = arena.create(4096)
    arena.hand_out(seg)
    arena.reap()
    assert os.path.exists(f"/dev/shm/{seg.name}")  # within its lease
    arena._clock.t += 5.1
    assert arena.reap() == 1
    assert not os.path.exists(f"/dev/shm/{seg.name}")
    assert arena.stats()["removed"] == {"lease": 1} and arena.bytes == 0


def test_budget_is_never_exceeded(arena):
    small = shm.ShmArena(f"b{secrets.token_hex(4)}", budget_bytes=MiB, pool_segments=0)
    try:
        a = small.create(600_000)
        assert a is not None
        assert small.create(600_000) is None  # would pass the budget: the caller sends it inline
        assert small.stats()["inline_fallbacks"] == 1
        small.discard(a, "failed")
        assert small.create(600_000) is not None  # room again
        assert small.stats()["peak_bytes"] <= MiB
    finally:
        small.close()


def test_staged_segments_live_with_their_handle(arena):
    staged = arena.create(4096, handle="h1")
    out = arena.create(4096, handle="h1")
    arena.hand_out(out)
    arena.drop_handle([staged, out], "expired", unread_too=False)
    assert not os.path.exists(f"/dev/shm/{staged.name}")  # never handed out: gone with its handle
    assert os.path.exists(f"/dev/shm/{out.name}")  # handed out: its reader or its lease removes it
    arena.drop_handle([out], "release", unread_too=True)  # an explicit Release: the caller is done
    assert not os.path.exists(f"/dev/shm/{out.name}")
    assert arena.stats()["removed"] == {"expired": 1, "release": 1}


def test_a_staged_segment_handed_out_stays_mapped_for_its_kept_result(arena):
    seg = arena.create(4096, handle="h")
    view = seg.buffer().view(np.float32)
    view[:] = 7.0
    td = handle_of(arena.hand_out(seg, keep_mapped=True))
    assert mm_shm.tensor_payload_bytes(td) == view.tobytes()  # read and unlinked
    assert float(view[0]) == 7.0  # the kept result still reads it (another Assemble, inline)
    arena.reap()
    assert arena.bytes == 4096  # still mapped: still counted
    arena.drop_handle([seg], "release", unread_too=True)
    assert arena.bytes == 0


def test_shutdown_removes_everything(arena):
    segs = [arena.create(4096) for _ in range(3)]
    arena.hand_out(segs[0])
    arena.close()
    assert arena.names() == [] and arena.stats()["removed"] == {"shutdown": 3}


def test_a_restart_removes_only_its_previous_instances_segments(tmp_path):
    owner = f"r{secrets.token_hex(4)}"
    first = shm.ShmArena(owner, budget_bytes=MiB, pool_segments=0)
    left = [first.create(64) for _ in range(2)]
    other = shm.ShmArena(f"o{secrets.token_hex(4)}", budget_bytes=MiB, pool_segments=0)
    kept = other.create(64)
    target = tmp_path / "target"
    target.write_bytes(b"x")
    link = f"/dev/shm/sglang-mm.{owner}.{secrets.token_hex(16)}"
    os.symlink(target, link)  # a link with our prefix is not ours to follow or remove
    second = None
    try:
        # the first instance "dies" without closing; a new one with its owner id starts
        second = shm.ShmArena(owner, budget_bytes=MiB, pool_segments=0)
        # 2, and those of any instance whose process is gone (a test running beside this
        # one may have just killed a server)
        removed = second.remove_previous()
        assert removed >= 2
        assert not any(os.path.exists(f"/dev/shm/{s.name}") for s in left)
        assert os.path.lexists(link) and target.read_bytes() == b"x"
        assert os.path.exists(f"/dev/shm/{kept.name}")  # another live owner's
        assert second.stats()["removed"] == {"startup": removed}
    finally:
        os.unlink(link)
        other.close()
        if second is not None:
            second.close()  # and its liveness record with it
        for s in left:
            os.close(s.fd)


def test_pool_prefaults_and_truncates_to_size():
    a = shm.ShmArena(f"p{secrets.token_hex(4)}", budget_bytes=256 * MiB, pool_segments=2)
    try:
        first = a.create(3 * MiB + 5)  # learns the size: 4 MiB spares
        from servers import wait_until

        time.sleep(0.3)
        assert len(a.names()) == 2  # the segment and its file's home: no refill beside the write
        a.written(first)
        assert wait_until(lambda: len(a.names()) == 4, 10)  # and two spares, each its home alone
        seg = a.create(2 * MiB)  # from the pool, cut to size
        assert os.path.getsize(f"/dev/shm/{seg.name}") == 2 * MiB
        assert seg.buffer().size == 2 * MiB
        a.discard(first, "failed")
        a.discard(seg, "failed")
    finally:
        a.close()
    assert a.names() == []


def test_owner_id_is_one_name_component():
    for bad in ("a/b", "a.b", "", "x" * 65, "../x"):
        with pytest.raises(ValueError):
            shm.ShmArena(bad)
    assert shm.check_owner_id(shm.default_owner_id(50061))


def test_removal_is_claimed_once_whoever_gets_there(arena):
    """The reaper, a Release and the shutdown may reach one segment together."""
    from concurrent.futures import ThreadPoolExecutor

    segs = [arena.create(4096) for _ in range(50)]
    for s in segs:
        arena.hand_out(s)
    with ThreadPoolExecutor(4) as ex:
        list(ex.map(lambda s: [arena.discard(s, "release") for _ in range(3)], segs))
    assert arena.stats()["removed"] == {"release": 50} and arena.stats()["read"] == 0 and arena.bytes == 0


def test_a_staged_segment_whose_payload_was_not_sent_is_taken_back(arena):
    seg = arena.create(4096, handle="h")
    arena.hand_out(seg, keep_mapped=True)
    arena.take_back(seg)  # e.g. the response was over the send limit
    assert arena.stats()["handed_out"] == 0
    arena._clock.t += 100
    assert arena.reap() == 0  # no lease runs for it: it is the kept result's again
    arena.drop_handle([seg], "release", unread_too=False)
    assert arena.stats()["removed"] == {"release": 1}


def _ino(seg) -> int:
    return os.fstat(seg.fd).st_ino


def _read(seg_tuple) -> bytes:
    return mm_shm.tensor_payload_bytes(handle_of(seg_tuple))


def _held(a: shm.ShmArena) -> int:
    """The bytes of the arena's files in /dev/shm, each file once (a segment has two names)."""
    sizes = {st.st_ino: st.st_size for st in (os.stat(f"/dev/shm/{n}") for n in a.names())}
    return sum(sizes.values())


@pytest.fixture
def pooled():
    yield from _closed_after(shm.ShmArena(f"c{secrets.token_hex(4)}", budget_bytes=256 * MiB, lease_s=5,
                                          clock=Clock(), pool_segments=2))


def test_a_read_segments_file_serves_the_next_one(pooled):
    """Once its reader removed a handed-out segment's name, its file (pages and mapping)
    holds the next segment of up to its size: no new file, each read sees its own bytes."""
    from servers import wait_until

    first = pooled.create(3 * MiB + 5)
    first.buffer()[:] = 1
    handed = pooled.hand_out(first)
    assert wait_until(lambda: len(pooled.names()) == 4, 10)  # the segment, its home, two spares
    assert _read(handed) == b"\x01" * (3 * MiB + 5)
    homes = sorted(pooled.names())
    files = {os.stat(f"/dev/shm/{n}").st_ino for n in homes}
    for k, nbytes in enumerate([3 * MiB + 5, 2 * MiB, 4 * MiB, 3 * MiB + 5] * 2):  # as is, cut, grown
        seg = pooled.create(nbytes)
        assert _ino(seg) in files and seg.name not in homes
        assert os.path.getsize(f"/dev/shm/{seg.name}") == nbytes
        seg.buffer()[:] = k
        assert pooled.bytes == _held(pooled)  # counted as the files' sizes, not what they may grow to
        assert _read(pooled.hand_out(seg)) == bytes([k]) * nbytes
    assert sorted(pooled.names()) == homes  # no file made, none left
    pooled.reap()  # notes the last read
    assert pooled.stats()["read"] == 9 and pooled.stats()["written"] == 9 and pooled.stats()["segments"] == 0
    assert pooled.stats()["reused"] >= 4  # each as-is size took the file the last read gave back


def test_a_segment_this_server_removed_takes_its_file_with_it(pooled):
    """A name removed here (its lease ended, a Release) may still be being read: its file is
    never reused, and its home goes with it."""
    seg = pooled.create(MiB)
    files, home = _ino(seg), seg.home
    pooled.hand_out(seg)
    pooled._clock.t += 5.1
    assert pooled.reap() == 1
    assert not os.path.exists(f"/dev/shm/{home}")
    assert _ino(pooled.create(MiB)) != files


def test_a_kept_results_segment_is_not_reused(pooled):
    """A kept result reads its staged segment after the worker did (a later Assemble): its
    file is never another segment's; it goes with the result."""
    seg = pooled.create(MiB, handle="h")
    seg.buffer()[:] = 7
    _read(pooled.hand_out_staged(seg))
    again = pooled.create(MiB)
    assert _ino(again) != _ino(seg) and bytes(seg.buffer()[:4]) == b"\x07" * 4
    pooled.drop_handle([seg], "expired", unread_too=False)
    pooled.discard(again, "failed")
