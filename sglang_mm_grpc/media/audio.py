"""Audio bytes -> float32 mono at the stream's own rate, as vLLM 0.33's loader gives it, and
that wave resampled as vLLM's default resampler does.

vLLM's ``AudioMediaIO`` calls ``load_audio(sr=None, max_duration_s=600, ...)``
(vllm/multimodal/media/audio.py), whose "auto" backend tries torchcodec (FFmpeg, the
frames converted to float32 by swresample), then soundfile (libsndfile; reached only when
torchcodec cannot load, e.g. without a system FFmpeg), then PyAV for what libsndfile cannot
open (M4A/AAC); each averages the channels in float32 (``np.mean(axis=0)``). This module
decodes with PyAV's FFmpeg and converts as swresample and libsndfile do: int16 times
2^-15, int32 (and 24-bit, which FFmpeg shifts into int32) times 2^-31, u8 less 128 times
2^-7, float as it is, double rounded to float32; the channels summed in order and divided
by their count, as ``np.mean`` does over a C-ordered ``[channels, n]`` array (torchcodec's).
Like vLLM's torchcodec path, a Vorbis stream decoded past its stated duration (by up to a
block) is cut to it.

So PCM WAV and FLAC come out equal to every vLLM backend's; MP3 equal to torchcodec's
(FFmpeg's decoder) and within 1e-6 of libsndfile's (mpg123); AAC equal to vLLM's PyAV
backend's and within 2e-7 of torchcodec's over FFmpeg 5.1; Opus and libvorbis-made Vorbis
within 2e-7 of FFmpeg 5.1's. Apart: libsndfile decodes Opus at the header's input rate
where FFmpeg always gives 48 kHz (and differs by up to 1e-4 at 48 kHz); FFmpeg 5.1 decodes
streams from FFmpeg's own Vorbis encoder up to 0.15 apart from FFmpeg 8.1 and libvorbis
(which agree). tests/audio/test_audio_decode.py holds the measurements.

Every limit (``AudioLimits``) is checked as early as it can be: the byte size before
opening; the header's claims (sample rate, channels, duration, samples x channels) before
anything is decoded -- for WAV and FLAC read from the file's own header, so a 4 GHz rate or
a 10-hour data chunk is refused even where FFmpeg would not open it or would believe only
the bytes that are there (vLLM decodes those); then, while decoding, the real samples and
packets (RESOURCE_EXHAUSTED) and the time (DEADLINE_EXCEEDED, naming decode_timeout_s or
the request's deadline, as a video's decode does).

``av`` (PyAV) is the ``video`` extra: imported on first use, so the package imports
without it and a clip then gets FAILED_PRECONDITION.
"""

from __future__ import annotations

import functools
import io
import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.carriers import AudioMeta
from ..core.errors import Code, PreprocessError
from ..kernels import audio_resample
from .video import video_available as audio_available  # PyAV (the `video` extra) decodes both

INSTALL_HINT = ("audio needs the `video` extra (PyAV): pip install 'sglang-mm-grpc[video]' "
                "(./scripts/serve and ./scripts/test install it)")

#: A resampling kernel's bounds (rates whose gcd is small make huge ones: 44101 -> 16000
#: Hz would take 16000 x 44135 taps): taps per output sample, and weights in all.
MAX_RESAMPLE_TAPS = 8192
MAX_RESAMPLE_WEIGHTS = 1 << 24


@dataclass(frozen=True)
class AudioLimits:
    """What one clip may cost; each is named in its RESOURCE_EXHAUSTED error."""

    max_bytes: int = 64 << 20
    max_duration_s: float = 600.0  # vLLM's VLLM_MAX_AUDIO_DECODE_DURATION_S
    max_sample_rate: int = 192000
    max_channels: int = 8
    max_decoded_samples: int = 600 * 48000 * 2  # samples x channels decoded
    decode_timeout_s: float = 30.0

    @property
    def max_packets(self) -> int:
        """Packets read before their samples must have come: a stream of empty packets
        is cut off here rather than read to its end (16 samples a packet is FLAC's
        smallest block)."""
        return self.max_decoded_samples // 16 + 4096


def _av():
    if not audio_available():
        raise PreprocessError(Code.FAILED_PRECONDITION, INSTALL_HINT, kind="audio")
    import av  # noqa: PLC0415  (lazy: the extra is optional)

    return av


def _exhausted(what: str, value, limit, name: str, item: int | None) -> PreprocessError:
    return PreprocessError(Code.RESOURCE_EXHAUSTED, f"{what} {value}, over the limit of {limit} ({name})",
                           item=item, kind="audio")


def _bad(message: str, item: int | None) -> PreprocessError:
    return PreprocessError(Code.INVALID_ARGUMENT, message, item=item, kind="audio")


def _why(e: Exception) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _open(av, data: bytes, item: int | None):
    try:
        return av.open(io.BytesIO(data), mode="r")
    except av.FFmpegError as e:
        raise _bad(f"not a readable audio container ({_why(e)})", item) from None
    except (ValueError, OSError) as e:
        raise _bad(f"not a readable audio container ({e})", item) from None


# -- the header ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Header:
    """What a WAV or FLAC file's own header says: its rate and channels, the samples it
    claims, and those its bytes hold (None: not known from the header); for a plain PCM
    WAV, its samples' dtype and where its data chunk starts (else None)."""

    rate: int
    channels: int
    claimed: int | None
    samples: int | None
    pcm: np.dtype | None = None
    offset: int = 0


#: Chunks read before the data chunk (beyond them FFmpeg alone reads the header).
_MAX_CHUNKS = 64
#: WAVE format tags whose data chunk is plain frames: PCM, IEEE float, extensible.
_PCM_TAGS = {1, 3}
_EXTENSIBLE = 0xFFFE


def _wav_header(data: bytes) -> _Header | None:
    """The RIFF/WAVE header's fmt and data chunks (None when it is not one, is cut short or
    has over ``_MAX_CHUNKS`` chunks before its data: FFmpeg then reads it)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos, fmt = 12, None
    for _ in range(_MAX_CHUNKS):
        if pos + 8 > len(data):
            break
        cid, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = pos + 8
        if cid == b"fmt " and size >= 16 and body + 16 <= len(data):
            fmt = struct.unpack_from("<HHIIHH", data, body)
            if fmt[0] == _EXTENSIBLE and size >= 26 and body + 26 <= len(data):
                fmt = (struct.unpack_from("<H", data, body + 24)[0],) + fmt[1:]
        elif cid == b"data" and fmt is not None:
            return _wav_facts(fmt, size, len(data) - body, body)
        pos = body + size + (size & 1)
    return None


#: (WAVE format tag, bits per sample) -> the dtype its samples are read as directly (the
#: kinds FFmpeg decodes to that very sample format: s16, s32, flt, u8)
_PCM_DTYPES: dict[tuple[int, int], np.dtype] = {
    (1, 16): np.dtype("<i2"), (1, 32): np.dtype("<i4"), (3, 32): np.dtype("<f4"), (1, 8): np.dtype("u1")}
#: ... and FFmpeg's name of its decoder
_PCM_CODECS: dict[np.dtype, str] = {np.dtype("<i2"): "pcm_s16le", np.dtype("<i4"): "pcm_s32le", np.dtype("<f4"): "pcm_f32le",
               np.dtype("u1"): "pcm_u8"}


def _wav_facts(fmt: tuple, size: int, available: int, offset: int) -> _Header:
    tag, channels, rate, _, align, bits = fmt
    # FFmpeg and libsndfile read a data chunk of size 0 or 0xFFFFFFFF (a streamed
    # file's placeholder) to the end of the file
    claimed_bytes = available if size in (0, 0xFFFFFFFF) else size
    plain = tag in _PCM_TAGS and channels > 0 and align == channels * bits // 8 and align > 0
    if not plain:
        return _Header(rate, channels, None, None)
    return _Header(rate, channels, claimed_bytes // align, min(claimed_bytes, available) // align,
                   _PCM_DTYPES.get((tag, bits)), offset)


def _flac_header(data: bytes) -> _Header | None:
    """FLAC's STREAMINFO: rate, channels and total samples (0 there: unknown)."""
    if len(data) < 42 or data[:4] != b"fLaC" or data[4] & 0x7F != 0:
        return None
    bits = int.from_bytes(data[18:26], "big")
    rate, channels, total = bits >> 44, ((bits >> 41) & 7) + 1, bits & ((1 << 36) - 1)
    return _Header(rate, channels, total or None, total or None)


def _check_format(rate: int, channels: int, limits: AudioLimits, item: int | None) -> None:
    if rate > limits.max_sample_rate:
        raise _exhausted("a sample rate of", f"{rate} Hz", f"{limits.max_sample_rate} Hz", "max_sample_rate", item)
    if channels > limits.max_channels:
        raise _exhausted("the stream has", f"{channels} channels", limits.max_channels, "max_channels", item)
    if rate <= 0:
        raise _bad(f"the audio stream has no sample rate ({rate} Hz)", item)
    if channels <= 0:
        raise _bad(f"the audio stream has no channels ({channels})", item)


def _check_length(samples: int, seconds: float, channels: int, limits: AudioLimits, item: int | None) -> None:
    if seconds > limits.max_duration_s:
        raise _exhausted("a duration of", f"{seconds:.1f} s", f"{limits.max_duration_s:g} s", "max_duration_s", item)
    if samples * channels > limits.max_decoded_samples:
        raise _exhausted("the stream holds", f"{samples} samples x {channels} channels", limits.max_decoded_samples,
                         "max_decoded_samples", item)


# -- probe -------------------------------------------------------------------------------


def probe(data: bytes, limits: AudioLimits = AudioLimits(), item: int | None = None) -> AudioMeta:
    """The header's facts, held to the limits; nothing decoded. ``samples`` is exact for
    PCM WAV (its data chunk) and FLAC (STREAMINFO), else the stated duration x rate."""
    av = _av()
    header, meta = _own_header(data, limits, item)
    if meta is not None:
        return meta
    with _open(av, data, item) as container:
        return _meta(container, header, limits, item)


def load(data: bytes, limits: AudioLimits = AudioLimits(), item: int | None = None,
         deadline: float | None = None, keep: tuple[int, int] | None = None) -> tuple[AudioMeta, np.ndarray]:
    """``probe`` then ``decode``, the container opened once (FFmpeg's probe of a compressed
    stream is a real share of its decode). ``keep`` (samples, rate): only that many samples
    at that rate are wanted, so decoding stops once they can be resampled exactly
    (``audio_resample.input_needed``); the wave is then the whole clip's prefix."""
    av = _av()
    header, meta = _own_header(data, limits, item)
    if meta is not None:
        return meta, decode(data, meta, limits, item, deadline, _enough(keep, meta))
    with _open(av, data, item) as container:
        meta = _meta(container, header, limits, item)
        return meta, _demuxed(av, container, _Decode(meta, limits, item, deadline, _enough(keep, meta)), item)


def _enough(keep: tuple[int, int] | None, meta: AudioMeta) -> int | None:
    return None if keep is None else audio_resample.input_needed(keep[0], meta.sample_rate, keep[1])


def _own_header(data: bytes, limits: AudioLimits, item: int | None) -> tuple[_Header | None, AudioMeta | None]:
    """The byte limit, and a WAV's or FLAC's own header held to the limits; with the facts
    when it is a plain PCM WAV (which says all FFmpeg would)."""
    if len(data) > limits.max_bytes:
        raise _exhausted("audio of", f"{len(data)} bytes", limits.max_bytes, "max_bytes", item)
    if not data:
        raise _bad("empty audio (0 bytes)", item)
    header = _wav_header(data) or _flac_header(data)
    if header is None:
        return None, None
    _check_format(header.rate, header.channels, limits, item)
    if header.claimed is not None:
        _check_length(header.claimed, header.claimed / header.rate, header.channels, limits, item)
    if header.pcm is not None and header.samples:
        _check_length(header.samples, header.samples / header.rate, header.channels, limits, item)
        return header, AudioMeta(header.rate, header.channels, header.samples, header.samples / header.rate,
                                 _PCM_CODECS[header.pcm], "wav", True)
    return header, None


def _audio_stream(container, item: int | None):
    if not container.streams.audio:
        kinds = sorted({s.type for s in container.streams}) or ["no streams"]
        raise _bad(f"the container has no audio stream ({', '.join(kinds)})", item)
    return container.streams.audio[0]


def _stated_seconds(container, stream) -> float | None:
    """The stream's duration, else the container's (what torchcodec reports)."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration and container.duration > 0:
        return container.duration / 1e6
    return None


def _meta(container, header: _Header | None, limits: AudioLimits, item: int | None) -> AudioMeta:
    stream = _audio_stream(container, item)
    rate, channels = int(stream.rate or 0), int(stream.channels or 0)
    _check_format(rate, channels, limits, item)
    if header is not None and header.samples is not None and header.rate == rate:
        samples, exact = header.samples, True
        if not samples:
            raise _bad("the audio stream holds no samples (its header says so)", item)
    else:
        seconds = _stated_seconds(container, stream)
        samples, exact = (int(round(seconds * rate)) if seconds is not None else 0), False
    _check_length(samples, samples / rate, channels, limits, item)
    return AudioMeta(rate, channels, samples, samples / rate, stream.codec_context.name or "",
                     container.format.name or "", exact)


# -- decode ------------------------------------------------------------------------------


def decode(data: bytes, meta: AudioMeta, limits: AudioLimits = AudioLimits(), item: int | None = None,
           deadline: float | None = None, enough: int | None = None) -> np.ndarray:
    """float32 [n]: the clip's mono wave at ``meta.sample_rate``, as vLLM's loader gives it.
    ``deadline``: a ``time.monotonic()`` value the decode must end by (with
    ``limits.decode_timeout_s``, the earlier wins). ``enough``: decoding may stop once it
    has that many samples (the wave is then a prefix of the whole, at least that long)."""
    av = _av()
    if len(data) > limits.max_bytes:
        raise _exhausted("audio of", f"{len(data)} bytes", limits.max_bytes, "max_bytes", item)
    job = _Decode(meta, limits, item, deadline, enough)
    pcm = _pcm_wave(data, meta, job)
    if pcm is not None:
        return pcm
    with _open(av, data, item) as container:
        return _demuxed(av, container, job, item)


def _demuxed(av, container, job: "_Decode", item: int | None) -> np.ndarray:
    """The open container's first audio stream decoded by ``job`` (to its end where it is
    Vorbis: its tail rule needs the whole length)."""
    stream = _audio_stream(container, item)
    vorbis = stream.codec_context.name == "vorbis"
    enough = job.enough if not vorbis else _TO_THE_END
    try:
        for packet in container.demux(stream):
            job.packet()
            for frame in packet.decode():
                job.add(frame)
            if job.samples >= enough:
                break
    except av.FFmpegError as e:
        raise _bad(f"corrupt audio data after {job.samples} samples ({_why(e)})", item) from None
    wave = job.wave()
    if vorbis:
        wave = _vorbis_tail(wave, _stated_seconds(container, stream), job.meta.sample_rate)
    return wave


def _pcm_wave(data: bytes, meta: AudioMeta, job: "_Decode") -> np.ndarray | None:
    """A plain PCM WAV's samples read straight from its data chunk (None for any other
    file): FFmpeg's pcm decoders hand out these very samples, converted and mixed here as
    each decoded frame is (``_converted``, ``mono``: element by element, so one block equals
    the frames joined)."""
    header = _wav_header(data)
    if header is None or header.pcm is None or header.samples is None or not meta.exact:
        return None
    if (header.rate, header.channels, header.samples) != (meta.sample_rate, meta.channels, meta.samples):
        return None
    job.packet()  # the deadline, as for a decoded stream's first packet
    count = min(header.samples, job.enough)
    frames = np.frombuffer(data, header.pcm, count=count * header.channels, offset=header.offset)
    job.add_planes(frames.reshape(-1, header.channels).T)
    return job.wave()


#: The largest Vorbis block, in samples (vLLM's _VORBIS_MAX_BLOCK_SAMPLES).
_VORBIS_MAX_BLOCK = 8192


def _vorbis_tail(wave: np.ndarray, seconds: float | None, rate: int) -> np.ndarray:
    """vLLM's torchcodec path cuts a Vorbis stream decoded past its stated duration by up
    to a block to ``round(duration x rate)`` samples (FFmpeg may not apply Ogg's end
    trimming)."""
    if seconds is None:
        return wave
    expected = round(seconds * rate)
    if 0 < len(wave) - expected <= _VORBIS_MAX_BLOCK:
        return wave[:expected]
    return wave


#: ``_Decode.enough`` of a clip decoded to its end.
_TO_THE_END = 1 << 62


class _Decode:
    """One clip's decode: frames to float32 mono, the limits counted as it goes. Decoded
    frames are queued as they are in FFmpeg's audio FIFO (one C copy a frame, no array made
    per frame); each run of one sample format is read out as one block and converted and
    mixed once at the end: the conversion and the mix go element by element, so one pass
    over the whole equals one per frame."""

    def __init__(self, meta: AudioMeta, limits: AudioLimits, item: int | None, deadline: float | None,
                 enough: int | None = None):
        self.meta, self.limits, self.item, self.deadline = meta, limits, item, deadline
        self.enough = enough if enough is not None else _TO_THE_END  # samples after which decoding may stop
        self.end = time.monotonic() + limits.decode_timeout_s
        self.max_samples = int(meta.sample_rate * limits.max_duration_s)  # vLLM's int(sr * max_duration_s)
        self.packets = self.samples = 0
        self.max_packets = limits.max_packets
        self.parts: list = []  # per run of one sample format: its channels' samples, in that format
        self.fifo: Any = None  # av.audio.fifo.AudioFifo (the optional extra's)

    def packet(self) -> None:
        self.packets += 1
        if self.packets > self.max_packets:
            n = self.max_packets
            raise _exhausted("the stream holds over", f"{n} packets", n, "max_decoded_samples / 16 + 4096 packets",
                             self.item)
        now = time.monotonic()
        if now > self.end or (self.deadline is not None and now > self.deadline):
            late = self.deadline is not None and now > self.deadline
            what = "the request's deadline" if late else f"decode_timeout_s {self.limits.decode_timeout_s:g} s"
            raise PreprocessError(Code.DEADLINE_EXCEEDED, f"decoding took longer than its budget ({what}) after "
                                  f"{self.samples} samples", item=self.item, kind="audio")

    def add(self, frame) -> None:
        """A decoded frame, checked and counted, into the FIFO (a new one where the sample
        format changes: the FIFO holds one format)."""
        if frame.sample_rate != self.meta.sample_rate:
            raise _bad(f"a frame at {frame.sample_rate} Hz in a stream of {self.meta.sample_rate} Hz "
                       "(the rate changes mid-stream)", self.item)
        self._count(frame.layout.nb_channels, frame.samples)  # before the write: the FIFO checks no channels
        frame.pts = None  # the FIFO would check the timestamps' continuity; the decoder's are not ours to judge
        if self.fifo is not None:
            try:
                self.fifo.write(frame)
                return
            except ValueError:  # another sample format
                self._flush()
        from av.audio.fifo import AudioFifo  # noqa: PLC0415  (the optional extra)

        self.fifo = AudioFifo()
        self.fifo.write(frame)

    def add_planes(self, planes) -> None:
        """[channels, n] samples (an array, or a sequence of per-channel arrays of one
        dtype), counted against the limits."""
        self._count(len(planes), len(planes[0]))
        self.parts.append(planes)

    def _count(self, channels: int, n: int) -> None:
        if channels != self.meta.channels:
            raise _bad(f"a frame of {channels} channels in a stream of {self.meta.channels} "
                       "(the channels change mid-stream)", self.item)
        self.samples += n
        if self.samples * channels > self.limits.max_decoded_samples:
            raise _exhausted("the stream decodes into over", f"{self.limits.max_decoded_samples} samples x channels",
                             self.limits.max_decoded_samples, "max_decoded_samples", self.item)
        if self.samples > self.max_samples:
            raise _exhausted("the stream decodes into", f"{self.samples} samples at {self.meta.sample_rate} Hz",
                             f"{self.limits.max_duration_s:g} s", "max_duration_s", self.item)

    def _flush(self) -> None:
        block = self.fifo.read() if self.fifo is not None else None
        self.fifo = None
        if block is not None:
            self.parts.append(_channels(block))

    def wave(self) -> np.ndarray:
        self._flush()
        if not self.samples:
            raise _bad("the audio stream decodes into no samples", self.item)
        parts, self.parts = self.parts, []
        if len({p[0].dtype for p in parts}) > 1:  # the sample format changed mid-stream: part by part
            return np.concatenate([mono(_converted(p)) for p in parts])
        if len(parts) == 1:
            return mono(_converted(parts[0]))
        return mono(_converted([np.concatenate([p[c] for p in parts]) for c in range(self.meta.channels)]))


_TO_FLOAT = {
    np.dtype(np.int16): np.float32(2.0 ** -15),
    np.dtype(np.int32): np.float32(2.0 ** -31),
    np.dtype(np.int64): np.float32(2.0 ** -63),
}


#: FFmpeg's sample formats (planar ones end in "p") -> their numpy dtype
_SAMPLE_DTYPES: dict[str, np.dtype] = {"u8": np.dtype(np.uint8), "s16": np.dtype(np.int16), "s32": np.dtype(np.int32),
                                        "s64": np.dtype(np.int64), "flt": np.dtype(np.float32), "dbl": np.dtype(np.float64)}


def _channels(frame) -> list[np.ndarray]:
    """A decoded frame's samples per channel, views of its planes in their own dtype."""
    fmt = frame.format
    dtype = _SAMPLE_DTYPES.get(fmt.name.removesuffix("p") if fmt.is_planar else fmt.name)
    n, c = frame.samples, frame.layout.nb_channels
    if dtype is None:
        return list(frame.to_ndarray().reshape(c, n) if fmt.is_planar else frame.to_ndarray().reshape(n, c).T)
    if fmt.is_planar:
        return [np.frombuffer(frame.planes[i], dtype, count=n) for i in range(c)]
    return list(np.frombuffer(frame.planes[0], dtype, count=n * c).reshape(n, c).T)


def _converted(channels) -> list[np.ndarray]:
    """Each channel's integer or float samples as float32, as swresample converts them."""
    return [_float32(c) for c in channels]


def _float32(samples: np.ndarray) -> np.ndarray:
    scale = _TO_FLOAT.get(samples.dtype)
    if scale is not None:
        return samples.astype(np.float32) * scale
    if samples.dtype == np.uint8:
        return (samples.astype(np.float32) - np.float32(128)) * np.float32(2.0 ** -7)
    return samples.astype(np.float32, copy=False)


def mono(channels) -> np.ndarray:
    """float32 [n]: the channels' mean (a [channels, n] array or a sequence of channels) as
    ``np.mean(planes, axis=0)`` takes it over a C-ordered [channels, n] float32 array
    (summed in order, then divided by the count)."""
    acc = np.array(channels[0], dtype=np.float32)
    for c in range(1, len(channels)):
        acc += channels[c]
    if len(channels) > 1:
        acc /= np.float32(len(channels))
    return acc


# -- resample ----------------------------------------------------------------------------


def resampled_length(samples: int, orig: int, new: int) -> int:
    """The samples ``resample`` makes of ``samples`` (torchaudio's ``ceil(new * n / orig)``)."""
    if int(orig) == int(new):
        return int(samples)
    return audio_resample.output_length(samples, int(orig), int(new))


def resample(wave: np.ndarray, orig_sr: int, new_sr: int, item: int | None = None) -> np.ndarray:
    """float32: ``wave`` at ``new_sr``, as vLLM 0.33's default ``AudioResampler``
    ("torchaudio": ``torchaudio.transforms.Resample(orig, new)``, float32, 1 thread, mkldnn
    off) makes it; the same array when the rates are equal."""
    orig, new = int(orig_sr), int(new_sr)
    if orig == new:
        return wave
    if orig <= 0 or new <= 0:
        raise _bad(f"cannot resample {orig} Hz to {new} Hz", item)
    phases, taps, _ = audio_resample.kernel_shape(orig, new)
    if taps > MAX_RESAMPLE_TAPS or phases * taps > MAX_RESAMPLE_WEIGHTS:
        raise PreprocessError(Code.RESOURCE_EXHAUSTED, f"resampling {orig} Hz to {new} Hz takes a kernel of "
                              f"{phases} x {taps} taps, over the limit of {MAX_RESAMPLE_TAPS} taps and "
                              f"{MAX_RESAMPLE_WEIGHTS} weights (the rates' greatest common divisor is too small)",
                              item=item, kind="audio")
    kernel, width = _kernel(orig, new)
    return audio_resample.resample(wave, orig, new, kernel, width)


@functools.lru_cache(maxsize=32)
def _kernel(orig: int, new: int) -> tuple[np.ndarray, int]:
    """torchaudio's kernel for a rate pair, as [taps, phases], kept (as vLLM keeps its
    Resample modules)."""
    kernel, width = audio_resample.sinc_kernel(orig, new)
    taps_by_phase = np.ascontiguousarray(kernel.T)
    taps_by_phase.flags.writeable = False
    return taps_by_phase, width
