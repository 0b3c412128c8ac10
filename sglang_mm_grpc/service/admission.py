"""The in-flight limit: past it a new request is refused at once instead of queueing.

A request holds its slot while its handler runs, while its response is being sent, and
while any of its work is still in the worker pool: a cancelled call whose worker is
finishing the current image keeps its slot until that worker lets go, so clients that
cancel and resend cannot pile unbounded work behind the pool, nor slow readers
unbounded responses. Thread-safe (pool callbacks release from worker threads).
"""

from __future__ import annotations

import threading


def default_max_in_flight(workers: int) -> int:
    """16 per worker, at least 64: enough to keep every worker fed through fetch waits,
    short enough that a queued request still finishes in seconds."""
    return max(64, 16 * workers)


class Busy(Exception):
    def __init__(self, in_flight: int, limit: int):
        super().__init__(f"server busy: {in_flight} requests in flight (limit {limit}); retry with backoff")


class Ticket:
    """One admitted request; ``hold``/``release`` pairs, the slot frees at zero holds."""

    def __init__(self, gate: "Admission"):
        self._gate = gate
        self._holds = 1

    def hold(self) -> None:
        with self._gate._lock:
            self._holds += 1

    def release(self) -> None:
        with self._gate._lock:
            self._holds -= 1
            if self._holds == 0:
                self._gate._in_flight -= 1


class Admission:
    def __init__(self, limit: int):
        if limit <= 0:
            raise ValueError(f"max_in_flight must be positive, got {limit}")
        self.limit = limit
        self._lock = threading.Lock()
        self._in_flight = 0
        self.rejected = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def enter(self) -> Ticket:
        """A ticket for a new request, or ``Busy`` (never waits)."""
        with self._lock:
            if self._in_flight >= self.limit:
                self.rejected += 1
                raise Busy(self._in_flight, self.limit)
            self._in_flight += 1
        return Ticket(self)
