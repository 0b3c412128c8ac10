"""Video limits and hostile files, in process (PyAV, no torch): each file gets its status
code and a message naming the cause, quickly, with memory bounded; the limits name
themselves; without PyAV a video gets FAILED_PRECONDITION saying how to enable it."""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("av")

import videogen  # noqa: E402

from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc.core.carriers import VideoOptions  # noqa: E402
from sglang_mm_grpc.core.errors import PreprocessError  # noqa: E402
from sglang_mm_grpc.media import video as media_video  # noqa: E402
from sglang_mm_grpc.media.video import VideoLimits  # noqa: E402

MODEL = "Qwen/Qwen2-VL-7B-Instruct"
#: Files whose header is sound: only decoding finds what is wrong.
FOUND_DECODING = {"truncated_faststart", "garbage_payload", "tiny_packets", "decoder_spin"}


@pytest.fixture(scope="module")
def pp():
    return Preprocessor.from_model(MODEL)


@pytest.fixture(scope="module")
def hostile():
    return videogen.hostile()


@pytest.mark.parametrize("name", sorted(videogen.HOSTILE))
def test_hostile_video_gets_its_status_quickly(pp, hostile, name):
    code, word = videogen.HOSTILE[name]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([], [1, 151656, 2], videos=[hostile[name]])
    assert time.perf_counter() - t < 5
    assert e.value.code.value == code and word in e.value.message and e.value.message.startswith("video 0: ")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 200 * 1024  # KiB
    if name in FOUND_DECODING:  # the header is fine: Plan answers from it
        assert pp.plan([], [1, 151656, 2], videos=[hostile[name]]).videos[0].token_count > 0
    else:
        with pytest.raises(PreprocessError) as p:
            pp.plan([], [1, 151656, 2], videos=[hostile[name]])
        assert p.value.code == e.value.code


def test_limits_name_themselves(pp):
    data = videogen.clip(frames=20, fps=10, size=(64, 96))
    cases = [
        (VideoLimits(max_bytes=100), "RESOURCE_EXHAUSTED", "max_bytes"),
        (VideoLimits(max_decoded_frames=10), "RESOURCE_EXHAUSTED", "max_decoded_frames"),
        (VideoLimits(max_frame_pixels=64 * 95), "RESOURCE_EXHAUSTED", "max_frame_pixels"),
        (VideoLimits(max_duration_s=1.5), "RESOURCE_EXHAUSTED", "max_duration_s"),
        (VideoLimits(max_sampled_frames=12), "RESOURCE_EXHAUSTED", "max_sampled_frames"),
        (VideoLimits(decode_timeout_s=0.0), "DEADLINE_EXCEEDED", "decode_timeout_s"),
    ]
    for limits, code, word in cases:
        limited = Preprocessor(pp.family, name="m", source="m", video_limits=limits, cache_bytes=0)
        with pytest.raises(PreprocessError) as e:
            limited.preprocess([], videos=[data])
        assert e.value.code.value == code and word in e.value.message, (limits, e.value.message)


def test_request_deadline_bounds_decoding(pp):
    data = videogen.clip(frames=20, fps=10, size=(64, 96))
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([], videos=[data], deadline=time.monotonic() - 1)
    assert e.value.code.value == "DEADLINE_EXCEEDED" and "the request's deadline" in e.value.message


def test_packet_limit_stops_a_stream_of_packets_without_frames():
    data = videogen.clip(frames=30, fps=10, size=(64, 96))
    meta = media_video.probe(data)
    limits = VideoLimits(max_decoded_frames=1)  # 4 x 1 + 1024 packets: plenty; then frames run out
    with pytest.raises(PreprocessError) as e:
        list(media_video.frames(data, [29], meta, limits))
    assert e.value.code.value == "RESOURCE_EXHAUSTED" and "max_decoded_frames" in e.value.message


@pytest.fixture(scope="module")
def spin():
    return videogen.hostile()["decoder_spin"]


def test_decoder_spin_is_stopped_by_the_packet_limit(spin):
    """A million packets the decoder takes without a frame: a plain decode (HF's loader) reads
    them all for 8 frames; ours stops at the packet limit, in a fraction of that time."""
    import av

    t = time.perf_counter()
    with av.open(__import__("io").BytesIO(spin)) as c:
        packets = sum(1 for _ in c.demux(video=0))
    with av.open(__import__("io").BytesIO(spin)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 8
    plain_s = time.perf_counter() - t
    assert packets > 1_000_000
    meta = media_video.probe(spin)
    assert meta.total_num_frames == 8
    t = time.perf_counter()
    with pytest.raises(PreprocessError) as e:
        list(media_video.frames(spin, [7], meta))
    took = time.perf_counter() - t
    assert e.value.code.value == "RESOURCE_EXHAUSTED" and "41024 packets" in e.value.message
    assert took < plain_s / 5 and took < 1.5, (took, plain_s)


def test_decoder_spin_is_stopped_by_the_time_limit(spin):
    meta = media_video.probe(spin)
    limits = VideoLimits(max_decoded_frames=1_000_000, decode_timeout_s=0.25)  # 4M packets allowed
    t = time.perf_counter()
    with pytest.raises(PreprocessError) as e:
        list(media_video.frames(spin, [7], meta, limits))
    assert time.perf_counter() - t < 1.0
    assert e.value.code.value == "DEADLINE_EXCEEDED" and "decode_timeout_s 0.25 s" in e.value.message
    with pytest.raises(PreprocessError) as e:  # and the request's deadline, when it is earlier
        list(media_video.frames(spin, [7], meta, limits, deadline=time.monotonic() + 0.1))
    assert e.value.code.value == "DEADLINE_EXCEEDED" and "the request's deadline" in e.value.message


def test_token_budget_refuses_before_decoding(pp):
    data = videogen.clip(frames=20, fps=10, size=(240, 320))
    out = pp.plan([], videos=[data])
    need = out.videos[0].token_count
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([], videos=[data], video_options=VideoOptions(max_tokens=need - 1))
    assert e.value.code.value == "RESOURCE_EXHAUSTED" and "not decoded" in e.value.message
    small = Preprocessor(pp.family, name="m", source="m", max_video_tokens=need - 1)
    with pytest.raises(PreprocessError) as e:
        small.preprocess([], videos=[data])
    assert "max_video_tokens" in e.value.message
    assert pp.preprocess([], videos=[data], video_options=VideoOptions(max_tokens=need)).videos[0].token_count == need


def test_a_10s_720p_clip_at_2fps_fits_the_default_budget(pp):
    from sglang_mm_grpc.core.carriers import VideoMeta
    from sglang_mm_grpc.families.qwen import video as qwen_video
    from sglang_mm_grpc.pipeline.video_driver import DEFAULT_MAX_VIDEO_TOKENS

    meta = VideoMeta(300, 30.0, 10.0, 720, 1280)
    for model in ("Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"):
        family = Preprocessor.from_model(model).family
        opts = VideoOptions(fps=2.0) if "Qwen3" not in model else None
        plan = qwen_video.plan_video(family.video_config(opts), meta)
        assert plan.token_count <= DEFAULT_MAX_VIDEO_TOKENS, (model, plan.token_count)


def test_request_shape_errors(pp):
    data = videogen.clip(frames=4, fps=10, size=(64, 64))
    with pytest.raises(PreprocessError, match="video placeholder"):
        pp.preprocess([], [1, 2, 3], videos=[data])
    with pytest.raises(PreprocessError, match="mutually exclusive"):
        pp.preprocess([], videos=[data], video_options=VideoOptions(fps=2, num_frames=4))
    with pytest.raises(PreprocessError, match="fps must be a positive"):
        pp.preprocess([], videos=[data], video_options=VideoOptions(fps=-1.0))
    llava = Preprocessor.from_model("llava-hf/llava-1.5-7b-hf")
    with pytest.raises(PreprocessError) as e:
        llava.check_request(0, None, videos=1)
    assert e.value.code.value == "FAILED_PRECONDITION" and "takes no video" in e.value.message


def test_without_av_video_is_failed_precondition_and_the_package_imports():
    code = (
        "import sys; sys.modules['av'] = None\n"
        "import importlib.util as u; real = u.find_spec\n"
        "u.find_spec = lambda n, *a: None if n == 'av' else real(n, *a)\n"
        "from sglang_mm_grpc import Preprocessor\n"
        "from sglang_mm_grpc.core.errors import PreprocessError\n"
        "pp = Preprocessor.from_model('Qwen/Qwen2-VL-7B-Instruct')\n"
        "try:\n    pp.preprocess([], videos=[b'x'])\nexcept PreprocessError as e:\n    print(e.code.value, e.message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("FAILED_PRECONDITION") and "sglang-mm-grpc[video]" in out.stdout, out.stderr


def test_frames_are_never_all_held(pp):
    """Decoding a long clip keeps one group of frames: peak memory far below the frames' total."""
    data = videogen.clip(frames=240, fps=24, size=(480, 640), crf=35)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = pp.preprocess([], videos=[data], video_options=VideoOptions(num_frames=200, max_pixels=28 * 28 * 16),
                        use_cache=False)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    frames_total = 200 * 480 * 640 * 3
    assert grown < out.pixel_values_videos.nbytes + frames_total // 2
    assert np.isfinite(out.pixel_values_videos).all()


def test_decode_budget_counts_decoding_not_the_callers_time():
    """Time the caller spends between frames (the pixel work on them, a first call's
    kernel compilation) is not decoding: a slow consumer stays within decode_timeout_s,
    while the request's deadline counts all of it."""
    data = videogen.clip(frames=8, fps=8, size=(64, 96))
    meta = media_video.probe(data)
    limits = VideoLimits(decode_timeout_s=0.3)

    def slow(frames):
        got = 0
        for _ in frames:
            time.sleep(0.15)
            got += 1
        return got

    assert slow(media_video.frames(data, range(8), meta, limits)) == 8  # 1.2 s held by the caller
    with pytest.raises(PreprocessError) as e:
        slow(media_video.frames(data, range(8), meta, limits, deadline=time.monotonic() + 0.4))
    assert e.value.code.value == "DEADLINE_EXCEEDED" and "the request's deadline" in e.value.message
