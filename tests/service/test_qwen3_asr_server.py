"""Qwen3-ASR through a real server to the real stub backends: TokenSpeed takes one AUDIO item
per clip (its ``[1, 128, Tmax]`` features, mask row and length), inline and over shared
memory, and reads exactly the in-process tensors; images are refused with
FAILED_PRECONDITION; vLLM refuses audio as for Inkling; Plan answers from the header."""

from __future__ import annotations

import grpc
import pytest

pytest.importorskip("av")

import audiogen  # noqa: E402
import imagegen  # noqa: E402
from servers import Server  # noqa: E402
from service_support import expected_tokenspeed_with_audio, generate, without  # noqa: E402
from test_wire_current import UPSTREAM, no_unknown_fields  # noqa: E402
from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc.client import Client, payload_options  # noqa: E402

MODEL = "Qwen/Qwen3-ASR-1.7B-hf"
QWEN2_AUDIO = "Qwen/Qwen2-Audio-7B-Instruct"
PHI4 = "microsoft/Phi-4-multimodal-instruct"
AUDIO = 151676
CLIPS = [audiogen.clip(seconds=1.1, rate=44100, channels=2, fmt="mp3", seed=4),
         audiogen.clip(seconds=0.3, rate=16000, channels=1, fmt="wav_s16", seed=5)]


def _ids(audios: int) -> list[int]:
    ids = [1, 17]
    for _ in range(audios):
        ids += [151669, AUDIO, 151670, 13]
    return ids + [2]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    proc = Server(tmp_path_factory.mktemp("qwen3-asr"), "--shm-lease", "60", "--log-level", "WARNING",
                  models=[MODEL, QWEN2_AUDIO, PHI4])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def local():
    return Preprocessor.from_model(MODEL, cache_bytes=0)


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("transport,dtype", [("inline", "bfloat16"), ("shm", "float32")])
def test_tokenspeed_reads_each_clips_features(served, stubs, local, count, transport, dtype):
    audios = CLIPS[:count]
    ids = _ids(count)
    out = local.preprocess([], ids, audios=audios)
    with Client(served.target, timeout=120) as c:
        resp = c.preprocess(MODEL, [], ids, "tokenspeed", audios=audios,
                            options=payload_options(dtype, transport, shm_min_bytes=0))
    assert list(resp.input_ids) == out.input_ids.tolist() and resp.audio_token_id == AUDIO
    assert [(a.frames, a.samples, a.token_count) for a in resp.audios] == [
        (a.frames, a.samples, a.token_count) for a in out.audios]
    no_unknown_fields(UPSTREAM["tokenspeed"].FromString(resp.payload.tokenspeed.SerializeToString()))
    _, report = generate("tokenspeed", stubs["tokenspeed"], resp.payload, request_id="asr")
    want = expected_tokenspeed_with_audio(out, local.field_layout, local.family.audio_field_layout, [], "asr",
                                          dtype=dtype, via="shm handle" if transport == "shm" and dtype == "bfloat16"
                                          else "decoded")
    assert without(report, "transport") == want
    assert [it["modality"] for it in report["items"]] == ["audio"] * count


def test_images_and_vllm_are_refused(served):
    with Client(served.target, timeout=60) as c:
        with pytest.raises(grpc.RpcError) as image:
            c.preprocess(MODEL, [imagegen.png(20, 30, seed=1)], [151655] + _ids(0), "tokenspeed")
        with pytest.raises(grpc.RpcError) as vllm:
            c.preprocess(MODEL, [], _ids(1), "vllm", audios=["http://127.0.0.1:9/never-fetched.wav"])
        plan = c.plan(MODEL, [], _ids(1), audios=[CLIPS[1]])
        models = {m.name: m for m in c.list_models()}
    assert image.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "takes no images" in image.value.details()
    assert vllm.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "not VIDEO" in vllm.value.details()
    (a,) = plan.audios
    assert (a.frames, a.token_count) == (50, 7)  # 0.3 s padded to min_length: 8000 samples
    assert list(models[MODEL].modalities) == ["audio"] and models[MODEL].audio_token_id == AUDIO


@pytest.mark.parametrize("transport,dtype", [("inline", "bfloat16"), ("shm", "float32")])
def test_qwen2_audio_tokenspeed_reads_each_clips_padded_features(served, stubs, transport, dtype):
    """Qwen2-Audio on the same server: one AUDIO item per clip, its [1, 128, 3000] features
    and mask row (every clip padded to 30 s)."""
    local = Preprocessor.from_model(QWEN2_AUDIO, cache_bytes=0)
    ids = [1, 151647, 151646, 151648, 13, 151647, 151646, 151648, 2]
    out = local.preprocess([], ids, audios=CLIPS)
    with Client(served.target, timeout=120) as c:
        resp = c.preprocess(QWEN2_AUDIO, [], ids, "tokenspeed", audios=CLIPS,
                            options=payload_options(dtype, transport, shm_min_bytes=0))
    assert list(resp.input_ids) == out.input_ids.tolist() and resp.audio_token_id == 151646
    _, report = generate("tokenspeed", stubs["tokenspeed"], resp.payload, request_id="a2")
    want = expected_tokenspeed_with_audio(out, local.field_layout, local.family.audio_field_layout, [], "a2",
                                          dtype=dtype, via="shm handle" if transport == "shm" and dtype == "bfloat16"
                                          else "decoded")
    assert without(report, "transport") == want


@pytest.mark.parametrize("transport,dtype", [("inline", "bfloat16"), ("shm", "float32")])
def test_phi4_tokenspeed_reads_an_image_and_two_clips(served, stubs, transport, dtype):
    """Phi-4-multimodal on the same server: its image item and one AUDIO item per clip, the
    clip's rows of the batch (features, embed size, attention mask)."""
    import blake3

    local = Preprocessor.from_model(PHI4, cache_bytes=0)
    png = imagegen.png(70, 90, seed=6)
    ids = [1, 200010, 13, 200011, 13, 200011, 2]
    out = local.preprocess([png], ids, audios=CLIPS)
    with Client(served.target, timeout=120) as c:
        resp = c.preprocess(PHI4, [png], ids, "tokenspeed", audios=CLIPS,
                            options=payload_options(dtype, transport, shm_min_bytes=0))
    assert list(resp.input_ids) == out.input_ids.tolist() and resp.audio_token_id == 200011
    _, report = generate("tokenspeed", stubs["tokenspeed"], resp.payload, request_id="p4")
    want = expected_tokenspeed_with_audio(out, local.field_layout, local.family.audio_field_layout,
                                          [blake3.blake3(png).hexdigest()], "p4", dtype=dtype,
                                          via="shm handle" if transport == "shm" and dtype == "bfloat16" else "decoded")
    assert without(report, "transport") == want
    assert [it["modality"] for it in report["items"]] == ["image", "audio", "audio"]
