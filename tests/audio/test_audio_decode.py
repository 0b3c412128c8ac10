"""Audio decoding (media.audio): every container decodes, channels are mixed as vLLM mixes
them, the header's facts, and the waves equal vLLM 0.33.0's own ``load_audio``.

The fixtures (tests/audio/fixtures/decode.npz) are written by scripts/gen_audio_fixtures.py
in a venv with vLLM 0.33.0, torch 2.14.0, torchaudio 2.11.0, torchcodec 0.17.0 (over the
system FFmpeg 5.1.9), soundfile 0.14.0 (libsndfile 1.2.2) and PyAV 18.1.0 (FFmpeg 8.1.2);
``meta`` in the file records them. Each clip has vLLM's wave from its torchcodec backend
(what "auto" uses when torchcodec loads) and, where different, from the chain "auto" takes
without torchcodec (soundfile, or PyAV where libsndfile cannot open the file).

Where the same decoder runs, the waves are equal bit for bit: PCM WAV and FLAC (every
backend), MP3 (FFmpeg's mp3float in torchcodec's FFmpeg 5.1 and PyAV's 8.1), AAC against
vLLM's PyAV backend (the same PyAV). Elsewhere the bounds are the measured gaps between two
decoders of one stream, rounded up: another FFmpeg release (AAC, Opus, libvorbis-made
Vorbis: 1.2e-7 measured, 2.5e-7 allowed), mpg123 against FFmpeg (MP3: 9.1e-7 measured,
2e-6 allowed), libvorbis against FFmpeg (Vorbis: 1.8e-7 measured, 3e-7 allowed), libopus
against FFmpeg (Opus at 48 kHz: 1.0e-4 measured, near the clip's end; 2e-4 allowed). Two
cases apart, each pinned below: libsndfile decodes Opus at the header's input rate (16 kHz
here) where FFmpeg always gives 48 kHz, and FFmpeg 5.1's Vorbis decoder is off by up to 0.15
on a stream from FFmpeg's own (experimental) Vorbis encoder, where FFmpeg 8.1 and libvorbis
agree to 1.2e-7.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("av")

import audiogen  # noqa: E402

from sglang_mm_grpc.core.errors import PreprocessError  # noqa: E402
from sglang_mm_grpc.media import audio  # noqa: E402

FIXTURES = np.load(Path(__file__).resolve().parent / "fixtures" / "decode.npz")
META = json.loads(str(FIXTURES["meta"]))

#: clip -> (bound against torchcodec's wave, bound against the fallback chain's); 0: equal
BOUNDS = {
    "wav_s16_1ch": (0.0, 0.0),
    "wav_s32_2ch": (0.0, 0.0),
    "wav_f32_3ch": (0.0, 0.0),
    "flac_2ch": (0.0, 0.0),
    "mp3_2ch": (0.0, 2e-6),  # fallback: libsndfile's mpg123
    "mp3_1ch_22k": (0.0, 2e-6),
    "opus_2ch_48k": (2.5e-7, 2e-4),  # FFmpeg 5.1 | libopus
    "libvorbis_1ch": (2.5e-7, 3e-7),  # FFmpeg 5.1 | libvorbis
    "aac_2ch": (2.5e-7, 0.0),  # FFmpeg 5.1 | vLLM's PyAV backend (libsndfile cannot open .m4a)
}


def _decode(data: bytes, **kw) -> tuple[audio.AudioMeta, np.ndarray]:
    meta = audio.probe(data, **kw)
    return meta, audio.decode(data, meta, **kw)


def _fixture(name: str) -> tuple[bytes, np.ndarray, np.ndarray]:
    torchcodec = FIXTURES[f"{name}/torchcodec"]
    fallback = FIXTURES[f"{name}/fallback"] if f"{name}/fallback" in FIXTURES else torchcodec
    return FIXTURES[f"{name}/bytes"].tobytes(), torchcodec, fallback


def _within(wave: np.ndarray, ref: np.ndarray, bound: float) -> None:
    assert wave.dtype == np.float32 and wave.shape == ref.shape
    if bound == 0.0:
        assert np.array_equal(wave, ref)
    else:
        assert np.abs(wave.astype(np.float64) - ref).max() <= bound


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_wave_equals_vllms_load_audio(name):
    data, torchcodec, fallback = _fixture(name)
    meta, wave = _decode(data)
    clip = META["clips"][name]
    assert meta.sample_rate == clip["torchcodec_rate"]
    to_torchcodec, to_fallback = BOUNDS[name]
    _within(wave, torchcodec, to_torchcodec)
    if clip["fallback_rate"] == meta.sample_rate:
        _within(wave, fallback, to_fallback)


def test_opus_rate_differs_from_libsndfiles():
    """FFmpeg (torchcodec, PyAV, this module) decodes Opus at 48 kHz; libsndfile at the
    rate the encoder was given (OpusHead's input rate): vLLM without torchcodec gets a
    16 kHz wave from this 16 kHz clip, with torchcodec a 48 kHz one, as here."""
    data, torchcodec, fallback = _fixture("opus_1ch_16k")
    meta, wave = _decode(data)
    clip = META["clips"]["opus_1ch_16k"]
    assert (meta.sample_rate, clip["torchcodec_rate"], clip["fallback_rate"]) == (48000, 48000, 16000)
    _within(wave, torchcodec, 2.5e-7)
    assert len(fallback) * 3 == len(wave)


def test_vorbis_tail_and_ffmpeg_51s_decoder():
    """The stream decodes past its stated 0.5 s; like vLLM's torchcodec path the tail is
    cut to it. FFmpeg 5.1 (torchcodec here) decodes this FFmpeg-encoded stream apart from
    FFmpeg 8.1 and libvorbis, which agree."""
    data, torchcodec, fallback = _fixture("vorbis_2ch")
    meta, wave = _decode(data)
    assert len(wave) == len(torchcodec) == len(fallback) == 8000
    _within(wave, fallback, 2e-7)
    gap = np.abs(wave - torchcodec).max()
    assert 0.01 < gap < 0.2  # the known FFmpeg 5.1 difference (0.15 measured), not a shift or a mix-up
    source = audiogen.signal(0.5, 16000, 2, seed=9).mean(axis=0)
    assert np.abs(wave - source).mean() < np.abs(torchcodec - source).mean()


# -- every container ----------------------------------------------------------------------

#: fmt -> (rate, channels list, exact header count)
FORMATS = {
    "wav_s16": (16000, (1, 2, 6), True),
    "wav_s24": (44100, (2,), True),
    "wav_s32": (16000, (1, 2), True),
    "wav_f32": (22050, (1, 3), True),
    "wav_u8": (8000, (1, 2), True),
    "flac": (16000, (1, 2), True),
    "mp3": (44100, (1, 2), False),
    "opus": (48000, (1, 2), False),
    "vorbis": (16000, (2,), False),
    "aac": (44100, (1, 2), False),
}


@pytest.mark.parametrize("fmt,channels", [(f, c) for f, (_, cs, _) in FORMATS.items() for c in cs])
def test_each_format_decodes(fmt, channels):
    rate, _, exact = FORMATS[fmt]
    data = audiogen.clip(0.6, rate, channels, fmt, seed=channels)
    meta, wave = _decode(data)
    assert (meta.sample_rate, meta.channels, meta.exact) == (rate, channels, exact)
    assert wave.dtype == np.float32 and wave.ndim == 1
    n = round(0.6 * rate)
    if exact:
        assert meta.samples == len(wave) == n and meta.duration_s == pytest.approx(0.6)
    else:
        assert abs(len(wave) - n) <= 2048 and abs(meta.samples - n) <= 2048  # codec frames and priming
    source = audiogen.signal(0.6, rate, channels, seed=channels).mean(axis=0)
    got = wave[:n - 2048]  # no lag: FFmpeg skips the encoders' priming (AAC's padding is kept, as in vLLM)
    assert np.corrcoef(got, source[:len(got)])[0, 1] > 0.97


def test_pcm_converts_as_swresample_and_libsndfile():
    """int16 / 32768, int32 / 2^31, 24-bit as int32 / 2^31, u8 (x - 128) / 128, float as
    it is: exact, and the channels' float32 mean."""
    x = audiogen.signal(0.25, 16000, 2, seed=4)
    cases = {
        "wav_s16": np.round(x * 32767).astype(np.int16).astype(np.float32) / np.float32(32768),
        "wav_s32": (np.round(x.astype(np.float64) * 2147483392).astype(np.int32).astype(np.float32)
                    * np.float32(2.0 ** -31)),
        "wav_u8": (np.round(x * 127 + 128).astype(np.float32) - 128) / np.float32(128),
        "wav_f32": x,
    }
    for fmt, planes in cases.items():
        _, wave = _decode(audiogen.clip(0.25, 16000, 2, fmt, seed=4))
        assert np.array_equal(wave, np.mean(planes, axis=0)), fmt


def test_mono_is_numpys_channel_mean():
    """Summed in channel order, then divided: ``np.mean(axis=0)`` of a C-ordered
    [channels, n] float32 array, which torchcodec's samples are (8 channels included, where
    numpy's pairwise sum of a column-ordered array, soundfile's layout, differs)."""
    planes = np.random.default_rng(0).standard_normal((8, 5000)).astype(np.float32)
    for c in range(1, 9):
        assert np.array_equal(audio.mono(planes[:c]), np.mean(planes[:c], axis=0))


@pytest.mark.parametrize("first,second,cause", [((44100, 1), (44100, 2), "the channels change mid-stream"),
                                                 ((44100, 2), (44100, 1), "the channels change mid-stream"),
                                                 ((44100, 1), (48000, 1), "the rate changes mid-stream")])
def test_a_stream_that_changes_its_channels_or_rate_is_refused(first, second, cause):
    """Two MP3s back to back: one stream whose frames change layout or rate. Every frame is
    checked before it joins the others (the FIFO that gathers them checks no channels)."""
    data = audiogen.clip(0.5, first[0], first[1], "mp3") + audiogen.clip(0.5, second[0], second[1], "mp3")
    with pytest.raises(PreprocessError, match=cause) as e:
        _decode(data)
    assert e.value.code.name == "INVALID_ARGUMENT"


def test_probe_reads_the_header_only():
    wav = audiogen.clip(1.0, 16000, 2, "wav_s16")
    meta = audio.probe(wav)
    assert (meta.sample_rate, meta.channels, meta.samples, meta.exact, meta.codec, meta.container) == (
        16000, 2, 16000, True, "pcm_s16le", "wav")
    flac = audio.probe(audiogen.clip(0.75, 44100, 1, "flac"))
    assert (flac.samples, flac.exact, flac.codec) == (33075, True, "flac")
    mp3 = audio.probe(audiogen.clip(2.0, 22050, 1, "mp3"))
    assert not mp3.exact and abs(mp3.samples - 44100) < 1152 and mp3.codec.startswith("mp3")
    m4a = audio.probe(audiogen.clip(1.0, 16000, 1, "aac"))
    assert m4a.container.startswith("mov,mp4,m4a") and m4a.codec == "aac"


def test_truncated_wav_decodes_what_is_there():
    """A WAV whose data chunk claims more than the file holds: the header's exact count is
    the frames that are there, and that is what decodes (as FFmpeg and libsndfile read it)."""
    wav = audiogen.clip(1.0, 16000, 2, "wav_s16")
    cut = wav[:len(wav) - 1001]  # half a frame too
    meta, wave = _decode(cut)
    assert meta.exact and meta.samples == len(wave) == 16000 - 251


def test_streamed_wav_sizes_read_to_the_end():
    """A data chunk of size 0 or 0xFFFFFFFF (a streaming writer's placeholder) runs to the
    end of the file, as FFmpeg and libsndfile read it."""
    wav = audiogen.clip(0.5, 16000, 1, "wav_s16")
    for size in (0, 0xFFFFFFFF):
        meta, wave = _decode(audiogen.wav_patch(wav, data_size=size))
        assert meta.samples == len(wave) == 8000


def test_without_pyav_a_clip_fails_precondition(monkeypatch):
    monkeypatch.setattr(audio, "audio_available", lambda: False)
    with pytest.raises(PreprocessError) as e:
        audio.probe(audiogen.clip(0.2, 16000, 1, "wav_s16"))
    assert e.value.code.value == "FAILED_PRECONDITION" and "video" in e.value.message


@pytest.mark.parametrize("fmt", ["wav_s16", "wav_s24", "wav_s32", "wav_f32", "wav_u8"])
@pytest.mark.parametrize("channels", [1, 2, 3])
def test_a_pcm_wav_read_directly_equals_its_decoded_frames(fmt, channels):
    """A plain PCM WAV's header and data chunk are read without FFmpeg (``probe``,
    ``_pcm_wave``); what FFmpeg's reading and frames give, converted and mixed frame by
    frame, is the same to the bit (24-bit WAV, which FFmpeg shifts into int32, always takes
    the decoder)."""
    data = audiogen.clip(1.7, 22050, channels, fmt, seed=channels)
    meta = audio.probe(data)
    job = audio._Decode(meta, audio.AudioLimits(), None, None)
    with audio._open(audio._av(), data, None) as container:
        for packet in container.demux(audio._audio_stream(container, None)):
            for frame in packet.decode():
                job.add(frame)
        read = audio._meta(container, audio._wav_header(data), audio.AudioLimits(), None)
    direct = audio._pcm_wave(data, meta, audio._Decode(meta, audio.AudioLimits(), None, None))
    assert (direct is None) == (fmt == "wav_s24")
    assert np.array_equal(audio.decode(data, meta), job.wave())
    assert meta == read  # the header read alone says what FFmpeg's reading does


@pytest.mark.parametrize("fmt", sorted(audiogen.FORMATS))
def test_load_is_probe_then_decode_with_one_open(fmt):
    """``load`` (the container opened once) gives ``probe``'s facts and ``decode``'s samples."""
    channels = 2 if fmt == "vorbis" else 1
    data = audiogen.clip(seconds=0.7, rate=24000, channels=channels, fmt=fmt, seed=9)
    meta, wave = audio.load(data)
    assert meta == audio.probe(data)
    assert wave.dtype == np.float32 and np.array_equal(wave, audio.decode(data, meta))
    with pytest.raises(PreprocessError, match="max_bytes"):
        audio.load(data, audio.AudioLimits(max_bytes=len(data) - 1))
