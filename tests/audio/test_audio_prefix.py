"""A clip is decoded only as far as its family reads it (``audio_driver.reads_at_most``: a
request's ``max_seconds``, or a buffer such as Qwen2-Audio's 30 s): the tensors and the
prompt equal decoding it whole, in every audio family, over decoded, PCM and resampled
clips. The vLLM sidecar decodes whole (its keys are the whole waveform's)."""

from __future__ import annotations

import numpy as np
import pytest

import audiogen
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.core.carriers import AudioOptions
from sglang_mm_grpc.kernels import audio_resample
from sglang_mm_grpc.media import audio as media_audio
from sglang_mm_grpc.sidecar.jobs import load_model

pytest.importorskip("av")

#: (preset, max_seconds: None where the family's own buffer caps it)
CASES = [("Qwen/Qwen2-Audio-7B-Instruct", None), ("Qwen/Qwen3-ASR-1.7B-hf", 1.3), ("thinkingmachines/Inkling", 0.9),
         ("microsoft/Phi-4-multimodal-instruct", 1.1), ("Qwen/Qwen2.5-Omni-7B", 1.7),
         ("Qwen/Qwen3-Omni-30B-A3B-Instruct", 0.7)]


@pytest.fixture(scope="module")
def clips():
    return {"mp3 44.1 kHz stereo": audiogen.clip(3.0, 44100, 2, "mp3"),
            "wav 22.05 kHz": audiogen.clip(3.0, 22050, 1, "wav_s16"),
            "flac 48 kHz stereo": audiogen.clip(3.0, 48000, 2, "flac")}


@pytest.mark.parametrize("model,seconds", CASES)
def test_a_clip_decoded_as_far_as_read_equals_it_decoded_whole(model, seconds, clips):
    prefix = Preprocessor.from_model(model, cache_bytes=0)
    whole = Preprocessor.from_model(model, cache_bytes=0, whole_clips=True)
    options = AudioOptions(max_seconds=seconds) if seconds else None
    if seconds is None:  # Qwen2-Audio keeps 30 s of any clip
        clips = {"wav 16 kHz, 31 s": audiogen.clip(31.0, 16000, 1, "wav_s16"),
                 "mp3 22.05 kHz, 31 s": audiogen.clip(31.0, 22050, 1, "mp3")}
    for name, clip in clips.items():
        a = prefix.preprocess([], audios=[clip], audio_options=options, use_cache=False)
        b = whole.preprocess([], audios=[clip], audio_options=options, use_cache=False)
        assert np.array_equal(a.input_ids, b.input_ids), name
        assert a.audio_tensors.keys() == b.audio_tensors.keys()
        for key, value in b.audio_tensors.items():
            assert np.array_equal(a.audio_tensors[key], value), (name, key)
        assert a.audios[0].samples == b.audios[0].samples, name
        assert len(a.audio_waves[0]) < len(b.audio_waves[0]), name  # it did stop early


def test_the_sidecar_decodes_whole_clips():
    assert load_model("Qwen/Qwen2-Audio-7B-Instruct", "torchvision").whole_clips


@pytest.mark.parametrize("orig,new", [(44100, 16000), (22050, 16000), (48000, 16000), (8000, 16000), (16000, 24000)])
def test_input_needed_resamples_the_first_outputs_exactly(orig, new):
    """Resampling ``input_needed(k)`` samples gives the first ``k`` outputs of any longer
    clip's, bit for bit (the kernel's span read, and the long clip's summation path)."""
    x = audiogen.noise(3 * orig)
    full = media_audio.resample(x, orig, new)
    for k in (1, 5, 159, 160, 161, 3000, len(full) // 2):
        need = audio_resample.input_needed(k, orig, new)
        head = media_audio.resample(x[:need], orig, new)
        assert len(head) >= k and np.array_equal(head[:k], full[:k]), k
