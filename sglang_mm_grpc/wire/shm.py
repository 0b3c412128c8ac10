"""Shared-memory segments for tensors handed to a co-located worker.

The gateway's SHM transport (smg ``transport.rs`` / ``proto_wrapper.rs``, the servicers'
``mm_shm.py``): the producer writes a tensor's bytes into ``/dev/shm/<name>`` and sends
``ShmHandle{name, offset, nbytes, owner_id}``; the worker opens the name (a single path
component, ``O_NOFOLLOW``, a regular file), ``pread``s ``nbytes`` at ``offset`` and
unlinks the file. One segment per tensor: a reader unlinks after its one read, so two
tensors never share a file.

Everything a reader never reads is this server's to remove. A segment is

* *staged*: written for a kept result (Preprocess asked for SHM, so the kernels wrote
  a pixel tensor, ``pixel_values`` or ``pixel_values_videos``, straight into it) and not
  handed out yet (``hand_out_staged``, at most once); removed when its handle leaves the
  store (Release, Assemble with release, expiry, eviction);
* *out*: its handle is in a payload sent to a caller; the reader removes it, else this
  server does when its lease ends (``lease_s`` after it was handed out), when the handle
  it came from is Released, and at shutdown.

At start-up the segments a previous instance with the same owner id left behind are
removed, and so are those of every other instance whose process is gone: each instance
holds a liveness record (``sglang-mm-live.<owner_id>`` beside its segments, outside their
``sglang-mm.`` namespace) naming its owner id, pid and process start time, with an
exclusive ``flock`` on it while it lives; a record whose lock can be taken, and whose
process (that pid with that start time) no longer runs, is a dead instance's: its
segments and the record go. Segments of an owner id with no record (an older version)
are left to a restart with that id. Names are ``sglang-mm.<owner_id>.<128 random bits
in hex>``; files are created with ``O_EXCL | O_NOFOLLOW`` and mode 0600 unless
configured.

A byte budget bounds what is held at once (files in /dev/shm, and the mappings of
staged segments, which outlive their file once read); when a segment does not fit in
it, or /dev/shm itself is short of space, ``create`` returns None and the caller sends
the tensor inline. Segments are pre-faulted: a background thread keeps a few files of
the recently needed size allocated and mapped, so writing a tensor is a plain memory
copy (or the kernels' own writes) rather than a page fault per 4 KiB.

A pooled file has a second name of its own, its *home* (another ``sglang-mm.<owner_id>.``
name, never handed out): a segment is its file linked under a new name. When a reader
removes the name of a segment nothing here reads any more (a one-shot payload's, an
Assemble's copy; not a kept result's), the file, its pages and its mapping go back to the
pool for the next segment of up to its size: no new file, no zeroed pages, no page
faults, nothing freed. Readers read before they unlink (``mm_shm``: open, ``pread``,
close, unlink), so a name gone means its bytes were read; a name this server removed
itself (a lease, a Release) takes its file with it, since a reader may still be reading.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import itertools
import json
import logging
import mmap
import os
import re
import secrets
import socket
import stat
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

SHM_DIR = "/dev/shm"
NAME_PREFIX = "sglang-mm."
DEFAULT_MIN_BYTES = 64 * 1024
DEFAULT_LEASE_S = 60.0
DEFAULT_MODE = 0o600
#: The most a server keeps in /dev/shm by default: a quarter of it, at most 2 GiB.
DEFAULT_BUDGET_CAP = 2 << 30
#: Left free in /dev/shm for everyone else, whatever the budget says.
RESERVE_BYTES = 64 << 20
_OWNER = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MiB = 1 << 20

STAGED, OUT, GONE = "staged", "out", "gone"
#: The pool refills once no segment is being written: a refill (allocating and zeroing
#: tens of MB) running beside the kernels' write into the segment just taken would slow
#: that write several times over on a machine with few cores. A writer that never says
#: it is done (``written``) holds the refill back this long at most.
WRITE_WAIT_S = 1.0
#: How many of the recycled segments out longest a new segment looks at (one ``lstat``
#: each) for a file to reuse; the reaper looks at all.
RECLAIM_LOOKS = 32


def namespace_id(directory: str = SHM_DIR) -> str:
    """``<boot_id>:<st_dev of /dev/shm>``: equal in two processes iff they share the
    same tmpfs (same host, same /dev/shm), as the workers' GetServerInfo reports it.
    Empty when it cannot be determined."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot_id = f.read().strip()
        return f"{boot_id}:{os.stat(directory).st_dev}"
    except OSError:
        return ""


# -- liveness records ------------------------------------------------------------------------
#
# One small file per running instance, beside its segments, naming its owner id and its
# process (pid, start time), locked with flock while the process lives: the kernel drops
# the lock when the process dies, however it dies, so a later start can tell a dead
# instance's leftovers from a live one's. The supervisor of ``serve --processes`` keeps
# one the same way for its socket directory (server/supervisor.py).

#: ``<dir>/sglang-mm-live.<owner_id>``: not under ``NAME_PREFIX``, so no reader, sweep or
#: listing of segments takes it for one.
RECORD_PREFIX = "sglang-mm-live."
#: How long a start waits for its own record while another process holds its lock (a
#: sweeper removing a dead predecessor's segments holds it for a moment).
RECORD_WAIT_S = 2.0


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat, the process's start in clock ticks after boot: with
    the pid it names one process for the boot (a reused pid has another start). None when
    no such process runs (none, or a zombie: it has exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2:].split()  # after the name, which may hold spaces
        return None if fields[0] in (b"Z", b"X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def liveness_record(**extra) -> dict:
    """What a record says of this process."""
    pid = os.getpid()
    return {**extra, "pid": pid, "start_time": process_start_time(pid), "boot_id": _boot_id(),
            "pid_ns": _pid_namespace()}


def process_lives(record: dict) -> bool | None:
    """Whether the process a record names still runs: its pid with its start time, in this
    boot; None when that cannot be told here (another pid namespace)."""
    if record.get("boot_id") != _boot_id():
        return False  # a process of an earlier boot
    if record.get("pid_ns") != _pid_namespace():
        return None
    pid, start = record.get("pid"), record.get("start_time")
    if not isinstance(pid, int) or pid <= 0:
        return False
    return start is not None and process_start_time(pid) == start


def lock(fd: int, *, exclusive: bool = True) -> bool | None:
    """flock without waiting: True when taken, False when another process holds it, None
    when this file system has no flock."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        return True
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        return None


def write_record(fd: int, record: dict) -> None:
    data = json.dumps(record, sort_keys=True).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def read_record(fd: int) -> dict | None:
    """The record in ``fd``; None when empty (still being written) or not a record."""
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"null")
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def abandoned(fd: int) -> dict | None:
    """The record in ``fd`` (open on a record file) when its instance is gone: its lock
    could be taken (and is now held through ``fd``) and the process it names does not
    run (without flock: the process does not run, as far as can be told); ``{}`` when it
    was never written and is older than ``RECORD_WAIT_S`` (its creator died between
    creating it and taking the lock it writes under). None otherwise (and the lock is not
    kept): the instance lives, or the record is being written (a creator writes only
    under its lock, and makes its file again if it was removed before it got the lock)."""
    taken = lock(fd)
    if taken is False:
        return None
    record = read_record(fd)
    if record is None and taken and time.time() - os.fstat(fd).st_mtime > RECORD_WAIT_S:
        return {}
    lives = process_lives(record) if record is not None else True
    if lives or (taken is None and lives is None):
        if taken:
            fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    return record


def same_file(fd: int, path: str) -> bool:
    """``fd`` is still the file at ``path`` (not removed or replaced meanwhile)."""
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _own_regular_file(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()


def default_owner_id(port: int) -> str:
    """``<host>-<port>``: stable across restarts of one configured server (so a restart
    removes what the killed instance left), distinct between servers sharing /dev/shm."""
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40].strip("-") or "host"
    return f"{host}-{port}"


def check_owner_id(owner_id: str) -> str:
    if not _OWNER.match(owner_id):
        raise ValueError(f"shm owner id {owner_id!r} must be 1-64 characters of A-Z a-z 0-9 _ -")
    return owner_id


def default_budget(directory: str = SHM_DIR) -> int:
    try:
        st = os.statvfs(directory)
        return max(0, min(DEFAULT_BUDGET_CAP, st.f_blocks * st.f_frsize // 4))
    except OSError:
        return 0


@dataclass(eq=False)
class Segment:
    """One file in /dev/shm holding one tensor's bytes (``nbytes``) from offset 0."""

    name: str
    nbytes: int
    accounted: int  # bytes counted against the budget while it lives
    fd: int
    map: mmap.mmap | None
    state: str = STAGED
    lease_until: float = 0.0
    handle: str = ""  # the kept result it belongs to, if any
    owner_id: str = ""
    removed: bool = False  # claimed by one remover (under the arena's lock)
    #: The file's own name in the pool ("" when it has none): it outlives the reader's
    #: unlink of ``name``, so the file serves a later segment. A pool entry's name is it.
    home: str = ""

    @property
    def capacity(self) -> int:
        """The most bytes a later segment in this file may hold: the mapping's length."""
        return len(self.map) if self.map is not None else 0

    def buffer(self) -> np.ndarray:
        """The segment's bytes as a writable uint8 array (while it is mapped)."""
        if self.map is None:
            raise ValueError(f"segment {self.name} is not mapped")
        return np.frombuffer(self.map, dtype=np.uint8, count=self.nbytes)


@dataclass
class ShmCounters:
    written: int = 0
    handed_out: int = 0
    read: int = 0
    removed: Counter = field(default_factory=Counter)
    inline_fallbacks: int = 0
    peak_bytes: int = 0
    reused: int = 0  # segments written into a file an earlier, read one gave back


class ShmArena:
    """This server's segments: create (from a pre-faulted pool), hand out, remove."""

    def __init__(
        self,
        owner_id: str,
        *,
        budget_bytes: int | None = None,
        lease_s: float = DEFAULT_LEASE_S,
        mode: int = DEFAULT_MODE,
        directory: str = SHM_DIR,
        pool_segments: int = 2,
        clock=time.monotonic,
    ):
        self.owner_id = check_owner_id(owner_id)
        self.directory = directory
        self.budget = default_budget(directory) if budget_bytes is None else int(budget_bytes)
        self.lease_s = float(lease_s)
        self.mode = int(mode)
        self.namespace_id = namespace_id(directory)
        self.counters = ShmCounters()
        self._clock = clock
        self._lock = threading.Lock()
        self._live: dict[str, Segment] = {}  # every segment counted against the budget
        self._bytes = 0
        self._pool: list[Segment] = []  # pre-faulted, unused
        self._pool_segments = pool_segments
        self._pool_size = 0  # bytes per pooled segment: the largest recently asked for
        self._wake = threading.Event()
        self._writing: dict[str, float] = {}  # segments being written: name -> time.monotonic() taken
        self._unmaps: deque[Segment] = deque()  # mappings the background thread drops
        self._recycling: dict[str, Segment] = {}  # handed out, read by nobody here: name -> segment
        self._links = True  # files get a home name (False once a link failed here)
        self._closed = False
        self._filler: threading.Thread | None = None
        self._record_fd = -1  # this instance's liveness record, locked while it lives

    # -- life cycle ----------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        return f"{NAME_PREFIX}{self.owner_id}."

    def remove_previous(self) -> int:
        """Start-up: take this instance's liveness record, then remove the segments a
        previous instance with this owner id left and those of every instance whose process
        is gone (regular files of this user only, never following a link), counted as
        ``startup``. ValueError when a live instance holds this owner id's record."""
        self._hold_record()
        n = self._remove_files(self.prefix)
        if n:
            log.warning("removed %d shared-memory segments a previous instance (owner %s) left", n, self.owner_id)
        n += self._remove_dead_owners()
        if n:
            with self._lock:
                self.counters.removed["startup"] += n
        return n

    def _remove_files(self, prefix: str) -> int:
        """Remove the regular files of this user named ``prefix...`` (not this arena's own)."""
        n = 0
        try:
            names = os.listdir(self.directory)
        except OSError:
            return 0
        for name in names:
            if not name.startswith(prefix) or name in self._live:
                continue
            path = os.path.join(self.directory, name)
            try:
                if _own_regular_file(os.lstat(path)):
                    os.unlink(path)
                    n += 1
            except OSError:
                continue
        return n

    def _record_path(self, owner_id: str) -> str:
        return os.path.join(self.directory, RECORD_PREFIX + owner_id)

    def _hold_record(self) -> None:
        """Create (or take over a dead predecessor's) ``sglang-mm-live.<owner_id>`` and hold
        its lock for this instance's life. Without a writable directory there is no record
        (and no segments either)."""
        path = self._record_path(self.owner_id)
        deadline = time.monotonic() + RECORD_WAIT_S
        while self._record_fd < 0:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as e:
                log.warning("no shared-memory liveness record %s: %s", path, e)
                return
            try:
                taken = self._take_record(fd, path, deadline)
            except BaseException:
                os.close(fd)
                raise
            if taken:
                self._record_fd = fd
            else:
                os.close(fd)
                time.sleep(0.05)

    def _take_record(self, fd: int, path: str, deadline: float) -> bool:
        if not _own_regular_file(os.fstat(fd)):
            raise ValueError(f"{path} is not a regular file of this user")
        if lock(fd) is False:
            if time.monotonic() < deadline:
                return False  # a sweeper has it for a moment, or its owner lives: look again
            held = read_record(fd) or {}
            raise ValueError(f"shm owner id {self.owner_id} is in use by a live instance "
                             f"(pid {held.get('pid', '?')}); give each server its own --shm-owner-id")
        if not same_file(fd, path):
            return False  # a sweeper removed it meanwhile: create it again
        write_record(fd, liveness_record(owner_id=self.owner_id))
        return True

    def _drop_record(self) -> None:
        fd, self._record_fd = self._record_fd, -1
        if fd < 0:
            return
        path = self._record_path(self.owner_id)
        if same_file(fd, path):  # still ours: removed under its lock
            _unlink(path)
        os.close(fd)

    def _remove_dead_owners(self) -> int:
        """Every other owner whose record says its instance is gone: its segments, then the
        record, under the record's lock (so its owner id cannot start again meanwhile)."""
        n = 0
        try:
            names = [x for x in os.listdir(self.directory) if x.startswith(RECORD_PREFIX)]
        except OSError:
            return 0
        for name in names:
            owner = name[len(RECORD_PREFIX):]
            if owner != self.owner_id and _OWNER.match(owner):
                n += self._remove_dead_owner(owner)
        return n

    def _remove_dead_owner(self, owner: str) -> int:
        path = self._record_path(owner)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return 0
        try:
            if not _own_regular_file(os.fstat(fd)):
                return 0
            record = abandoned(fd)
            if record is None or record.get("owner_id", owner) != owner or not same_file(fd, path):
                return 0
            n = self._remove_files(f"{NAME_PREFIX}{owner}.")
            _unlink(path)
        finally:
            os.close(fd)
        log.log(logging.WARNING if n else logging.INFO,
                "removed %d shared-memory segments of owner %s, whose instance (pid %s) is gone",
                n, owner, record.get("pid", "?"))
        return n

    def writable(self) -> bool:
        """Whether a segment can be created here now (a one-byte probe, removed at once)."""
        try:
            seg = self._new_file(1, accounted=0)
        except OSError as e:
            log.warning("cannot create a shared-memory segment in %s: %s", self.directory, e)
            self._drop_record()  # this arena will not be used
            return False
        self._unmap(seg)
        _unlink(os.path.join(self.directory, seg.name))
        os.close(seg.fd)
        return True

    def close(self) -> None:
        """Shutdown: remove every segment (unread ones are counted as such) and the pool."""
        with self._lock:
            self._closed = True
            segments = list(self._live.values())
        self._wake.set()
        if self._filler is not None:
            self._filler.join(5)
        for seg in segments:
            self._remove(seg, "shutdown", count=seg.state != GONE and seg not in self._pool)
        with self._lock:
            self._pool.clear()
        self._drop_record()  # last: until here a start with this owner id waits for us

    # -- creating ------------------------------------------------------------------------

    def create(self, nbytes: int, handle: str = "") -> Segment | None:
        """A mapped segment of exactly ``nbytes`` (> 0), or None when the budget or /dev/shm
        has no room for it (the caller sends the tensor inline)."""
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise ValueError("a segment holds at least one byte")
        seg = self._from_pool(nbytes)
        if seg is None:
            if not self._reserve(nbytes):
                with self._lock:
                    self.counters.inline_fallbacks += 1
                return None
            try:
                capacity = -(-nbytes // _MiB) * _MiB if self._homes() else nbytes  # room for a later segment
                seg = self._new_file(nbytes, accounted=nbytes, capacity=capacity, home=self._homes())
            except OSError as e:
                self._unreserve(nbytes)
                log.warning("cannot create a shared-memory segment of %d bytes: %s; sending inline", nbytes, e)
                with self._lock:
                    self.counters.inline_fallbacks += 1
                return None
            with self._lock:
                self._live[seg.name] = seg
        if seg.home and not self._named(seg):
            self._remove(seg, "", count=False)
            with self._lock:
                self.counters.inline_fallbacks += 1
            return None
        seg.handle = handle
        with self._lock:
            self._live[seg.name] = seg
            self._writing[seg.name] = time.monotonic()
            self.counters.written += 1
        self._learn(nbytes)
        return seg

    def _reserve(self, nbytes: int) -> bool:
        if not self._fits_dev_shm(nbytes):
            return False
        with self._lock:
            if self._closed or self._bytes + nbytes > self.budget:
                return False
            self._bytes += nbytes
            self.counters.peak_bytes = max(self.counters.peak_bytes, self._bytes)
            return True

    def _unreserve(self, nbytes: int) -> None:
        with self._lock:
            self._bytes -= nbytes

    def _fits_dev_shm(self, nbytes: int) -> bool:
        try:
            st = os.statvfs(self.directory)
        except OSError:
            return False
        return st.f_bavail * st.f_frsize >= nbytes + RESERVE_BYTES

    def _homes(self) -> bool:
        """Whether new files get a home name (a pool, and links that work here)."""
        return self._pool_segments > 0 and self._links

    def _new_file(self, nbytes: int, accounted: int, capacity: int | None = None, home: bool = False) -> Segment:
        """A file of ``nbytes`` mapped for ``capacity`` bytes (a later segment in it may
        grow to that), named as a segment, or as its own home (``home``)."""
        name = self.prefix + secrets.token_hex(16)
        path = os.path.join(self.directory, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, self.mode)
        try:
            if self.mode != DEFAULT_MODE:
                os.fchmod(fd, self.mode)  # exactly as configured, whatever the umask
            _resize(fd, 0, nbytes)  # the pages now, not at the first write
            length = max(nbytes, capacity or 0)
            if length > nbytes:  # mmap maps no more than the file holds: room first, then the size
                os.ftruncate(fd, length)
            m = _mapped(fd, nbytes, length)
            if length > nbytes:
                os.ftruncate(fd, nbytes)
        except BaseException:
            os.close(fd)
            _unlink(path)
            raise
        return Segment(name, nbytes, accounted, fd, m, owner_id=self.owner_id, home=name if home else "")

    def _named(self, seg: Segment) -> bool:
        """Give a file taken from its home a new segment name: a second link, so the file
        outlives its reader's unlink; where links cannot be made, its home becomes its name
        (renamed: no second name, no reuse). False when neither worked (nothing changed)."""
        name = self.prefix + secrets.token_hex(16)
        home, new = os.path.join(self.directory, seg.home), os.path.join(self.directory, name)
        try:
            if self._links:
                try:
                    os.link(home, new)
                except OSError as e:
                    log.warning("cannot link shared-memory segments in %s (%s): each is a new file", self.directory, e)
                    self._links = False
            if not self._links:
                os.rename(home, new)
                seg.home = ""
        except OSError as e:
            log.warning("cannot name a shared-memory segment: %s; sending inline", e)
            return False
        with self._lock:
            self._live.pop(seg.name, None)
            seg.name = name
        return True

    # -- the pre-faulted pool --------------------------------------------------------------

    def _from_pool(self, nbytes: int) -> Segment | None:
        """A pooled file cut (or grown, within the budget) to ``nbytes``: one of the same
        size first, else the smallest that holds it. It counts as its size; None when none
        fits (a file that cannot grow is let go)."""
        self._reclaim()
        with self._lock:
            fits = [s for s in self._pool if s.capacity >= nbytes]
            if not fits:
                return None
            seg = min(fits, key=lambda s: (s.nbytes != nbytes, s.capacity))
            self._pool.remove(seg)
            given_back = seg.state == GONE  # by ``_reclaim``: its last segment was read
            seg.state = STAGED
        if seg.nbytes != nbytes:
            grow = nbytes - seg.nbytes
            if grow > 0 and not self._reserve(grow):  # no room to grow it: let it go
                self._remove(seg, "", count=False)
                return None
            try:
                _resize(seg.fd, seg.nbytes, nbytes)
            except OSError:
                if grow > 0:
                    self._unreserve(grow)
                self._remove(seg, "", count=False)
                return None
            with self._lock:
                self._bytes += min(grow, 0)
                seg.accounted = seg.nbytes = nbytes
        if given_back:
            with self._lock:
                self.counters.reused += 1
        return seg

    def _reclaim(self, limit: int | None = RECLAIM_LOOKS) -> None:
        """The files of recycled segments whose readers removed their names go back to
        the pool (those the pool has no room or use for, away in the background); looks at
        the ``limit`` longest out (None: all)."""
        with self._lock:
            if not self._recycling:
                return
            waiting = list(itertools.islice(self._recycling.values(), limit))
        for seg in waiting:
            if os.path.lexists(os.path.join(self.directory, seg.name)):
                continue
            with self._lock:
                if self._recycling.pop(seg.name, None) is None or seg.removed or seg.state != OUT:
                    continue
                seg.removed, seg.state = True, GONE
                self.counters.read += 1
                self._live.pop(seg.name, None)
                entry = Segment(seg.home, seg.nbytes, seg.accounted, seg.fd, seg.map, state=GONE,
                                owner_id=self.owner_id, home=seg.home)
                seg.fd, seg.map, seg.home = -1, None, ""
                self._live[entry.name] = entry
                pooled = (not self._closed and entry.capacity >= self._pool_size
                          and len(self._pool) < 2 * self._pool_segments
                          and sum(s.capacity for s in self._pool) + entry.capacity <= self.budget // 4)
                if pooled:
                    self._pool.append(entry)
            if not pooled:
                self._unmap_later(entry)  # then its fd and its home go

    def _learn(self, nbytes: int) -> None:
        """Pool segments are the size of the largest tensor recently asked for (rounded up
        to a MiB), and only if two of them fit in a quarter of the budget."""
        size = -(-nbytes // _MiB) * _MiB
        with self._lock:
            if self._pool_segments <= 0 or size * 2 > self.budget // 4 or size <= self._pool_size:
                return
            self._pool_size = size
            if self._filler is None:
                self._filler = threading.Thread(target=self._fill, name="shm-prefault", daemon=True)
                self._filler.start()
        self._wake.set()

    def written(self, seg: Segment) -> None:
        """Its writer is done with ``seg`` (handing out and removing say so too): once no
        segment is being written, the pool refills, if it lacks anything (with files given
        back by readers it mostly does not: the background thread is then left asleep)."""
        with self._lock:
            if self._writing.pop(seg.name, None) is None or self._writing:
                return
            fits = sum(1 for s in self._pool if s.capacity >= self._pool_size)
            if fits == len(self._pool) and fits >= self._pool_segments:
                return
        self._wake.set()

    def _being_written(self) -> bool:
        now = time.monotonic()
        with self._lock:
            return any(now - t < WRITE_WAIT_S for t in self._writing.values())

    def _fill(self) -> None:
        """The background thread: drops the mappings handed to it, refills the pool."""
        while True:
            self._wake.wait(WRITE_WAIT_S)
            self._wake.clear()
            while True:
                self._drain_unmaps()
                if self._closed:
                    return
                if self._being_written():  # written() wakes this thread when they are done
                    break
                self._reclaim()
                with self._lock:
                    if self._closed:
                        return
                    size = self._pool_size
                    stale = [s for s in self._pool if s.capacity < size]
                    need = len([s for s in self._pool if s.capacity >= size]) < self._pool_segments
                for s in stale:  # smaller than what is asked for now
                    with self._lock:
                        if s not in self._pool:
                            continue  # a writer took it meanwhile: it is theirs now
                        self._pool.remove(s)
                    self._remove(s, "", count=False)
                if not need or not self._reserve(size):
                    break
                try:
                    seg = self._new_file(size, accounted=size, home=self._homes())
                except OSError as e:
                    self._unreserve(size)
                    log.debug("pre-faulting a shared-memory segment failed: %s", e)
                    break
                with self._lock:
                    if self._closed:
                        closed = True
                    else:
                        closed = False
                        self._live[seg.name] = seg
                        self._pool.append(seg)
                if closed:
                    self._remove(seg, "", count=False)
                    return

    # -- handing out and removing --------------------------------------------------------------

    def hand_out(self, seg: Segment, *, keep_mapped: bool = False) -> tuple[str, int, int, str]:
        """Mark ``seg`` sent: (name, offset, nbytes, owner_id) for its ShmHandle. Its lease
        starts now. ``keep_mapped``: a kept result still reads its bytes (staged tensors)."""
        with self._lock:
            self._sent(seg)
            recycled = not keep_mapped and self._recycle(seg)
        self.written(seg)
        if not keep_mapped and not recycled:
            self._unmap_later(seg)
        return seg.name, 0, seg.nbytes, self.owner_id

    def _recycle(self, seg: Segment) -> bool:  # under the lock
        """Reuse ``seg``'s file once its reader removed its name, if it has a home and was
        handed out and nothing here reads it any more (no kept result)."""
        if not seg.home or seg.handle or seg.state != OUT or seg.removed or self._closed:
            return False
        self._recycling[seg.name] = seg
        return True

    def hand_out_staged(self, seg: Segment) -> tuple[str, int, int, str] | None:
        """``hand_out`` of a staged segment, which stays mapped for the result that reads
        it; None when another payload handed it out or it was removed first (two
        Assembles of one handle at once, an expiry): that payload copies instead."""
        with self._lock:
            if seg.state != STAGED or seg.removed:
                return None
            self._sent(seg)
        self.written(seg)
        return seg.name, 0, seg.nbytes, self.owner_id

    def _sent(self, seg: Segment) -> None:  # under the lock
        seg.state = OUT
        seg.lease_until = self._clock() + self.lease_s
        self.counters.handed_out += 1

    def discard(self, seg: Segment, why: str) -> None:
        """Remove a segment that will not be handed out (or whose payload was not sent)."""
        self._remove(seg, why, count=True)

    def take_back(self, seg: Segment) -> None:
        """A staged segment whose payload was not sent after all is its kept result's again."""
        with self._lock:
            if seg.state == OUT and not seg.removed:
                seg.state = STAGED
                self.counters.handed_out -= 1

    def drop_handle(self, segments, why: str, *, unread_too: bool) -> None:
        """A kept result left the store: its staged segments go; those it handed out too
        when ``unread_too`` (an explicit Release: the caller is done with them); its
        mappings are dropped either way."""
        for seg in segments:
            if seg.state == STAGED or (unread_too and seg.state == OUT):
                self._remove(seg, why, count=True)
                continue
            with self._lock:
                recycled = self._recycle(seg)
            if not recycled:
                self._unmap_later(seg)

    def reap(self) -> int:
        """Note what readers removed; remove what outlived its lease. Returns how many were
        removed here."""
        now = self._clock()
        self._reclaim(None)
        with self._lock:
            out = [s for s in self._live.values() if s.state == OUT]
            recycling = set(self._recycling)
        n = 0
        for seg in out:
            if seg.name not in recycling and not os.path.lexists(os.path.join(self.directory, seg.name)):
                with self._lock:
                    if seg.state != OUT or seg.removed:
                        continue
                    self.counters.read += 1
                    seg.state = GONE
                    unmapped = seg.map is None  # else its kept result unmaps it when it goes
                if unmapped:
                    self._unmap_later(seg)  # nothing to unmap: its fd closed, off the event loop
            elif seg.lease_until <= now:
                self._remove(seg, "lease", count=True)
                n += 1
        return n

    def _unmap(self, seg: Segment) -> None:
        with self._lock:
            m, seg.map = seg.map, None
        if m is not None:
            try:
                m.close()
            except BufferError:  # an array still views it; it unmaps when that is freed
                pass

    def _unmap_later(self, seg: Segment) -> None:
        """Unmap ``seg`` and, once its file is gone, close it, in the background thread when
        there is one: closing a 22 MB mapping holds the GIL for 1-2 ms, and closing a read
        segment's last fd frees its pages (~1 ms for 5.6 MB), which a call would otherwise
        pay, before its response or on the event loop."""
        with self._lock:
            queued = self._filler is not None and not self._closed
            if queued:
                self._unmaps.append(seg)
        if queued:
            self._wake.set()
        else:
            self._unmap(seg)
            self._settle(seg)

    def _drain_unmaps(self) -> None:
        while True:
            with self._lock:
                if not self._unmaps:
                    return
                seg = self._unmaps.popleft()
            self._unmap(seg)
            self._settle(seg)

    def _settle(self, seg: Segment) -> None:
        """Stop counting a segment whose file is gone and which is no longer mapped here."""
        if seg.state == GONE and seg.map is None:
            self._forget(seg)

    def _forget(self, seg: Segment) -> None:
        """Close ``seg``'s file and remove its home, then stop counting it: a segment no
        longer counted (in ``stats``, the budget) has no file left here."""
        with self._lock:
            fd, seg.fd = seg.fd, -1
            home, seg.home = seg.home, ""
        if home:
            _unlink(os.path.join(self.directory, home))
        if fd >= 0:
            os.close(fd)
        with self._lock:
            if self._live.pop(seg.name, None) is not None:
                self._bytes -= seg.accounted

    def _remove(self, seg: Segment, why: str, *, count: bool) -> None:
        with self._lock:
            if seg.removed:  # another thread is at it (reaper, a Release, shutdown)
                return
            self._recycling.pop(seg.name, None)  # removed here: a reader may still be at it
            seg.removed = True
            unread = seg.state != GONE
            seg.state = GONE
        self.written(seg)
        self._unmap(seg)
        if unread:
            try:
                os.unlink(os.path.join(self.directory, seg.name))
            except FileNotFoundError:  # its reader was first
                unread = False
                with self._lock:
                    if count:
                        self.counters.read += 1
        if count and unread and why:
            with self._lock:
                self.counters.removed[why] += 1
        self._forget(seg)

    # -- reading the state ---------------------------------------------------------------------

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._bytes

    def stats(self) -> dict:
        with self._lock:
            c = self.counters
            return {
                "segments": len(self._live) - len(self._pool),
                "bytes": self._bytes,
                "peak_bytes": c.peak_bytes,
                "written": c.written,
                "handed_out": c.handed_out,
                "read": c.read,
                "removed": dict(c.removed),
                "inline_fallbacks": c.inline_fallbacks,
                "reused": c.reused,
            }

    def names(self) -> list[str]:
        """Files of this owner in /dev/shm now (pool files included)."""
        try:
            return sorted(n for n in os.listdir(self.directory) if n.startswith(self.prefix))
        except OSError:
            return []


_MADV_POPULATE_WRITE = 23  # Linux 5.14+


def _mapped(fd: int, nbytes: int, length: int) -> mmap.mmap:
    """A shared writable mapping of ``length`` bytes (past the file's ``nbytes``: room for
    a later, larger segment in the same file), its page table filled for writing the
    file's bytes, so writing the tensor takes no fault at all (MADV_POPULATE_WRITE; before
    Linux 5.14, MAP_POPULATE, which maps shared pages read-only and leaves one cheap write
    fault per page)."""
    prot = mmap.PROT_READ | mmap.PROT_WRITE
    m = mmap.mmap(fd, length, flags=mmap.MAP_SHARED, prot=prot)
    if _populate_for_writing(m, nbytes):
        return m
    m.close()
    return mmap.mmap(fd, length, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=prot)


def _libc_madvise():
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
    return fn


_madvise = _libc_madvise()


def _populate_for_writing(m: mmap.mmap, nbytes: int) -> bool:
    """MADV_POPULATE_WRITE through libc, so the GIL is released while the kernel fills the
    page table (~2 us a page: mmap.madvise would hold the GIL for ~10 ms per 22 MB)."""
    if _madvise is None:
        return False
    view = ctypes.c_char.from_buffer(m)
    addr = ctypes.addressof(view)
    del view  # no export left: the mapping stays where it is while ``m`` is open
    return _madvise(addr, nbytes, _MADV_POPULATE_WRITE) == 0


def _resize(fd: int, old: int, new: int) -> None:
    """Cut a file to ``new`` bytes, or grow it with its pages allocated now: a full
    ``/dev/shm`` then fails here (ENOSPC), never as a SIGBUS in the kernels' write."""
    if new < old:
        os.ftruncate(fd, new)
        return
    try:
        os.posix_fallocate(fd, old, new - old)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        os.ftruncate(fd, new)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
