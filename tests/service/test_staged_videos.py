"""pixel_values_videos staged in shared memory, through a real server and the real stub
backends (separate processes on 127.0.0.1).

A Preprocess asking for float32 SHM has the kernels write the video tensor straight into a
segment (as pixel_values): the first payload that carries the tensor whole (vLLM's video
batch, TokenSpeed's lone video item) hands that segment out, and the counters show no
copy (``written`` unchanged by the payload, ``handed_out`` up). What the stub read equals
the in-process output bit for bit. Images and videos stage side by side; payloads that
cannot hand a segment out (bfloat16, several TokenSpeed items, a second Assemble, even
one running at the same time) copy; a tensor the budget has no room for is written as
usual and sent inline. A failed request, an expired or evicted kept result and an unused
staged segment leave nothing behind; the preprocessing cache keeps a copy, not the
segment's memory.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import blake3
import grpc
import pytest
from smg_grpc_proto.generated import common_pb2

pytest.importorskip("av")

import imagegen  # noqa: E402
import videogen  # noqa: E402
from servers import Server, wait_until  # noqa: E402
from service_support import (expected_tokenspeed_with_videos, expected_vllm_with_videos, generate,  # noqa: E402
                             qwen_prompt, without)
from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc.core.carriers import VideoOptions  # noqa: E402
from sglang_mm_grpc.client import Client, payload_options, video_options  # noqa: E402

QWEN = "Qwen/Qwen2-VL-7B-Instruct"
SHM32 = payload_options("float32", "shm")
SHM16 = payload_options("bfloat16", "shm")
FPS = 2  # a 2 s clip: 4 frames, 2 temporal groups


def clip(seed: int) -> bytes:
    """A new clip each time (a cached video is not staged); its tensor is 96 rows, 451 KB."""
    return videogen.clip(frames=20, fps=10, size=(72, 100), noise=8, seed=seed)


def image(seed: int) -> bytes:
    """A new image each time (a cached one is not staged either); pixel_values 282 KB."""
    return imagegen.jpeg(90, 140, seed=seed)


TRUNCATED = videogen.hostile()["truncated_faststart"]  # opens and plans, then runs out of frames


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Leases of 60 s (only the worker, Release or the handle's end removes a segment),
    handles of 3 s, one kept result at a time (keeping another evicts it)."""
    proc = Server(tmp_path_factory.mktemp("staged-videos"), "--shm-lease", "60", "--handle-ttl", "3",
                  "--store-items", "1", "--log-level", "WARNING", models=[QWEN])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def local():
    return Preprocessor.from_model(QWEN, cache_bytes=0)


def shm(server):
    with Client(server.target) as c:
        return c.server_info().shm


def expect(local, backend: str, images: list, videos: list, dtype: str = "float32", via: str = "decoded"):
    """The stub's report for this request, from the in-process output, and that output."""
    out = local.preprocess(images, qwen_prompt(len(images), len(videos)), videos=videos,
                           video_options=VideoOptions(fps=FPS))
    hashes = [blake3.blake3(r).hexdigest() for r in images]
    layouts = (local.field_layout, local.family.video_field_layout)
    if backend == "vllm":
        return expected_vllm_with_videos(out, *layouts, hashes, "s", dtype), out
    return expected_tokenspeed_with_videos(out, *layouts, hashes, "s", dtype, via), out


def video_td(payload, backend: str):
    """The TensorData of the (first) video's pixels in a payload."""
    if backend == "vllm":
        return (payload.vllm_extra[0] if payload.vllm_extra else payload.vllm).pixel_values
    return next(it for it in payload.tokenspeed.items if it.modality == common_pb2.VIDEO).encoder_input


def read(stubs, backend: str, payload) -> dict:
    _, report = generate(backend, stubs[backend], payload, request_id="s")
    return report


def pixel_transports(report: dict) -> list[str]:
    """How the stub got each pixel tensor (image batch, video batch, or each item's)."""
    if report["backend"] == "tokenspeed":
        return [it["transport"]["encoder_input"] for it in report["items"]]
    return [b["transport"][k] for b in (report, *report.get("extra", [])) for k in ("pixel_values", "pixel_values_videos")
            if k in b["transport"]]


@pytest.mark.parametrize("backend", ["vllm", "tokenspeed"])
def test_staged_video_is_handed_out_without_a_copy(served, stubs, local, backend):
    video = clip(100 + len(backend))
    want, _ = expect(local, backend, [], [video])
    ids = qwen_prompt(0, 1)
    before = shm(served)
    with Client(served.target, timeout=120) as c:
        handle = c.preprocess(QWEN, [], ids, videos=[video], video_options=video_options(fps=FPS),
                              options=SHM32).handle
        staged = shm(served)
        assert staged.written == before.written + 1
        first = c.assemble(handle, backend, options=SHM32)
        now = shm(served)
        assert now.written == staged.written and now.handed_out == staged.handed_out + 1  # no copy
        name = video_td(first, backend).shm.name
        report = read(stubs, backend, first)
        assert without(report, "transport") == want and pixel_transports(report) == ["shm"]
        assert not os.path.exists(f"/dev/shm/{name}")  # read and removed by the worker
        # later payloads copy from the kept result's mapping: again, converted, inline
        second = c.assemble(handle, backend, options=SHM32)
        assert video_td(second, backend).shm.name != name and shm(served).written == staged.written + 1
        assert without(read(stubs, backend, second), "transport") == want
        narrow = c.assemble(handle, backend, options=SHM16)
        assert shm(served).written == staged.written + 2
        bf16, _ = expect(local, backend, [], [video], "bfloat16", "shm handle")
        assert without(read(stubs, backend, narrow), "transport") == bf16
        inline = c.assemble(handle, backend, options=payload_options("float32", "inline"), release=True)
        assert video_td(inline, backend).WhichOneof("payload") == "inline"
        assert without(read(stubs, backend, inline), "transport") == want
    after = shm(served)
    assert after.removed.get("failed", 0) == before.removed.get("failed", 0)
    assert after.removed.get("unused", 0) == before.removed.get("unused", 0)


@pytest.mark.parametrize("backend", ["vllm", "tokenspeed"])
def test_image_and_video_stage_side_by_side(served, stubs, local, backend):
    """One Preprocess, two staged segments: a two-phase call's first Assemble hands both
    out, and so does a one-shot call."""
    images, videos = [image(200 + len(backend))], [clip(200 + len(backend))]
    want, _ = expect(local, backend, images, videos)
    ids = qwen_prompt(1, 1)
    with Client(served.target, timeout=120) as c:
        before = shm(served)
        handle = c.preprocess(QWEN, images, ids, videos=videos, video_options=video_options(fps=FPS),
                              options=SHM32).handle
        staged = shm(served)
        assert staged.written == before.written + 2
        payload = c.assemble(handle, backend, options=SHM32, release=True)
        now = shm(served)
        assert now.written == staged.written and now.handed_out == staged.handed_out + 2
        report = read(stubs, backend, payload)
        assert without(report, "transport") == want and pixel_transports(report) == ["shm", "shm"]
        # one-shot: the same, with neither segment left unused
        images, videos = [image(300 + len(backend))], [clip(300 + len(backend))]
        want, _ = expect(local, backend, images, videos)
        before = shm(served)
        payload = c.preprocess(QWEN, images, ids, backend, videos=videos, video_options=video_options(fps=FPS),
                               options=SHM32).payload
        after = shm(served)
        assert after.written == before.written + 2 and after.handed_out == before.handed_out + 2
        assert after.removed.get("unused", 0) == before.removed.get("unused", 0)
        report = read(stubs, backend, payload)
        assert without(report, "transport") == want and pixel_transports(report) == ["shm", "shm"]


def test_payloads_that_cannot_hand_it_out_copy_as_before(served, stubs, local):
    """Two videos to TokenSpeed (two items, two segments) and bfloat16 are not staged:
    one segment written per tensor sent, none left unused; two videos to vLLM (one batch)
    are staged and handed out."""
    with Client(served.target, timeout=120) as c:
        cases = [("tokenspeed", SHM32, 2, 2), ("vllm", SHM16, 1, 1), ("tokenspeed", SHM16, 1, 1),
                 ("vllm", SHM32, 2, 1)]
        for n, (backend, options, videos, segments) in enumerate(cases):
            clips = [clip(400 + 10 * n + k) for k in range(videos)]
            dtype = "float32" if options is SHM32 else "bfloat16"
            want, _ = expect(local, backend, [], clips, dtype, "shm handle" if dtype == "bfloat16" else "decoded")
            before = shm(served)
            payload = c.preprocess(QWEN, [], qwen_prompt(0, videos), backend, videos=clips,
                                   video_options=video_options(fps=FPS), options=options).payload
            after = shm(served)
            case = (backend, dtype, videos)
            assert after.written == before.written + segments, case
            assert after.handed_out == before.handed_out + segments, case
            assert after.removed.get("unused", 0) == before.removed.get("unused", 0), case
            report = read(stubs, backend, payload)
            assert without(report, "transport") == want, case
            assert set(pixel_transports(report)) == {"shm"}, case


@pytest.mark.parametrize("backend", [None, "vllm"])
def test_a_failed_request_leaves_no_segment(served, backend):
    """An image and a good video written into their segments, then the next video runs
    out of frames: INVALID_ARGUMENT, and both segments are removed."""
    before = shm(served)
    with Client(served.target, timeout=120) as c:
        with pytest.raises(grpc.RpcError) as e:
            c.preprocess(QWEN, [image(500 + bool(backend))], qwen_prompt(1, 2), backend,
                         videos=[clip(500 + bool(backend)), TRUNCATED],
                         video_options=video_options(fps=FPS), options=SHM32)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and e.value.details().startswith("video 1: ")
    after = shm(served)
    assert after.written == before.written + 2  # both were staged before the failure
    assert after.removed["failed"] == before.removed.get("failed", 0) + 2
    assert after.handed_out == before.handed_out


def test_unused_staged_segments_go_with_their_handle(served):
    """A kept result never assembled: its image and video segments are removed when its
    handle expires; another's when a newer result evicts it (``--store-items 1``); the
    newest's on Release."""
    def removed(why: str) -> int:
        return shm(served).removed.get(why, 0)

    one = video_options(fps=FPS)
    with Client(served.target, timeout=120) as c:
        before = shm(served)
        c.preprocess(QWEN, [image(600)], qwen_prompt(1, 1), videos=[clip(600)], video_options=one, options=SHM32)
        assert shm(served).written == before.written + 2
        assert wait_until(lambda: removed("expired") == before.removed.get("expired", 0) + 2, 10)
        evicted = removed("evicted")
        c.preprocess(QWEN, [], qwen_prompt(0, 1), videos=[clip(601)], video_options=one, options=SHM32)
        kept = c.preprocess(QWEN, [], qwen_prompt(0, 1), videos=[clip(602)], video_options=one, options=SHM32).handle
        assert removed("evicted") == evicted + 1
        released = removed("release")
        assert c.release(kept)
        assert removed("release") == released + 1
    after = shm(served)
    assert after.written == before.written + 4 and after.handed_out == before.handed_out


def test_the_cache_keeps_a_copy_not_the_segment(served, stubs, local):
    """A lone new video's cache entry is copied out of its segment: once the worker has
    read it and the call is over, the server maps the segment no more, and the cache
    answers the same video again with the same bytes."""
    video = clip(700)
    want, out = expect(local, "vllm", [], [video])
    ids = qwen_prompt(0, 1)
    with Client(served.target, timeout=120) as c:
        payload = c.preprocess(QWEN, [], ids, "vllm", videos=[video], video_options=video_options(fps=FPS),
                               options=SHM32).payload
        name = video_td(payload, "vllm").shm.name
        assert without(read(stubs, "vllm", payload), "transport") == want

        def mapped() -> bool:
            with open(f"/proc/{served.pid}/maps") as f:
                return name in f.read()

        assert wait_until(lambda: not mapped(), 10)
        again = c.preprocess(QWEN, [], ids, "vllm", videos=[video], video_options=video_options(fps=FPS),
                             options=payload_options("float32", "inline"))
    assert again.videos[0].cached
    assert without(read(stubs, "vllm", again.payload), "transport") == want


def test_two_assembles_at_once_hand_the_staged_segment_out_once(served, stubs, local):
    """Two Assembles of one handle at the same time: one hands the staged segment out, the
    other copies; both payloads name their own segment and read back the same tensor."""
    video = clip(800)
    want, _ = expect(local, "vllm", [], [video])
    with Client(served.target, timeout=120) as c:
        handle = c.preprocess(QWEN, [], qwen_prompt(0, 1), videos=[video], video_options=video_options(fps=FPS),
                              options=SHM32).handle
        before = shm(served)
        with ThreadPoolExecutor(2) as pool:
            payloads = list(pool.map(lambda _: c.assemble(handle, "vllm", options=SHM32), range(2)))
        after = shm(served)
        assert after.written == before.written + 1 and after.handed_out == before.handed_out + 2
        assert len({video_td(p, "vllm").shm.name for p in payloads}) == 2
        for p in payloads:
            assert without(read(stubs, "vllm", p), "transport") == want
        assert c.release(handle)


def test_no_room_in_the_budget_sends_the_video_inline(tmp_path, stubs, local):
    """A 451 KB video tensor and a 256 KiB budget: not staged, not copied into a segment,
    sent inline and correct, nothing held."""
    server = Server(tmp_path, "--shm-budget", "256KiB", "--shm-lease", "60", "--log-level", "WARNING", models=[QWEN])
    try:
        video = clip(900)
        want, _ = expect(local, "vllm", [], [video])
        before = shm(server)
        with Client(server.target, timeout=120) as c:
            payload = c.preprocess(QWEN, [], qwen_prompt(0, 1), "vllm", videos=[video],
                                   video_options=video_options(fps=FPS), options=SHM32).payload
        after = shm(server)
        assert video_td(payload, "vllm").WhichOneof("payload") == "inline"
        assert after.inline_fallbacks == before.inline_fallbacks + 2  # staging, then the payload's copy
        assert after.written == before.written and after.segments == 0 and after.peak_bytes <= 256 << 10
        assert without(read(stubs, "vllm", payload), "transport") == want
    finally:
        server.stop()
