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
``video/*``: a small H.264 clip (``video/clip``, tests/videogen.clip), its frames decoded by
PyAV (``video/frames_sha256``), through ``Qwen3OmniMoeProcessor._process_videos`` with the
processor's own ``videos_kwargs`` and ``Qwen2VLVideoProcessor`` (torchvision) configured from
the checkpoint's preprocessor_config.json: ``pixel_values_videos`` (sha256 of its float32
bytes), ``video_grid_thw``, ``video_second_per_grid``, the replacement's token count; and
the thinker's positions of a prompt of an image, that video and a clip (``mixed/*``).
``q25/*``: Qwen2.5-Omni the same way (``Qwen2_5OmniProcessor``: the extractor pads every clip
to 300 s, its masked frames kept, ``feat/``, ``mask/``, ``tokens/``, ``feat64_sha256/``, on a
few clips; its video and an image + video + clip prompt's positions, ``video/``, ``mixed/``).
"""

from __future__ import annotations

import hashlib
import io
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import WhisperFeatureExtractor
from transformers import Qwen2VLVideoProcessor
from transformers.models.qwen2_5_omni import Qwen2_5OmniProcessor, Qwen2_5OmniThinkerConfig
from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniPreTrainedModelForConditionalGeneration
from transformers.models.qwen3_omni_moe import Qwen3OmniMoeProcessor, Qwen3OmniMoeThinkerConfig
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
    Qwen3OmniMoePreTrainedModelForConditionalGeneration, _get_feat_extract_output_lengths)

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from gen_inkling_audio_fixtures import as_float, save  # noqa: E402
from gen_qwen3_asr_fixtures import centered_float64 as float64_features, clips  # noqa: E402

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


def run(proc: Qwen3OmniMoeProcessor, audio: list[np.ndarray]):
    out, reps = proc._process_audio(audio, **KWARGS, n_window=Qwen3OmniMoeProcessor.n_window)
    feats, mask = out["input_features"].numpy(), out["feature_attention_mask"].numpy()
    tokens = np.asarray(out["num_audio_tokens"], np.int64)
    assert all(len(r) == len(proc.audio_token) * int(n) for r, n in zip(reps, tokens))
    return feats, mask, tokens


def rope() -> dict[str, np.ndarray]:
    """HF's positions for text, an image, a clip and an image."""
    cfg = Qwen3OmniMoeThinkerConfig(**THINKER)
    model = _model(cfg)
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


#: The checkpoints' image and video processor knobs (preprocessor_config.json).
VISION = dict(patch_size=16, temporal_patch_size=2, merge_size=2, min_pixels=3136, max_pixels=12845056,
              image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
VIDEO_CLIP = dict(frames=9, fps=6, size=(72, 120))


def _model(cfg):
    model = Qwen3OmniMoePreTrainedModelForConditionalGeneration.__new__(
        Qwen3OmniMoePreTrainedModelForConditionalGeneration)
    model.__dict__.update(config=cfg, spatial_merge_size=2)
    return model


def video() -> dict[str, np.ndarray]:
    """HF's Qwen3-Omni video path on a small clip, and the positions of image + video + clip."""
    import av
    import videogen

    clip = videogen.clip(**VIDEO_CLIP)
    with av.open(io.BytesIO(clip)) as container:
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    proc = Qwen3OmniMoeProcessor.__new__(Qwen3OmniMoeProcessor)
    proc.video_processor = Qwen2VLVideoProcessor(**VISION)
    proc.video_token = "<|video_pad|>"
    out, (rep,) = proc._process_videos([frames], videos_kwargs={**Qwen3OmniMoeProcessor.videos_kwargs,
                                                               "return_tensors": "pt"}, load_audio_from_video=False)
    pv, grid = out["pixel_values_videos"].numpy(), out["video_grid_thw"]
    spg = torch.tensor(out["video_second_per_grid"], dtype=torch.float32)
    cfg = Qwen3OmniMoeThinkerConfig(**THINKER)
    frames_audio = torch.tensor([ROPE_FRAMES])
    n_audio = int(_get_feat_extract_output_lengths(frames_audio, cfg.audio_config.n_window)[0])
    n_video = int(grid[0].prod()) // 4
    ids = [11, 151652, *[cfg.image_token_id] * 28, 151653, 12, 151652, *[cfg.video_token_id] * n_video, 151653,
           13, 151669, *[cfg.audio_token_id] * n_audio, 151670, 14]
    pos, delta = _model(cfg).get_rope_index(torch.tensor([ids]), torch.tensor(ROPE_IMAGES[:1]), grid,
                                            torch.ones(1, len(ids), dtype=torch.long), False, frames_audio, spg)
    return {"video/clip": np.frombuffer(clip, np.uint8), "video/frames_sha256": np.array(hashlib.sha256(
        frames.tobytes()).hexdigest()), "video/pixel_values_videos_sha256": np.array(hashlib.sha256(
            pv.astype(np.float32).tobytes()).hexdigest()), "video/shape": np.array(pv.shape),
            "video/video_grid_thw": grid.numpy(), "video/second_per_grid": spg.numpy(),
            "video/tokens": np.int64(len(rep) // len(proc.video_token)),
            "mixed/ids": np.array(ids), "mixed/positions": pos[:, 0].numpy().astype(np.int64),
            "mixed/delta": delta.numpy().reshape(-1).astype(np.int64)}


#: Qwen2.5-Omni-7B: its image / video processor knobs, thinker ids, and the clips checked
Q25_VISION = dict(VISION, patch_size=14, image_mean=[0.48145466, 0.4578275, 0.40821073],
                  image_std=[0.26862954, 0.26130258, 0.27577711])
Q25_THINKER = dict(audio_token_index=151646, image_token_index=151655, video_token_index=151656,
                   vision_start_token_id=151652, audio_start_token_id=151647, position_id_per_seconds=25)
Q25_CLIPS = ("noise", "silence", "tones", "len_201", "len_8001", "five_s")
#: the 128x224 image's grid at patch 14 (smart_resize to 140x224)
Q25_IMAGE = (1, 10, 16)


def qwen2_5(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Qwen2.5-Omni's audio (each clip alone, padded to 300 s by the extractor), video and
    positions."""
    import av
    import videogen

    data: dict[str, np.ndarray] = {}
    proc = Qwen2_5OmniProcessor.__new__(Qwen2_5OmniProcessor)
    proc.feature_extractor = WhisperFeatureExtractor(**dict(EXTRACTOR, n_samples=4_800_000))
    proc.audio_token = "<|AUDIO|>"
    fe = proc.feature_extractor
    for name in Q25_CLIPS:
        clip = as_float(inputs[name])
        out, _ = proc._process_audio([clip], **Qwen2_5OmniProcessor.audio_kwargs, return_tensors="pt")
        t = int(out["feature_attention_mask"].sum())
        buffer = np.zeros(fe.n_samples, np.float32)
        buffer[:len(clip)] = clip
        data[f"q25/feat/{name}"] = out["input_features"][0, :, :t].numpy()
        data[f"q25/mask/{name}"] = np.int64(t)
        data[f"q25/tokens/{name}"] = np.int64(int(out["num_audio_tokens"][0]))
        data[f"q25/feat64_sha256/{name}"] = np.array(hashlib.sha256(np.ascontiguousarray(
            float64_features(fe, buffer)[:, :t]).tobytes()).hexdigest())
    clip = videogen.clip(**VIDEO_CLIP)
    with av.open(io.BytesIO(clip)) as container:
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    vp = Qwen2_5OmniProcessor.__new__(Qwen2_5OmniProcessor)
    vp.video_processor, vp.video_token = Qwen2VLVideoProcessor(**Q25_VISION), "<|VIDEO|>"
    out, (rep,) = vp._process_videos([frames], videos_kwargs={**Qwen2_5OmniProcessor.videos_kwargs,
                                                             "return_tensors": "pt"}, load_audio_from_video=False)
    grid, spg = out["video_grid_thw"], torch.tensor(out["video_second_per_grid"], dtype=torch.float32)
    cfg = Qwen2_5OmniThinkerConfig(**Q25_THINKER)
    model = Qwen2_5OmniPreTrainedModelForConditionalGeneration.__new__(
        Qwen2_5OmniPreTrainedModelForConditionalGeneration)
    model.__dict__.update(config=cfg, spatial_merge_size=2)
    n_video = int(grid[0].prod()) // 4
    ids = [11, 151652, *[151655] * (int(np.prod(Q25_IMAGE)) // 4), 151653, 12, 151652, *[151656] * n_video, 151653,
           13, 151647, *[151646] * 25, 151648, 14]
    pos, delta = model.get_rope_index(torch.tensor([ids]), torch.tensor([Q25_IMAGE]), grid,
                                      torch.ones(1, len(ids), dtype=torch.long), False, torch.tensor([101]), spg)
    data.update({"q25/video/pixel_values_videos_sha256": np.array(hashlib.sha256(
        out["pixel_values_videos"].numpy().astype(np.float32).tobytes()).hexdigest()),
        "q25/video/video_grid_thw": grid.numpy(), "q25/video/second_per_grid": spg.numpy(),
        "q25/video/tokens": np.int64(len(rep) // len(vp.video_token)), "q25/mixed/ids": np.array(ids),
        "q25/mixed/positions": pos[:, 0].numpy().astype(np.int64),
        "q25/mixed/delta": delta.numpy().reshape(-1).astype(np.int64)})
    return data


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
    data.update(video())
    data.update(qwen2_5(inputs))
    meta = {
        "transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
        "python": sys.version.split()[0], "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(), "kwargs": {k: str(v) for k, v in KWARGS.items()},
        "extractor": EXTRACTOR, "batch": list(BATCH), "vllm": "0.33.0 (pad_to_hop_length transcribed)",
    }
    save(OUT, data, meta, f"{len(inputs)} clips")


if __name__ == "__main__":
    main()
