"""Write tests/audio/fixtures/qwen2_audio_features.npz: what transformers 5.24's
``WhisperFeatureExtractor`` through ``Qwen2AudioProcessor._process_audio`` (torch, CPU) makes
of deterministic 16 kHz clips, for tests/audio/test_qwen2_audio.py (which runs without torch).

Run in a venv with torch and transformers 5.24.0 first on the path, e.g.:

    PYTHONPATH=/work/tf524 /work/vllm-venv/bin/python scripts/gen_qwen2_audio_fixtures.py

Clips: the Qwen3-ASR fixture script's (``gen_qwen3_asr_fixtures.clips``; the waves are read
from that fixture), plus 31 s of noise (cut to 30 s; ``long_noise``, made again by the test;
kept without its float32 features). Per clip, the processor on the clip
alone (every clip is padded to 30 s, so a batch changes nothing): ``feat/<name>`` float32
[128, 3000], ``mask/<name>`` (its sum), ``tokens/<name>`` (``num_audio_tokens``),
``feat64_sha256/<name>`` (the same arithmetic in float64 after the float32 windowing, rounded
to float32 before the max-8 floor and the ``(x + 4) / 4``: the service's bytes must equal it).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import WhisperFeatureExtractor
from transformers.models.qwen2_audio import Qwen2AudioProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_inkling_audio_fixtures import as_float, save  # noqa: E402
from gen_qwen3_asr_fixtures import centered_float64 as float64_features, clips  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "audio" / "fixtures" / "qwen2_audio_features.npz"
#: The Qwen2-Audio-7B checkpoints' extractor (preprocessor_config.json).
EXTRACTOR = dict(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=30,
                 padding_value=0.0, return_attention_mask=True)
LONG = "noise_31s"


def long_noise() -> np.ndarray:
    return (0.1 * np.random.default_rng(31).standard_normal(31 * 16000)).astype(np.float32)


def main() -> None:
    proc = Qwen2AudioProcessor.__new__(Qwen2AudioProcessor)
    proc.feature_extractor, proc.audio_token = WhisperFeatureExtractor(**EXTRACTOR), "<|AUDIO|>"
    fe = proc.feature_extractor
    inputs = clips()
    inputs[LONG] = long_noise()
    data: dict[str, np.ndarray] = {}
    for name, clip in inputs.items():
        out, (rep,) = proc._process_audio([as_float(clip)], sampling_rate=16000, return_tensors="pt")
        feats, mask = out["input_features"].numpy()[0], out["feature_attention_mask"].numpy()[0]
        tokens = int(out["num_audio_tokens"][0])
        assert len(rep) == len(proc.audio_token) * tokens and feats.shape == (128, 3000), name
        padded = np.zeros(fe.n_samples, np.float32)
        x = as_float(clip)[:fe.n_samples]
        padded[:len(x)] = x
        if name != LONG:
            data[f"feat/{name}"] = feats
        data[f"mask/{name}"] = np.int64(mask.sum())
        data[f"mask_dtype/{name}"] = np.array(str(mask.dtype))
        data[f"tokens/{name}"] = np.int64(tokens)
        data[f"feat64_sha256/{name}"] = np.array(hashlib.sha256(float64_features(fe, padded).tobytes()).hexdigest())
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0], "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "extractor": EXTRACTOR, "audio_kwargs": dict(Qwen2AudioProcessor.audio_kwargs)}
    save(OUT, data, meta, f"{len(inputs)} clips")


if __name__ == "__main__":
    main()
