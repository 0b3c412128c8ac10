"""Replicas on 127.0.0.1 and the multi-target client under a rolling restart, for the test
and for ``scripts/replicas_drill.py``. No pytest here.

``drill``: N replicas (each ``serve`` with a drain delay) behind one
``sglang_mm_grpc.client.Client``; client threads run two-phase flows (Preprocess, then
Assemble of the handle with release) the whole time, while one replica is sent SIGTERM,
drains, exits, and is started again on the same port (same replica id). Returns every
flow's outcome and the replicas that served, before and after the restart.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

import imagegen
from servers import Server, wait_serving
from sglang_mm_grpc.core import owners
from sglang_mm_grpc.client import Client

MODEL = "Qwen/Qwen2-VL-7B-Instruct"


@dataclass
class DrillResult:
    outcomes: Counter = field(default_factory=Counter)  # status code name -> flows
    errors: list = field(default_factory=list)  # (code, details) of failed flows
    served_before: Counter = field(default_factory=Counter)  # replica -> flows whose handle it owned
    served_after: Counter = field(default_factory=Counter)  # after the restarted replica was SERVING
    drained: str = ""
    timeline: dict = field(default_factory=dict)  # seconds from the start of the flows

    @property
    def flows(self) -> int:
        return sum(self.outcomes.values())

    @property
    def ok_fraction(self) -> float:
        return self.outcomes["OK"] / max(1, self.flows)


def start_replicas(workdir: Path, n: int, *args: str) -> list[Server]:
    servers = [Server(workdir, *args, models=[MODEL], name=f"replica{i}", wait=False) for i in range(n)]
    try:
        for s in servers:
            wait_serving(s.target, s)
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers


def drill(workdir: Path, *, replicas: int = 3, threads: int = 4, drain_delay: float = 2.0, settle_s: float = 1.5,
          health_interval: float = 0.2, image_size=(320, 240)) -> DrillResult:
    args = ("--drain-delay", str(drain_delay), "--grace", "15", "--cache-bytes", "0")
    servers = start_replicas(workdir, replicas, *args)
    result = DrillResult()
    raw = imagegen.jpeg(*image_size, seed=21)
    stop = threading.Event()
    phase = {"after": False}
    lock = threading.Lock()
    t0 = time.monotonic()
    try:
        client = Client([s.target for s in servers], health_interval=health_interval, timeout=30)

        def run() -> None:
            while not stop.is_set():
                try:
                    r = client.preprocess(MODEL, [raw])
                    client.assemble(r.handle, "vllm", release=True)
                    owner = owners.owner_of(r.handle)
                    with lock:
                        result.outcomes["OK"] += 1
                        (result.served_after if phase["after"] else result.served_before)[owner.replica] += 1
                except grpc.RpcError as e:
                    with lock:
                        result.outcomes[e.code().name] += 1
                        result.errors.append((e.code().name, e.details()))

        workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
        for w in workers:
            w.start()
        time.sleep(settle_s)
        victim = servers[0]
        result.drained = f"{owners.default_replica_id(victim.port)}"
        result.timeline["sigterm"] = time.monotonic() - t0
        victim.signal(signal.SIGTERM)
        code = victim.wait(drain_delay + 30)
        result.timeline["exited"] = time.monotonic() - t0
        result.timeline["exit_code"] = code
        victim.stop()
        servers[0] = Server(workdir, *args, models=[MODEL], port=victim.port, name="replica0-restarted")
        result.timeline["serving_again"] = time.monotonic() - t0
        phase["after"] = True
        time.sleep(settle_s + 2 * health_interval)
        stop.set()
        for w in workers:
            w.join(60)
        result.timeline["end"] = time.monotonic() - t0
        client.close()
    finally:
        stop.set()
        for s in servers:
            s.stop()
    return result
