"""Video counters through a real server on 127.0.0.1: GetStats.video, the Prometheus
endpoint (``serve --metrics-port``) and the request log line, after a known mix of calls
with videos (successes, and refusals of each cause with small ``--video-*`` limits).

Failures that are not about a video (an image's, a media id not held) are not counted
as video refusals; merging the stats of ``serve --processes`` sums the video counters.
"""

from __future__ import annotations

import json
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytest.importorskip("av")

import imagegen  # noqa: E402
import videogen  # noqa: E402
from servers import Server, free_port  # noqa: E402
from service_support import QWEN_VIDEO as VIDEO_TOKEN, qwen_prompt as ids  # noqa: E402
from sglang_mm_grpc.server import siblings  # noqa: E402
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb  # noqa: E402
from sglang_mm_grpc.client import Client, video_options  # noqa: E402
from sglang_mm_grpc.core.hashing import content_hash  # noqa: E402
from sglang_mm_grpc.pipeline.metrics import VIDEO_STAGES  # noqa: E402

QWEN = "Qwen/Qwen2-VL-7B-Instruct"
LLAVA = "llava-hf/llava-1.5-7b-hf"
CLIP = videogen.clip(frames=12, fps=6, size=(56, 84), noise=6, seed=21)  # 2 s
LONG = videogen.clip(frames=30, fps=6, size=(56, 84), seed=22)  # 5 s, over --video-max-duration 4
IMAGE = imagegen.jpeg(64, 96, seed=23)


def refused(fn, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.RpcError) as e:
        fn()
    assert e.value.code() == code, e.value.details()
    return e.value.details()


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """The server, its metrics URL and what the calls sent."""
    port = free_port()
    server = Server(tmp_path_factory.mktemp("video-stats"), "--metrics-port", str(port), "--max-videos", "2",
                    "--video-max-duration", "4", "--video-max-sampled-frames", "8", models=[QWEN, LLAVA], workers=1)
    sent = {}
    try:
        with Client(server.target, timeout=120) as c:
            one = c.preprocess(QWEN, [], ids(0, 1), backend="vllm", videos=[CLIP], video_options=video_options(fps=2))
            two = c.preprocess(QWEN, [IMAGE], ids(1, 1), backend="tokenspeed", videos=[CLIP],
                               video_options=video_options(num_frames=6))
            sent["frames"] = len(one.videos[0].frame_indices) + len(two.videos[0].frame_indices)
            again = c.preprocess(QWEN, [], ids(0, 1), backend="vllm", videos=[CLIP],
                                 video_options=video_options(fps=2))  # the cache answers: nothing decoded
            assert again.videos[0].cached and not one.videos[0].cached and not two.videos[0].cached
            c.plan(QWEN, [], ids(0, 2), videos=[CLIP, CLIP], video_options=video_options(fps=2))
            Q = grpc.StatusCode
            refusals = [
                (lambda: c.preprocess(QWEN, [], ids(0, 3), videos=[CLIP] * 3), Q.RESOURCE_EXHAUSTED, "max_videos"),
                (lambda: c.preprocess(QWEN, [], ids(0, 1), videos=[LONG]), Q.RESOURCE_EXHAUSTED, "max_duration_s"),
                (lambda: c.plan(QWEN, [], ids(0, 1), videos=[CLIP], video_options=video_options(num_frames=10)),
                 Q.RESOURCE_EXHAUSTED, "max_sampled_frames"),
                (lambda: c.preprocess(QWEN, [], ids(0, 1), videos=[CLIP], video_options=video_options(fps=2, max_tokens=4)),
                 Q.RESOURCE_EXHAUSTED, "max_tokens"),
                (lambda: c.preprocess(QWEN, [], ids(0, 1), videos=[b"not a video at all"]), Q.INVALID_ARGUMENT,
                 "invalid"),
                (lambda: c.preprocess(LLAVA, [], [1, VIDEO_TOKEN], videos=[CLIP]), Q.FAILED_PRECONDITION, "model"),
                (lambda: c.preprocess(QWEN, [], ids(0, 1), backend="sglang", videos=[CLIP]), Q.FAILED_PRECONDITION,
                 "backend"),
            ]
            for fn, code, cause in refusals:
                refused(fn, code)
            sent["refusals"] = {cause: 1 for _, _, cause in refusals}
            # not about a video: a corrupt image beside a video, a video id not held
            assert "image 0" in refused(lambda: c.preprocess(QWEN, [b"not an image"], ids(1, 1), videos=[CLIP]),
                                        Q.INVALID_ARGUMENT)
            refused(lambda: c.preprocess(QWEN, [], ids(0, 1), videos=[pb.MediaItem(media_id=content_hash(b"x"))]),
                    Q.NOT_FOUND)
        yield server, f"http://127.0.0.1:{port}/metrics", sent
    finally:
        server.stop()


def test_get_stats_counts_videos(observed):
    server, _, sent = observed
    v = server.stats().video
    assert (v.videos, v.video_bytes, v.frames, v.planned, v.cached) == (3, 3 * len(CLIP), sent["frames"], 2, 1)
    assert dict(v.refusals) == sent["refusals"]
    stages = {h.stage: h for h in v.stages}
    assert set(stages) == set(VIDEO_STAGES)
    for h in stages.values():
        assert h.count == 3 and h.sum_ms > 0 and sum(h.bucket_counts) == 3
        assert len(h.bucket_counts) == len(h.upper_bounds_ms) + 1
    st = server.stats()
    assert st.images == 1 and st.image_bytes == len(IMAGE)  # the video bytes are not image bytes


def scrape(url: str) -> dict[tuple, float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_prometheus_matches_get_stats(observed):
    server, url, _ = observed
    m, v = scrape(url), server.stats().video
    assert m[("sglang_mm_videos_total", ())] == v.videos
    assert m[("sglang_mm_video_bytes_total", ())] == v.video_bytes
    assert m[("sglang_mm_video_frames_total", ())] == v.frames
    assert m[("sglang_mm_videos_planned_total", ())] == v.planned
    assert m[("sglang_mm_videos_cached_total", ())] == v.cached == 1
    for cause, n in v.refusals.items():
        assert m[("sglang_mm_video_refusals_total", (("cause", cause),))] == n
    assert sum(n for (name, _), n in m.items() if name == "sglang_mm_video_refusals_total") == sum(v.refusals.values())
    for h in v.stages:
        assert m[("sglang_mm_video_stage_seconds_count", (("stage", h.stage),))] == h.count
        assert m[("sglang_mm_video_stage_seconds_sum", (("stage", h.stage),))] == pytest.approx(h.sum_ms / 1e3)


def test_log_line_names_the_videos(observed):
    server, _, _ = observed
    lines = [json.loads(line.split(" sglang_mm_grpc.requests: ", 1)[1]) for line in server.log_text().splitlines()
             if " sglang_mm_grpc.requests: " in line]
    ok = [r for r in lines if r["method"] == "Preprocess" and r["status"] == "OK"]
    assert len(ok) == 3 and all(r["videos"] == 1 and r["video_bytes"] == len(CLIP) for r in ok)
    assert all(set(r["video_ms"]) == set(VIDEO_STAGES) for r in ok)
    assert [r["bytes"] for r in ok] == [0, len(IMAGE), 0]


def test_processes_merge_sums_the_video_counters(observed):
    server, _, _ = observed
    one = server.stats()
    merged = siblings.merge_stats([one, one])
    v, w = one.video, merged.video
    assert (w.videos, w.video_bytes, w.frames, w.planned, w.cached) == (
        2 * v.videos, 2 * v.video_bytes, 2 * v.frames, 2 * v.planned, 2 * v.cached)
    assert dict(w.refusals) == {k: 2 * n for k, n in v.refusals.items()}
    for a, b in zip(v.stages, w.stages):
        assert (b.stage, b.count, list(b.upper_bounds_ms)) == (a.stage, 2 * a.count, list(a.upper_bounds_ms))
        assert list(b.bucket_counts) == [2 * n for n in a.bucket_counts]
