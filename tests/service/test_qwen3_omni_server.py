"""Qwen3-Omni through a real server to the real stub backends: a prompt of an image, a video
and two clips reaches TokenSpeed as image, video and audio items in prompt order, inline and
over shared memory, equal to the in-process tensors; the image-only prompt is every
preset's (see test_service_presets.py); vLLM, SGLang and TensorRT-LLM refuse the clips;
Plan and ListModels name the three modalities."""

from __future__ import annotations

import blake3
import grpc
import pytest

pytest.importorskip("av")

import audiogen  # noqa: E402
import imagegen  # noqa: E402
import videogen  # noqa: E402
from servers import Server  # noqa: E402
from service_support import expected_tokenspeed_mixed, generate, without  # noqa: E402
from test_wire_current import UPSTREAM, no_unknown_fields  # noqa: E402
from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc.client import Client, payload_options  # noqa: E402

MODEL = "Qwen/Qwen3-Omni-30B-A3B-Instruct"
IMAGE, AUDIO, VIDEO = 151655, 151675, 151656
CLIPS = [audiogen.clip(seconds=1.1, rate=44100, channels=2, fmt="mp3", seed=4),
         audiogen.clip(seconds=0.3, rate=16000, channels=1, fmt="wav_s16", seed=5)]
PNG = imagegen.png(70, 90, seed=6)
MP4 = videogen.clip(frames=6, fps=6, size=(48, 64))


def _ids(images: int, audios: int, videos: int = 0) -> list[int]:
    ids = [1, 17]
    for _ in range(images):
        ids += [151652, IMAGE, 151653, 13]
    for _ in range(videos):
        ids += [151652, VIDEO, 151653, 13]
    for _ in range(audios):
        ids += [151669, AUDIO, 151670, 13]
    return ids + [2]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    proc = Server(tmp_path_factory.mktemp("omni"), "--shm-lease", "60", "--log-level", "WARNING", models=[MODEL])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def local():
    return Preprocessor.from_model(MODEL, cache_bytes=0)


@pytest.mark.parametrize("transport,dtype", [("inline", "bfloat16"), ("shm", "float32")])
def test_tokenspeed_reads_the_image_the_video_and_the_clips(served, stubs, local, transport, dtype):
    ids = _ids(1, 2, videos=1)
    out = local.preprocess([PNG], ids, audios=CLIPS, videos=[MP4])
    with Client(served.target, timeout=120) as c:
        resp = c.preprocess(MODEL, [PNG], ids, "tokenspeed", audios=CLIPS, videos=[MP4],
                            options=payload_options(dtype, transport, shm_min_bytes=0))
    assert list(resp.input_ids) == out.input_ids.tolist() and resp.audio_token_id == AUDIO
    assert [(a.frames, a.samples, a.token_count) for a in resp.audios] == [
        (a.frames, a.samples, a.token_count) for a in out.audios]
    no_unknown_fields(UPSTREAM["tokenspeed"].FromString(resp.payload.tokenspeed.SerializeToString()))
    _, report = generate("tokenspeed", stubs["tokenspeed"], resp.payload, request_id="omni")
    want = expected_tokenspeed_mixed(out, local.field_layout, local.family.video_field_layout,
                                     local.family.audio_field_layout, [blake3.blake3(PNG).hexdigest()], "omni",
                                     dtype=dtype, via="shm handle" if transport == "shm" and dtype == "bfloat16"
                                     else "decoded")
    assert without(report, "transport") == want
    assert [it["modality"] for it in report["items"]] == ["image", "video", "audio", "audio"]


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm"])
def test_backends_without_audio_refuse_the_clips(served, backend):
    with Client(served.target, timeout=60) as c, pytest.raises(grpc.RpcError) as e:
        c.preprocess(MODEL, [PNG], _ids(1, 1), backend, audios=["http://127.0.0.1:9/never-fetched.wav"])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "audio clip" in e.value.details()


def test_plan_and_models(served, local):
    with Client(served.target, timeout=60) as c:
        plan = c.plan(MODEL, [PNG], _ids(1, 2, videos=1), audios=CLIPS, videos=[MP4])
        models = {m.name: m for m in c.list_models()}
    out = local.preprocess([PNG], _ids(1, 2, videos=1), audios=CLIPS, videos=[MP4])
    assert [(a.frames, a.token_count) for a in plan.audios] == [(a.frames, a.token_count) for a in out.audios]
    assert [v.token_count for v in plan.videos] == [v.token_count for v in out.videos]
    assert plan.input_ids_length == len(out.input_ids)
    assert list(models[MODEL].modalities) == ["image", "video", "audio"] and models[MODEL].audio_token_id == AUDIO
