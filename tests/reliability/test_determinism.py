"""Determinism: the same request gives bit-identical outputs sequentially, concurrently,
with 1, 2 or 3 workers, with the cache on or off, and equal to the in-process result."""

from __future__ import annotations

import concurrent.futures as cf
import hashlib

import grpc
import numpy as np
import pytest

import imagegen
import procs
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
from sglang_mm_grpc.client import payload_arrays

MODELS = [procs.QWEN2, procs.PIXTRAL]
IMAGES = [imagegen.jpeg(300, 451, seed=1), imagegen.png(97, 131, seed=2), imagegen.jpeg(640, 480, seed=3)]
BACKENDS = (pb.BACKEND_SGLANG, pb.BACKEND_VLLM, pb.BACKEND_TRTLLM, pb.BACKEND_TOKENSPEED)


def fingerprint(resp: pb.PreprocessResponse) -> str:
    """Everything but timings, the handle and whether the cache answered, serialized
    deterministically."""
    r = pb.PreprocessResponse()
    r.CopyFrom(resp)
    r.ClearField("timings")
    r.ClearField("handle")
    for im in r.images:
        im.ClearField("cached")
    return hashlib.sha256(r.SerializeToString(deterministic=True)).hexdigest()


def requests() -> list[pb.PreprocessRequest]:
    return [
        pb.PreprocessRequest(request_id=f"{m}-{b}", model=m, images=[pb.MediaItem(data=x) for x in IMAGES], backend=b)
        for m in MODELS
        for b in BACKENDS
        if not (m == procs.PIXTRAL and b == pb.BACKEND_VLLM)  # refused: images of different sizes
    ]


def run_all(target: str, concurrent: int = 1) -> dict[str, str]:
    with grpc.insecure_channel(target, options=procs.CHANNEL_OPTIONS) as ch:
        stub = pb_grpc.MultimodalPreprocessorStub(ch)
        reqs = requests() * concurrent
        with cf.ThreadPoolExecutor(max(1, concurrent * 2)) as ex:
            resps = list(ex.map(lambda r: stub.Preprocess(r, timeout=60), reqs))
    out: dict[str, str] = {}
    for req, resp in zip(reqs, resps):
        fp = fingerprint(resp)
        assert out.setdefault(req.request_id, fp) == fp, f"{req.request_id} differs between concurrent copies"
    return out


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    work = tmp_path_factory.mktemp("determinism")
    started = []
    try:
        for workers, cache in ((1, "0"), (2, "64MiB"), (3, "0")):
            started.append(
                procs.Server(work, "--cache-bytes", cache, "--log-level", "WARNING", models=MODELS, workers=workers, name=f"w{workers}")
            )
        yield started
    finally:
        for s in started:
            s.stop()


def test_sequential_concurrent_and_any_worker_count(servers):
    reference = run_all(servers[0].target)
    assert len(set(reference.values())) == len(reference)  # the requests do differ
    for server in servers:
        assert run_all(server.target) == reference  # repeated: the cached path on w2
        assert run_all(server.target, concurrent=4) == reference


def test_equal_to_in_process(servers):
    """The wire tensors are the in-process arrays, bit for bit."""
    with grpc.insecure_channel(servers[1].target, options=procs.CHANNEL_OPTIONS) as ch:
        stub = pb_grpc.MultimodalPreprocessorStub(ch)
        for model in MODELS:
            out = Preprocessor.from_model(model, cache_bytes=0).preprocess(IMAGES)
            resp = stub.Preprocess(
                pb.PreprocessRequest(model=model, images=[pb.MediaItem(data=x) for x in IMAGES], backend=pb.BACKEND_SGLANG),
                timeout=60,
            )
            arrays = payload_arrays(resp.payload)
            pv = out.pixel_values.astype(np.float32)
            assert arrays["pixel_values"].tobytes() == pv.tobytes()
            assert list(resp.input_ids) == [int(x) for x in out.input_ids]
