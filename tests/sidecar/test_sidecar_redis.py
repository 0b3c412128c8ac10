"""``vllm-sidecar`` against a real redis-server and the worker's own code.

The worker side is smg-grpc-servicer's ``RedisMediaProcessor`` (0.14.1): ``probe()``
reads the sidecar's hello, ``_submit_and_wait`` queues a job and reads its result, both
unchanged. Its ``_rebuild`` needs vLLM and is not run here; the items' bytes equal
vLLM's own (test_vllm_items.py). Redis, the sidecar and an HTTP server are separate
processes (the HTTP server a thread) on 127.0.0.1, each on a free port.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import subprocess
import sys
import threading
import time
import uuid
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import msgspec
import numpy as np
import pytest

import imagegen
import videogen
from redis_server import Redis
from servers import Proc, free_port, wait_until
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.sidecar import jobs, vllm_hashes, vllm_items

redis = pytest.importorskip("redis")
from smg_grpc_servicer.mm_sidecar_protocol import (  # noqa: E402
    SCHEMA_VERSION, Fingerprint, Job, JobItem, Keys, decode_result, encode_job, resolve_namespace)
from smg_grpc_servicer.vllm.mm_processor import MmProcessorUnavailable, RedisMediaProcessor  # noqa: E402

QWEN = "Qwen/Qwen2-VL-7B-Instruct"
FIXTURES = Path(__file__).parent / "fixtures"
PAD, START, END, VPAD = 151655, 151652, 151653, 151656
FINGERPRINT = Fingerprint(model=QWEN, vllm_version="0.33.0", dtype="torch.bfloat16", video_backend="opencv",
                          media_io_kwargs="{}", mm_processor_kwargs="{}", limit_per_prompt='{"*": {"count": 3}}')


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """A directory of images, served over HTTP on 127.0.0.1 too."""
    root = tmp_path_factory.mktemp("media")
    (root / "a.png").write_bytes(imagegen.png(56, 84, seed=11))
    (root / "b.jpg").write_bytes(imagegen.jpeg(120, 90, seed=12))
    (root / "c.png").write_bytes(imagegen.png(84, 112, seed=13))
    (root / "broken.png").write_bytes(imagegen.png(56, 84, seed=14)[:200])
    (root / "v.mp4").write_bytes(videogen.clip(frames=24, fps=24))  # 4 frames sampled at 2 fps
    with np.load(FIXTURES / "inputs.npz") as npz:  # 15 frames, the last clamped by vLLM's loader
        (root / "clamp.mp4").write_bytes(npz["video/clamp"].tobytes())
    (root / "broken.mp4").write_bytes((root / "v.mp4").read_bytes()[:300])
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield SimpleNamespace(root=root, http=f"http://127.0.0.1:{server.server_address[1]}")
    server.shutdown()


class _QuietHandler(SimpleHTTPRequestHandler):
    """Files; ``/slow/NAME`` answers NAME after SLOW_S."""

    def do_GET(self) -> None:
        if self.path.startswith("/slow/"):
            time.sleep(SLOW_S)
            self.path = self.path[len("/slow"):]
        super().do_GET()

    def log_message(self, *args) -> None:
        pass


SLOW_S = 1.5  # under the fetch timeout (3 s), over a Redis restart


@pytest.fixture(scope="module")
def stack(tmp_path_factory, media):
    """redis-server and one sidecar serving QWEN for FINGERPRINT."""
    work = tmp_path_factory.mktemp("sidecar")
    server = Redis(work)
    fp = work / "fingerprint.json"
    fp.write_text(json.dumps(FINGERPRINT.to_hello()))
    sidecar = _sidecar(work, server.url, fp, media.root)
    keys = Keys.for_namespace(resolve_namespace(FINGERPRINT, None))
    client = redis.Redis(port=server.port)
    assert wait_until(lambda: client.exists(keys.hello) or not sidecar.alive(), 300), sidecar.log_text()
    assert sidecar.alive(), sidecar.log_text()
    yield SimpleNamespace(redis=server, sidecar=sidecar, keys=keys, client=client, work=work)
    sidecar.stop()
    server.stop()


def _sidecar(work: Path, url: str, fingerprint: Path, root: Path, *extra: str, env: dict | None = None) -> Proc:
    return Proc([sys.executable, "-m", "sglang_mm_grpc.cli", "vllm-sidecar", "--model", QWEN, "--fingerprint",
                 str(fingerprint), "--redis-url", url, "--allow-private-media-hosts", "--allowed-local-media-path",
                 str(root), *extra], work / f"sidecar-{uuid.uuid4().hex[:6]}.log", env=env)


def _processor(url: str, timeout_ms: int = 60_000, fingerprint: Fingerprint = FINGERPRINT) -> RedisMediaProcessor:
    """The worker's processor; its engine is read only for the per-prompt item limits."""
    mm_config = SimpleNamespace(get_limit_per_prompt=lambda modality: 3)
    engine = SimpleNamespace(model_config=SimpleNamespace(get_multimodal_config=lambda: mm_config))
    return RedisMediaProcessor(engine, fingerprint, redis_url=url, timeout_ms=timeout_ms)


def _job(urls: list[str], ids: list[int] | None = None, *, modality: str | list[str] = "image",
         deadline_s: float = 60, fingerprint: Fingerprint = FINGERPRINT, v: int = SCHEMA_VERSION) -> Job:
    """``modality``: every item's, or each item's in order."""
    now = int(time.time() * 1000)
    modalities = [modality] * len(urls) if isinstance(modality, str) else modality
    ids = ids if ids is not None else [1] + [t for m in modalities for t in (START, VPAD if m == "video" else PAD,
                                                                             END)] + [2]
    return Job(v=v, job_id=uuid.uuid4().hex, request_id="r", fingerprint=fingerprint, prompt_token_ids=ids,
               prompt=None, items=[JobItem(modality=m, url=u) for m, u in zip(modalities, urls)], enqueued_ms=now,
               deadline_ms=now + int(deadline_s * 1000))


def _submit(stack, job: Job, fingerprint: Fingerprint = FINGERPRINT):
    """The worker's _submit_and_wait (a worker of ``fingerprint``): the result, or the error
    the worker raises."""
    async def run():
        proc = _processor(stack.redis.url, fingerprint=fingerprint)
        try:
            return await proc._submit_and_wait(job)
        finally:
            await proc._client.aclose()

    return asyncio.run(run())


def _video_urls(media) -> list[str]:
    v = (media.root / "v.mp4").read_bytes()
    return [f"data:video/mp4;base64,{base64.b64encode(v).decode()}", f"{media.http}/clamp.mp4",
            f"file://{media.root / 'v.mp4'}"]


def test_videos_by_data_url_http_and_file_with_an_image_equal_the_services_own(stack, media):
    """Three videos, one of each source, around an image: ids, each item's range, vLLM's keys
    (the clamped clip's is vLLM 0.33.0's own, from the fixtures) and the items' tensors are
    what the service computes in process with frames sampled as vLLM's loader samples them."""
    urls = _video_urls(media)
    job = _job([urls[0], f"{media.http}/a.png", urls[1], urls[2]], modality=["video", "image", "video", "video"])
    result = _submit(stack, job)
    assert result.ok, (result.code, result.message)
    videos = [(media.root / n).read_bytes() for n in ("v.mp4", "clamp.mp4", "v.mp4")]
    want = jobs.load_model(QWEN, "torchvision").preprocess([(media.root / "a.png").read_bytes()],
                                                           job.prompt_token_ids, videos=videos, raw=True)
    assert result.prompt_token_ids == want.input_ids.tolist()
    assert [(p.offset, p.length, p.is_embed) for p in result.mm_placeholders["video"]] == [
        (*v.structural_range, None) for v in want.videos]
    assert [(p.offset, p.length) for p in result.mm_placeholders["image"]] == [want.images[0].structural_range]
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())
    clamped = next(e for e in manifest["videos"] if e["case"] == "clamp" and e["model"] == QWEN)
    assert [len(v.frame_indices) for v in want.videos] == [4, 15, 4]
    assert result.mm_hashes["video"][1] == clamped["hash"]
    assert result.mm_hashes["video"][0] == result.mm_hashes["video"][2] != clamped["hash"]
    grids = want.video_tensors["video_grid_thw"]
    starts = np.cumsum([0, *grids.prod(-1)])
    for i, blob in enumerate(result.mm_kwargs["video"]):
        item = msgspec.msgpack.decode(blob)
        assert set(item) == {"pixel_values_videos", "video_grid_thw"}
        dtype, shape, ext = item["pixel_values_videos"]["data"]
        assert dtype == "uint8" and np.array_equal(np.frombuffer(ext.data, np.uint8).reshape(shape),
                                                   want.pixel_values_videos[starts[i]:starts[i + 1]])
        assert np.frombuffer(item["video_grid_thw"]["data"][2].data, np.int64).tolist() == grids[i].tolist()
    assert len(result.mm_kwargs["image"]) == 1


def test_the_worker_finds_the_sidecar(stack):
    async def run():
        proc = _processor(stack.redis.url)
        try:
            return await proc.probe(), proc.schemes
        finally:
            await proc._client.aclose()

    found, schemes = asyncio.run(run())
    assert found and schemes == "http,https,data,file"
    hello = {k.decode(): v.decode() for k, v in stack.client.hgetall(stack.keys.hello).items()}
    assert hello["schema"] == str(SCHEMA_VERSION) and hello["implementation"] == "sglang-mm-grpc"
    assert Fingerprint.from_hello(hello) == FINGERPRINT
    assert 0 < stack.client.ttl(stack.keys.hello) <= 15


def _urls(media) -> list[str]:
    a = (media.root / "a.png").read_bytes()
    return [f"data:image/png;base64,{base64.b64encode(a).decode()}", f"{media.http}/b.jpg",
            f"file://{media.root / 'c.png'}"]


def test_images_by_data_url_http_and_file_equal_the_services_own(stack, media):
    """Three images, one of each source: the expanded ids, each item's range, vLLM's
    cache key and the item's tensors are what the service computes in process."""
    urls = _urls(media)
    job = _job(urls)
    result = _submit(stack, job)
    assert result.ok, (result.code, result.message)
    raws = [(media.root / n).read_bytes() for n in ("a.png", "b.jpg", "c.png")]
    want = Preprocessor.from_model(QWEN, processor="torchvision", cache_bytes=0).preprocess(
        raws, job.prompt_token_ids, raw=True)
    assert result.prompt_token_ids == want.input_ids.tolist()
    assert [(p.offset, p.length, p.is_embed) for p in result.mm_placeholders["image"]] == [
        (*im.structural_range, None) for im in want.images]
    assert result.mm_hashes == {"image": [vllm_hashes.image_hash(r, QWEN) for r in raws]}
    starts = np.cumsum([0, *want.tensors["image_grid_thw"].prod(-1)])
    for i, blob in enumerate(result.mm_kwargs["image"]):
        item = msgspec.msgpack.decode(blob)
        dtype, shape, ext = item["pixel_values"]["data"]
        assert (dtype, shape) == ("uint8", [starts[i + 1] - starts[i], 1176])
        assert np.array_equal(np.frombuffer(ext.data, np.uint8).reshape(shape),
                              want.pixel_values[starts[i]:starts[i + 1]])
        assert np.frombuffer(item["image_grid_thw"]["data"][2].data, np.int64).tolist() == \
            want.tensors["image_grid_thw"][i].tolist()
    assert result.fingerprint == FINGERPRINT and result.timing is not None


@pytest.mark.parametrize("case", [
    "past_deadline", "unknown_modality", "too_many_items", "unreachable", "undecodable_image",
    "placeholder_mismatch", "missing_file", "scheme", "fingerprint", "undecodable_video"])
def test_each_failure_is_answered_with_its_code(stack, media, case):
    """The worker raises ValueError for the client's codes and MmProcessorUnavailable for
    the retryable ones, with the sidecar's code in the message."""
    png = f"{media.http}/a.png"
    job, code = {
        "past_deadline": (_job([png], deadline_s=-1), "expired"),
        "unknown_modality": (_job([png], modality="hologram"), "fetch_failed"),
        "too_many_items": (_job([png] * 4), "limit_exceeded"),
        "unreachable": (_job([f"http://127.0.0.1:{free_port()}/a.png"]), "fetch_failed"),
        "undecodable_image": (_job([f"{media.http}/broken.png"]), "decode_failed"),
        "placeholder_mismatch": (_job([png], ids=[1, 2, 3]), "placeholder_mismatch"),
        "missing_file": (_job(["file:///etc/passwd"]), "fetch_failed"),
        "scheme": (_job(["ftp://127.0.0.1/a.png"]), "scheme_not_accepted"),
        "fingerprint": (_job([png], fingerprint=msgspec.structs.replace(FINGERPRINT, dtype="torch.float16")),
                        "fingerprint_mismatch"),
        "undecodable_video": (_job([png, f"{media.http}/broken.mp4"], modality=["image", "video"]), "decode_failed"),
    }[case]
    error = ValueError if code not in ("expired", "fingerprint_mismatch") else MmProcessorUnavailable
    with pytest.raises(error, match=code):
        _submit(stack, job)
    assert stack.sidecar.alive()


def test_an_undecodable_job_and_a_wrong_schema_leave_the_sidecar_serving(stack, media):
    stack.client.lpush(stack.keys.jobs, b"\x93not a job")
    job = _job([f"{media.http}/a.png"], v=SCHEMA_VERSION + 1)
    stack.client.lpush(stack.keys.jobs, encode_job(job))
    popped = stack.client.brpop(stack.keys.result(job.job_id), timeout=30)
    assert popped is not None
    result = decode_result(popped[1])
    assert not result.ok and result.code == "processor_error" and "schema" in result.message
    assert _submit(stack, _job([f"{media.http}/a.png"])).ok
    assert "undecodable job dropped" in stack.sidecar.log_text()


def test_a_sidecars_own_limits_and_policy(stack, media, tmp_path):
    """A second sidecar on its own namespace: results capped below one image's
    (SMG_VLLM_MM_MAX_RESULT_BYTES), http only from 127.0.0.1 (--allowed-media-domains) and
    images up to 5000 pixels (--max-image-pixels: a.png has 4704, c.png 9408)."""
    fp = stack.work / "fingerprint.json"
    small = _sidecar(tmp_path, stack.redis.url, fp, media.root, "--namespace", "small", "--allowed-media-domains",
                     "127.0.0.1", "--max-image-pixels", "5000", env={"SMG_VLLM_MM_MAX_RESULT_BYTES": "1000"})
    small_keys = Keys.for_namespace("small")
    results = []
    try:
        assert wait_until(lambda: stack.client.exists(small_keys.hello) or not small.alive(), 120), small.log_text()
        port = media.http.rsplit(":", 1)[1]
        for url in (f"{media.http}/a.png", f"http://localhost:{port}/a.png", f"{media.http}/c.png"):
            job = _job([url])
            stack.client.lpush(small_keys.jobs, encode_job(job))
            popped = stack.client.brpop(small_keys.result(job.job_id), timeout=30)
            assert popped is not None, small.log_text()
            results.append(decode_result(popped[1]))
    finally:
        small.stop()
    too_large, refused, too_many_pixels = results
    assert (too_large.ok, too_large.code) == (False, "result_too_large")
    assert "transport limit 1000 bytes" in too_large.message
    assert (refused.ok, refused.code) == (False, "domain_not_allowed") and "localhost" in refused.message
    assert (too_many_pixels.ok, too_many_pixels.code) == (False, "limit_exceeded"), too_many_pixels.message


def test_a_redis_restart_is_survived(stack, media):
    """Redis killed and started again on its port: the sidecar advertises again and
    answers the next job."""
    stack.redis.stop()
    time.sleep(1)
    stack.redis.start()
    client = redis.Redis(port=stack.redis.port)
    assert wait_until(lambda: client.exists(stack.keys.hello), 30)
    assert _submit(stack, _job([f"{media.http}/a.png"])).ok
    assert stack.sidecar.alive()


def test_an_image_vllm_converts_carries_vllms_own_key(stack):
    """An RGBA PNG (vLLM's loader composites it onto white, as the HF processor does): the
    sidecar's key is the one vLLM 0.33.0 computed for it (fixtures/MANIFEST.json)."""
    manifest = json.loads((Path(__file__).parent / "fixtures" / "MANIFEST.json").read_text())
    want = next(h["hash"] for h in manifest["hashes"] if h["png"] == "extra/rgba_png" and not h["factors"])
    with np.load(Path(__file__).parent / "fixtures" / "inputs.npz") as npz:
        png = npz["extra/rgba_png"].tobytes()
    result = _submit(stack, _job([f"data:image/png;base64,{base64.b64encode(png).decode()}"]))
    assert result.ok and result.mm_hashes == {"image": [want]}


def test_engine_kwargs_it_does_not_reproduce_are_refused_at_start(tmp_path):
    fp = tmp_path / "fp.json"
    for field, value, says in (
            ("mm_processor_kwargs", '{"fps": 1}', "mm_processor_kwargs 'fps' (1) is not reproduced"),
            ("mm_processor_kwargs", '{"min_pixels": 20000000}', "min_pixels 20000000 (the engine's) above max_pixels "
                                                                "12845056 (the image processor's default)"),
            ("media_io_kwargs", '{"video": {"fps": 1}}', "this sidecar reproduces the engine's defaults only")):
        fp.write_text(json.dumps({**FINGERPRINT.to_hello(), field: value}))
        r = subprocess.run([sys.executable, "-m", "sglang_mm_grpc.cli", "vllm-sidecar", "--model", QWEN,
                            "--fingerprint", str(fp)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    fp.write_text(json.dumps({"model": QWEN}))
    r = subprocess.run([sys.executable, "-m", "sglang_mm_grpc.cli", "vllm-sidecar", "--model", QWEN,
                        "--fingerprint", str(fp)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "misses vllm_version" in r.stderr
    fp.write_text(json.dumps({**FINGERPRINT.to_hello(), "dtype": "bfloat16"}))  # not str(torch.bfloat16)
    r = subprocess.run([sys.executable, "-m", "sglang_mm_grpc.cli", "vllm-sidecar", "--model", QWEN,
                        "--fingerprint", str(fp)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "dtype 'bfloat16' is not one vLLM 0.33.0 runs a model in" in r.stderr, r.stderr
    fp.write_text(json.dumps(FINGERPRINT.to_hello()))
    for model, says in (("no/such-model", "unknown model"),
                        ("mistral-community/pixtral-12b", "does not serve the pixtral family: vLLM 0.33.0 runs it")):
        r = subprocess.run([sys.executable, "-m", "sglang_mm_grpc.cli", "vllm-sidecar", "--model", model,
                            "--fingerprint", str(fp)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_two_sidecars_share_the_job_list(stack, media, tmp_path):
    """A second sidecar on the same namespace: every job answered exactly once, by
    either (both take from the one list)."""
    fp = stack.work / "fingerprint.json"
    second = _sidecar(tmp_path, stack.redis.url, fp, media.root, "--log-level", "DEBUG")
    try:
        assert wait_until(lambda: "serving under" in second.log_text() or not second.alive(), 120), second.log_text()
        jobs = [_job([f"{media.http}/a.png"]) for _ in range(12)]
        for job in jobs:
            stack.client.lpush(stack.keys.jobs, encode_job(job))
        answers = [stack.client.brpop(stack.keys.result(job.job_id), timeout=60) for job in jobs]
        assert all(a is not None and decode_result(a[1]).ok for a in answers)
        assert all(stack.client.llen(stack.keys.result(job.job_id)) == 0 for job in jobs)  # one answer each
        assert stack.client.llen(stack.keys.jobs) == 0
    finally:
        second.stop()


def test_a_job_in_progress_when_redis_restarts_is_still_answered(stack, media):
    """Redis goes away while the sidecar fetches a job's image (a slow source), stays away
    past the moment the answer is ready, and is back before the job's deadline: the
    answer is pushed to the new Redis."""
    job = _job([f"{media.http}/slow/a.png"], deadline_s=60)
    stack.client.lpush(stack.keys.jobs, encode_job(job))
    assert wait_until(lambda: stack.client.llen(stack.keys.jobs) == 0, 10)  # a sidecar worker holds it
    stack.redis.stop()
    time.sleep(SLOW_S + 1.5)  # the answer's first push finds no Redis
    stack.redis.start()
    popped = redis.Redis(port=stack.redis.port).brpop(stack.keys.result(job.job_id), timeout=30)
    assert popped is not None and decode_result(popped[1]).ok
    assert stack.sidecar.alive()


LLAMA4 = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def test_llama4_images_carry_bfloat16_pixels_and_is_embed(stack, media, tmp_path):
    """Llama 4's engine wants normalized pixels, which vLLM's processor casts to the
    engine's dtype (the fingerprint's bfloat16: ``InputProcessingContext._postprocess_output``):
    the service's float32 pixels rounded to bfloat16 as torch rounds them. Its range spans
    the image's structure tokens, with ``is_embed`` on the patches only (vLLM's
    select_token_ids)."""
    from sglang_mm_grpc.kernels import bf16

    fingerprint = msgspec.structs.replace(FINGERPRINT, model=LLAMA4)
    fp = tmp_path / "fp.json"
    fp.write_text(json.dumps(fingerprint.to_hello()))
    argv = [sys.executable, "-m", "sglang_mm_grpc.cli", "vllm-sidecar", "--model", LLAMA4, "--fingerprint", str(fp),
            "--redis-url", stack.redis.url, "--allow-private-media-hosts"]
    refused = subprocess.run([*argv, "--mm-device-do-normalize"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "does not normalize pixels on the device" in refused.stderr
    sidecar = Proc(argv, tmp_path / "llama4.log")
    keys = Keys.for_namespace(resolve_namespace(fingerprint, None))
    try:
        assert wait_until(lambda: stack.client.exists(keys.hello) or not sidecar.alive(), 300), sidecar.log_text()
        job = _job([f"{media.http}/b.jpg"], [1, 200090, 2], fingerprint=fingerprint)
        stack.client.lpush(keys.jobs, encode_job(job))
        popped = stack.client.brpop(keys.result(job.job_id), timeout=60)
        video = _job([f"{media.http}/v.mp4"], [1, 200090, 2], modality="video", fingerprint=fingerprint)
        stack.client.lpush(keys.jobs, encode_job(video))
        refused = decode_result(stack.client.brpop(keys.result(video.job_id), timeout=60)[1])
    finally:
        sidecar.stop()
    assert (refused.ok, refused.code) == (False, "fetch_failed")
    assert "unsupported media modality 'video' (this sidecar processes image)" in refused.message
    result = decode_result(popped[1])
    assert result.ok, result.message
    want = Preprocessor.from_model(LLAMA4, cache_bytes=0).preprocess([(media.root / "b.jpg").read_bytes()],
                                                                      [1, 200090, 2])
    assert result.prompt_token_ids == want.input_ids.tolist()
    (placeholder,) = result.mm_placeholders["image"]
    offset, length = want.images[0].structural_range
    assert (placeholder.offset, placeholder.length) == (offset, length)
    ids = np.array(want.input_ids[offset:offset + length])
    assert placeholder.is_embed == (ids == 200092).tolist()  # the <|patch|> tokens
    item = msgspec.msgpack.decode(result.mm_kwargs["image"][0])
    dtype, shape, ext = item["pixel_values"]["data"]
    assert want.pixel_values.dtype == np.float32 and (dtype, shape) == ("bfloat16", list(want.pixel_values.shape))
    assert np.array_equal(np.frombuffer(ext.data, np.uint16).reshape(shape), bf16.to_bf16_bits(want.pixel_values))
    assert [item[k]["data"][0] for k in ("patches_per_image", "aspect_ratios")] == ["int64", "int64"]


INKLING = "thinkingmachines/Inkling"


def _assert_vllms(result, entry: dict, modality: str | None = None) -> None:
    """``result`` holds what vLLM 0.33.0 computed for the fixtures' job (MANIFEST.json
    "families": of ``modality``; "omni": per modality): its ids, ranges, keys and item bytes
    (in vLLM's run's key order)."""
    assert result.ok, result.message
    assert result.prompt_token_ids == entry["prompt_token_ids"]
    wanted = {modality: entry} if modality else {
        m: {k: entry[k][m] for k in ("placeholders", "hashes", "items")} for m in entry["items"]}
    assert result.mm_hashes == {m: want["hashes"] for m, want in wanted.items()}
    for m, want in wanted.items():
        assert [{"offset": p.offset, "length": p.length, "is_embed": p.is_embed}
                for p in result.mm_placeholders[m]] == want["placeholders"]
        for raw, item_want in zip(result.mm_kwargs[m], want["items"], strict=True):
            item = msgspec.msgpack.decode(raw)
            raw = msgspec.msgpack.encode({key: item[key] for key in item_want["keys"]})
            assert hashlib.sha256(raw).hexdigest() == item_want["sha256"]


def test_inkling_results_are_vllms_own(stack, media, tmp_path):
    """A sidecar for Inkling on the module's Redis: the fixtures' jobs (two images, by data
    URL and over HTTP, in a prompt of three <|content_image|> markers; an MP3 and a WAV
    likewise, three <|content_audio_input|> markers) are answered with what vLLM 0.33.0
    computed for them (fixtures/MANIFEST.json "families"): the expanded ids, each range with
    is_embed off on its marker, vLLM's keys, and items whose bytes (bfloat16 pixels, int32
    dMel bins) hash to vLLM's."""
    entries = [e for e in json.loads((FIXTURES / "MANIFEST.json").read_text())["families"] if e["model"] == INKLING]
    (entry,), (audio_entry,) = [e for e in entries if "clips" not in e], [e for e in entries if "clips" in e]
    with np.load(FIXTURES / "inputs.npz") as npz:
        images = [npz[f"inkling/image{i}"].tobytes() for i in range(2)]
        clips = [npz[f"audio/clip{i}"].tobytes() for i in range(2)]
    (media.root / "inkling1.jpg").write_bytes(images[1])
    (media.root / "inkling1.wav").write_bytes(clips[1])
    fingerprint = msgspec.structs.replace(FINGERPRINT, model=INKLING)
    fp = tmp_path / "fp.json"
    fp.write_text(json.dumps(fingerprint.to_hello()))
    sidecar = Proc([sys.executable, "-m", "sglang_mm_grpc.cli", "vllm-sidecar", "--model", INKLING, "--fingerprint",
                    str(fp), "--redis-url", stack.redis.url, "--allow-private-media-hosts"], tmp_path / "inkling.log")
    keys = Keys.for_namespace(resolve_namespace(fingerprint, None))
    try:
        assert wait_until(lambda: stack.client.exists(keys.hello) or not sidecar.alive(), 300), sidecar.log_text()
        job = _job([f"data:image/png;base64,{base64.b64encode(images[0]).decode()}", f"{media.http}/inkling1.jpg"],
                   entry["prompt"], fingerprint=fingerprint)
        stack.client.lpush(keys.jobs, encode_job(job))
        popped = stack.client.brpop(keys.result(job.job_id), timeout=60)
        audio_job = _job([f"data:audio/mpeg;base64,{base64.b64encode(clips[0]).decode()}",
                          f"{media.http}/inkling1.wav"], audio_entry["prompt"], modality="audio",
                         fingerprint=fingerprint)
        stack.client.lpush(keys.jobs, encode_job(audio_job))
        audio_popped = stack.client.brpop(keys.result(audio_job.job_id), timeout=60)
    finally:
        sidecar.stop()
    assert popped is not None and audio_popped is not None, sidecar.log_text()
    _assert_vllms(decode_result(popped[1]), entry, "image")
    _assert_vllms(decode_result(audio_popped[1]), audio_entry, "audio")


def test_results_equal_the_servers_vllm_payload(stack, media, tmp_path):
    """The same request to ``serve`` (Qwen2-VL with the torchvision processor, a vLLM
    payload of raw uint8 pixels, the video sampled at 2 fps as vLLM's loader samples it) and
    to the sidecar: the same expanded ids, ranges, pixels and grids."""
    from servers import Server
    from sglang_mm_grpc.client import Client, payload_options
    from sglang_mm_grpc.wire.tensors import to_array

    job = _job([*_urls(media), _video_urls(media)[0]], modality=["image"] * 3 + ["video"])
    result = _submit(stack, job)
    assert result.ok, (result.code, result.message)
    raws = [(media.root / n).read_bytes() for n in ("a.png", "b.jpg", "c.png")]
    server = Server(tmp_path, "--processor", "torchvision", models=[QWEN])
    try:
        with Client(server.target, timeout=60) as c:
            payload = c.preprocess(QWEN, raws, job.prompt_token_ids, "vllm", options=payload_options("uint8", "inline"),
                                   videos=[(media.root / "v.mp4").read_bytes()], video_options={"fps": 2.0}).payload
    finally:
        server.stop()
    assert result.prompt_token_ids == list(payload.input_ids)
    for modality, batch in (("image", payload.vllm), ("video", payload.vllm_extra[0])):
        key = f"{modality}_grid_thw"
        assert [(p.offset, p.length) for p in result.mm_placeholders[modality]] == \
            [(p.offset, p.length) for p in batch.mm_placeholders]
        items = [msgspec.msgpack.decode(blob) for blob in result.mm_kwargs[modality]]
        pixels_key = "pixel_values" if modality == "image" else "pixel_values_videos"
        got = np.concatenate([np.frombuffer(i[pixels_key]["data"][2].data, np.uint8).reshape(
            i[pixels_key]["data"][1]) for i in items])
        pixels = to_array(batch.pixel_values)
        assert pixels.dtype == np.uint8 and np.array_equal(got, pixels)
        assert [np.frombuffer(i[key]["data"][2].data, np.int64).tolist() for i in items] == \
            to_array(batch.model_specific_tensors[key]).tolist()


ASR = "Qwen/Qwen3-ASR-1.7B-hf"


def test_qwen3_asr_clips_are_vllms_own_and_the_services(stack, media, tmp_path):
    """A sidecar for Qwen3-ASR on the module's Redis. The fixtures' job (an MP3 by data URL,
    a WAV over HTTP) is answered with what vLLM 0.33.0 computed for it (fixtures/MANIFEST.json
    "families": ids, ranges, vLLM's keys of the parsed waveforms, item bytes). A job through
    the worker's own ``_submit_and_wait`` with the WAV by file path carries the service's own
    expansion and features (in the engine's bfloat16). An image, and a clip that is not
    audio, get their codes."""
    entry = next(e for e in json.loads((FIXTURES / "MANIFEST.json").read_text())["families"] if e["model"] == ASR)
    with np.load(FIXTURES / "inputs.npz") as npz:
        clips = [npz[f"audio/clip{i}"].tobytes() for i in range(2)]
    (media.root / "clip1.wav").write_bytes(clips[1])
    fingerprint = msgspec.structs.replace(FINGERPRINT, model=ASR)
    fp = tmp_path / "fp.json"
    fp.write_text(json.dumps(fingerprint.to_hello()))
    sidecar = Proc([sys.executable, "-m", "sglang_mm_grpc.cli", "vllm-sidecar", "--model", ASR, "--fingerprint",
                    str(fp), "--redis-url", stack.redis.url, "--allow-private-media-hosts",
                    "--allowed-local-media-path", str(media.root)], tmp_path / "asr.log")
    keys = Keys.for_namespace(resolve_namespace(fingerprint, None))
    wav_ids = [1, 151669, 151676, 151670, 2]
    try:
        assert wait_until(lambda: stack.client.exists(keys.hello) or not sidecar.alive(), 300), sidecar.log_text()
        job = _job([f"data:audio/mpeg;base64,{base64.b64encode(clips[0]).decode()}", f"{media.http}/clip1.wav"],
                   entry["prompt"], modality="audio", fingerprint=fingerprint)
        stack.client.lpush(keys.jobs, encode_job(job))
        popped = stack.client.brpop(keys.result(job.job_id), timeout=60)
        refused = {}
        for name, modality, url in (("image", "image", f"{media.http}/a.png"),
                                    ("not audio", "audio", f"{media.http}/a.png")):
            bad = _job([url], wav_ids, modality=modality, fingerprint=fingerprint)
            stack.client.lpush(keys.jobs, encode_job(bad))
            refused[name] = decode_result(stack.client.brpop(keys.result(bad.job_id), timeout=60)[1])

        async def worker():
            proc = RedisMediaProcessor(SimpleNamespace(model_config=SimpleNamespace(
                get_multimodal_config=lambda: SimpleNamespace(get_limit_per_prompt=lambda m: 3))), fingerprint,
                redis_url=stack.redis.url, timeout_ms=60_000)
            try:
                return await proc._submit_and_wait(_job([f"file://{media.root / 'clip1.wav'}"], wav_ids,
                                                        modality="audio", fingerprint=fingerprint))
            finally:
                await proc._client.aclose()

        by_worker = asyncio.run(worker())
    finally:
        sidecar.stop()
    assert popped is not None, sidecar.log_text()
    _assert_vllms(decode_result(popped[1]), entry, "audio")
    assert (refused["image"].code, refused["not audio"].code) == ("fetch_failed", "decode_failed")
    out = Preprocessor.from_model(ASR, cache_bytes=0).preprocess([], wav_ids, audios=[clips[1]])
    assert by_worker.ok and by_worker.prompt_token_ids == out.input_ids.tolist()
    assert by_worker.mm_hashes == {"audio": [entry["hashes"][1]]}
    (item,) = [msgspec.msgpack.decode(raw) for raw in by_worker.mm_kwargs["audio"]]
    dtype, shape, ext = item["input_audio_features"]["data"]
    bits = np.frombuffer(ext.data, np.uint16).reshape(shape)
    assert dtype == "bfloat16"
    assert np.array_equal(bits, vllm_items.BFloat16.of(out.audio_tensors["input_audio_features"][0]).bits)


def test_omni_jobs_through_the_worker_are_vllms_own(stack, media, tmp_path):
    """A sidecar for each Omni thinker on the module's Redis, both started at once. The
    fixtures' job (the PNG by data URL, the clamped clip over HTTP, the MP3 by file path and
    the WAV over HTTP, in one prompt), submitted by the worker's own ``_submit_and_wait``, is
    answered with what vLLM 0.33.0 computed for it (fixtures/MANIFEST.json "omni"): per
    modality, the ids, ranges, keys and item bytes (float pixels in bfloat16; Qwen3-Omni's
    shorter clip's features as vLLM's one extractor call on both clips gives them)."""
    entries = json.loads((FIXTURES / "MANIFEST.json").read_text())["omni"]
    with np.load(FIXTURES / "inputs.npz") as npz:
        png = npz[entries[0]["media"]["image"][0]].tobytes()
        clips = [npz[key].tobytes() for key in entries[0]["media"]["audio"]]
    (media.root / "omni0.mp3").write_bytes(clips[0])
    (media.root / "omni1.wav").write_bytes(clips[1])
    urls = [f"data:image/png;base64,{base64.b64encode(png).decode()}", f"{media.http}/clamp.mp4",
            f"file://{media.root / 'omni0.mp3'}", f"{media.http}/omni1.wav"]
    running = []
    try:
        for entry in entries:
            fingerprint = msgspec.structs.replace(FINGERPRINT, model=entry["model"])
            fp = tmp_path / f"{entry['family']}.json"
            fp.write_text(json.dumps(fingerprint.to_hello()))
            running.append((entry, fingerprint, Proc(
                [sys.executable, "-m", "sglang_mm_grpc.cli", "vllm-sidecar", "--model", entry["model"], "--fingerprint",
                 str(fp), "--redis-url", stack.redis.url, "--allow-private-media-hosts", "--allowed-local-media-path",
                 str(media.root)], tmp_path / f"{entry['family']}.log")))
        results = []
        for entry, fingerprint, sidecar in running:
            hello = Keys.for_namespace(resolve_namespace(fingerprint, None)).hello
            assert wait_until(lambda: stack.client.exists(hello) or not sidecar.alive(), 300), sidecar.log_text()
            job = _job(urls, entry["prompt"], modality=["image", "video", "audio", "audio"], fingerprint=fingerprint)
            results.append((entry, _submit(stack, job, fingerprint)))
    finally:
        for _, _, sidecar in running:
            sidecar.stop()
    for entry, result in results:
        _assert_vllms(result, entry)


def test_an_engine_with_pixel_kwargs_is_answered_as_vllm_answers_it(stack, media, tmp_path):
    """A sidecar for a Qwen2-VL engine started with ``--mm-processor-kwargs '{"min_pixels":
    12544, "max_pixels": 50176}'``, on the module's Redis: the fixtures' job (the PNG by data
    URL, the large JPEG and the clamped clip over HTTP), submitted by the worker's own
    ``_submit_and_wait``, is answered with what vLLM 0.33.0's processor made of it for that
    engine (fixtures/MANIFEST.json "engine_kwargs": ids, ranges, keys, item bytes)."""
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())
    entry = next(e for e in manifest["engine_kwargs"] if e["model"] == QWEN and "video" in e["media"])
    with np.load(FIXTURES / "inputs.npz") as npz:
        png, jpeg = (npz[key].tobytes() for key in entry["media"]["image"])
    (media.root / "kwargs.jpg").write_bytes(jpeg)
    fingerprint = msgspec.structs.replace(FINGERPRINT, mm_processor_kwargs=entry["mm_processor_kwargs"])
    fp = tmp_path / "fp.json"
    fp.write_text(json.dumps(fingerprint.to_hello()))
    sidecar = _sidecar(tmp_path, stack.redis.url, fp, media.root)
    try:
        hello = Keys.for_namespace(resolve_namespace(fingerprint, None)).hello
        assert wait_until(lambda: stack.client.exists(hello) or not sidecar.alive(), 120), sidecar.log_text()
        urls = [f"data:image/png;base64,{base64.b64encode(png).decode()}", f"{media.http}/kwargs.jpg",
                f"{media.http}/clamp.mp4"]
        result = _submit(stack, _job(urls, entry["prompt"], modality=["image", "image", "video"],
                                     fingerprint=fingerprint), fingerprint)
    finally:
        sidecar.stop()
    _assert_vllms(result, entry)
