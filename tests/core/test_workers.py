"""The server's worker threads (server.workers.WarmFirstExecutor): the most recently idle
worker takes the next task, every worker still runs at once under load, and the
``Executor`` contract the pool and the fan-out rely on holds (a task not started can be
cancelled, errors reach the future, shutdown cancels what waits)."""

from __future__ import annotations

import threading
import time

import pytest

from sglang_mm_grpc.server.workers import WarmFirstExecutor


@pytest.fixture
def pool():
    ex = WarmFirstExecutor(3, thread_name_prefix="t")
    yield ex
    ex.shutdown(wait=True)


def _settle(ex: WarmFirstExecutor, idle: int) -> None:
    deadline = time.monotonic() + 5
    while len(ex._idle) < idle and time.monotonic() < deadline:
        time.sleep(0.001)


def test_a_lone_stream_of_calls_stays_on_one_thread(pool):
    """One call after another (each waited for): each runs on the thread that ran the one
    before, where a first-in-first-out wake-up (ThreadPoolExecutor's) rotates over all."""
    threads = []
    for _ in range(20):
        _settle(pool, 3)
        threads.append(pool.submit(threading.get_ident).result(5))
    assert len(set(threads)) == 1


def test_every_worker_runs_at_once_and_the_rest_wait_in_order(pool):
    barrier = threading.Barrier(3, timeout=5)
    together = [pool.submit(barrier.wait) for _ in range(3)]  # only passes with all three running
    order: list[int] = []
    later = [pool.submit(order.append, i) for i in range(10)]
    assert sorted(f.result(5) for f in together) == [0, 1, 2]
    for f in later:
        f.result(5)
    assert sorted(order) == list(range(10))


def test_errors_reach_the_future_and_the_worker_goes_on(pool):
    def boom():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        pool.submit(boom).result(5)
    assert pool.submit(lambda x: x + 1, 1).result(5) == 2


def test_a_task_not_started_can_be_cancelled(pool):
    release = threading.Event()
    busy = [pool.submit(release.wait, 5) for _ in range(3)]
    waiting = pool.submit(lambda: "ran")
    assert waiting.cancel()  # still queued: the fan-out runs it itself instead
    release.set()
    assert all(f.result(5) for f in busy) and waiting.cancelled()


def test_shutdown_cancels_what_waits_and_refuses_more():
    ex = WarmFirstExecutor(1, thread_name_prefix="s")
    started, release = threading.Event(), threading.Event()
    running = ex.submit(lambda: started.set() or release.wait(5))
    assert started.wait(5)
    queued = ex.submit(lambda: "ran")
    stopper = threading.Thread(target=ex.shutdown, kwargs={"wait": True, "cancel_futures": True})
    stopper.start()
    time.sleep(0.05)
    assert queued.cancelled() and stopper.is_alive()  # waits for the running task
    release.set()
    stopper.join(5)
    assert not stopper.is_alive() and running.result() is True
    assert not any(t.is_alive() for t in ex._threads)
    with pytest.raises(RuntimeError):
        ex.submit(lambda: None)
