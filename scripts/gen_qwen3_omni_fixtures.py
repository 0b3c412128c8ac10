"""Write tests/audio/fixtures/qwen3_omni_features.npz: what transformers 5.24's
``WhisperFeatureExtractor`` through ``Qwen3OmniMoeProcessor._process_audio`` (torch, CPU)
makes of deterministic 16 kHz clips as vLLM 0.33 hands them over, for
tests/audio/test_qwen3_omni.py (which runs without torch).

Run in a venv with torch and transformers 5.24.0 first on the path, e.g.:

    PYTHONPATH=/work/tf524 /work/vllm-venv/bin/python scripts/gen_qwen3_omni_fixtures.py

Clips: the Qwen3-ASR fixture script's (``gen_qwen3_asr_fixtures.clips``; the waves are
read from that fixture). Per clip, vLLM's
``Qwen3OmniMoeThinkerMultiModalProcessor._get_hf_mm_inputs`` first zero-pads it to a
multiple of the hop (``pad_to_hop_length``, transcribed below from
``vllm/model_executor/models/qwen3_omni_moe_thinker.py`` of vLLM 0.33.0), then the processor
runs on the clip alone with its ``audio_kwargs`` (``padding=True, truncation=False``):
``feat/<name>`` float32 [128, T] (the mask's frames), ``mask/<name>`` (its sum),
``tokens/<name>`` (``num_audio_tokens``), ``feat64_sha256/<name>`` (the same arithmetic in
float64 after the float32 windowing, rounded to float32 before the max-8 floor and the
``(x + 4) / 4``: the service's bytes must equal it). ``unpadded/<name>``: the mask's sum
without vLLM's padding (the processor alone). ``refused``: the clips the extractor fails
on (too short for the centred STFT's reflection). ``batch/*``: two clips in one call.
``rope/*``: the thinker's ``get_rope_index`` (``modeling_qwen3_omni_moe.py``, the
checkpoint's thinker ids) on a prompt of text, a 128x224 image, a clip of 101 frames and a
64x64 image: ``rope/ids`` (the expanded prompt), ``rope/positions`` [3, n], ``rope/delta``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import WhisperFeatureExtractor
from transformers.models.qwen3_omni_moe import Qwen3OmniMoeProcessor, Qwen3OmniMoeThinkerConfig
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
    Qwen3OmniMoePreTrainedModelForConditionalGeneration, _get_feat_extract_output_lengths)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_inkling_audio_fixtures import as_float, rounded_hann  # noqa: E402
from gen_qwen3_asr_fixtures import clips  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "audio" / "fixtures" / "qwen3_omni_features.npz"
#: The Qwen3-Omni-30B-A3B checkpoints' extractor (preprocessor_config.json).
EXTRACTOR = dict(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=300, dither=0.0,
                 padding_value=0.0, return_attention_mask=True)
KWARGS = dict(Qwen3OmniMoeProcessor.audio_kwargs, return_tensors="pt")
BATCH = ("noise", "len_8000")
#: The Qwen3-Omni-30B-A3B thinker_config's ids.
THINKER = dict(audio_token_id=151675, image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
               audio_start_token_id=151669, position_id_per_seconds=13)
#: Image grids (t, h, w) and the clip's feature frames in the rope prompt.
ROPE_IMAGES, ROPE_FRAMES = ((1, 8, 14), (1, 4, 4)), 101


def pad_to_hop_length(x: np.ndarray, hop_length: int) -> np.ndarray:
    """vLLM 0.33.0, ``Qwen3OmniMoeThinkerMultiModalProcessor._get_hf_mm_inputs``."""
    length = x.shape[-1]
    if length % hop_length != 0:
        pad_length = hop_length - (length % hop_length)
        x = np.pad(x, (0, pad_length), mode="constant", constant_values=0)
    return x


def processor() -> Qwen3OmniMoeProcessor:
    """The processor's audio path (``_process_audio``) with the real extractor; no tokenizer."""
    proc = Qwen3OmniMoeProcessor.__new__(Qwen3OmniMoeProcessor)
    proc.feature_extractor = WhisperFeatureExtractor(**EXTRACTOR)
    proc.audio_token = "<|audio_pad|>"
    return proc


def float64_features(fe: WhisperFeatureExtractor, x: np.ndarray) -> np.ndarray:
    wave = torch.nn.functional.pad(torch.from_numpy(x)[None], (fe.n_fft // 2, fe.n_fft // 2), mode="reflect")[0]
    frames = wave.unfold(-1, fe.n_fft, fe.hop_length)[:-1] * rounded_hann(fe.n_fft)
    spec = torch.fft.rfft(frames.double(), dim=-1)
    power = spec.real ** 2 + spec.imag ** 2
    filters = torch.from_numpy(fe.mel_filters).float().double()
    lm = (power @ filters).clamp_min(1e-10).log10().float().T
    lm = torch.maximum(lm, lm.max() - 8.0)
    return ((lm + 4.0) / 4.0).numpy()


def run(proc: Qwen3OmniMoeProcessor, audio: list[np.ndarray]):
    out, reps = proc._process_audio(audio, **KWARGS, n_window=Qwen3OmniMoeProcessor.n_window)
    feats, mask = out["input_features"].numpy(), out["feature_attention_mask"].numpy()
    tokens = np.asarray(out["num_audio_tokens"], np.int64)
    assert all(len(r) == len(proc.audio_token) * int(n) for r, n in zip(reps, tokens))
    return feats, mask, tokens


def rope() -> dict[str, np.ndarray]:
    """HF's positions for text, an image, a clip and an image."""
    cfg = Qwen3OmniMoeThinkerConfig(**THINKER)
    model = Qwen3OmniMoePreTrainedModelForConditionalGeneration.__new__(
        Qwen3OmniMoePreTrainedModelForConditionalGeneration)
    model.__dict__.update(config=cfg, spatial_merge_size=2)
    frames = torch.tensor([ROPE_FRAMES])
    n_audio = int(_get_feat_extract_output_lengths(frames, cfg.audio_config.n_window)[0])

    def image(t: int, h: int, w: int) -> list[int]:
        return [151652, *[cfg.image_token_id] * (t * h * w // 4), 151653]

    ids = [11, 12, *image(*ROPE_IMAGES[0]), 13, 151669, *[cfg.audio_token_id] * n_audio, 151670, 14, 15,
           *image(*ROPE_IMAGES[1]), 16]
    grid = torch.tensor(ROPE_IMAGES)
    pos, delta = model.get_rope_index(torch.tensor([ids]), grid, None, torch.ones(1, len(ids), dtype=torch.long),
                                      False, frames, None)
    return {"rope/ids": np.array(ids), "rope/positions": pos[:, 0].numpy().astype(np.int64),
            "rope/delta": delta.numpy().reshape(-1).astype(np.int64)}


def main() -> None:
    proc = processor()
    fe = proc.feature_extractor
    data: dict[str, np.ndarray] = {}
    refused = []
    inputs = clips()
    for name, clip in inputs.items():
        padded = pad_to_hop_length(as_float(clip), fe.hop_length)
        try:
            feats, mask, tokens = run(proc, [padded])
        except RuntimeError as e:
            refused.append(name)
            print(f"{name}: refused ({e})")
            continue
        t = int(mask.sum())
        assert t == len(padded) // fe.hop_length == feats.shape[-1], name
        data[f"feat/{name}"] = feats[0]
        data[f"mask/{name}"] = np.int64(t)
        data[f"tokens/{name}"] = tokens[0]
        data[f"feat64_sha256/{name}"] = np.array(hashlib.sha256(float64_features(fe, padded).tobytes()).hexdigest())
        data[f"unpadded/{name}"] = np.int64(run(proc, [as_float(clip)])[1].sum())
    padded = [pad_to_hop_length(as_float(inputs[n]), fe.hop_length) for n in BATCH]
    data["batch/feat"], data["batch/mask"], data["batch/tokens"] = run(proc, padded)
    data["refused"] = np.array(refused)
    data.update(rope())
    meta = {
        "transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
        "python": sys.version.split()[0], "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(), "kwargs": {k: str(v) for k, v in KWARGS.items()},
        "extractor": EXTRACTOR, "batch": list(BATCH), "vllm": "0.33.0 (pad_to_hop_length transcribed)",
    }
    data["meta"] = np.array(json.dumps(meta))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **data)
    print(f"{OUT}: {OUT.stat().st_size} bytes, {len(inputs)} clips, {meta}")


if __name__ == "__main__":
    main()
