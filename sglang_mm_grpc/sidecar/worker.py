"""The sidecar's Redis side: the hello, the job list, the answers.

As the reference sidecar does (``smg_grpc_servicer/vllm/mm_sidecar.py``), whose
behaviour the worker relies on:

* the hello hash (fingerprint, ``schema``, ``schemes``) is refreshed every
  ``HELLO_REFRESH_S`` with a ``HELLO_TTL_S`` expiry, in one transaction, so a sidecar
  that stops is forgotten and one that comes back (or a Redis that restarts) is found;
* ``concurrency`` workers BRPOP the shared job list, so several sidecars on one Redis
  split the jobs, each taken once;
* an answer whose push finds Redis gone is pushed again until the job's deadline;
* a result at or over the transport limit (the configured one, lowered to Redis's own
  ``proto-max-bulk-len``) is answered ``result_too_large``; a refused push is answered
  with a small ``result_push_failed``; every push gets the time the job has left (at
  least ``PUSH_FLOOR_S``);
* an undecodable job is dropped (it has no key to answer on); no job stops a worker, and
  a Redis that stops answering is waited for and reconnected to.
"""

from __future__ import annotations

import asyncio
import logging
import time

from redis import exceptions as redis_errors
from smg_grpc_servicer.mm_sidecar_protocol import (
    CODE_RESULT_PUSH_FAILED,
    CODE_RESULT_TOO_LARGE,
    DEFAULT_MAX_RESULT_BYTES,
    HELLO_REFRESH_S,
    HELLO_TTL_S,
    RESULT_TTL_S,
    SCHEMA_VERSION,
    Job,
    Keys,
    decode_job,
    encode_result,
    failure,
)

from .jobs import JobRunner

log = logging.getLogger(__name__)

JOB_WAIT_S = 5  # one BRPOP's wait for the next job
JOB_WAIT_MARGIN_S = 2  # past that, the connection is taken for dead
RECONNECT_PAUSE_S = 1
PUSH_FLOOR_S = 5  # the least time an answer gets to reach the worker
FAILURE_PUSH_S = 5.0
REDIS_BULK_LIMIT = "proto-max-bulk-len"


class Sidecar:
    """Serves one namespace's jobs with ``runner`` over the ``redis.asyncio`` ``client``."""

    def __init__(self, runner: JobRunner, client, keys: Keys, *, concurrency: int = 2,
                 max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES):
        self.runner = runner
        self.client = client
        self.keys = keys
        self.concurrency = max(1, concurrency)
        self.max_result_bytes = max_result_bytes
        self.started_at = time.time()
        self.jobs_done = 0

    async def run(self) -> None:
        await self._learn_result_limit()
        log.info("media sidecar serving under %s (concurrency %d, results up to %d bytes)", self.keys.prefix,
                 self.concurrency, self.max_result_bytes)
        tasks = [asyncio.create_task(self._heartbeat())]
        tasks += [asyncio.create_task(self._worker(i)) for i in range(self.concurrency)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    async def _learn_result_limit(self) -> None:
        """Redis refuses a value at or over its bulk limit: the limit is the lower one."""
        try:
            reply = await asyncio.wait_for(self.client.config_get(REDIS_BULK_LIMIT), HELLO_TTL_S)
            limit = int(next(iter(reply.values())))
        except Exception as e:  # noqa: BLE001 - a managed Redis may refuse CONFIG: the configured limit stands
            log.info("result limit %d bytes (%s not readable: %s)", self.max_result_bytes, REDIS_BULK_LIMIT, e)
            return
        self.max_result_bytes = min(self.max_result_bytes, limit)

    def hello(self) -> dict[str, str]:
        engine = self.runner.engine
        return {**engine.fingerprint.to_hello(), "schema": str(SCHEMA_VERSION), "schemes": engine.schemes,
                "started_at": str(int(self.started_at)), "max_result_bytes": str(self.max_result_bytes),
                "implementation": "sglang-mm-grpc"}

    async def _heartbeat(self) -> None:
        while True:
            try:
                pipe = self.client.pipeline(transaction=True)
                pipe.hset(self.keys.hello, mapping=self.hello())
                pipe.expire(self.keys.hello, HELLO_TTL_S)
                await asyncio.wait_for(pipe.execute(), HELLO_TTL_S)
            except Exception as e:  # noqa: BLE001 - keep advertising through Redis blips
                log.warning("hello refresh failed: %s", e)
            await asyncio.sleep(HELLO_REFRESH_S)

    async def _worker(self, index: int) -> None:
        while True:
            try:
                popped = await asyncio.wait_for(self.client.brpop(self.keys.jobs, timeout=JOB_WAIT_S),
                                                JOB_WAIT_S + JOB_WAIT_MARGIN_S)
            except Exception as e:  # noqa: BLE001 - a dead or refused connection: wait, then again
                log.warning("worker %d: waiting for a job failed (%s); retrying", index, e or type(e).__name__)
                await asyncio.sleep(RECONNECT_PAUSE_S)
                continue
            if popped is not None:
                await self.serve_one(index, popped[1])

    async def serve_one(self, index: int, raw: bytes) -> None:
        """Answer one popped job (an undecodable one is logged and dropped)."""
        try:
            job = decode_job(raw)
        except Exception as e:  # noqa: BLE001 - no job id: nothing to answer on
            log.error("worker %d: undecodable job dropped: %s", index, e)
            return
        if job.v != SCHEMA_VERSION:
            await self._deliver(index, job, encode_result(failure(
                job.job_id, "processor_error", f"job schema v{job.v}; this sidecar speaks v{SCHEMA_VERSION}")))
            return
        try:
            result = await self.runner.handle(job)
        except Exception as e:  # noqa: BLE001 - one bad job never stops a worker
            log.exception("worker %d: job %s failed", index, job.job_id)
            result = failure(job.job_id, "processor_error", f"{type(e).__name__}: {e}")
        encoded = encode_result(result)
        if len(encoded) >= self.max_result_bytes:
            log.warning("worker %d: result for %s is %d bytes, at or over the %d-byte limit", index, job.job_id,
                        len(encoded), self.max_result_bytes)
            encoded = encode_result(failure(
                job.job_id, CODE_RESULT_TOO_LARGE, f"encoded media result is {len(encoded)} bytes, transport "
                f"limit {self.max_result_bytes} bytes; send fewer or smaller images"))
        await self._deliver(index, job, encoded)
        self.jobs_done += 1

    async def _deliver(self, index: int, job: Job, raw: bytes) -> None:
        """Push the answer; while Redis is unreachable, again until the job's deadline (a
        Redis that restarts in time still gets it); a push Redis refuses is replaced by a
        small ``result_push_failed``."""
        key = self.keys.result(job.job_id)
        budget = max(PUSH_FLOOR_S, job.deadline_ms / 1000 - time.time())
        try:
            await self._push_until(key, raw, time.monotonic() + budget)
        except Exception as first:  # noqa: BLE001 - the worker is told, not left to time out
            log.warning("worker %d: result push failed for %s: %s", index, job.job_id, first)
            notice = encode_result(failure(job.job_id, CODE_RESULT_PUSH_FAILED, f"{type(first).__name__}: {first}"))
            try:
                await self._push(key, notice, min(budget, FAILURE_PUSH_S))
            except Exception as second:  # noqa: BLE001 - the worker times out and retries elsewhere
                log.error("worker %d: result push failed twice for %s: %s", index, job.job_id, second)

    async def _push_until(self, key: str, raw: bytes, until: float) -> None:
        while True:
            try:
                return await self._push(key, raw, max(0.1, until - time.monotonic()))
            except (ConnectionError, OSError, redis_errors.ConnectionError, redis_errors.TimeoutError):
                if time.monotonic() + RECONNECT_PAUSE_S >= until:
                    raise
                await asyncio.sleep(RECONNECT_PAUSE_S)

    async def _push(self, key: str, raw: bytes, budget: float) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.lpush(key, memoryview(raw))  # a view goes out as it is: hiredis' packer would copy it, slowly
        pipe.expire(key, RESULT_TTL_S)
        await asyncio.wait_for(pipe.execute(), budget)
