"""Closed-loop load against one server, with sampling and a printed report.

Each of ``clients`` asyncio clients repeats, until the duration is over, one router
flow picked at random: one-shot (Preprocess with a backend), two-phase (Preprocess,
then Assemble with release), two-phase leaving its handle behind (for the store's
bounds, TTL and eviction), or one-shot then the payload forwarded to that backend's
stub (what a router does). Models, image sizes and counts, and backends are mixed; a
pool of distinct images larger than the cache makes both cache hits and evictions.

With ``shm``, a third of the flows to vLLM and TokenSpeed ask for their tensors in
shared memory (any size): the forwarded ones are read (and removed) by the stub, the
others never are, which the server's lease must clean up.

A sampler reads the server's RSS (/proc) and GetStats every ``sample_every`` seconds,
so the report can show the RSS curve and that the store and cache stayed in bounds.
Errors are split into service errors (from our server; none are expected) and
backend errors (from a stub, e.g. one killed on purpose); a documented refusal (vLLM
given Pixtral images of different sizes: FAILED_PRECONDITION) is counted apart.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc

from procs import BACKENDS, CHANNEL_OPTIONS, MiB, Server  # first: it puts tests/ on sys.path
import imagegen  # noqa: I001
from smg_grpc_proto.generated import sglang_scheduler_pb2 as sg  # noqa: I001
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as sg_grpc
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2 as ts
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2_grpc as ts_grpc
from smg_grpc_proto.generated import trtllm_service_pb2 as tr
from smg_grpc_proto.generated import trtllm_service_pb2_grpc as tr_grpc
from smg_grpc_proto.generated import vllm_engine_pb2 as vl
from smg_grpc_proto.generated import vllm_engine_pb2_grpc as vl_grpc
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc

BACKEND_ENUM = {"sglang": pb.BACKEND_SGLANG, "vllm": pb.BACKEND_VLLM, "trtllm": pb.BACKEND_TRTLLM,
                "tokenspeed": pb.BACKEND_TOKENSPEED}
SHM = pb.PayloadOptions(transport=pb.TENSOR_TRANSPORT_SHM, shm_min_bytes=0)
# (height, width, format): thumbnails to 800x600 photos.
SIZES = [(64, 64, "png"), (224, 224, "jpeg"), (240, 320, "jpeg"), (375, 500, "png"), (480, 640, "jpeg"), (600, 800, "jpeg")]
FLOWS = (("oneshot", 0.45), ("twophase", 0.35), ("leak", 0.10), ("forward", 0.10))


def corpus(n: int, seed: int = 0) -> list[bytes]:
    """``n`` distinct encoded images cycling through SIZES."""
    out = []
    for i in range(n):
        h, w, fmt = SIZES[i % len(SIZES)]
        out.append(imagegen.png(h, w, seed=seed + i) if fmt == "png" else imagegen.jpeg(h, w, seed=seed + i))
    return out


def prompt(info: pb.ModelInfo, n_images: int) -> list[int]:
    """Text ids around one placeholder per image, wrapped as the model's template does."""
    tok = info.token_ids
    ids = [1, 872, 198]
    for i in range(n_images):
        if "vision_start" in tok:
            ids += [tok["vision_start"], info.image_token_id, tok["vision_end"], 1000 + i]
        else:
            ids += [info.image_token_id, 1000 + i]
    return ids + [3838, 374, 419, 30, 2]


@dataclass
class Results:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {f: [] for f, _ in FLOWS})
    service_errors: Counter = field(default_factory=Counter)  # (rpc, code) -> n
    backend_errors: Counter = field(default_factory=Counter)  # (backend, code) -> n
    refused: Counter = field(default_factory=Counter)  # (rpc, code) -> n, documented refusals
    shm_flows: int = 0
    error_examples: list[str] = field(default_factory=list)
    flows: Counter = field(default_factory=Counter)
    backends: Counter = field(default_factory=Counter)
    models: Counter = field(default_factory=Counter)
    images: int = 0
    samples: list[dict] = field(default_factory=list)
    duration_s: float = 0.0
    clients: int = 0
    final_stats: pb.GetStatsResponse | None = None

    @property
    def ok(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    def all_latencies(self) -> list[float]:
        return sorted(x for v in self.latencies.values() for x in v)


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


class Load:
    def __init__(
        self,
        server: Server,
        *,
        models: list[str],
        clients: int = 64,
        duration_s: float = 60.0,
        images: list[bytes] | None = None,
        stubs: dict | None = None,
        sample_every: float = 1.0,
        timeout: float = 60.0,
        seed: int = 1,
        flows=FLOWS,
        shm: bool = False,
    ):
        self.server, self.models, self.clients = server, models, clients
        self.duration_s, self.timeout, self.seed = duration_s, timeout, seed
        self.images = images if images is not None else corpus(120)
        self.stubs = stubs or {}
        self.sample_every = sample_every
        self.shm = shm
        self.flows = [f for f in flows if f[0] != "forward" or self.stubs]
        self.results = Results(clients=clients)
        self._infos: dict[str, pb.ModelInfo] = {}

    def run(self) -> Results:
        return asyncio.run(self.arun())

    async def arun(self) -> Results:
        channels = [grpc.aio.insecure_channel(self.server.target, options=CHANNEL_OPTIONS) for _ in range(min(8, self.clients))]
        self._stub_channels = {
            b: grpc.aio.insecure_channel(s.target, options=CHANNEL_OPTIONS) for b, s in self.stubs.items()
        }
        try:
            stub0 = pb_grpc.MultimodalPreprocessorStub(channels[0])
            models = (await stub0.ListModels(pb.ListModelsRequest(), timeout=10)).models
            self._infos = {m.name: m for m in models}
            missing = set(self.models) - set(self._infos)
            if missing:
                raise RuntimeError(f"server does not serve {sorted(missing)}")
            t0 = time.monotonic()
            self._end = t0 + self.duration_s
            sampler = asyncio.ensure_future(self._sample(stub0, t0))
            await asyncio.gather(
                *(self._client(i, pb_grpc.MultimodalPreprocessorStub(channels[i % len(channels)])) for i in range(self.clients))
            )
            self.results.duration_s = time.monotonic() - t0
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            await self._take_sample(stub0, t0)
            self.results.final_stats = self.results.samples[-1].get("stats")
        finally:
            for ch in (*channels, *self._stub_channels.values()):
                await ch.close()
        return self.results

    # -- sampling ---------------------------------------------------------------------

    async def _sample(self, stub, t0: float) -> None:
        while True:
            await self._take_sample(stub, t0)
            await asyncio.sleep(self.sample_every)

    async def _take_sample(self, stub, t0: float) -> None:
        sample = {"t": time.monotonic() - t0, "rss": self.server.rss_bytes()}
        try:
            sample["stats"] = await stub.GetStats(pb.GetStatsRequest(), timeout=10)
        except grpc.RpcError as e:  # counted: GetStats must answer under load
            self.results.service_errors[("GetStats", e.code().name)] += 1
        self.results.samples.append(sample)

    # -- clients ----------------------------------------------------------------------

    async def _client(self, index: int, stub) -> None:
        rng = random.Random(self.seed * 100_003 + index)
        names, weights = zip(*self.flows)
        n = 0
        while time.monotonic() < self._end:
            flow = rng.choices(names, weights)[0]
            model = rng.choice(self.models)
            backend = rng.choice(BACKENDS)
            k = 1 if rng.random() < 0.7 else 2
            images = [rng.choice(self.images) for _ in range(k)]
            t = time.monotonic()
            shm = self.shm and backend in ("vllm", "tokenspeed") and rng.random() < 1 / 3
            if await self._flow(stub, flow, model, backend, images, f"c{index}-{n}", shm):
                self.results.latencies[flow].append(time.monotonic() - t)
                self.results.flows[flow] += 1
                self.results.backends[backend] += 1
                self.results.models[model] += 1
                self.results.images += k
            n += 1

    async def _flow(self, stub, flow: str, model: str, backend: str, images: list[bytes], rid: str,
                    shm: bool = False) -> bool:
        req = pb.PreprocessRequest(
            request_id=rid,
            model=model,
            input_ids=prompt(self._infos[model], len(images)),
            images=[pb.MediaItem(data=b) for b in images],
            payload_options=SHM if shm else None,
        )
        self.results.shm_flows += shm
        if flow in ("oneshot", "forward"):
            req.backend = BACKEND_ENUM[backend]
        resp = await self._call("Preprocess", stub.Preprocess, req)
        if resp is None:
            return False
        payload = resp.payload
        if flow in ("twophase", "leak"):
            areq = pb.AssembleRequest(handle=resp.handle, backend=BACKEND_ENUM[backend], release=flow == "twophase",
                                      payload_options=SHM if shm else None)
            aresp = await self._call("Assemble", stub.Assemble, areq)
            if aresp is None:
                return False
            payload = aresp.payload
        if flow == "forward":
            return await self._forward(backend, payload, rid)
        return True

    async def _call(self, name: str, method, request):
        """The response, or None after counting the error."""
        try:
            return await method(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION and "vLLM cannot take these images" in (e.details() or ""):
                self.results.refused[(name, e.code().name)] += 1
                return None
            self._error(self.results.service_errors, name, e)
            return None

    async def _forward(self, backend: str, payload: pb.BackendPayload, rid: str) -> bool:
        ch = self._stub_channels[backend]
        try:
            if backend == "sglang":
                req = sg.GenerateRequest(
                    request_id=rid, tokenized=sg.TokenizedInput(input_ids=payload.input_ids), mm_inputs=payload.sglang,
                    sampling_params=sg.SamplingParams(max_new_tokens=1),
                )
                call = sg_grpc.SglangSchedulerStub(ch).Generate(req, timeout=self.timeout)
            elif backend == "vllm":
                req = vl.GenerateRequest(
                    request_id=rid, tokenized=vl.TokenizedInput(input_ids=payload.input_ids), mm_inputs=payload.vllm,
                    sampling_params=vl.SamplingParams(max_tokens=1),
                )
                call = vl_grpc.VllmEngineStub(ch).Generate(req, timeout=self.timeout)
            elif backend == "tokenspeed":
                req = ts.GenerateRequest(
                    request_id=rid, tokenized=ts.TokenizedInput(input_ids=payload.input_ids), mm_inputs=payload.tokenspeed,
                    sampling_params=ts.SamplingParams(max_new_tokens=1),
                )
                call = ts_grpc.TokenSpeedSchedulerStub(ch).Generate(req, timeout=self.timeout)
            else:
                req = tr.GenerateRequest(
                    request_id=rid, tokenized=tr.TokenizedInput(input_token_ids=payload.input_ids), max_tokens=1,
                    multimodal_input=payload.trtllm,
                )
                call = tr_grpc.TrtllmServiceStub(ch).Generate(req, timeout=self.timeout)
            async for _ in call:
                pass
            return True
        except grpc.aio.AioRpcError as e:
            self._error(self.results.backend_errors, backend, e)
            return False

    def _error(self, counter: Counter, name: str, e: grpc.aio.AioRpcError) -> None:
        counter[(name, e.code().name)] += 1
        if len(self.results.error_examples) < 10:
            self.results.error_examples.append(f"{name}: {e.code().name}: {e.details()}")


# -- the report ------------------------------------------------------------------------


def rss_plateau(samples: list[dict]) -> dict:
    """RSS growth from the second quarter of the run to its last quarter. A service that
    leaks grows there; one that plateaus has reached its working set by then."""
    pts = [(s["t"], s["rss"]) for s in samples if s.get("rss")]
    if len(pts) < 4:
        return {"warm": 0, "end": 0, "growth": 0}
    end_t = pts[-1][0]
    warm = max(r for t, r in pts if end_t * 0.25 <= t <= end_t * 0.5) if any(end_t * 0.25 <= t <= end_t * 0.5 for t, _ in pts) else pts[0][1]
    last = max(r for t, r in pts if t >= end_t * 0.75)
    return {"warm": warm, "end": last, "growth": last - warm}


def bounds(samples: list[dict]) -> dict:
    """Peak store and cache bytes against their bounds: the servers' own high-water marks
    (every insertion, not only the sampled moments)."""
    stats = [s["stats"] for s in samples if "stats" in s]
    return {
        "store_peak": max((max(st.store.bytes, st.store.peak_bytes) for st in stats), default=0),
        "store_items_peak": max((st.store.items for st in stats), default=0),
        "store_max": stats[-1].store.max_bytes if stats else 0,
        "store_max_items": stats[-1].store.max_items if stats else 0,
        "cache_peak": max((max(st.cache.bytes, st.cache.peak_bytes) for st in stats), default=0),
        "cache_max": stats[-1].cache.max_bytes if stats else 0,
        "in_flight_peak": max((st.in_flight for st in stats), default=0),
    }


def report(r: Results, every_s: float = 5.0) -> str:
    lat = r.all_latencies()
    ms = lambda x: f"{x * 1e3:.1f} ms"  # noqa: E731
    lines = [
        f"load: {r.clients} clients for {r.duration_s:.1f} s",
        f"flows ok: {r.ok} ({r.ok / max(r.duration_s, 1e-9):.1f}/s), images {r.images} "
        f"({r.images / max(r.duration_s, 1e-9):.1f}/s)",
        f"  by flow: {dict(r.flows)}",
        f"  by backend: {dict(r.backends)}",
        f"  by model: {dict(r.models)}",
        f"latency (whole flow) p50 {ms(percentile(lat, 0.5))}  p90 {ms(percentile(lat, 0.9))}  "
        f"p99 {ms(percentile(lat, 0.99))}  max {ms(lat[-1] if lat else 0)}",
    ]
    for flow, xs in r.latencies.items():
        if xs:
            lines.append(f"  {flow:9s} n={len(xs):6d}  p50 {ms(percentile(xs, 0.5))}  p99 {ms(percentile(xs, 0.99))}")
    lines.append(f"service errors: {sum(r.service_errors.values())} {dict(r.service_errors)}")
    lines.append(f"backend errors: {sum(r.backend_errors.values())} {dict(r.backend_errors)}")
    lines.append(f"documented refusals (vLLM + Pixtral images of different sizes): {dict(r.refused)}; "
                 f"flows asking for shared memory: {r.shm_flows}")
    for ex in r.error_examples[:5]:
        lines.append(f"  e.g. {ex}")
    b = bounds(r.samples)
    lines.append(
        f"handle store: high-water mark {b['store_peak']:,} of {b['store_max']:,} bytes "
        f"({_within(b['store_peak'], b['store_max'])}), peak {b['store_items_peak']} of {b['store_max_items']} handles (sampled)"
    )
    lines.append(
        f"cache: high-water mark {b['cache_peak']:,} of {b['cache_max']:,} bytes ({_within(b['cache_peak'], b['cache_max'])})"
    )
    st = r.final_stats
    if st is not None:
        lines.append(
            f"evictions: store {st.store.evicted} (expired {st.store.expired}), cache {st.cache.evictions}; "
            f"cache hits {st.cache.hits} misses {st.cache.misses}"
        )
        lines.append(
            f"server: in flight now {st.in_flight} (peak sampled {b['in_flight_peak']}, limit {st.max_in_flight}), "
            f"rejected busy {st.rejected_busy}, worker busy {st.work.busy}, handles left {st.store.items}"
        )
        codes = Counter()
        for s in st.statuses:
            codes[(s.method, s.code)] += s.count
        lines.append(f"server statuses: {dict(sorted(codes.items()))}")
        stage_line = []
        for h in st.stages:
            if h.count:
                stage_line.append(f"{h.stage} {h.sum_ms / h.count:.1f}")
        lines.append(f"server stage means (ms, ok calls): {', '.join(stage_line)}")
    p = rss_plateau(r.samples)
    lines.append(
        f"RSS: {p['warm'] / MiB:.0f} MiB at 25-50% of the run -> {p['end'] / MiB:.0f} MiB in the last quarter "
        f"({p['growth'] / MiB:+.0f} MiB)"
    )
    curve, next_t = [], 0.0
    for s in r.samples:
        if s["t"] + 1e-6 >= next_t and s.get("rss"):
            curve.append(f"{s['t']:5.1f}s {s['rss'] / MiB:6.0f} MiB")
            next_t = s["t"] + every_s
    lines.append("RSS curve: " + " | ".join(curve))
    return "\n".join(lines)


def _within(peak: int, bound: int) -> str:
    return "within the bound" if peak <= bound else "OVER THE BOUND"


def summary_ok(r: Results) -> list[str]:
    """What must hold after a load run; each broken rule as a sentence (empty: all held)."""
    problems = []
    if r.service_errors:
        problems.append(f"service errors: {dict(r.service_errors)} e.g. {r.error_examples[:3]}")
    if r.ok == 0:
        problems.append("no flow completed")
    b = bounds(r.samples)
    if b["store_peak"] > b["store_max"]:
        problems.append(f"store over its bound: {b['store_peak']} > {b['store_max']}")
    if b["store_items_peak"] > b["store_max_items"]:
        problems.append(f"store over its item bound: {b['store_items_peak']} > {b['store_max_items']}")
    if b["cache_peak"] > b["cache_max"]:
        problems.append(f"cache over its bound: {b['cache_peak']} > {b['cache_max']}")
    return problems


# -- an overload burst -------------------------------------------------------------------


def idle_latency(server: Server, model: str, image: bytes, n: int = 20) -> float:
    """Median seconds of one small one-shot call on an otherwise idle server."""

    async def main():
        async with grpc.aio.insecure_channel(server.target, options=CHANNEL_OPTIONS) as ch:
            stub = pb_grpc.MultimodalPreprocessorStub(ch)
            req = pb.PreprocessRequest(model=model, images=[pb.MediaItem(data=image)], backend=pb.BACKEND_VLLM)
            times = []
            for _ in range(n):
                t = time.perf_counter()
                await stub.Preprocess(req, timeout=30)
                times.append(time.perf_counter() - t)
            return statistics.median(times)

    return asyncio.run(main())


def burst(server: Server, model: str, images: list[bytes], channels: int = 16) -> dict:
    """One one-shot call per image, all at once over ``channels`` connections (many
    clients; distinct images, so the cache cannot answer them): how many
    were refused as busy, how fast (as the client saw it, transport included), what else.
    TensorRT-LLM payloads: the full preprocessing, but small responses, so the burst
    tests admission rather than the client's ability to take in tensors."""

    async def main():
        chans = [grpc.aio.insecure_channel(server.target, options=CHANNEL_OPTIONS) for _ in range(channels)]
        try:
            stubs = [pb_grpc.MultimodalPreprocessorStub(ch) for ch in chans]
            for s in stubs:  # connected before the burst
                await s.GetStats(pb.GetStatsRequest(), timeout=10)
            reqs = [pb.PreprocessRequest(model=model, images=[pb.MediaItem(data=im)], backend=pb.BACKEND_TRTLLM) for im in images]

            async def one(i):
                req = reqs[i]
                t = time.perf_counter()
                try:
                    await stubs[i % channels].Preprocess(req, timeout=60)
                    return "OK", time.perf_counter() - t
                except grpc.aio.AioRpcError as e:
                    return e.code().name, time.perf_counter() - t

            return await asyncio.gather(*(one(i) for i in range(len(reqs))))
        finally:
            for ch in chans:
                await ch.close()

    results = asyncio.run(main())
    codes = Counter(c for c, _ in results)
    busy = [t for c, t in results if c == "RESOURCE_EXHAUSTED"]
    ok = [t for c, t in results if c == "OK"]
    return {"n": len(images), "codes": dict(codes), "busy_p50": percentile(busy, 0.5), "busy_max": max(busy, default=0.0),
            "ok_p50": percentile(ok, 0.5), "ok_max": max(ok, default=0.0)}
