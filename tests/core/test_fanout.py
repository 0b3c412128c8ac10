"""The fan-out seam: one executor for requests and their images, no nested pools.

A request already running in the server's pool offers its other images to the same
pool and runs whatever no worker has started itself, so it cannot wait on work queued
behind it; errors are reported for the lowest failing image, whatever the timing.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from sglang_mm_grpc import Code, PreprocessError
from sglang_mm_grpc.pipeline.fanout import fan_out
from sglang_mm_grpc.pipeline.metrics import WorkCounters


@pytest.mark.parametrize("workers", [None, 1, 4])
def test_results_in_order(workers):
    pool = ThreadPoolExecutor(workers) if workers else None
    work = WorkCounters()
    assert fan_out(lambda i: i * i, 7, pool, None, work) == [i * i for i in range(7)]
    assert (work.run, work.skipped) == (7, 0)


def test_a_task_inside_a_full_pool_runs_its_items_itself():
    """With every worker busy (here: the one worker runs the request itself), the items
    it offered are still queued; it takes them back and finishes instead of waiting."""
    pool = ThreadPoolExecutor(1)
    threads = []

    def request() -> list[int]:
        def item(i: int) -> int:
            threads.append(threading.get_ident())
            return i

        return fan_out(item, 5, pool, None, WorkCounters())

    assert pool.submit(request).result(timeout=10) == [0, 1, 2, 3, 4]
    assert len(set(threads)) == 1


def test_idle_workers_take_items():
    pool = ThreadPoolExecutor(3)
    started = threading.Barrier(3, timeout=10)

    def item(i: int) -> int:
        started.wait()  # only passes if three items run at once
        return i

    assert fan_out(item, 3, pool, None, WorkCounters()) == [0, 1, 2]


@pytest.mark.parametrize("workers", [None, 2])
def test_the_lowest_failing_item_wins(workers):
    pool = ThreadPoolExecutor(workers) if workers else None

    def item(i: int) -> int:
        if i == 1:
            time.sleep(0.05)  # fails after item 3 has failed
            raise PreprocessError(Code.INVALID_ARGUMENT, "bad", item=i)
        if i == 3:
            raise PreprocessError(Code.RESOURCE_EXHAUSTED, "big", item=i)
        return i

    with pytest.raises(PreprocessError) as e:
        fan_out(item, 5, pool, None, WorkCounters())
    assert e.value.item == 1 and e.value.code is Code.INVALID_ARGUMENT


def test_unexpected_errors_name_their_item():
    def item(i: int) -> int:
        if i == 2:
            raise ZeroDivisionError("division by zero")
        return i

    with pytest.raises(PreprocessError) as e:
        fan_out(item, 3, None, None, WorkCounters())
    assert e.value.code is Code.INTERNAL and e.value.message == "image 2: internal error: ZeroDivisionError: division by zero"


def test_cancelled_items_are_skipped_and_counted():
    cancel = threading.Event()
    work = WorkCounters()

    def item(i: int) -> int:
        cancel.set()  # the request is cancelled while its first image runs
        return i

    with pytest.raises(PreprocessError) as e:
        fan_out(item, 4, None, cancel, work)
    assert e.value.code is Code.CANCELLED and e.value.item == 1
    assert (work.run, work.skipped) == (1, 3)
