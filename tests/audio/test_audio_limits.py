"""Audio limits and hostile files, in process (PyAV, no torch): each file gets its status
code and a message naming the cause and the clip, quickly, with memory bounded; every
limit names itself, from the header where it can (before anything is decoded) and while
decoding where only the decode can tell.

Where vLLM 0.33.0's loader differs: it decodes the 0.5 s a WAV whose data chunk claims 10
hours holds (FFmpeg and libsndfile believe the bytes), and garbage from a WAV patched to 64
channels; here a header over a limit is refused as it is read (RESOURCE_EXHAUSTED)."""

from __future__ import annotations

import resource
import time

import numpy as np
import pytest

pytest.importorskip("av")

import audiogen  # noqa: E402

from sglang_mm_grpc.core.errors import PreprocessError  # noqa: E402
from sglang_mm_grpc.media import audio  # noqa: E402
from sglang_mm_grpc.media.audio import AudioLimits  # noqa: E402



@pytest.fixture(scope="module")
def hostile():
    return audiogen.hostile()


def _load(data: bytes, limits: AudioLimits = AudioLimits(), item: int | None = 3, deadline=None) -> np.ndarray:
    meta = audio.probe(data, limits, item)
    return audio.decode(data, meta, limits, item, deadline)


@pytest.mark.parametrize("name", sorted(audiogen.HOSTILE))
def test_hostile_audio_gets_its_status_quickly(hostile, name):
    code, word = audiogen.HOSTILE[name]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    with pytest.raises(PreprocessError) as e:
        _load(hostile[name])
    assert time.perf_counter() - t < 2
    assert e.value.code.value == code, e.value.message
    assert word in e.value.message and e.value.message.startswith("audio 3: ") and e.value.kind == "audio"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 100 * 1024  # KiB


@pytest.mark.parametrize("name", ["claims_10_hours", "sample_rate_bomb", "too_many_channels", "empty", "zero_length"])
def test_hostile_headers_are_refused_by_probe(hostile, name):
    """Refused from the header alone: a Plan says so too."""
    code, word = audiogen.HOSTILE[name]
    with pytest.raises(PreprocessError) as e:
        audio.probe(hostile[name], item=0)
    assert e.value.code.value == code and word in e.value.message


def test_limits_name_themselves():
    wav = audiogen.clip(1.0, 16000, 2, "wav_s16")
    cases = [
        (AudioLimits(max_bytes=1000), "max_bytes"),
        (AudioLimits(max_duration_s=0.5), "max_duration_s"),
        (AudioLimits(max_sample_rate=8000), "max_sample_rate"),
        (AudioLimits(max_channels=1), "max_channels"),
        (AudioLimits(max_decoded_samples=20000), "max_decoded_samples"),
    ]
    for limits, word in cases:
        with pytest.raises(PreprocessError) as e:
            audio.probe(wav, limits, 1)  # from the header: nothing decoded
        assert e.value.code.value == "RESOURCE_EXHAUSTED" and word in e.value.message, (limits, e.value.message)
        assert e.value.message.startswith("audio 1: ")


def test_decoding_holds_the_limits_a_header_cannot():
    """An MP3's length is an estimate: the decode itself is held to the limits, and stops
    as it crosses one."""
    mp3 = audiogen.clip(2.0, 16000, 2, "mp3")
    meta = audio.probe(mp3)
    cases = [
        (AudioLimits(max_decoded_samples=30000), "RESOURCE_EXHAUSTED", "max_decoded_samples"),
        (AudioLimits(max_duration_s=1.0), "RESOURCE_EXHAUSTED", "max_duration_s"),
        (AudioLimits(decode_timeout_s=0.0), "DEADLINE_EXCEEDED", "decode_timeout_s"),
    ]
    for limits, code, word in cases:
        with pytest.raises(PreprocessError) as e:
            audio.decode(mp3, meta, limits, 2)
        assert e.value.code.value == code and word in e.value.message, (limits, e.value.message)
    assert len(audio.decode(mp3, meta, AudioLimits(max_duration_s=2.1), 2)) >= 32000


def test_request_deadline_bounds_decoding():
    data = audiogen.clip(1.0, 16000, 1, "wav_s16")
    with pytest.raises(PreprocessError) as e:
        _load(data, deadline=time.monotonic() - 1)
    assert e.value.code.value == "DEADLINE_EXCEEDED" and "the request's deadline" in e.value.message


def test_duration_limit_is_vllms():
    """vLLM refuses more than int(rate x max_duration_s) decoded samples: exactly that many pass."""
    data = audiogen.clip(1.0, 16000, 1, "wav_s16")
    assert len(_load(data, AudioLimits(max_duration_s=1.0))) == 16000
    with pytest.raises(PreprocessError) as e:
        _load(data, AudioLimits(max_duration_s=0.99995))
    assert "max_duration_s" in e.value.message


def test_a_long_clip_stops_at_the_bound_in_time_and_memory():
    """A minute of 48 kHz stereo PCM (11 MB) under a bound of 1 s: refused from its header;
    with the header's size hidden (a streamed WAV's placeholder), decoding stops at the
    bound, having held about that much."""
    data = audiogen.wav_patch(audiogen.clip(60.0, 48000, 2, "wav_s16"), data_size=0xFFFFFFFF)
    limits = AudioLimits(max_decoded_samples=96000)
    meta = audio.probe(data)  # the default limits: 60 s is fine
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    with pytest.raises(PreprocessError) as e:
        audio.decode(data, meta, limits)
    assert time.perf_counter() - t < 0.5 and "max_decoded_samples" in e.value.message
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 20 * 1024  # KiB


def test_packets_are_bounded():
    limits = AudioLimits(max_decoded_samples=16 * 100)
    assert limits.max_packets == 100 + 4096


def test_a_resampling_kernel_is_bounded():
    """Rates whose gcd is small (44101 -> 16000 Hz: 16000 phases x 44135 taps, 2.8 GB of
    weights in torchaudio) are refused before any kernel is built."""
    t = time.perf_counter()
    with pytest.raises(PreprocessError) as e:
        audio.resample(np.zeros(44101, np.float32), 44101, 16000, item=4)
    assert time.perf_counter() - t < 0.1
    assert e.value.code.value == "RESOURCE_EXHAUSTED" and e.value.message.startswith("audio 4: ")
    assert "taps" in e.value.message


def test_a_header_of_many_chunks_is_read_quickly():
    """200000 empty chunks before the data (1.6 MB): past its first 64 chunks the header is
    FFmpeg's to read (a Python loop over each would take a second); the clip still decodes."""
    wav = audiogen.clip(0.5, 16000, 1, "wav_s16")
    fmt_end = wav.index(b"data")
    junk = b"junk\0\0\0\0" * 200_000
    data = bytearray(wav[:fmt_end] + junk + wav[fmt_end:])
    data[4:8] = (len(data) - 8).to_bytes(4, "little")
    t = time.perf_counter()
    meta = audio.probe(bytes(data))
    wave = audio.decode(bytes(data), meta)
    assert time.perf_counter() - t < 1 and len(wave) == 8000 and not meta.exact
