"""Write tests/audio/fixtures/phi4_audio_features.npz: what transformers 5.24's
``Phi4MultimodalFeatureExtractor`` (torch, CPU) makes of deterministic 16 kHz clips, each
alone, for tests/audio/test_phi4_audio.py (which runs without torch).

Run in a venv with torch and transformers 5.24.0 first on the path, e.g.:

    PYTHONPATH=/work/tf524 /work/vllm-venv/bin/python scripts/gen_phi4_audio_fixtures.py

Clips: the Qwen3-ASR fixture script's (``gen_qwen3_asr_fixtures.clips``; the waves are read
from that fixture). Per clip: ``feat/<name>`` float32 [T, 80] (``audio_input_features``),
``sizes/<name>`` (``audio_embed_sizes``); ``refused``: the clips the extractor makes no frame
of. ``mel_filters``: the extractor's filters (float32, as it casts them).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers.models.phi4_multimodal import Phi4MultimodalFeatureExtractor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_inkling_audio_fixtures import as_float, save  # noqa: E402
from gen_qwen3_asr_fixtures import clips  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "audio" / "fixtures" / "phi4_audio_features.npz"


def main() -> None:
    fe = Phi4MultimodalFeatureExtractor()
    data: dict[str, np.ndarray] = {"mel_filters": fe.mel_filters.astype(np.float32)}
    refused = []
    for name, clip in clips().items():
        try:
            out = fe([as_float(clip)], sampling_rate=16000, return_tensors="pt")
        except (RuntimeError, ValueError) as e:
            refused.append(name)
            print(f"{name}: refused ({e})")
            continue
        feats = out["audio_input_features"][0].numpy()
        if feats.shape[0] == 0 or int(out["audio_embed_sizes"][0]) <= 0:
            refused.append(name)
            continue
        data[f"feat/{name}"] = feats
        data[f"sizes/{name}"] = np.int64(int(out["audio_embed_sizes"][0]))
    data["refused"] = np.array(refused)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0], "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    save(OUT, data, meta, f"refused {refused}")


if __name__ == "__main__":
    main()
