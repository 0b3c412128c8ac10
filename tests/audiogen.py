"""Real audio files made with PyAV (its wheel's FFmpeg encoders), for tests, fixtures and benches.

    signal(seconds, rate, channels, seed) -> float32 [channels, n]    # the samples a clip encodes
    noise(n, seed) -> float32 [n]   # hashed white noise, the same bytes on every machine
    clip(seconds=..., rate=..., channels=..., fmt="wav_s16"|"wav_s24"|"wav_s32"|"wav_f32"|"wav_u8"|"flac"
         |"mp3"|"opus"|"vorbis"|"aac", seed=...) -> bytes
    hostile() -> {name: bytes}      # files each refused with their own status (see HOSTILE)
    wav_patch(data, **fields) -> bytes   # a WAV with fmt / data header fields replaced

The signal is a few tones per channel (each channel its own, so a wrong mono mix shows) plus
seeded noise, at about half of full scale: every codec has real work and no sample clips.
"""

from __future__ import annotations

import io
import struct

import numpy as np

#: fmt -> (container format, encoder, the sample format the encoder is given)
FORMATS = {
    "wav_s16": ("wav", "pcm_s16le", "s16"),
    "wav_s24": ("wav", "pcm_s24le", "s32"),  # 24-bit: the encoder keeps the top 24 bits
    "wav_s32": ("wav", "pcm_s32le", "s32"),
    "wav_f32": ("wav", "pcm_f32le", "flt"),
    "wav_u8": ("wav", "pcm_u8", "u8"),
    "flac": ("flac", "flac", "s16"),
    "mp3": ("mp3", "libmp3lame", "fltp"),
    "opus": ("ogg", "libopus", "flt"),
    "vorbis": ("ogg", "vorbis", "fltp"),  # FFmpeg's own encoder: stereo only, "experimental"
    "aac": ("ipod", "aac", "fltp"),  # .m4a
}

LAYOUTS = {1: "mono", 2: "stereo", 3: "2.1", 4: "quad", 5: "4.1", 6: "5.1", 7: "6.1", 8: "7.1"}


def signal(seconds: float, rate: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """float32 [channels, round(seconds * rate)] in about [-0.6, 0.6]."""
    n = int(round(seconds * rate))
    t = np.arange(n, dtype=np.float64) / rate
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(channels):
        f0 = 220.0 * (1 + c) * (1 + 0.1 * seed)
        x = 0.3 * np.sin(2 * np.pi * f0 * t) + 0.15 * np.sin(2 * np.pi * min(3.7 * f0, rate * 0.4) * t + c)
        x *= 0.6 + 0.4 * np.sin(2 * np.pi * 1.5 * t)  # an envelope: loud and quiet parts
        rows.append(x + rng.normal(0.0, 0.03, n))
    return np.clip(np.asarray(rows), -0.95, 0.95).astype(np.float32)


def noise(n: int, seed: int = 0) -> np.ndarray:
    """float32 [n] in [-0.3, 0.3): a multiplicative hash of the index, in integer
    arithmetic (the same bytes on any machine, unlike a generator's stream)."""
    i = np.arange(n, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(seed * 40503 + 12345)) % np.uint64(1 << 32)
    h = (h ^ (h >> np.uint64(15))) * np.uint64(2246822519) % np.uint64(1 << 32)
    return ((h.astype(np.float64) / 2.0 ** 32 - 0.5) * 0.6).astype(np.float32)


def _samples(x: np.ndarray, sample_format: str) -> np.ndarray:
    """``x`` [c, n] as the encoder's frame array: packed formats interleaved [1, n * c]."""
    if sample_format == "u8":
        packed = np.round(x.T * 127 + 128).astype(np.uint8)
    elif sample_format == "s16":
        packed = np.round(x.T * 32767).astype(np.int16)
    elif sample_format == "s32":
        packed = np.round(x.T.astype(np.float64) * 2147483392).astype(np.int32)
    elif sample_format == "flt":
        packed = x.T.astype(np.float32)
    else:  # planar float
        return np.ascontiguousarray(x, dtype=np.float32)
    return packed.reshape(1, -1)


def clip(seconds: float = 1.0, rate: int = 16000, channels: int = 1, fmt: str = "wav_s16", seed: int = 0,
         bitrate: int | None = None) -> bytes:
    """``seconds`` of ``signal`` encoded as ``fmt`` (see ``FORMATS``) at ``rate`` Hz."""
    import av

    container, codec, sample_format = FORMATS[fmt]
    x = signal(seconds, rate, channels, seed)
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout=LAYOUTS[channels])
        if codec == "vorbis":
            stream.codec_context.options = {"strict": "experimental"}
        if bitrate:
            stream.codec_context.bit_rate = bitrate
        step = 1024
        for k in range(0, x.shape[1], step):
            part = x[:, k:k + step]
            frame = av.AudioFrame.from_ndarray(_samples(part, sample_format), format=sample_format,
                                               layout=LAYOUTS[channels])
            frame.rate, frame.pts = rate, k
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def _chunks(data: bytes) -> dict[bytes, int]:
    """A RIFF/WAVE file's chunk ids -> the offset of their body (the first of each id)."""
    found, pos = {}, 12
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        found.setdefault(cid, pos + 8)
        if cid == b"data":
            break
        pos += 8 + size + (size & 1)
    return found


def wav_patch(data: bytes, **fields) -> bytes:
    """A WAV with header fields replaced: ``rate`` (and the byte rate with it), ``channels``
    (block align and byte rate follow), ``data_size`` (the data chunk's size field), ``riff_size``."""
    b = bytearray(data)
    chunks = _chunks(data)
    fmt = chunks[b"fmt "]
    tag, channels, rate, _, align, bits = struct.unpack_from("<HHIIHH", b, fmt)
    channels = fields.get("channels", channels)
    rate = fields.get("rate", rate)
    align = channels * bits // 8
    struct.pack_into("<HHIIHH", b, fmt, tag, channels, rate & 0xFFFFFFFF, (rate * align) & 0xFFFFFFFF, align, bits)
    if "data_size" in fields:
        struct.pack_into("<I", b, chunks[b"data"] - 4, fields["data_size"])
    if "riff_size" in fields:
        struct.pack_into("<I", b, 4, fields["riff_size"])
    return bytes(b)


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 40, 40)).save(buf, format="PNG")
    return buf.getvalue()


def _video_without_audio() -> bytes:
    import videogen

    return videogen.clip(frames=6, fps=12, size=(32, 32))


#: name -> (the status code it gets, a word its message holds)
HOSTILE = {
    "truncated_header": ("INVALID_ARGUMENT", "container"),
    "truncated_m4a": ("INVALID_ARGUMENT", "container"),
    "empty": ("INVALID_ARGUMENT", "empty"),
    "zero_length": ("INVALID_ARGUMENT", "no samples"),
    "claims_10_hours": ("RESOURCE_EXHAUSTED", "max_duration_s"),
    "sample_rate_bomb": ("RESOURCE_EXHAUSTED", "max_sample_rate"),
    "too_many_channels": ("RESOURCE_EXHAUSTED", "max_channels"),
    "png": ("INVALID_ARGUMENT", "no audio stream"),  # FFmpeg opens it as an image
    "video_without_audio": ("INVALID_ARGUMENT", "no audio stream"),
    "noise": ("INVALID_ARGUMENT", "container"),
    "garbage_mp3": ("INVALID_ARGUMENT", "container"),
}


def hostile() -> dict[str, bytes]:
    """Files that must each get their status quickly, with bounded memory (``HOSTILE``)."""
    wav = clip(0.5, 16000, 1, "wav_s16")
    m4a = clip(1.0, 16000, 1, "aac")
    header_end = _chunks(wav)[b"data"]
    rng = np.random.default_rng(7)
    return {
        "truncated_header": wav[:30],  # cut inside the fmt chunk
        "truncated_m4a": m4a[: len(m4a) // 2],  # the moov box (written last) is lost
        "empty": b"",
        "zero_length": wav_patch(wav[:header_end], data_size=0, riff_size=header_end - 8),
        "claims_10_hours": wav_patch(wav, data_size=10 * 3600 * 16000 * 2),
        "sample_rate_bomb": wav_patch(wav, rate=4_000_000_000),
        "too_many_channels": wav_patch(wav, channels=64),
        "png": _png(),
        "video_without_audio": _video_without_audio(),
        "noise": rng.integers(0, 256, 20000, dtype=np.uint8).tobytes(),
        "garbage_mp3": b"ID3\x03\0\0\0\0\0\0" + rng.integers(0, 256, 20000, dtype=np.uint8).tobytes(),
    }
