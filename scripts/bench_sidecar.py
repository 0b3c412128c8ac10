#!/usr/bin/env python3
"""The vLLM sidecar (``vllm-sidecar``) against the in-process time, in one run (docs/SIDECAR.md).

    python scripts/bench_sidecar.py [--repeat N] [--jobs N] [--json out.json]

* in-process: ``Preprocessor.preprocess(raw=True)`` (Qwen2-VL, the torchvision processor,
  as the sidecar runs it) of a never-seen 1280x720 photo-like JPEG each call, p50;
* one job at a time: LPUSH of a job whose item is that JPEG as a data URL, to BRPOP of
  its result, as the worker does (a plain Redis client), p50 and its ratio to in-process,
  and its parts (the LPUSH; the result's queue, fetch and process times; the rest: the
  answer's push and its BRPOP);
* the transport's floor: the result's bytes alone pushed and popped through the same Redis,
  no job, p50;
* throughput: ``--jobs`` such jobs queued at once, answered by 1 and then 2 sidecars (each
  ``--concurrency 2``), jobs per second.

Needs Debian's ``redis-server`` and the sidecar extra (``pip install -e '.[sidecar,test]'``);
starts its own Redis (a free port, no persistence) and sidecars as separate processes.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import photo_like, variant  # noqa: E402

MODEL = "Qwen/Qwen2-VL-7B-Instruct"
SIZE = (1280, 720)
PROMPT = [1, 151652, 151655, 151653, 2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fingerprint():
    from smg_grpc_servicer.mm_sidecar_protocol import Fingerprint

    return Fingerprint(model=MODEL, vllm_version="0.33.0", dtype="torch.bfloat16", video_backend="opencv",
                       media_io_kwargs="{}", mm_processor_kwargs="{}", limit_per_prompt='{"*": {"count": 8}}')


def _job(jpeg: bytes):
    from smg_grpc_servicer.mm_sidecar_protocol import SCHEMA_VERSION, Job, JobItem

    now = int(time.time() * 1000)
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    return Job(v=SCHEMA_VERSION, job_id=uuid.uuid4().hex, request_id="bench", fingerprint=_fingerprint(),
               prompt_token_ids=PROMPT, prompt=None, items=[JobItem(modality="image", url=url)], enqueued_ms=now,
               deadline_ms=now + 60_000)


def bench_inprocess(repeat: int, fresh) -> float:
    from sglang_mm_grpc import Preprocessor

    pp = Preprocessor.from_model(MODEL, processor="torchvision", cache_bytes=0)
    pp.warmup()
    times = []
    for _ in range(repeat + 1):
        data = next(fresh)
        t0 = time.perf_counter()
        pp.preprocess([data], PROMPT, raw=True)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[1:])


class Stack:
    """redis-server and sidecars, each its own process."""

    def __init__(self, work: Path):
        import redis

        self.work = work
        self.port = _free_port()
        self.redis = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(self.port),
                                       "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(work)],
                                      stdout=subprocess.DEVNULL)
        self.client = redis.Redis(port=self.port)
        for _ in range(100):
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        (work / "fp.json").write_text(json.dumps(_fingerprint().to_hello()))
        self.sidecars: list[subprocess.Popen] = []
        from smg_grpc_servicer.mm_sidecar_protocol import Keys, resolve_namespace

        self.keys = Keys.for_namespace(resolve_namespace(_fingerprint(), None))

    def add_sidecar(self) -> None:
        log = open(self.work / f"sidecar{len(self.sidecars)}.log", "wb")
        self.sidecars.append(subprocess.Popen(
            [sys.executable, "-m", "sglang_mm_grpc.cli", "vllm-sidecar", "--model", MODEL, "--fingerprint",
             str(self.work / "fp.json"), "--redis-url", f"redis://127.0.0.1:{self.port}/0", "--concurrency", "2"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "NUMBA_NUM_THREADS": "1"}))
        deadline = time.monotonic() + 300
        while b"serving under" not in (self.work / f"sidecar{len(self.sidecars) - 1}.log").read_bytes():
            if time.monotonic() > deadline or self.sidecars[-1].poll() is not None:
                raise RuntimeError("the sidecar did not start: see " + log.name)
            time.sleep(0.1)

    def one_job(self, jpeg: bytes) -> dict[str, float]:
        """ms from LPUSH to the result, and its parts: the LPUSH, the result's own timing
        (queue: until a sidecar worker had it; fetch; process: pixels, keys, encoding) and
        the rest (the answer's push and the BRPOP that reads it)."""
        from smg_grpc_servicer.mm_sidecar_protocol import decode_result, encode_job

        job = _job(jpeg)
        raw = encode_job(job)
        t0 = time.perf_counter()
        self.client.lpush(self.keys.jobs, raw)
        t1 = time.perf_counter()
        _, answer = self.client.brpop(self.keys.result(job.job_id), timeout=60)
        total = (time.perf_counter() - t0) * 1e3
        result = decode_result(answer)
        assert result.ok and result.timing is not None
        parts = {"total": total, "lpush": (t1 - t0) * 1e3, "queue": result.timing.queue_ms,
                 "fetch": result.timing.fetch_ms, "process": result.timing.process_ms}
        parts["answer"] = total - sum(v for k, v in parts.items() if k != "total")
        return parts

    def result_bytes(self, jpeg: bytes) -> int:
        """The size of one job's encoded result, as the worker reads it."""
        from smg_grpc_servicer.mm_sidecar_protocol import encode_job

        job = _job(jpeg)
        self.client.lpush(self.keys.jobs, encode_job(job))
        _, answer = self.client.brpop(self.keys.result(job.job_id), timeout=60)
        return len(answer)

    def result_round_trip(self, nbytes: int, repeat: int) -> float:
        """p50 ms of an LPUSH of ``nbytes`` (a result's size, as a view, as the sidecar
        pushes it) and the BRPOP that reads it, with no job: what the protocol's transport
        alone costs a result, the floor under the answer's part."""
        payload = memoryview(os.urandom(nbytes))
        times = []
        for _ in range(repeat + 1):
            t0 = time.perf_counter()
            self.client.lpush("bench:floor", payload)
            self.client.brpop("bench:floor", timeout=60)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times[1:])

    def throughput(self, jobs: int, fresh) -> float:
        from smg_grpc_servicer.mm_sidecar_protocol import encode_job

        queued = [_job(next(fresh)) for _ in range(jobs)]
        t0 = time.perf_counter()
        self.client.lpush(self.keys.jobs, *[encode_job(j) for j in queued])
        for job in queued:
            self.client.brpop(self.keys.result(job.job_id), timeout=120)
        return jobs / (time.perf_counter() - t0)

    def close(self) -> None:
        for p in (*self.sidecars, self.redis):
            p.terminate()
            p.wait(30)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=48)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    photo = photo_like(*SIZE)
    fresh = iter(variant(photo, k) for k in range(1 << 20))
    inproc = bench_inprocess(args.repeat, fresh)
    print(f"in-process raw uint8, a new {SIZE[0]}x{SIZE[1]} JPEG: p50 {inproc:.2f} ms")
    out: dict = {"inprocess_p50_ms": inproc}
    with tempfile.TemporaryDirectory() as work:
        stack = Stack(Path(work))
        try:
            stack.add_sidecar()
            stack.one_job(next(fresh))
            jobs = [stack.one_job(next(fresh)) for _ in range(args.repeat)]
            parts = {k: statistics.median(j[k] for j in jobs) for k in jobs[0]}
            out["job_p50_ms"] = parts.pop("total")
            out["job_over_inprocess"] = out["job_p50_ms"] / inproc
            out["job_parts_p50_ms"] = parts
            print(f"one job, LPUSH to result: p50 {out['job_p50_ms']:.2f} ms ({out['job_over_inprocess']:.2f}x "
                  f"in-process); parts (p50 each, whole ms where the sidecar timed them): "
                  + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
            out["result_bytes"] = size = stack.result_bytes(next(fresh))
            out["result_round_trip_p50_ms"] = floor = stack.result_round_trip(size, args.repeat)
            print(f"the result's {size / 1e6:.2f} MB alone, LPUSH then BRPOP, no job: p50 {floor:.2f} ms "
                  f"({floor / inproc:.2f}x the in-process time; 1.5x leaves {inproc / 2:.2f} ms for all but the pixels)")
            for n in (1, 2):
                if len(stack.sidecars) < n:
                    stack.add_sidecar()
                stack.throughput(4, fresh)
                out[f"jobs_per_s_{n}"] = stack.throughput(args.jobs, fresh)
                print(f"{args.jobs} jobs queued at once, {n} sidecar(s): {out[f'jobs_per_s_{n}']:.1f} jobs/s")
        finally:
            stack.close()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
