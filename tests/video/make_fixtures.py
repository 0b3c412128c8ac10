"""Write tests/fixtures/qwen_video.json from the real HF code (run in the torch venv):

    /root/torchvenv/bin/python tests/video/make_fixtures.py

Each case: a clip (its bytes, base64: a few KB; encoders differ across builds, so clips are
stored rather than regenerated), a model preset, the video options, a prompt; the outputs
of the HF reference (``hf_video``): pixel_values_videos (shape, sha256), video_grid_thw,
the sampled frame indices, the expanded ids, second_per_grid_ts, positions (sha256) and
the rope delta. ``test_video_fixtures.py`` checks ours against them without torch.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import hf_video as hf  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
import videogen  # noqa: E402

OUT = HERE.parent / "fixtures" / "qwen_video.json"
CLIPS = {
    "h264_24fps_13": dict(frames=13, fps=24, size=(64, 96)),
    "h264_vfr_rot90": dict(frames=11, fps=25, size=(56, 84), vfr=True, rotation=90),
    "mpeg4_12fps_9_noisy": dict(frames=9, fps=12, size=(58, 114), codec="mpeg4", noise=10),
    "h264_29.97fps_tiny": dict(frames=6, fps=30000 / 1001, size=(32, 48)),
}
CASES = [
    ("h264_24fps_13", {}), ("h264_24fps_13", {"fps": 4.0}), ("h264_vfr_rot90", {"num_frames": 5}),
    ("mpeg4_12fps_9_noisy", {}), ("h264_29.97fps_tiny", {}),
    ("h264_24fps_13", {"min_pixels": 28 * 28, "max_pixels": 56 * 56 * 2}),
]
PROMPT = [1, hf.VSTART, hf.VIDEO, hf.VEND, 7]


def _call(model: str, opts: dict) -> dict:
    call = {}
    if "fps" in opts or "num_frames" in opts:
        call.update(do_sample_frames=True, **{k: opts[k] for k in ("fps", "num_frames") if k in opts})
        if model == hf.QWEN3 and "num_frames" in opts:
            call["fps"] = None
    if "min_pixels" in opts:
        call["size"] = {"shortest_edge": opts["min_pixels"], "longest_edge": opts["max_pixels"]}
    return call


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def case(model: str, clip: bytes, name: str, opts: dict) -> dict:
    out, meta, proc = hf.process(model, clip, _call(model, opts))
    grid = out["video_grid_thw"].numpy()
    text = hf.expansion_text(model, proc, grid[0].tolist(), meta)
    ids = PROMPT[:2] + hf.text_to_ids(text) + PROMPT[3:]
    spg = [hf.second_per_grid(proc, meta)] if model == hf.QWEN25 else None
    pos, delta = hf.rope_index(model, np.asarray(ids), [], grid.tolist(), spg)
    pv = out["pixel_values_videos"].numpy()
    raw = hf.process(model, clip, {**_call(model, opts), "do_rescale": False, "do_normalize": False})[0]
    raw = raw["pixel_values_videos"].numpy()
    assert raw.dtype == np.uint8
    return {
        "id": f"{model.split('/')[1]}:{name}:{json.dumps(opts, sort_keys=True)}", "model": model, "clip": name,
        "options": opts, "prompt": PROMPT,
        "outputs": {
            "pixel_values_videos": {"shape": list(pv.shape), "sha256": _sha(pv.astype(np.float32))},
            # the processor with do_rescale=False, do_normalize=False (uint8): raw pixels
            "pixel_values_videos_raw": {"shape": list(raw.shape), "sha256": _sha(raw)},
            "video_grid_thw": grid.tolist(), "frame_indices": [int(i) for i in meta.frames_indices],
            "input_ids": ids, "second_per_grid_ts": spg,
            "positions": {"shape": list(pos.shape), "sha256": _sha(pos.astype(np.int64))}, "rope_delta": delta,
        },
    }


def main() -> None:
    # the committed clips where there are some (encoders differ across builds), else new ones
    stored = json.loads(OUT.read_text())["clips"] if OUT.exists() else {}
    clips = {name: base64.b64decode(stored[name]["base64"]) if name in stored else videogen.clip(**kw)
             for name, kw in CLIPS.items()}
    cases = [case(m, clips[n], n, o) for m in (hf.QWEN2, hf.QWEN25, hf.QWEN3) for n, o in CASES]
    doc = {
        "set": "qwen_video",
        "doc": "Qwen2VLVideoProcessor / Qwen3VLVideoProcessor (torchvision) outputs, processor expansions and "
               "get_rope_index positions for small generated clips (tests/video/make_fixtures.py)",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "clips": {n: {"recipe": CLIPS[n], "base64": base64.b64encode(c).decode()} for n, c in clips.items()},
        "cases": cases,
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(cases)} cases)")


if __name__ == "__main__":
    main()
