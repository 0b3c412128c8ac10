"""``serve --processes N``: N server processes sharing one port, under one supervisor.

One Python process leaves cores idle whenever the GIL-bound parts (gRPC, protobuf, the
event loop) are busy; N processes each run their own. They share the port with
SO_REUSEPORT (as grpc's multiprocessing example does): the kernel spreads connections
over the processes that listen.

The supervisor (this module, the process ``serve`` started):

1. checks that the port is free (a port held by another program is an error, as with
   one process) and keeps it reserved: a socket bound with SO_REUSEPORT but not
   listening, so no other program can take it and ``--port 0`` has one number for all;
2. starts process 0 alone and waits until it is warm: it compiles the numba kernels
   into the cache once; then starts the others, which load them from the cache;
3. when every process is warm, tells them to listen: the port reports SERVING only
   when all N are ready, and every connection reaches a warm process;
4. forwards SIGTERM/SIGINT to all of them (each drains on its own: NOT_SERVING,
   ``--drain-delay``, grace) and exits 0 when they have;
5. restarts a process that dies while serving (it binds the port again once warm; the
   handles it kept are gone, so Assemble for them answers NOT_FOUND).

Processes are spawned (never forked: grpc does not survive a fork), die with the
supervisor (``PR_SET_PDEATHSIG``), and reach each other over Unix sockets in a private
directory (``siblings.py``), which is where Assemble/Release for a sibling's handle go.

Nothing is left in the temporary directory when the supervisor is killed: the socket
directory holds a liveness record (``supervisor``: its pid and process start time, as
``shm.liveness_record``), on which the supervisor and every process hold a shared
``flock``. A process that finds, as it exits, that the supervisor is gone drops its lock
and tries for an exclusive one: the last one out gets it and removes the directory. A
start of ``serve --processes`` removes the directories whose record's lock can be taken
and whose supervisor no longer runs (everyone killed at once); directories without a
record (older versions) are left.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import fcntl
import logging
import multiprocessing as mp
import os
import shutil
import signal
import socket
import stat
import tempfile
import time
from multiprocessing.connection import Connection, wait as wait_any
from multiprocessing.process import BaseProcess

from ..wire.shm import abandoned, default_owner_id, liveness_record, lock, process_lives, read_record, write_record
from .allocator import tune_for_large_tensors
from .app import bind_failure, serve

log = logging.getLogger(__name__)

_RESTART_BACKOFF_S = (0.5, 1, 2, 5, 10)
_DIR_PREFIX = "sglang-mm-grpc-"
_RECORD = "supervisor"  # the liveness record in the socket directory
_LAST_OUT_WAIT_S = 5.0
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[p{index}]: %(message)s"


def default_processes() -> int:
    """``serve --processes`` when not given: 1. Measured on 2 cores (docs/PERFORMANCE.md,
    "Several processes"): 2 processes served 8 clients' Preprocess flows 1.3-1.5x as fast
    as one, but each process holds its own models, cache and handle store, and a two-phase flow
    may cost a forward between them; so more processes are a choice, sized with
    ``--processes`` (Kubernetes: one per core the pod gets, see deploy/kubernetes)."""
    return 1


# -- the port ---------------------------------------------------------------------------


def reserve_port(host: str, port: int) -> tuple[int, list[socket.socket]]:
    """Check ``host:port`` is free and hold it (SO_REUSEPORT, bound, not listening) for
    the processes; returns the port (picked when 0) and the sockets to keep open."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        raise OSError(bind_failure(host, port)) from None
    held: list[socket.socket] = []
    try:
        for family, _, _, _, sockaddr in dict.fromkeys((i[0], i[1], i[2], i[3], i[4]) for i in infos):
            address = (sockaddr[0], port, *sockaddr[2:])
            # Free at all? (bound without SO_REUSEPORT: fails if anyone holds it)
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(address)
                except OSError:
                    raise OSError(bind_failure(host, port)) from None
                if port == 0:
                    port = probe.getsockname()[1]
                    address = (sockaddr[0], port, *sockaddr[2:])
            s = socket.socket(family, socket.SOCK_STREAM)
            held.append(s)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind(address)
    except BaseException:
        for s in held:
            s.close()
        raise
    return port, held


# -- the socket directory ---------------------------------------------------------------


def make_directory() -> tuple[str, int]:
    """The sibling sockets' directory (0700: only this user) with the supervisor's liveness
    record in it, held (a shared lock) through the returned descriptor."""
    directory = tempfile.mkdtemp(prefix=_DIR_PREFIX)
    fd = os.open(os.path.join(directory, _RECORD), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    for _ in range(200):  # a sweeper may look at the empty record for a moment
        if lock(fd, exclusive=False) is not False:
            break
        time.sleep(0.01)
    write_record(fd, liveness_record(directory=directory))
    return directory, fd


def remove_stale_directories(root: str | None = None) -> int:
    """Remove the socket directories (of this user) whose supervisor and processes are all
    gone: the record's lock can be taken and its supervisor does not run. Returns how many."""
    root = root or tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(_DIR_PREFIX)]
    except OSError:
        return 0
    removed = 0
    for name in names:
        path = os.path.join(root, name)
        try:
            dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if os.fstat(dfd).st_uid != os.geteuid():
                continue
            fd = os.open(_RECORD, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dfd)
        except OSError:  # no record: an older version's directory, or one being made
            continue
        finally:
            os.close(dfd)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode) and abandoned(fd) is not None:
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
        finally:
            os.close(fd)
    if removed:
        log.info("removed %d socket directories of killed serve --processes in %s", removed, root)
    return removed


def _join_directory(directory: str) -> int:
    """A process's shared lock on the supervisor's record (-1 when it cannot have one)."""
    try:
        fd = os.open(os.path.join(directory, _RECORD), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return -1
    if lock(fd, exclusive=False) is False:
        os.close(fd)
        return -1
    return fd


def _leave_directory(directory: str, fd: int, supervisor_pid: int) -> None:
    """A process exits: when the supervisor is gone, the last one out removes the directory.
    The supervisor's death signal comes when its main thread exits: its other threads may
    still run a moment (this process's parent is then one of them, the same pid, and the
    supervisor's lock is held until the last has gone), and a sibling may be leaving at
    the same time; so it looks for a while (and at least one of them finds the lock free)."""
    if fd < 0:
        return
    try:
        record = read_record(fd) or {}
        if os.getppid() == supervisor_pid and process_lives(record) is not False:
            return  # the supervisor lives and removes it when it stops
        fcntl.flock(fd, fcntl.LOCK_UN)
        end = time.monotonic() + _LAST_OUT_WAIT_S
        while abandoned(fd) is None:  # someone still holds it
            if time.monotonic() >= end:
                return  # a sibling still serving: it is the last one out
            time.sleep(0.05)
        shutil.rmtree(directory, ignore_errors=True)
    finally:
        os.close(fd)


# -- one process ------------------------------------------------------------------------


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _exit_on_term(signum, _frame) -> None:
    raise SystemExit(0)


def _child(config, index: int, conn, log_level: int, supervisor_pid: int) -> None:
    """Entry point of process ``index`` (spawned)."""
    _die_with_parent()
    if os.getppid() != supervisor_pid:  # it died before this process asked to die with it
        raise SystemExit(1)
    # until serve() takes SIGTERM over (it drains), it ends this process through the cleanup below
    signal.signal(signal.SIGTERM, _exit_on_term)
    held = _join_directory(config.sibling_dir)
    try:
        _serve_child(config, index, conn, log_level)
    finally:
        # Leaving: a second death signal (one per supervisor thread that exits) must not cut
        # the cleanup short, now that serve() has handed SIGTERM back to its default.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _leave_directory(config.sibling_dir, held, supervisor_pid)


def _serve_child(config, index: int, conn, log_level: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor forwards a Ctrl-C as SIGTERM
    logging.basicConfig(level=log_level, format=_LOG_FORMAT.format(index=index))
    if config.tune_malloc:
        tune_for_large_tensors()

    async def before_listen() -> None:
        conn.send(("warm",))
        loop = asyncio.get_running_loop()
        message = await loop.run_in_executor(None, _receive, conn)
        if message != ("listen",):
            raise RuntimeError(f"supervisor said {message!r}, not listen")

    code = asyncio.run(serve(config, before_listen=before_listen, signals=(signal.SIGTERM,)))
    raise SystemExit(code)


def _receive(conn):
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


@dataclasses.dataclass
class _Proc:
    index: int
    process: BaseProcess
    conn: Connection
    warm: bool = False
    started: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        assert self.process.pid is not None  # started by Supervisor._start
        return self.process.pid


# -- the supervisor ---------------------------------------------------------------------


class Supervisor:
    def __init__(self, config, log_level: int | None = None):
        self.config = config
        self.n = config.processes
        self.log_level = log_level if log_level is not None else logging.getLogger().getEffectiveLevel()
        self.ctx = mp.get_context("spawn")
        self.procs: dict[int, _Proc] = {}
        self.stopping = False
        self.restarts: dict[int, int] = {}
        self.signalled: set[int] = set()

    def _config_for(self, index: int, port: int, directory: str):

        return dataclasses.replace(
            self.config, port=port, process_index=index, sibling_dir=directory,
            # each process owns its own shared-memory segments (a restart removes only its own)
            shm_owner_id=f"{self.config.shm_owner_id or default_owner_id(port)}-p{index}",
        )

    def _start(self, index: int) -> _Proc:
        parent, child = self.ctx.Pipe()
        process = self.ctx.Process(
            target=_child,
            args=(self._config_for(index, self.port, self.directory), index, child, self.log_level, os.getpid()),
            name=f"sglang-mm-grpc-p{index}", daemon=False,
        )
        process.start()
        child.close()
        proc = self.procs[index] = _Proc(index, process, parent)
        log.info("process %d started (pid %d)", index, process.pid)
        return proc

    def _signal(self, signum, _frame) -> None:
        if not self.stopping:
            log.info("signal received: stopping %d processes (each drains)", self.n)
        self.stopping = True
        for proc in self.procs.values():
            if proc.process.is_alive() and proc.pid not in self.signalled:
                self.signalled.add(proc.pid)  # once: a second SIGTERM would kill it mid-drain
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def _await_warm(self, indexes: list[int]) -> bool:
        """Wait until these processes are warm; False if one exits first or a signal came."""
        waiting = {i for i in indexes}
        while waiting and not self.stopping:
            ready = wait_any([self.procs[i].conn for i in waiting] + [self.procs[i].process.sentinel for i in waiting],
                             timeout=0.2)
            for i in list(waiting):
                proc = self.procs[i]
                if proc.conn in ready and _poll(proc.conn) == ("warm",):
                    proc.warm = True
                    waiting.discard(i)
                    log.info("process %d warm after %.1fs", i, time.monotonic() - proc.started)
                elif not proc.process.is_alive():
                    log.error("process %d exited with %s before it was warm", i, proc.process.exitcode)
                    return False
        return not waiting

    def run(self) -> int:
        cfg = self.config
        self.port, self._reserved = reserve_port(cfg.host, cfg.port)
        remove_stale_directories()
        self.directory, record = make_directory()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._signal)
        log.info("serving %s:%d with %d processes (process 0 first: it compiles what the kernel cache lacks)",
                 cfg.host, self.port, self.n)
        try:
            self._start(0)
            ok = self._await_warm([0])
            if ok:
                for i in range(1, self.n):
                    self._start(i)
                ok = self._await_warm(list(range(1, self.n)))
            if not ok:
                return self._shutdown(1 if not self.stopping else 0)
            for proc in self.procs.values():
                proc.conn.send(("listen",))
            log.info("all %d processes warm: listening on %s:%d", self.n, cfg.host, self.port)
            return self._supervise()
        finally:
            for s in self._reserved:
                s.close()
            shutil.rmtree(self.directory, ignore_errors=True)
            os.close(record)

    def _supervise(self) -> int:
        while not self.stopping:
            sentinels = {p.process.sentinel: p for p in self.procs.values()}
            conns = {p.conn: p for p in self.procs.values() if not p.warm}
            ready = wait_any([*sentinels, *conns], timeout=0.5)
            for conn, proc in conns.items():
                if conn in ready and _poll(conn) == ("warm",):  # a restarted process is warm: let it join the port
                    proc.warm = True
                    conn.send(("listen",))
                    log.info("process %d warm again after %.1fs: listening", proc.index,
                             time.monotonic() - proc.started)
            for sentinel, proc in sentinels.items():
                if sentinel not in ready or self.stopping or proc.process.is_alive():
                    continue
                n = self.restarts.get(proc.index, 0)
                delay = _RESTART_BACKOFF_S[min(n, len(_RESTART_BACKOFF_S) - 1)]
                log.error("process %d (pid %d) exited with %s; restarting it in %gs (its handles are gone)",
                          proc.index, proc.process.pid, proc.process.exitcode, delay)
                self.restarts[proc.index] = n + 1
                end = time.monotonic() + delay
                while time.monotonic() < end and not self.stopping:
                    time.sleep(0.05)
                if not self.stopping:
                    self._start(proc.index)
        return self._shutdown(0)

    def _shutdown(self, code: int) -> int:
        self._signal(signal.SIGTERM, None)
        wait_s = self.config.drain_delay_s + self.config.grace_s + 30
        end = time.monotonic() + wait_s
        for proc in self.procs.values():
            proc.process.join(max(0.0, end - time.monotonic()))
        worst = code
        for proc in self.procs.values():
            if proc.process.is_alive():
                log.error("process %d did not stop within %.0fs: killing it", proc.index, wait_s)
                proc.process.kill()
                proc.process.join()
                worst = worst or 1
            elif proc.process.exitcode not in (0, None) and proc.warm:
                worst = worst or proc.process.exitcode
        log.info("stopped")
        return worst


def _poll(conn):
    try:
        return conn.recv() if conn.poll() else None
    except (EOFError, OSError):
        return None


def supervise(config) -> int:
    """Run ``config.processes`` server processes on one port until SIGTERM/SIGINT."""
    try:
        return Supervisor(config).run()
    except OSError as e:
        log.error("%s", e)
        return 1
