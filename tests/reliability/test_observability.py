"""Observability: one JSON log line per request, and the same counters from GetStats and
from the Prometheus endpoint (``serve --metrics-port``)."""

from __future__ import annotations

import json
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

import imagegen
import procs
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
from sglang_mm_grpc.pipeline.metrics import STAGES

IMAGE = imagegen.jpeg(240, 320, seed=4)


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """A server with --metrics-port, sent a known mix; (server, metrics URL, what was sent)."""
    work = tmp_path_factory.mktemp("observe")
    media = work / "media"
    media.mkdir()
    (media / "a.jpg").write_bytes(IMAGE)
    port = procs.free_port()
    server = procs.Server(
        work, "--metrics-port", str(port), "--allowed-local-media-path", str(media), models=[procs.QWEN2],
    )
    sent = {"ok": [], "invalid": [], "not_found": []}
    try:
        with grpc.insecure_channel(server.target, options=procs.CHANNEL_OPTIONS) as ch:
            stub = pb_grpc.MultimodalPreprocessorStub(ch)
            for i in range(3):  # the first decodes, the repeats hit the cache
                rid = f"ok-{i}"
                stub.Preprocess(
                    pb.PreprocessRequest(request_id=rid, model=procs.QWEN2, images=[pb.MediaItem(data=IMAGE)], backend=pb.BACKEND_VLLM),
                    timeout=30,
                )
                sent["ok"].append(rid)
            kept = stub.Preprocess(
                pb.PreprocessRequest(request_id="file-1", model=procs.QWEN2, images=[pb.MediaItem(url=f"file://{media}/a.jpg")]),
                timeout=30,
            )
            sent["ok"].append("file-1")
            stub.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_SGLANG, release=True), timeout=30)
            for rid, req in (
                ("bad-1", pb.PreprocessRequest(request_id="bad-1", model=procs.QWEN2, images=[pb.MediaItem(data=b"not an image")])),
                ("bad-2", pb.PreprocessRequest(request_id="bad-2\n{\"forged\": 1}", model=procs.QWEN2)),
            ):
                with pytest.raises(grpc.RpcError) as e:
                    stub.Preprocess(req, timeout=30)
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                sent["invalid"].append(req.request_id)
            with pytest.raises(grpc.RpcError):
                stub.Preprocess(pb.PreprocessRequest(request_id="nf-1", model="no/such", images=[pb.MediaItem(data=IMAGE)]), timeout=30)
            sent["not_found"].append("nf-1")
        yield server, f"http://127.0.0.1:{port}/metrics", sent
    finally:
        server.stop()


def request_lines(server) -> list[dict]:
    out = []
    for line in server.log_text().splitlines():
        if " sglang_mm_grpc.requests: " in line:
            out.append(json.loads(line.split(" sglang_mm_grpc.requests: ", 1)[1]))
    return out


def scrape(url: str) -> dict[tuple, float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return values


def test_one_json_line_per_request(observed):
    server, _, sent = observed
    lines = [r for r in request_lines(server) if r["method"] == "Preprocess"]
    ids = [r["request_id"] for r in lines]
    everything = sent["ok"] + sent["invalid"] + sent["not_found"]
    assert sorted(ids) == sorted(everything)  # exactly one line each, a forged id stays inside its string
    by_id = {r["request_id"]: r for r in lines}
    for rid in sent["ok"]:
        r = by_id[rid]
        assert r["status"] == "OK" and r["model"] == procs.QWEN2 and r["images"] == 1 and r["bytes"] == len(IMAGE)
        assert set(r["ms"]) == set(STAGES) and all(v >= 0 for v in r["ms"].values())
        assert r["ms"]["total"] >= r["ms"]["fetch"]
    assert by_id["ok-0"]["backend"] == "vllm" and by_id["file-1"]["handle"]
    assert by_id["bad-1"]["status"] == "INVALID_ARGUMENT" and "image 0" in by_id["bad-1"]["error"]
    assert by_id["nf-1"]["status"] == "NOT_FOUND"
    assembles = [r for r in request_lines(server) if r["method"] == "Assemble"]
    assert len(assembles) == 1 and assembles[0]["status"] == "OK" and assembles[0]["backend"] == "sglang"


def test_get_stats_counts(observed):
    server, _, sent = observed
    st = server.stats()
    codes = {(s.method, s.code): s.count for s in st.statuses}
    assert codes[("Preprocess", "OK")] == len(sent["ok"])
    assert codes[("Preprocess", "INVALID_ARGUMENT")] == len(sent["invalid"])
    assert codes[("Preprocess", "NOT_FOUND")] == len(sent["not_found"])
    assert codes[("Assemble", "OK")] == 1
    assert st.requests["Preprocess"] == sum(len(v) for v in sent.values())
    assert st.images == len(sent["ok"]) and st.image_bytes == len(sent["ok"]) * len(IMAGE)
    assert st.fetch.started == 1 and st.fetch.bytes_fetched == len(IMAGE)
    assert st.cache.hits >= 2 and st.cache.max_bytes > 0
    assert st.store.items == 0 and st.in_flight == 0 and st.work.busy == 0
    stages = {h.stage: h for h in st.stages}
    assert set(stages) == set(STAGES)
    assert stages["total"].count == len(sent["ok"]) + 1  # + the Assemble
    assert stages["decode"].count == len(sent["ok"])
    for h in st.stages:
        assert sum(h.bucket_counts) == h.count and len(h.bucket_counts) == len(h.upper_bounds_ms) + 1


def test_prometheus_matches_get_stats(observed):
    server, url, sent = observed
    m = scrape(url)
    st = server.stats()
    p = "sglang_mm_"
    for s in st.statuses:
        assert m[(p + "responses_total", (("code", s.code), ("method", s.method)))] == s.count
    assert m[(p + "requests_total", (("method", "Preprocess"),))] == st.requests["Preprocess"]
    assert m[(p + "fetch_bytes_total", ())] == st.fetch.bytes_fetched == len(IMAGE)
    assert m[(p + "cache_hits_total", ())] == st.cache.hits
    assert m[(p + "cache_evictions_total", ())] == st.cache.evictions
    assert m[(p + "store_evictions_total", ())] == st.store.evicted
    assert m[(p + "store_bytes", ())] == st.store.bytes and m[(p + "store_max_bytes", ())] == st.store.max_bytes
    assert m[(p + "store_peak_bytes", ())] == st.store.peak_bytes > 0  # the file request kept a handle
    assert m[(p + "cache_peak_bytes", ())] == st.cache.peak_bytes >= st.cache.bytes > 0
    assert m[(p + "max_in_flight", ())] == st.max_in_flight and m[(p + "rejected_busy_total", ())] == 0
    assert m[(p + "images_total", ())] == st.images
    # Stage histograms in seconds: cumulative buckets ending at the count.
    for h in st.stages:
        label = (("stage", h.stage),)
        assert m[(p + "stage_seconds_count", label)] == h.count
        assert abs(m[(p + "stage_seconds_sum", label)] - h.sum_ms / 1e3) < 1e-6
        buckets = sorted(
            (float(dict(k[1])["le"]), v) for k, v in m.items()
            if k[0] == p + "stage_seconds_bucket" and dict(k[1])["stage"] == h.stage
        )
        assert [v for _, v in buckets] == sorted(v for _, v in buckets) and buckets[-1][1] == h.count


def test_metrics_port_taken_fails_startup(observed, tmp_path):
    _, url, _ = observed
    port = url.rsplit(":", 1)[1].split("/")[0]
    r = procs.run_cli("serve", "--port", str(procs.free_port()), "--metrics-port", port, "--model", procs.QWEN2)
    assert r.returncode == 1 and "cannot serve metrics" in r.stderr
