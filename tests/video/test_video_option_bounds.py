"""Frame-count bounds of VideoOptions that cannot be honoured: min_frames above max_frames
(the effective values: request-level options merged with a video's own, the model's
where unset) is INVALID_ARGUMENT naming both fields and values, before any frame is
decoded, in process and through a real server. HF's ``sample_frames`` takes
``min(max(n, min_frames), max_frames, ...)``: max_frames wins, so a max_frames asked below
the model's own min_frames is honoured exactly and stays accepted."""

from __future__ import annotations

import grpc
import pytest

pytest.importorskip("av")

import videogen  # noqa: E402
from servers import LOOPBACK, Server  # noqa: E402

from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb  # noqa: E402
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc  # noqa: E402
from sglang_mm_grpc.core.carriers import VideoOptions  # noqa: E402
from sglang_mm_grpc.core.errors import PreprocessError  # noqa: E402
from sglang_mm_grpc.media import video as media_video  # noqa: E402

QWEN2, QWEN3 = "Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"
IDS = [1, 151652, 151656, 151653, 2]
TWO = [1, 151652, 151656, 151653, 151652, 151656, 151653, 2]


@pytest.fixture(scope="module")
def clip():
    return videogen.clip(frames=24, fps=8, size=(56, 84))


@pytest.fixture
def no_decoding(monkeypatch):
    """Opening the container at all (probe or frames) fails the test."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("the video was opened: the options must be refused before")
    monkeypatch.setattr(media_video, "_open", refuse)
    monkeypatch.setattr(media_video, "probe", refuse)
    monkeypatch.setattr(media_video, "frames", refuse)


def _refused(pp, clip, *, videos=1, **kwargs) -> PreprocessError:
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([], IDS if videos == 1 else TWO, videos=[clip] * videos, use_cache=False, **kwargs)
    assert e.value.code.value == "INVALID_ARGUMENT", e.value
    return e.value


@pytest.mark.parametrize("model", [QWEN2, QWEN3])
def test_min_frames_above_max_frames_is_refused_before_decoding(clip, no_decoding, model):
    pp = Preprocessor.from_model(model)
    for opts in (VideoOptions(min_frames=8, max_frames=4), VideoOptions(fps=2, min_frames=8, max_frames=4)):
        e = _refused(pp, clip, video_options=opts)
        assert "min_frames 8" in e.message and "max_frames 4" in e.message, e.message
    with pytest.raises(PreprocessError) as e:  # the plan refuses it the same way
        pp.plan([], IDS, videos=[clip], video_options=VideoOptions(min_frames=8, max_frames=4))
    assert e.value.code.value == "INVALID_ARGUMENT" and "min_frames 8" in e.value.message


def test_the_check_applies_to_merged_options(clip, no_decoding):
    pp = Preprocessor.from_model(QWEN2)
    # min from the request, max from the second video's own options
    e = _refused(pp, clip, videos=2, video_options=VideoOptions(fps=2, min_frames=8),
                 per_video_options=[None, VideoOptions(max_frames=4)])
    assert e.message.startswith("video 1:") and "min_frames 8" in e.message and "max_frames 4" in e.message
    # the video's own min_frames over the request's bounds
    e = _refused(pp, clip, video_options=VideoOptions(fps=2, min_frames=2, max_frames=6),
                 per_video_options=[VideoOptions(min_frames=10)])
    assert "min_frames 10" in e.message and "max_frames 6" in e.message


def test_min_frames_above_the_models_max_frames_is_refused(clip, no_decoding):
    pp = Preprocessor.from_model(QWEN2)
    default_max = pp.family.video_config().max_frames
    e = _refused(pp, clip, video_options=VideoOptions(fps=2, min_frames=default_max + 1))
    assert f"min_frames {default_max + 1}" in e.message and f"max_frames {default_max}" in e.message
    assert "model's" in e.message


def test_honourable_bounds_are_accepted(clip):
    pp = Preprocessor.from_model(QWEN2)
    # merged min 8 <= the video's own max 16: fine, although the request alone says max 4
    out = pp.preprocess([], IDS, videos=[clip], video_options=VideoOptions(fps=2, min_frames=8, max_frames=4),
                        per_video_options=[VideoOptions(max_frames=16)], use_cache=False)
    assert len(out.videos[0].frame_indices) == 8  # 24 frames at 8 fps, 2 fps asks 6, min_frames 8 wins
    # max_frames below the model's min_frames (4): HF's max wins, exactly that many frames
    assert pp.family.video_config().min_frames > 2
    out = pp.preprocess([], IDS, videos=[clip], video_options=VideoOptions(fps=2, max_frames=2), use_cache=False)
    assert len(out.videos[0].frame_indices) == 2
    out = pp.preprocess([], IDS, videos=[clip], video_options=VideoOptions(fps=2, min_frames=4, max_frames=4),
                        use_cache=False)
    assert len(out.videos[0].frame_indices) == 4


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = Server(tmp_path_factory.mktemp("video-bounds"), "--log-level", "WARNING", models=[QWEN2])
    yield proc
    proc.stop()


def test_a_server_answers_invalid_argument_with_the_message(server, clip):
    with grpc.insecure_channel(server.target, LOOPBACK) as ch:
        stub = pb_grpc.MultimodalPreprocessorStub(ch)
        req = pb.PreprocessRequest(model=QWEN2, input_ids=IDS, videos=[pb.MediaItem(data=clip)],
                                   video_options=pb.VideoOptions(fps=2, min_frames=8, max_frames=4))
        with pytest.raises(grpc.RpcError) as e:
            stub.Preprocess(req, timeout=60)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "min_frames 8" in e.value.details() and "max_frames 4" in e.value.details(), e.value.details()
        req.video_options.max_frames = 8  # honourable: served
        resp = stub.Preprocess(req, timeout=120)
        assert len(resp.videos[0].frame_indices) == 8
