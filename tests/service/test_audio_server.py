"""Audio through a real server (Inkling) to the real stub backends (separate processes on
127.0.0.1): TokenSpeed takes clips alone and beside images, inline and over shared memory,
and reads exactly the in-process features; vLLM, SGLang and TensorRT-LLM refuse with
FAILED_PRECONDITION before anything is fetched; Plan answers from the header; every
hostile clip gets its status and the server keeps serving.

Inkling takes images and audio, no video: no served family takes all three today.
"""

from __future__ import annotations

import blake3
import grpc
import pytest

pytest.importorskip("av")

import audiogen  # noqa: E402
import imagegen  # noqa: E402
from servers import Server  # noqa: E402
from service_support import expected_tokenspeed_with_audio, generate, without  # noqa: E402
from test_wire_current import UPSTREAM, no_unknown_fields  # noqa: E402
from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc.client import Client, audio_options, payload_options  # noqa: E402
from sglang_mm_grpc.core.carriers import AudioOptions  # noqa: E402

INKLING = "thinkingmachines/Inkling"
QWEN = "Qwen/Qwen2-VL-7B-Instruct"
IMAGE, IMAGE_BOS, AUDIO, AUDIO_BOS = 200054, 200005, 200053, 200020
CLIPS = [audiogen.clip(seconds=1.1, rate=44100, channels=2, fmt="mp3", seed=4),
         audiogen.clip(seconds=0.6, rate=16000, channels=1, fmt="wav_s16", seed=5)]
PNG = imagegen.png(70, 90, seed=6)


def _ids(images: int, audios: int) -> list[int]:
    ids = [1, 17]
    for _ in range(images):
        ids += [IMAGE_BOS, IMAGE, 13]
    for _ in range(audios):
        ids += [AUDIO_BOS, AUDIO, 13]
    return ids + [2]


CASES = {"audio": ([], CLIPS), "image+audio": ([PNG], CLIPS[:1])}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    proc = Server(tmp_path_factory.mktemp("audio"), "--shm-lease", "60", "--log-level", "WARNING",
                  models=[INKLING, QWEN])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def local():
    return Preprocessor.from_model(INKLING, cache_bytes=0)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("transport,dtype", [("inline", "bfloat16"), ("shm", "float32")])
def test_tokenspeed_reads_the_clips_features(served, stubs, local, case, transport, dtype):
    images, audios = CASES[case]
    ids = _ids(len(images), len(audios))
    out = local.preprocess(images, ids, audios=audios)
    with Client(served.target, timeout=120) as c:
        resp = c.preprocess(INKLING, images, ids, "tokenspeed", audios=audios,
                            options=payload_options(dtype, transport, shm_min_bytes=0))
    assert list(resp.input_ids) == out.input_ids.tolist() and resp.audio_token_id == AUDIO
    assert [(a.frames, a.samples, a.sample_rate, a.channels) for a in resp.audios] == [
        (a.frames, a.samples, a.sample_rate, a.channels) for a in out.audios]
    no_unknown_fields(UPSTREAM["tokenspeed"].FromString(resp.payload.tokenspeed.SerializeToString()))
    _, report = generate("tokenspeed", stubs["tokenspeed"], resp.payload, request_id="audio")
    hashes = [blake3.blake3(b).hexdigest() for b in images]
    want = expected_tokenspeed_with_audio(out, local.field_layout, local.family.audio_field_layout, hashes, "audio",
                                          dtype=dtype, via="shm handle" if transport == "shm" and dtype == "bfloat16"
                                          else "decoded")
    assert without(report, "transport") == want


@pytest.mark.parametrize("backend,why", [("vllm", "registers every preprocessed batch that is not VIDEO"),
                                         ("sglang", "builds every preprocessed item as an image"),
                                         ("trtllm", "carries image_data only")])
def test_backends_without_audio_refuse_it(served, backend, why):
    with Client(served.target, timeout=60) as c, pytest.raises(grpc.RpcError) as e:
        c.preprocess(INKLING, [], _ids(0, 1), backend, audios=["http://127.0.0.1:9/never-fetched.wav"])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and why in e.value.details()
    assert "audio clip" in e.value.details()


def test_plan_and_options_through_the_server(served, local):
    wav = CLIPS[1]
    with Client(served.target, timeout=60) as c:
        plan = c.plan(INKLING, [], _ids(0, 1), audios=[wav])
        cut = c.preprocess(INKLING, [], _ids(0, 1), audios=[wav], audio_options=audio_options(max_seconds=0.25))
        with pytest.raises(grpc.RpcError) as refused:
            c.preprocess(QWEN, [], None, audios=[wav])
    out = local.preprocess([], _ids(0, 1), audios=[wav])
    (a,) = plan.audios
    assert (a.frames, a.samples, a.token_count, plan.input_ids_length) == (
        out.audios[0].frames, out.audios[0].samples, out.audios[0].token_count, len(out.input_ids))
    short = local.preprocess([], _ids(0, 1), audios=[wav], audio_options=AudioOptions(max_seconds=0.25))
    assert (cut.audios[0].frames, cut.audios[0].options.max_seconds) == (short.audios[0].frames, 0.25)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "takes no audio" in refused.value.details()


@pytest.mark.parametrize("name", sorted(audiogen.HOSTILE))
def test_hostile_clips_get_their_status(served, name):
    code, word = audiogen.HOSTILE[name]
    with Client(served.target, timeout=60) as c:
        with pytest.raises(grpc.RpcError) as e:
            c.preprocess(INKLING, [], _ids(0, 1), audios=[audiogen.hostile()[name]])
        assert e.value.code().name == code and word in e.value.details() and "audio 0" in e.value.details()
        assert c.preprocess(INKLING, [], _ids(0, 1), audios=[CLIPS[1]]).audios  # still serving
