"""Generate golden vLLM msgpack bytes for the sidecar's ``MultiModalKwargsItem``s.

Two steps, in two venvs:

    .venv/bin/python scripts/gen_vllm_fixtures.py --make-inputs tests/sidecar/fixtures/inputs.npz
    /path/to/vllm-venv/bin/python scripts/gen_vllm_fixtures.py \
        --inputs tests/sidecar/fixtures/inputs.npz --out tests/sidecar/fixtures

The first (the project's venv) preprocesses small PNGs with this service (Qwen2-VL, raw
uint8 pixels, as a device-normalizing vLLM engine takes them) and stores the PNGs and
the tensors; the second (a venv with vLLM 0.33.0 and its torch, ``pip install
vllm==0.33.0``) encodes them with vLLM's own code. tests/sidecar/test_vllm_items.py
checks that the service still produces those tensors and encodes them to these bytes.

What it does
------------
For every case in an input ``.npz`` (keys ``<case>/pixel_values`` — uint8,
shape (N, 1176) — and ``<case>/image_grid_thw`` — int64, shape (items, 3)),
this script builds the per-image ``MultiModalKwargsItem``s with vLLM's own
code, exactly as vLLM 0.33.0 does for Qwen2-VL images:

* field config: ``vllm.model_executor.models.qwen2_vl._create_qwen2vl_field_factory``
  with ``spatial_merge_size=2`` (the Qwen2-VL vision config default; this is
  what ``Qwen2VLMultiModalProcessor._get_mm_fields_config`` passes). It gives
  ``pixel_values = MultiModalFieldConfig.flat_from_sizes("image", grid.prod(-1))``
  and ``image_grid_thw = MultiModalFieldConfig.batched("image", keep_on_cpu=True)``;
* splitting into items: ``MultiModalKwargsItems.from_hf_inputs(BatchFeature, config)``
  (the call ``BaseMultiModalProcessor._apply_hf_processor`` makes);

then encodes each item with
``vllm.v1.serial_utils.MsgpackEncoder(size_threshold=2**62).encode(item)``
(which must return exactly one buffer: every tensor is inlined as msgpack
ext type 3), and writes

* ``<out>/<case>_<index>.msgpack`` — the raw encoded bytes,
* ``<out>/MANIFEST.json`` — files, sha256 of each, vllm / torch / msgspec
  versions, PYTHONHASHSEED and the per-item key order.

Each file is decoded back with ``MsgpackDecoder(MultiModalKwargsItem)`` and the
decoded tensors are checked against the inputs (one line printed per item).

The engine's dtype
------------------
vLLM casts every floating tensor the HF processor returns to the engine's dtype before it
builds the items (vllm/multimodal/processing/context.py:345-374,
``InputProcessingContext._postprocess_output``, which ``call_hf_processor`` applies to the
processor's output). This script calls that function itself (``_processor_output``) on
the tensors of every family vLLM runs through ``call_hf_processor`` (Qwen-VL, Llama 4), for
an engine in ``ENGINE_DTYPE`` (the tests' fingerprints': "torch.bfloat16"): Llama 4's
pixels and Qwen2.5-VL's ``second_per_grid_ts`` become bfloat16, raw uint8 pixels and the
integer tensors stay. Llama 4's first item is kept for each engine dtype vLLM runs in,
bfloat16, float16 and float32 (MANIFEST.json "llama4_dtypes"). Inkling's processor calls the HF image processor itself
and casts to bfloat16 whatever the engine's dtype.

The other families
------------------
Llama 4 and the Qwen videos are kept by the sha256 of vLLM's bytes (MANIFEST.json "llama4",
"videos"). "families" holds, per family served beyond those, vLLM's item bytes (sha256, keys),
the expanded prompt and each image's PlaceholderRange as vLLM's own prompt-update code gives
them, and vLLM's keys of the images: Inkling (``_inkling_entry``: vLLM's
vllm/models/inkling/common/mm_preprocess.py, with its own pixels checked equal to the
sidecar's). "omni" holds the same for one job of each Omni thinker (Qwen2.5-Omni, Qwen3-Omni:
an image, a video and two clips in one prompt, ``_omni_entry``), per modality, with the items
checked against what the thinker's own vLLM processor makes of the same media. "refused"
records, for the families the sidecar refuses because vLLM loads a torchvision image
processor class where the service reproduces the PIL one, that class and how far its pixels
are from the service's (``_refused_entries``).

Engines started with processor kwargs
-------------------------------------
"engine_kwargs" holds, for each Qwen-VL or Omni engine of ``KWARGS_ENGINES`` (``--mm-processor-kwargs``
min_pixels / max_pixels), what vLLM's own processor makes of a job: the processor built by
vLLM's registry for that engine (``_vllm_apply``; the checkpoint from the preset with a toy
tokenizer holding the real Qwen special-token ids, ``_vllm_checkpoint``: no GPU, no weights)
and its ``apply`` run on the media as vLLM's connector loads them. It keeps the expanded ids,
ranges, keys, grids and the sha256 of each item's bytes, and the keys and grids of the same
job for an engine without kwargs (equal keys, other grids). "engine_kwargs_refused" keeps what
vLLM makes of the kwargs the sidecar refuses (bounds that cross; a null bound).

Key order caveat
----------------
``from_hf_inputs`` collects the keys of a modality in a ``set[str]``, so the
key order inside an item (``pixel_values`` / ``image_grid_thw``) depends on
Python's string hash randomisation; in vLLM it varies between processes. To
make the fixtures reproducible this script re-executes itself with a fixed
``PYTHONHASHSEED`` (``--hash-seed``, default 0, which gives
``pixel_values`` first; e.g. seed 2 gives ``image_grid_thw`` first). Decoders
should therefore accept either order.

vLLM version: 0.33.0 (checked at start-up), with torch 2.14.0.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

EXPECTED_VLLM_VERSION = "0.33.0"
#: the engine's dtype (``torch`` attribute name), as the tests' fingerprints name it
ENGINE_DTYPE = "bfloat16"
SPATIAL_MERGE_SIZE = 2  # Qwen2VLVisionConfig.spatial_merge_size default
SIZE_THRESHOLD = 2**62


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--make-inputs", type=Path, help="write the service's tensors here (the project's venv)")
    p.add_argument("--inputs", type=Path, help="input .npz")
    p.add_argument("--out", type=Path, help="output directory")
    p.add_argument(
        "--hash-seed",
        default="0",
        help="PYTHONHASHSEED to pin (controls per-item key order); default 0",
    )
    return p.parse_args()


def _ensure_hash_seed(seed: str) -> None:
    if os.environ.get("PYTHONHASHSEED") != seed:
        env = dict(os.environ, PYTHONHASHSEED=seed)
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


#: case -> its images (height, width, seed of tests/imagegen.png), as one request
CASES = {"one": [(56, 84, 1)], "two": [(56, 84, 2), (84, 112, 3)]}
MODEL = "Qwen/Qwen2-VL-7B-Instruct"
LLAMA4 = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
LLAMA4_IMAGES = [(150, 200, 5), (400, 900, 6)]  # one tile; 2x3 tiles and the global one
LLAMA4_TENSORS = Path(tempfile.gettempdir()) / "sglang_mm_llama4_tensors.npz"  # made by --make-inputs
#: case -> tests/videogen.clip's arguments: "clamp" samples 15 frames at 2 fps, the qwen2_vl
#: loader's last index clamped from 75; "tiny" has its 4 sampled frames smaller than its bytes
VIDEO_CASES = {"clamp": dict(frames=75, fps=10, size=(64, 96)),
               "tiny": dict(frames=60, fps=30, size=(32, 32), noise=40.0, crf=0)}
#: model -> its vLLM video loader (the one ``get_video_loader_backend_for_processor`` picks for
#: its video processor) and whether its data parser keeps the video's metadata
VIDEO_MODELS = {"Qwen/Qwen2-VL-7B-Instruct": ("qwen2_vl", False), "Qwen/Qwen2.5-VL-7B-Instruct": ("qwen2_vl", True),
                "Qwen/Qwen3-VL-8B-Instruct": ("qwen3_vl", True)}
VIDEO_TENSORS = Path(tempfile.gettempdir()) / "sglang_mm_video_tensors.npz"  # made by --make-inputs
#: Inkling (vLLM 0.33: vllm/models/inkling/common/mm_preprocess.py): a PNG and a JPEG in a prompt
#: of three <|content_image|> markers (vLLM replaces the first two; the third stays text)
INKLING = "thinkingmachines/Inkling"
INKLING_IMAGES = [("png", 50, 70, 8), ("jpeg", 130, 90, 9)]
INKLING_PROMPT = [1, 200005, 7, 200005, 8, 200005, 2]
INKLING_TENSORS = Path(tempfile.gettempdir()) / "sglang_mm_inkling_tensors.npz"  # made by --make-inputs
#: the refused families whose HF processor the service reproduces in its PIL class: the
#: service's pixels of the Llama 4 JPEGs, against the class vLLM's transformers loads
REFUSED_MODELS = ["llava-hf/llava-1.5-7b-hf", "llava-hf/llava-v1.6-mistral-7b-hf", "mistral-community/pixtral-12b",
                  "mistralai/Mistral-Small-3.1-24B-Instruct-2503"]
REFUSED_TENSORS = Path(tempfile.gettempdir()) / "sglang_mm_refused_tensors.npz"  # made by --make-inputs
#: Qwen3-ASR (vLLM 0.33: model_executor/models/qwen3_asr.py): an MP3 (44.1 kHz stereo) and a WAV
#: (16 kHz mono) as tests/audiogen.clip makes them, in one prompt of two <|audio_pad|>
ASR = "Qwen/Qwen3-ASR-1.7B-hf"
ASR_CLIPS = [dict(seconds=1.1, rate=44100, channels=2, fmt="mp3", seed=4),
             dict(seconds=0.3, rate=16000, channels=1, fmt="wav_s16", seed=5)]
ASR_AUDIO = 151676
ASR_PROMPT = [1, 151669, ASR_AUDIO, 151670, 13, 151669, ASR_AUDIO, 151670, 2]
ASR_TENSORS = Path(tempfile.gettempdir()) / "sglang_mm_asr_tensors.npz"  # made by --make-inputs
#: Inkling's audio: the same clips in a prompt of three <|content_audio_input|> markers (vLLM
#: replaces the first two; the third stays text)
INKLING_AUDIO_PROMPT = [1, 200020, 7, 200020, 8, 200020, 2]
INKLING_AUDIO_TENSORS = Path(tempfile.gettempdir()) / "sglang_mm_inkling_audio_tensors.npz"  # made by --make-inputs
#: Qwen2-Audio (vLLM 0.33: model_executor/models/qwen2_audio.py): the same clips, two <|AUDIO|>
QWEN2_AUDIO = "Qwen/Qwen2-Audio-7B-Instruct"
QWEN2_AUDIO_PROMPT = [1, 151647, 151646, 151648, 13, 151647, 151646, 151648, 2]
QWEN2_AUDIO_TENSORS = Path(tempfile.gettempdir()) / "sglang_mm_qwen2_audio_tensors.npz"  # made by --make-inputs
#: the Omni thinkers (vLLM 0.33: model_executor/models/qwen2_5_omni_thinker.py, qwen3_omni_moe_thinker.py):
#: the inputs' first PNG, "clamp" clip and two audio clips in one prompt, each placeholder between its
#: start and end tokens; per model, its thinker's (image, video, audio) tokens and (audio start, end) ids
OMNI_MEDIA = {"image": ["one/png0"], "video": ["video/clamp"], "audio": ["audio/clip0", "audio/clip1"]}
OMNI = {"Qwen/Qwen2.5-Omni-7B": ({"<|IMAGE|>": 151655, "<|VIDEO|>": 151656, "<|AUDIO|>": 151646}, (151647, 151648)),
        "Qwen/Qwen3-Omni-30B-A3B-Instruct": ({"<|image_pad|>": 151655, "<|video_pad|>": 151656,
                                              "<|audio_pad|>": 151675}, (151669, 151670))}
OMNI_TENSORS = Path(tempfile.gettempdir()) / "sglang_mm_omni_tensors.npz"  # made by --make-inputs


#: engines started with ``--mm-processor-kwargs`` (vLLM 0.33: the flat kwargs reach the image and the
#: video processor, vllm/multimodal/processing/context.py:376-400): model, kwargs, and the job's media
#: from the inputs (each image's, then each video's, placeholder between the vision markers). The
#: first changes the PNG's grid (min) and the large JPEG's (max); the second is max only. The Omni
#: thinkers' jobs add a clip (after the videos, between the audio markers), which the kwargs leave as it is;
#: their max alone keeps the video min at the checkpoint's 3136, below the max (sidecar jobs.pixel_options).
KWARGS_ENGINES = [
    ("Qwen/Qwen2-VL-7B-Instruct", {"min_pixels": 12544, "max_pixels": 50176},
     {"image": ["one/png0", "llama4/jpeg1"], "video": ["video/clamp"]}),
    ("Qwen/Qwen2-VL-7B-Instruct", {"max_pixels": 12544}, {"image": ["one/png0", "llama4/jpeg0"]}),
    ("Qwen/Qwen2.5-VL-7B-Instruct", {"min_pixels": 12544, "max_pixels": 50176},
     {"image": ["llama4/jpeg0"], "video": ["video/clamp"]}),
    ("Qwen/Qwen3-VL-8B-Instruct", {"min_pixels": 4096, "max_pixels": 50176}, {"image": ["one/png0", "llama4/jpeg1"]}),
    *[(model, kwargs, {"image": ["one/png0", "llama4/jpeg1"], "video": ["video/clamp"], "audio": ["audio/clip0"]})
      for model, kwargs in (("Qwen/Qwen2.5-Omni-7B", {"min_pixels": 12544, "max_pixels": 50176}),
                            ("Qwen/Qwen3-Omni-30B-A3B-Instruct", {"min_pixels": 12544, "max_pixels": 50176}),
                            ("Qwen/Qwen3-Omni-30B-A3B-Instruct", {"max_pixels": 12544}))],
]
#: what vLLM does with kwargs the sidecar refuses: bounds that cross (Qwen3-VL's image min_pixels
#: 65536 above max_pixels 50176: HF's smart_resize scales past max) and a null bound
KWARGS_REFUSED = [("Qwen/Qwen3-VL-8B-Instruct", {"max_pixels": 50176}, "one/png0"),
                  ("Qwen/Qwen2-VL-7B-Instruct", {"max_pixels": 12544, "min_pixels": None}, "one/png0")]
#: the architectures vLLM's registry resolves the Qwen-VL presets' model types to
ARCHITECTURES = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
                 "qwen3_vl": "Qwen3VLForConditionalGeneration", "qwen2_5_omni": "Qwen2_5OmniForConditionalGeneration",
                 "qwen3_omni_moe": "Qwen3OmniMoeForConditionalGeneration"}
#: the Omni thinkers' audio start and end tokens (their ids: OMNI), which their HF processors read off
#: the tokenizer with the image, video and audio tokens (``tokenizer.audio_bos_token``, ...)
OMNI_AUDIO_MARKERS = {"Qwen/Qwen2.5-Omni-7B": ("<|audio_bos|>", "<|audio_eos|>"),
                      "Qwen/Qwen3-Omni-30B-A3B-Instruct": ("<|audio_start|>", "<|audio_end|>")}
#: the Qwen tokenizer's special tokens (their real ids) the toy tokenizer of ``_vllm_checkpoint`` holds
QWEN_SPECIAL = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|vision_start|>": 151652,
                "<|vision_end|>": 151653, "<|image_pad|>": 151655, "<|video_pad|>": 151656}


def omni_prompt(model: str) -> list[int]:
    """The Omni job's prompt: the image and the video between the vision markers (151652,
    151653), each clip between the audio ones."""
    (image, video, audio), (start, end) = OMNI[model][0].values(), OMNI[model][1]
    return [1, 151652, image, 151653, 151652, video, 151653, 7, start, audio, end, 8, start, audio, end, 2]


def make_inputs(path: Path) -> None:
    """The service's raw pixels for each case, with the PNGs they came from."""
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import imagegen
    from PIL import Image
    from sglang_mm_grpc import Preprocessor

    pp = Preprocessor.from_model(MODEL, cache_bytes=0)
    arrays = {}
    for case, images in CASES.items():
        pngs = [imagegen.png(h, w, seed=seed) for h, w, seed in images]
        out = pp.preprocess(pngs, raw=True)
        arrays[f"{case}/pixel_values"] = out.pixel_values
        arrays[f"{case}/image_grid_thw"] = out.tensors["image_grid_thw"].astype(np.int64)
        for i, png in enumerate(pngs):
            arrays[f"{case}/png{i}"] = np.frombuffer(png, np.uint8)
    # Llama 4 (float32 pixels, up to 1.35 MB a tile): its tensors go to a file beside the
    # inputs that is not kept; the manifest keeps the sha256 of vLLM's bytes
    l4 = Preprocessor.from_model(LLAMA4, cache_bytes=0)
    jpegs = [imagegen.jpeg(h, w, seed=seed) for h, w, seed in LLAMA4_IMAGES]
    out = l4.preprocess(jpegs)
    np.savez(LLAMA4_TENSORS, pixel_values=out.pixel_values, **out.tensors)
    for i, jpeg in enumerate(jpegs):
        arrays[f"llama4/jpeg{i}"] = np.frombuffer(jpeg, np.uint8)
    # an image whose loading converts its mode: its vLLM hash carries the conversion
    rgba = imagegen.encode(Image.fromarray(imagegen.pixels(40, 30, 4, channels=4), "RGBA"), "PNG")
    arrays["extra/rgba_png"] = np.frombuffer(rgba, np.uint8)
    arrays.update(_make_video_inputs())
    arrays.update(_make_family_inputs([bytes(arrays[f"llama4/jpeg{i}"]) for i in range(len(LLAMA4_IMAGES))]))
    arrays.update(_make_audio_inputs())
    _make_omni_inputs(arrays)
    np.savez_compressed(path, **arrays)
    print(f"wrote {path}")


def _make_video_inputs() -> dict:
    """The clips (kept in the inputs) and the sidecar's video tensors of each, per model
    (beside them, not kept: vLLM's bytes of the items are kept by sha256)."""
    import numpy as np
    import videogen
    from sglang_mm_grpc.sidecar import jobs, vllm_video

    clips, tensors = {}, {}
    for case, kwargs in VIDEO_CASES.items():
        clips[f"video/{case}"] = np.frombuffer(videogen.clip(**kwargs), np.uint8)
        for model in VIDEO_MODELS:
            out = jobs.load_model(model, "torchvision").preprocess([], videos=[clips[f"video/{case}"].tobytes()],
                                                                  raw=True)
            for name, value in vllm_video.video_batch(out).items():
                tensors[f"{case}/{model}/{name}"] = np.asarray(value)
    np.savez(VIDEO_TENSORS, **tensors)
    return clips


def _make_family_inputs(jpegs: list[bytes]) -> dict:
    """Inkling's images (kept in the inputs) and the sidecar's tensors of them; the refused
    families' pixels of ``jpegs`` (both beside the inputs, not kept)."""
    import numpy as np
    import imagegen
    from sglang_mm_grpc.sidecar import jobs, vllm_image

    images = [getattr(imagegen, kind)(h, w, seed=seed) for kind, h, w, seed in INKLING_IMAGES]
    ink = jobs.load_model(INKLING, "torchvision")
    out = ink.preprocess(images, vllm_image.service_prompt("inkling", INKLING_PROMPT, len(images)))
    np.savez(INKLING_TENSORS, pixel_values=out.pixel_values, num_patches=out.tensors["num_patches"])
    refused = {}
    for model in REFUSED_MODELS:
        refused[model] = jobs.load_model(model, "torchvision").preprocess(jpegs).pixel_values
    np.savez(REFUSED_TENSORS, **refused)
    return {f"inkling/image{i}": np.frombuffer(raw, np.uint8) for i, raw in enumerate(images)}


def _make_audio_inputs() -> dict:
    """Qwen3-ASR's clips (kept in the inputs) and the sidecar's audio tensors of them, before
    the engine's cast (beside the inputs, not kept)."""
    import numpy as np
    import audiogen
    from sglang_mm_grpc.sidecar import jobs, vllm_audio

    clips = [audiogen.clip(**kwargs) for kwargs in ASR_CLIPS]
    asr = jobs.load_model(ASR, "torchvision")
    batch = vllm_audio.audio_batch(asr.preprocess([], ASR_PROMPT, audios=clips), asr.family)
    masks = {f"mask{i}": m for i, m in enumerate(batch["feature_attention_mask"])}
    np.savez(ASR_TENSORS, input_audio_features=batch["input_audio_features"],
             audio_feature_lengths=batch["audio_feature_lengths"], **masks)
    prompt = vllm_audio.service_prompt("inkling", INKLING_AUDIO_PROMPT, len(clips))
    for model, prompt, path in ((INKLING, prompt, INKLING_AUDIO_TENSORS),
                                (QWEN2_AUDIO, QWEN2_AUDIO_PROMPT, QWEN2_AUDIO_TENSORS)):
        pp = jobs.load_model(model, "torchvision")
        np.savez(path, **vllm_audio.audio_batch(pp.preprocess([], prompt, audios=clips), pp.family))
    return {f"audio/clip{i}": np.frombuffer(raw, np.uint8) for i, raw in enumerate(clips)}


def _make_omni_inputs(arrays: dict) -> None:
    """The sidecar's tensors of the Omni job (``OMNI_MEDIA``, from the inputs), per model,
    before the engine's cast (beside the inputs, not kept); a list (Qwen3-Omni's masks) as
    ``key#i``."""
    import numpy as np
    from sglang_mm_grpc.sidecar import jobs, vllm_audio, vllm_video

    media = {m: [arrays[k].tobytes() for k in keys] for m, keys in OMNI_MEDIA.items()}
    tensors = {}
    for model in OMNI:
        pp = jobs.load_model(model, "torchvision")
        out = pp.preprocess(media["image"], omni_prompt(model), videos=media["video"], audios=media["audio"])
        batch = {"pixel_values": out.pixel_values, "image_grid_thw": out.tensors["image_grid_thw"],
                 **vllm_video.video_batch(out, pp.family.name), **vllm_audio.audio_batch(out, pp.family)}
        for key, value in batch.items():
            for name, v in ([(f"{key}#{i}", x) for i, x in enumerate(value)] if isinstance(value, list) else
                            [(key, value)]):
                tensors[f"{model}/{name}"] = np.asarray(v)
    np.savez(OMNI_TENSORS, **tensors)


def _load_cases(path: Path) -> dict[str, dict]:
    import numpy as np

    cases: dict[str, dict] = {}
    with np.load(path, allow_pickle=False) as npz:
        for key in npz.files:
            case, _, tensor = key.partition("/")
            if case in ("extra", "llama4", "video", "inkling", "audio"):
                continue
            if not tensor:
                raise ValueError(f"npz key {key!r} is not '<case>/<tensor>'")
            cases.setdefault(case, {})[tensor] = npz[key]
    for case, arrs in cases.items():
        for name in [k for k in arrs if k.startswith("png")]:
            del arrs[name]
        missing = {"pixel_values", "image_grid_thw"} - arrs.keys()
        if missing:
            raise ValueError(f"case {case!r} misses {sorted(missing)}")
        pv, thw = arrs["pixel_values"], arrs["image_grid_thw"]
        if pv.dtype != np.uint8 or pv.ndim != 2 or pv.shape[1] != 1176:
            raise ValueError(f"{case}/pixel_values: {pv.dtype} {pv.shape}")
        if thw.dtype != np.int64 or thw.ndim != 2 or thw.shape[1] != 3:
            raise ValueError(f"{case}/image_grid_thw: {thw.dtype} {thw.shape}")
        if int(thw.prod(-1).sum()) != pv.shape[0]:
            raise ValueError(f"{case}: sum(prod(grid)) != rows of pixel_values")
    return cases


def _describe(encoded_item: dict) -> list:
    """Human-readable structure of what MsgpackEncoder encodes for an item."""
    out = []
    for key, elem in encoded_item.items():
        dtype, shape, _ = elem["data"]
        name, kw = elem["field"]
        out.append(
            {
                "key": key,
                "data": [dtype, list(shape), "ext3"],
                "field": [name, {k: repr(v) for k, v in kw.items()}],
            }
        )
    return out


#: hash factors (get_mm_hashes' non-empty media_io_kwargs / mm_processor_kwargs) a case is hashed with
FACTORS = [{}, {"mm_processor_kwargs": {"max_pixels": 1003520}},
           {"media_io_kwargs": {"image": {"rgba_background_color": [0, 0, 0]}}}]


def vllm_hashes(inputs: Path) -> list[dict]:
    """vLLM's mm hash of each PNG as its MediaConnector loads it (ImageMediaIO.load_bytes:
    a MediaWithBytes), under each of ``FACTORS``."""
    import numpy as np
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.media.image import ImageMediaIO

    out = []
    with np.load(inputs) as npz:
        for key in sorted(k for k in npz.files if "png" in k):
            media = ImageMediaIO().load_bytes(npz[key].tobytes())
            for factors in FACTORS:
                out.append({"png": key, "factors": factors, "io_config": media.io_config,
                            "hash": MultiModalHasher.hash_kwargs("blake3", model_id=MODEL, image=media, **factors)})
    return out


def _processor_output(hf_inputs, dtype: str = ENGINE_DTYPE):
    """The HF processor's output as vLLM holds it once ``call_hf_processor`` has cast it:
    vLLM's own ``InputProcessingContext._postprocess_output``
    (vllm/multimodal/processing/context.py:345-374: every floating tensor
    ``.to(dtype=self.model_config.dtype)``, whatever its field; integer tensors and lists of
    floats as they are), for an engine in ``dtype``. Its ``self`` is a stand-in holding what
    it reads: the model config's dtype and the multimodal config's ``mm_tensor_ipc`` (the
    default "direct_rpc": tensors on the CPU)."""
    import torch
    from transformers import BatchFeature
    from vllm.multimodal.processing.context import InputProcessingContext

    mm_config = SimpleNamespace(mm_tensor_ipc="direct_rpc")
    ctx = SimpleNamespace(model_config=SimpleNamespace(dtype=getattr(torch, dtype),
                                                       get_multimodal_config=lambda: mm_config))
    return BatchFeature(InputProcessingContext._postprocess_output(ctx, dict(hf_inputs)))


def _dtypes(item) -> dict[str, str]:
    """Each key's data type in an item (``str`` of a tensor's torch dtype, or "list")."""
    return {key: str(elem.data.dtype).removeprefix("torch.") if hasattr(elem.data, "dtype") else "list"
            for key, elem in item.items()}


def _llama4_items(path: Path, encoder, decoder) -> tuple[list[dict], list[dict]]:
    """sha256 of vLLM's bytes of each Llama 4 item (vllm/model_executor/models/mllama4.py
    ``Mllama4MultiModalProcessor._get_mm_fields_config``, which reads nothing of ``self``)
    from the service's tensors cast as ``call_hf_processor`` casts them for a bfloat16
    engine (``_processor_output``); and of its first item for each engine dtype."""
    import numpy as np
    import torch
    from transformers import BatchFeature
    from vllm.model_executor.models.mllama4 import Mllama4MultiModalProcessor
    from vllm.multimodal.inputs import MultiModalKwargsItems

    with np.load(path) as npz:
        service = BatchFeature({k: torch.from_numpy(npz[k]) for k in npz.files})
    out, by_dtype = [], []
    for dtype in (ENGINE_DTYPE, "float16", "float32"):
        hf_inputs = _processor_output(service, dtype)
        config = Mllama4MultiModalProcessor._get_mm_fields_config(None, hf_inputs, {})
        items = MultiModalKwargsItems.from_hf_inputs(hf_inputs, config)["image"]
        for index, item in enumerate(items if dtype == ENGINE_DTYPE else items[:1]):
            (raw,) = encoder.encode(item)
            raw = bytes(raw)
            assert decoder.decode(raw) == item
            assert item["pixel_values"].data.dtype == getattr(torch, dtype)
            entry = {"index": index, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(),
                     "keys": list(item.keys()), "dtypes": _dtypes(item)}
            if dtype == ENGINE_DTYPE:
                out.append(entry)
            if index == 0:
                by_dtype.append({"dtype": f"torch.{dtype}", **entry})
            print(f"llama4 item {index} ({dtype} engine): {len(raw)} bytes keys={list(item.keys())} "
                  f"{entry['dtypes']}")
    return out, by_dtype


def _video_entries(inputs: Path, encoder, decoder) -> list[dict]:
    """Per clip and model: what vLLM's loader samples (indices, metadata, sha256 of its RGB
    frames), vLLM's hash of the loaded video, and the sha256 of vLLM's bytes of the item
    built from the sidecar's tensors (fields: qwen2_vl.py ``_create_qwen2vl_field_factory``;
    Qwen2.5-VL's ``second_per_grid_ts`` as qwen2_5_vl.py adds it; Qwen3-VL's ``timestamps``
    as qwen3_vl.py ``_call_hf_processor`` returns them, a list of floats per video, added
    after its ``call_hf_processor``), the HF processor's tensors cast as that call casts
    them for a bfloat16 engine (``_processor_output``: Qwen2.5-VL's ``second_per_grid_ts``)."""
    import numpy as np
    import torch
    from transformers import BatchFeature
    from vllm.model_executor.models.qwen2_vl import _create_qwen2vl_field_factory
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItems
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.media.video import VideoMediaIO
    from vllm.multimodal.parse import MultiModalDataParser

    out = []
    with np.load(inputs) as npz, np.load(VIDEO_TENSORS) as tensors:
        for case in VIDEO_CASES:
            data = npz[f"video/{case}"].tobytes()
            for model, (loader, needs_metadata) in VIDEO_MODELS.items():
                # MediaConnector.fetch_video: VideoMediaIO with the processor's loader
                media = VideoMediaIO(ImageMediaIO(), video_backend=loader).load_bytes(data)
                frames, metadata = media.media
                items = MultiModalDataParser(video_needs_metadata=needs_metadata).parse_mm_data({"video": [media]})
                key = MultiModalHasher.hash_kwargs("blake3", model_id=model,
                                                   video=items["video"].get_item_for_hash(0))
                prefix = f"{case}/{model}/"
                batch = {name[len(prefix):]: tensors[name] for name in tensors.files if name.startswith(prefix)}
                hf_inputs = _processor_output(
                    BatchFeature({k: torch.from_numpy(v) for k, v in batch.items() if k != "timestamps"}))
                if "timestamps" in batch:
                    hf_inputs["timestamps"] = [[float(t) for t in row] for row in batch["timestamps"]]
                config = dict(_create_qwen2vl_field_factory(SPATIAL_MERGE_SIZE)(hf_inputs))
                if "second_per_grid_ts" in batch:
                    config["second_per_grid_ts"] = MultiModalFieldConfig.batched("video", keep_on_cpu=True)
                (item,) = MultiModalKwargsItems.from_hf_inputs(hf_inputs, config)["video"]
                (raw,) = encoder.encode(item)
                raw = bytes(raw)
                assert decoder.decode(raw) == item
                out.append({"case": case, "model": model, "loader": loader,
                            "metadata": {k: ([int(i) for i in v] if k == "frames_indices" else v) for k, v in metadata.items()},
                            "frames": [list(frames.shape), hashlib.sha256(np.ascontiguousarray(frames)).hexdigest()],
                            "frames_smaller": frames.nbytes < len(data), "hash": key,
                            "item": {"keys": list(item.keys()), "bytes": len(raw),
                                     "sha256": hashlib.sha256(raw).hexdigest(), "dtypes": _dtypes(item)}})
                print(f"video {case} {model}: {len(metadata['frames_indices'])} frames {list(frames.shape)} "
                      f"hash {key[:16]} item {len(raw)} bytes {_dtypes(item)}")
    return out


def _item_entry(item, encoder, decoder) -> dict:
    (raw,) = encoder.encode(item)
    raw = bytes(raw)
    assert decoder.decode(raw) == item
    return {"keys": list(item.keys()), "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def _preset(model: str) -> dict:
    """The service's built-in preset of ``model`` (the checkpoint's JSON files)."""
    return json.loads((Path(__file__).resolve().parents[1] / "sglang_mm_grpc/config/presets" /
                       f"{model.replace('/', '__')}.json").read_text())


def _preset_dir(model: str, root: Path) -> Path:
    """A checkpoint directory with the preset's preprocessor_config.json (and config.json),
    for transformers' Auto classes."""
    preset = _preset(model)
    directory = root / model.replace("/", "__")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "preprocessor_config.json").write_text(json.dumps(preset["preprocessor_config"]))
    (directory / "config.json").write_text(json.dumps(preset["config"]))
    return directory


def _inkling_pixels(images: list[bytes]):
    """vLLM's Inkling pixels, as ``InklingMultiModalProcessor._apply_hf_processor_main`` makes
    them: each image as ``ImageMediaIO`` loads it, ``_rescale_image`` by the image processor's
    ``rescale_image_frac`` or ``DEFAULT_RESCALE_IMAGE_FRAC``, then the HF image processor
    (the class AutoImageProcessor loads, as ``InklingProcessor.from_pretrained`` does) with
    no rescale, cast to bfloat16."""
    import torch
    from transformers import AutoImageProcessor
    from vllm.models.inkling.common.mm_preprocess import DEFAULT_RESCALE_IMAGE_FRAC, _rescale_image
    from vllm.multimodal.media.image import ImageMediaIO

    with tempfile.TemporaryDirectory() as root:
        processor = AutoImageProcessor.from_pretrained(_preset_dir(INKLING, Path(root)))
    frac = processor.rescale_image_frac or DEFAULT_RESCALE_IMAGE_FRAC
    loaded = [_rescale_image(ImageMediaIO().load_bytes(raw).media, frac, processor.rescale_image_max_upscaled_long_edge)
              for raw in images]
    features = processor(loaded, rescale_image_frac=None, return_tensors="pt")
    return type(processor).__name__, features["pixel_values"].to(torch.bfloat16), features["num_patches"]


def _inkling_entry(inputs: Path, encoder, decoder) -> dict:
    """Inkling's items, prompt and keys as vLLM 0.33.0 makes them
    (vllm/models/inkling/common/mm_preprocess.py): the items built with vLLM's own
    ``_get_mm_fields_config`` and ``MultiModalKwargsItems.from_hf_inputs`` from the sidecar's
    tensors (cast to bfloat16 by torch, and checked equal to vLLM's own pixels,
    ``_inkling_pixels``); the expanded prompt and each image's PlaceholderRange from vLLM's
    ``_get_prompt_updates``, bound per item as ``_bind_and_group_updates`` does and applied by
    ``BaseMultiModalProcessor._apply_prompt_updates``."""
    import numpy as np
    import torch
    from transformers import BatchFeature
    from vllm.models.inkling.common.mm_preprocess import InklingMultiModalProcessor
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.inputs import MultiModalKwargsItems
    from vllm.multimodal.media.image import ImageMediaIO

    with np.load(inputs) as npz:
        images = [npz[f"inkling/image{i}"].tobytes() for i in range(len(INKLING_IMAGES))]
    with np.load(INKLING_TENSORS) as tensors:
        hf_inputs = BatchFeature({"pixel_values": torch.from_numpy(tensors["pixel_values"]).to(torch.bfloat16),
                                  "num_patches": torch.from_numpy(tensors["num_patches"])})
    cls, pixels, num_patches = _inkling_pixels(images)
    assert torch.equal(pixels.view(torch.int16), hf_inputs["pixel_values"].view(torch.int16))
    assert torch.equal(num_patches, hf_inputs["num_patches"])
    config = InklingMultiModalProcessor._get_mm_fields_config(None, hf_inputs, {})
    kwargs = MultiModalKwargsItems.from_hf_inputs(hf_inputs, config)
    updates = InklingMultiModalProcessor._get_prompt_updates(None, None, {}, kwargs)
    ids, ranges, items = _applied(InklingMultiModalProcessor, updates, INKLING_PROMPT, "image", kwargs, encoder,
                                  decoder)
    print(f"inkling: {cls}, vLLM's pixels equal the sidecar's, patches {num_patches.tolist()}, items "
          f"{[i['bytes'] for i in items]} bytes, ranges {[(r.offset, r.length) for r in ranges]}")
    return {"family": "inkling", "model": INKLING, "image_processor": cls, "pixels_equal_vllms": True,
            "prompt": INKLING_PROMPT, "prompt_token_ids": ids,
            "placeholders": _placeholders(ranges),
            "hashes": [MultiModalHasher.hash_kwargs("blake3", model_id=INKLING, image=ImageMediaIO().load_bytes(raw))
                       for raw in images],
            "items": items}


def _applied(processor_cls, updates, prompt: list[int], modality: str, kwargs, encoder, decoder) -> tuple:
    """vLLM's prompt updates of ``modality``'s items bound (``_bind_and_group_updates``) and
    applied to ``prompt`` (``_apply_prompt_updates``): the expanded ids, each item's
    PlaceholderRange, and the items' entries."""
    ids, ranges, items = _applied_all(processor_cls, updates, prompt, {modality: kwargs[modality]}, encoder, decoder)
    return ids, ranges[modality], items[modality]


def _applied_all(processor_cls, updates, prompt: list[int], kwargs, encoder, decoder) -> tuple:
    """``_applied`` for the items of every modality in ``kwargs`` at once: the expanded ids,
    and per modality its PlaceholderRanges and its items' entries."""
    from vllm.multimodal.processing import BaseMultiModalProcessor

    counts = {modality: len(items) for modality, items in kwargs.items()}
    bound = BaseMultiModalProcessor._bind_and_group_updates(None, updates, counts)
    ids, placeholders = object.__new__(processor_cls)._apply_prompt_updates(list(prompt), bound)
    return ([int(t) for t in ids], {m: [p.to_range() for p in placeholders[m]] for m in counts},
            {m: [_item_entry(item, encoder, decoder) for item in kwargs[m]] for m in counts})


def _placeholders(ranges) -> list[dict]:
    return [{"offset": r.offset, "length": r.length, "is_embed": None if r.is_embed is None else r.is_embed.tolist()}
            for r in ranges]


def _check_like_vllms(ours, theirs, ours32, theirs32, features: str, modality: str = "audio") -> None:
    """The sidecar's items of ``modality`` (``ours``, cast as vLLM casts) against those of
    vLLM's own path (``theirs``): the same keys, fields, dtypes and shapes; before the cast
    (``*32``), the ``features`` within 1e-4 and every other tensor equal."""
    import torch

    for o, t, o32, t32 in zip(ours[modality], theirs[modality], ours32[modality], theirs32[modality], strict=True):
        assert list(o.keys()) == list(t.keys()) and _dtypes(o) == _dtypes(t)
        for key in o:
            assert o[key].field == t[key].field and o[key].data.shape == t[key].data.shape, key
            a, b = o32[key].data, t32[key].data
            assert (a - b).abs().max() <= 1e-4 if key == features else torch.equal(a, b), key


def _qwen3_asr_entry(inputs: Path, encoder, decoder) -> dict:
    """Qwen3-ASR's clips as vLLM 0.33.0 makes them (model_executor/models/qwen3_asr.py): the
    clips loaded by vLLM's ``AudioMediaIO`` and parsed by its ``Qwen3ASRMultiModalDataParser``
    (resampled to 16 kHz), keyed by vLLM's hasher; the items built with vLLM's
    ``_qwen3asr_field_config`` and ``from_hf_inputs`` from the sidecar's tensors (cast to
    bfloat16 by vLLM's own cast), checked against what vLLM's own path makes of the parsed
    clips (the HF processor on each clip, then ``_postprocess_hf_mm_data``): the same keys,
    fields, dtypes and shapes, equal integer tensors, features within 2e-5 (torch's float32
    FFT; tests/audio/test_qwen3_asr.py); the expanded prompt and ranges from vLLM's
    ``_get_prompt_updates``, applied as ``_apply_prompt_updates`` does."""
    import numpy as np
    import torch
    from transformers import BatchFeature
    from transformers.models.qwen3_asr import Qwen3ASRFeatureExtractor, Qwen3ASRProcessor
    from vllm.model_executor.models.qwen3_asr import (Qwen3ASRMultiModalDataParser, Qwen3ASRMultiModalProcessor,
                                                      _qwen3asr_field_config)
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.inputs import MultiModalKwargsItems
    from vllm.multimodal.media.audio import AudioMediaIO

    with np.load(inputs) as npz:
        clips = [npz[f"audio/clip{i}"].tobytes() for i in range(len(ASR_CLIPS))]
    parsed = Qwen3ASRMultiModalDataParser(target_sr=16000).parse_mm_data(
        {"audio": [AudioMediaIO().load_bytes(raw) for raw in clips]})["audio"]
    waves = parsed.get_all_items_for_hash()
    hashes = [MultiModalHasher.hash_kwargs("blake3", model_id=ASR, audio=w) for w in waves]
    # vLLM's own tensors of the clips: the HF processor on each clip alone, cast, post-processed
    proc = Qwen3ASRProcessor.__new__(Qwen3ASRProcessor)
    proc.feature_extractor, proc.audio_token = Qwen3ASRFeatureExtractor(), "<|audio_pad|>"
    each = [proc._process_audio([w], **Qwen3ASRProcessor.audio_kwargs, return_tensors="pt")[0] for w in waves]

    def items_of(features, masks, lengths=None, cast=True):
        """vLLM's post-processing of the per-clip outputs (``lengths``: already joined), its
        cast and its items."""
        data = BatchFeature({"input_audio_features": features, "feature_attention_mask": masks,
                             "audio_feature_lengths": lengths}) if lengths is not None else (
            Qwen3ASRMultiModalProcessor._postprocess_hf_mm_data(None, {}, {}, BatchFeature(
                {"input_features": features, "input_features_mask": masks})))
        data = _processor_output(data) if cast else data
        return MultiModalKwargsItems.from_hf_inputs(data, _qwen3asr_field_config(data))

    own = [[e["input_features"][0] for e in each], [e["input_features_mask"][0] for e in each]]
    with np.load(ASR_TENSORS) as t:
        service = [torch.from_numpy(t["input_audio_features"]),
                   [torch.from_numpy(t[f"mask{i}"]) for i in range(len(clips))],
                   torch.from_numpy(t["audio_feature_lengths"])]
    # vLLM's cast happens before its post-processing, which only joins: cast after it here
    kwargs = items_of(*service)
    _check_like_vllms(kwargs, items_of(*own), items_of(*service, cast=False), items_of(*own, cast=False),
                      "input_audio_features")
    info = SimpleNamespace(get_hf_processor=lambda **_: SimpleNamespace(audio_token="<|audio_pad|>"),
                           get_tokenizer=lambda: SimpleNamespace(get_vocab=lambda: {"<|audio_pad|>": ASR_AUDIO}))
    updates = Qwen3ASRMultiModalProcessor._get_prompt_updates(SimpleNamespace(info=info), parsed, {}, kwargs)
    ids, ranges, items = _applied(Qwen3ASRMultiModalProcessor, updates, ASR_PROMPT, "audio", kwargs, encoder, decoder)
    print(f"qwen3_asr: {len(waves)} clips {[len(w) for w in waves]} samples, items {[i['bytes'] for i in items]} "
          f"bytes, ranges {[(r.offset, r.length) for r in ranges]}, the structure of vLLM's own path")
    return {"family": "qwen3_asr", "model": ASR, "clips": ASR_CLIPS, "samples": [len(w) for w in waves],
            "prompt": ASR_PROMPT, "prompt_token_ids": ids,
            "placeholders": _placeholders(ranges),
            "hashes": hashes, "items": items, "dtypes": _dtypes(kwargs["audio"][0])}


def _inkling_audio_entry(inputs: Path, encoder, decoder) -> dict:
    """Inkling's clips as vLLM 0.33.0 makes them (vllm/models/inkling/common/mm_preprocess.py):
    loaded by ``AudioMediaIO`` and parsed by ``InklingMultiModalDataParser`` (16 kHz, mono),
    keyed by vLLM's hasher; the extractor on the parsed clips together and the processor's
    dMel bins cut to each clip's frames (``_apply_hf_processor_main``, lines 213-232,
    transcribed), checked equal to the sidecar's; the items built with vLLM's
    ``_get_mm_fields_config`` and ``from_hf_inputs`` from the sidecar's tensors; the prompt
    and ranges from vLLM's ``_get_prompt_updates``."""
    import numpy as np
    import torch
    from transformers import BatchFeature
    from transformers.models.inkling import InklingFeatureExtractor
    from vllm.models.inkling.common.mm_preprocess import InklingMultiModalDataParser, InklingMultiModalProcessor
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.inputs import MultiModalKwargsItems
    from vllm.multimodal.media.audio import AudioMediaIO

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gen_inkling_audio_fixtures

    with np.load(inputs) as npz:
        clips = [npz[f"audio/clip{i}"].tobytes() for i in range(len(ASR_CLIPS))]
    parsed = InklingMultiModalDataParser(target_sr=16000, target_channels=1).parse_mm_data(
        {"audio": [AudioMediaIO().load_bytes(raw) for raw in clips]})["audio"]
    waves = parsed.get_all_items_for_hash()
    processor = gen_inkling_audio_fixtures.processor()  # the real __init__'s defaults and bin centers
    extractor = InklingFeatureExtractor()
    feat = extractor(list(waves), sampling_rate=extractor.sampling_rate, return_tensors="pt")
    bins = processor._extract_dmel_bins(feat["input_features"])
    counts = feat["input_features_mask"].sum(-1)
    own = torch.cat([ids[:n] for ids, n in zip(bins, counts)])
    with np.load(INKLING_AUDIO_TENSORS) as t:
        hf_inputs = BatchFeature({k: torch.from_numpy(t[k]) for k in ("input_audio_features", "num_audio_tokens")})
    assert torch.equal(own, hf_inputs["input_audio_features"]) and torch.equal(counts.to(torch.int64),
                                                                               hf_inputs["num_audio_tokens"])
    config = InklingMultiModalProcessor._get_mm_fields_config(None, hf_inputs, {})
    kwargs = MultiModalKwargsItems.from_hf_inputs(hf_inputs, config)
    updates = InklingMultiModalProcessor._get_prompt_updates(None, None, {}, kwargs)
    ids, ranges, items = _applied(InklingMultiModalProcessor, updates, INKLING_AUDIO_PROMPT, "audio", kwargs, encoder,
                                  decoder)
    print(f"inkling audio: bins equal vLLM's path ({own.dtype}), frames {counts.tolist()}, items "
          f"{[i['bytes'] for i in items]} bytes, ranges {[(r.offset, r.length) for r in ranges]}")
    return {"family": "inkling", "model": INKLING, "clips": ASR_CLIPS, "samples": [len(w) for w in waves],
            "bins_equal_vllms": True, "prompt": INKLING_AUDIO_PROMPT, "prompt_token_ids": ids,
            "placeholders": _placeholders(ranges),
            "hashes": [MultiModalHasher.hash_kwargs("blake3", model_id=INKLING, audio=w) for w in waves],
            "items": items, "dtypes": _dtypes(kwargs["audio"][0])}


def _qwen2_audio_entry(inputs: Path, encoder, decoder) -> dict:
    """Qwen2-Audio's clips as vLLM 0.33.0 makes them (model_executor/models/qwen2_audio.py):
    loaded by ``AudioMediaIO``, parsed by ``Qwen2AudioMultiModalDataParser`` (16 kHz, mono),
    keyed by vLLM's hasher; the items built with ``_qwen2audio_field_config`` and
    ``from_hf_inputs`` from the sidecar's tensors, cast as ``call_hf_processor`` casts, checked
    against what vLLM's own path makes of the parsed clips (the HF processor on the clips with
    vLLM's ``truncation=True``): the same keys, fields, dtypes and shapes, the masks equal, the
    features within 1e-4; the prompt and ranges from vLLM's ``_get_prompt_updates``."""
    import numpy as np
    import torch
    from transformers import BatchFeature, WhisperFeatureExtractor
    from transformers.models.qwen2_audio import Qwen2AudioProcessor
    from vllm.model_executor.models.qwen2_audio import (Qwen2AudioMultiModalDataParser,
                                                        Qwen2AudioMultiModalProcessor, _qwen2audio_field_config)
    from vllm.multimodal.hasher import MultiModalHasher
    from vllm.multimodal.inputs import MultiModalKwargsItems
    from vllm.multimodal.media.audio import AudioMediaIO

    with np.load(inputs) as npz:
        clips = [npz[f"audio/clip{i}"].tobytes() for i in range(len(ASR_CLIPS))]
    parsed = Qwen2AudioMultiModalDataParser(target_sr=16000, target_channels=1).parse_mm_data(
        {"audio": [AudioMediaIO().load_bytes(raw) for raw in clips]})["audio"]
    waves = parsed.get_all_items_for_hash()
    proc = Qwen2AudioProcessor.__new__(Qwen2AudioProcessor)
    proc.feature_extractor = WhisperFeatureExtractor(feature_size=128, chunk_length=30, sampling_rate=16000)
    proc.audio_token = "<|AUDIO|>"
    own, _ = proc._process_audio(list(waves), sampling_rate=16000, truncation=True, return_tensors="pt")
    own = BatchFeature({k: own[k] for k in ("input_features", "feature_attention_mask")})
    with np.load(QWEN2_AUDIO_TENSORS) as t:
        service = BatchFeature({k: torch.from_numpy(t[k]) for k in ("input_features", "feature_attention_mask")})

    def items_of(data, cast=True):
        data = _processor_output(data) if cast else data
        return MultiModalKwargsItems.from_hf_inputs(data, _qwen2audio_field_config(data))

    kwargs = items_of(service)
    _check_like_vllms(kwargs, items_of(own), items_of(service, False), items_of(own, False), "input_features")
    info = SimpleNamespace(get_hf_processor=lambda **_: SimpleNamespace(audio_token_id=151646))
    updates = Qwen2AudioMultiModalProcessor._get_prompt_updates(SimpleNamespace(info=info), parsed, {}, kwargs)
    ids, ranges, items = _applied(Qwen2AudioMultiModalProcessor, updates, QWEN2_AUDIO_PROMPT, "audio", kwargs,
                                  encoder, decoder)
    print(f"qwen2_audio: items {[i['bytes'] for i in items]} bytes, ranges {[(r.offset, r.length) for r in ranges]}, "
          "the structure of vLLM's own path")
    return {"family": "qwen2_audio", "model": QWEN2_AUDIO, "clips": ASR_CLIPS, "samples": [len(w) for w in waves],
            "prompt": QWEN2_AUDIO_PROMPT, "prompt_token_ids": ids,
            "placeholders": _placeholders(ranges),
            "hashes": [MultiModalHasher.hash_kwargs("blake3", model_id=QWEN2_AUDIO, audio=w) for w in waves],
            "items": items, "dtypes": _dtypes(kwargs["audio"][0])}


def _omni_processor(model: str, directory: Path, dtype: str = ENGINE_DTYPE):
    """vLLM's multimodal processor of the Omni thinker ``model``, on a stand-in ``info``: the
    HF processor vLLM loads (its image, video and audio processors as the Auto classes load
    them from the checkpoint's files in ``directory``; no tokenizer, which no item reads), the
    tokenizer's ids of its tokens, the vision config's merge size, and vLLM's own
    ``InputProcessingContext.call_hf_processor`` for an engine in ``dtype``."""
    import torch
    from transformers import AutoFeatureExtractor, AutoImageProcessor, AutoVideoProcessor
    from transformers.models.qwen2_5_omni import Qwen2_5OmniProcessor
    from transformers.models.qwen3_omni_moe import Qwen3OmniMoeProcessor
    from vllm.model_executor.models import qwen2_5_omni_thinker as q25, qwen3_omni_moe_thinker as q3
    from vllm.multimodal.processing.context import InputProcessingContext

    qwen3 = "Qwen3" in model
    hf_cls = Qwen3OmniMoeProcessor if qwen3 else Qwen2_5OmniProcessor
    hf = hf_cls.__new__(hf_cls)
    hf.image_processor = AutoImageProcessor.from_pretrained(directory)
    hf.video_processor = AutoVideoProcessor.from_pretrained(directory)
    hf.feature_extractor = AutoFeatureExtractor.from_pretrained(directory)
    tokens = OMNI[model][0]
    (hf.image_token, hf.video_token, hf.audio_token), hf.chat_template = tokens, None
    mm_config = SimpleNamespace(mm_tensor_ipc="direct_rpc", merge_mm_processor_kwargs=lambda kwargs: dict(kwargs))

    class Context:  # what call_hf_processor reads: the engine's dtype, no configured processor kwargs
        model_config = SimpleNamespace(dtype=getattr(torch, dtype), get_multimodal_config=lambda: mm_config)
        get_merged_mm_kwargs = InputProcessingContext.get_merged_mm_kwargs
        _postprocess_output = InputProcessingContext._postprocess_output
        call_hf_processor = InputProcessingContext.call_hf_processor

    info = object.__new__(q3.Qwen3OmniMoeThinkerProcessingInfo if qwen3 else q25.Qwen2_5OmniThinkerProcessingInfo)
    info.ctx, info.get_hf_processor = Context(), lambda **_: hf
    info.get_tokenizer = lambda: SimpleNamespace(get_vocab=lambda: dict(tokens))
    info.get_hf_config = lambda: SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=SPATIAL_MERGE_SIZE))
    proc = object.__new__(q3.Qwen3OmniMoeThinkerMultiModalProcessor if qwen3 else
                          q25.Qwen2_5OmniThinkerMultiModalProcessor)
    proc.info = info
    proc.dummy_inputs = SimpleNamespace(get_dummy_text=lambda counts: q25.Qwen2_5OmniThinkerDummyInputsBuilder
                                        .get_dummy_text(SimpleNamespace(info=info), counts))
    return proc


def _omni_service(model: str, dtype: str):
    """The sidecar's tensors of the Omni job as vLLM holds them for an engine in ``dtype``:
    the tensors cast as ``call_hf_processor`` casts the processor's output
    (``_processor_output``); a list (Qwen3-Omni's masks, which vLLM makes after that cast:
    qwen3_omni_moe_thinker.py ``_postprocess_hf_mm_data``) as it is."""
    import numpy as np
    import torch
    from transformers import BatchFeature

    tensors, lists = {}, {}
    with np.load(OMNI_TENSORS) as npz:
        for name in sorted((n for n in npz.files if n.startswith(f"{model}/")), key=lambda n: (len(n), n)):
            key, _, index = name[len(model) + 1:].partition("#")
            value = torch.from_numpy(npz[name])
            if index:
                lists.setdefault(key, []).append(value)
            else:
                tensors[key] = value
    return BatchFeature({**_processor_output(BatchFeature(tensors), dtype), **lists})


def _omni_entry(model: str, inputs: Path, encoder, decoder) -> dict:
    """An Omni thinker's job (an image, a video and two clips in one prompt) as vLLM 0.33.0
    makes it (model_executor/models/qwen2_5_omni_thinker.py, qwen3_omni_moe_thinker.py): the
    media loaded by vLLM's media IO (the video by the loader vLLM picks for the checkpoint)
    and parsed by the thinker's parser, keyed by vLLM's hasher; the items built with the
    thinker's field factory and ``from_hf_inputs`` from the sidecar's tensors (``_omni_service``),
    checked against those of vLLM's own path, the thinker's processor run on the parsed media
    (``_apply_hf_processor_main``: its HF call, cast and post-processing), for a bfloat16 and
    a float32 engine: the same keys, fields, dtypes and shapes, every float32 tensor equal but
    the audio features (within 1e-4); the prompt and ranges from its ``_get_prompt_updates``."""
    import numpy as np
    from vllm.model_executor.models import qwen2_5_omni_thinker as q25, qwen3_omni_moe_thinker as q3
    from vllm.multimodal.inputs import MultiModalKwargsItems
    from vllm.transformers_utils.processor import get_video_processor_cls_name_from_config
    from vllm.multimodal.video import get_video_loader_backend_for_processor

    with tempfile.TemporaryDirectory() as root:
        directory = _preset_dir(model, Path(root))
        loader = get_video_loader_backend_for_processor(get_video_processor_cls_name_from_config(str(directory)))
        procs = {dtype: _omni_processor(model, directory, dtype) for dtype in (ENGINE_DTYPE, "float32")}
    with np.load(inputs) as npz:
        media = {m: [npz[k].tobytes() for k in keys] for m, keys in OMNI_MEDIA.items()}
    items = _omni_parsed(media, loader)
    factory = q25.create_qwen2_5_omni_thinker_field_factory(SPATIAL_MERGE_SIZE)
    ours = {d: MultiModalKwargsItems.from_hf_inputs(b, factory(b)) for d in procs for b in [_omni_service(model, d)]}
    theirs = {d: MultiModalKwargsItems.from_hf_inputs(b, factory(b))
              for d, proc in procs.items() for b in [type(proc)._apply_hf_processor_main(proc, items, {})]}
    for modality, features in (("image", ""), ("video", ""), ("audio", "input_audio_features")):
        _check_like_vllms(ours[ENGINE_DTYPE], theirs[ENGINE_DTYPE], ours["float32"], theirs["float32"], features,
                          modality)
    proc = procs[ENGINE_DTYPE]
    updates = type(proc)._get_prompt_updates(proc, items, {}, ours[ENGINE_DTYPE])
    ids, ranges, entries = _applied_all(type(proc), updates, omni_prompt(model), ours[ENGINE_DTYPE], encoder, decoder)
    model_cls = (q3.Qwen3OmniMoeThinkerForConditionalGeneration if "Qwen3" in model else
                 q25.Qwen2_5OmniThinkerForConditionalGeneration)
    print(f"omni {model}: loader {loader}, items {({m: [e['bytes'] for e in v] for m, v in entries.items()})} bytes, "
          f"ranges {({m: [(r.offset, r.length) for r in v] for m, v in ranges.items()})}, like vLLM's own path")
    return {"family": "qwen3_omni" if "Qwen3" in model else "qwen2_5_omni", "model": model, "media": OMNI_MEDIA,
            "video_loader": loader, "device_normalize": model_cls.supports_mm_device_do_normalize,
            "like_vllms_own_path": True, "prompt": omni_prompt(model), "prompt_token_ids": ids,
            "placeholders": {m: _placeholders(r) for m, r in ranges.items()},
            "hashes": _omni_hashes(model, items), "items": entries,
            "dtypes": {m: _dtypes(v[0]) for m, v in ours[ENGINE_DTYPE].items()}}


def _omni_parsed(media: dict, loader: str):
    """The Omni job's media as vLLM's connector loads them and the thinker's parser
    (``Qwen2_5OmniThinkerMultiModalDataParser``, Qwen3-Omni's too: 16 kHz mono) parses them."""
    from vllm.model_executor.models.qwen2_5_omni_thinker import Qwen2_5OmniThinkerMultiModalDataParser
    from vllm.multimodal.media.audio import AudioMediaIO
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.media.video import VideoMediaIO

    parser = Qwen2_5OmniThinkerMultiModalDataParser(SPATIAL_MERGE_SIZE, target_sr=16000, target_channels=1)
    return parser.parse_mm_data({
        "image": [ImageMediaIO().load_bytes(raw) for raw in media["image"]],
        "video": [VideoMediaIO(ImageMediaIO(), video_backend=loader).load_bytes(raw) for raw in media["video"]],
        "audio": [AudioMediaIO().load_bytes(raw) for raw in media["audio"]]})


def _omni_hashes(model: str, items) -> dict[str, list[str]]:
    """vLLM's key of each parsed item (``get_item_for_hash``: the image's MediaWithBytes, the
    video's with the loader's metadata, the clip's waveform)."""
    from vllm.multimodal.hasher import MultiModalHasher

    return {m: [MultiModalHasher.hash_kwargs("blake3", model_id=model, **{m: items[m].get_item_for_hash(i)})
                for i in range(len(items[m]))] for m in OMNI_MEDIA}


def kwargs_prompt(media: dict, model: str = "") -> list[int]:
    """A kwargs job's prompt: each image's placeholder, then each video's, between the vision
    markers (151652, 151653), then each clip's between the Omni thinker's audio markers."""
    pads = [151655] * len(media.get("image", ())) + [151656] * len(media.get("video", ()))
    clips = [t for _ in media.get("audio", ()) for t in (OMNI[model][1][0], [*OMNI[model][0].values()][-1],
                                                        OMNI[model][1][1])]
    return [1, *[t for pad in pads for t in (151652, pad, 151653)], *clips, 2]


def _special_tokens(model: str) -> tuple[dict[str, int], dict[str, str]]:
    """The toy tokenizer's special tokens (token -> real id: ``QWEN_SPECIAL``, an Omni
    thinker's own over those of the same ids) and the tokens an Omni thinker's HF processor
    reads off the tokenizer (its ``extra_special_tokens``: attribute -> token)."""
    if model not in OMNI:
        return QWEN_SPECIAL, {}
    (image, video, audio), (bos, eos) = OMNI[model][0], OMNI_AUDIO_MARKERS[model]
    ids = {**OMNI[model][0], bos: OMNI[model][1][0], eos: OMNI[model][1][1]}
    special = {token: i for token, i in QWEN_SPECIAL.items() if i not in ids.values()} | ids
    return special, dict(image_token=image, video_token=video, audio_token=audio, audio_bos_token=bos,
                         audio_eos_token=eos, vision_bos_token="<|vision_start|>", vision_eos_token="<|vision_end|>")


def _vllm_checkpoint(model: str, root: Path) -> Path:
    """A checkpoint vLLM's ``ModelConfig`` and registry load without weights, at ``root/model``
    (vLLM's model id, the keys', is then the hub id with ``root`` the cwd): the preset's JSON
    files, config.json naming the architecture, and a toy tokenizer, a WordLevel vocabulary
    holding the Qwen special tokens at their real ids (``QWEN_SPECIAL``) and a dummy word at
    every other id: the prompts are token ids, and the processor reads only those ids of it
    (an Omni thinker's, ``_special_tokens``)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    preset, (special, extra) = _preset(model), _special_tokens(model)
    directory = root / model
    directory.mkdir(parents=True, exist_ok=True)
    files = {"config.json": {**preset["config"], "architectures": [ARCHITECTURES[preset["config"]["model_type"]]]},
             "preprocessor_config.json": preset["preprocessor_config"],
             "video_preprocessor_config.json": preset.get("video_preprocessor_config"),
             "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
                                       "pad_token": "<|endoftext|>", "model_max_length": 131072,
                                       **({"extra_special_tokens": extra} if extra else {})}}
    for name, content in files.items():
        if content is not None:
            (directory / name).write_text(json.dumps(content))
    names = {i: token for token, i in special.items()}
    vocab = {"[UNK]": 0, **{names.get(i, f"<d{i}>"): i for i in range(1, max(special.values()) + 4)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(list(special))
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def _vllm_apply(model: str, kwargs: dict | None, media: dict[str, list[bytes]]):
    """vLLM 0.33.0's own processor (``MULTIMODAL_REGISTRY.create_processor``) of an engine of
    ``model`` in ENGINE_DTYPE started with ``--mm-processor-kwargs kwargs``, its ``apply`` run
    on the job's media as vLLM's connector loads them (videos by the model's loader,
    VIDEO_MODELS, an Omni thinker's as vLLM picks it) and its parser parses them, in
    ``kwargs_prompt``, with no request kwargs
    (the worker's jobs carry none). The cwd holds the checkpoints (``_vllm_checkpoint``)."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.media.audio import AudioMediaIO
    from vllm.multimodal.media.image import ImageMediaIO
    from vllm.multimodal.media.video import VideoMediaIO
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs
    from vllm.multimodal.video import get_video_loader_backend_for_processor
    from vllm.transformers_utils.processor import get_video_processor_cls_name_from_config

    directory = _vllm_checkpoint(model, Path.cwd())
    proc = MULTIMODAL_REGISTRY.create_processor(ModelConfig(
        model=model, tokenizer=model, mm_processor_kwargs=kwargs, dtype=ENGINE_DTYPE, max_model_len=32768))
    loader = VIDEO_MODELS[model][0] if model in VIDEO_MODELS else get_video_loader_backend_for_processor(
        get_video_processor_cls_name_from_config(str(directory)))
    loaded = {"image": [ImageMediaIO().load_bytes(raw) for raw in media.get("image", [])],
              "video": [VideoMediaIO(ImageMediaIO(), video_backend=loader).load_bytes(raw)
                        for raw in media.get("video", [])],
              "audio": [AudioMediaIO().load_bytes(raw) for raw in media.get("audio", [])]}
    items = proc.info.parse_mm_data({m: v for m, v in loaded.items() if v})
    inputs = ProcessorInputs(kwargs_prompt(media, model), items, None, hf_processor_mm_kwargs={},
                             media_io_kwargs={}, cache=None)
    return proc, proc.apply(inputs, TimingContext(enabled=False))


def _kwargs_entries(inputs: Path, encoder, decoder) -> tuple[list[dict], list[dict]]:
    """What vLLM 0.33.0's own processor makes of each KWARGS_ENGINES job (``_kwargs_entry``)
    and of each KWARGS_REFUSED one (``_kwargs_refused``). No Qwen3-VL video: in vLLM 0.33.0
    with transformers 5.24, ``apply`` fails on every Qwen3-VL video, whatever the kwargs (its
    non-video HF call keeps <|video_pad|> in the text, which transformers' ``validate_inputs``
    refuses with no videos given)."""
    import numpy as np

    cwd = os.getcwd()
    with np.load(inputs) as npz, tempfile.TemporaryDirectory() as root:
        os.chdir(root)
        try:
            entries = [_kwargs_entry(model, kwargs, media, {m: [npz[k].tobytes() for k in keys]
                                                            for m, keys in media.items()}, encoder, decoder)
                       for model, kwargs, media in KWARGS_ENGINES]
            refused = [_kwargs_refused(model, kwargs, key, npz[key].tobytes()) for model, kwargs, key in KWARGS_REFUSED]
        finally:
            os.chdir(cwd)
    return entries, refused


def _kwargs_entry(model: str, kwargs: dict, keys: dict, media: dict, encoder, decoder) -> dict:
    """One engine's job: the expanded ids, each item's PlaceholderRange, key and grid, the
    sha256 of its bytes; and the keys and grids of the same job for an engine without
    kwargs: the keys equal (the engine's kwargs are no hash factor), the grids differ, the
    clips' items are the same bytes (the audio extractor takes no pixel bound)."""
    _, out = _vllm_apply(model, kwargs, media)
    _, default = _vllm_apply(model, None, media)
    visual = [m for m in media if m != "audio"]
    grids = {m: [item[f"{m}_grid_thw"].data.tolist() for item in out["mm_kwargs"][m]] for m in visual}
    default_grids = {m: [item[f"{m}_grid_thw"].data.tolist() for item in default["mm_kwargs"][m]] for m in visual}
    hashes = {m: list(out["mm_hashes"][m]) for m in media}
    assert hashes == {m: list(default["mm_hashes"][m]) for m in media} and grids != default_grids
    items = {m: [_item_entry(item, encoder, decoder) for item in out["mm_kwargs"][m]] for m in media}
    assert items.get("audio") == ([_item_entry(item, encoder, decoder) for item in default["mm_kwargs"]["audio"]]
                                  if "audio" in media else None)
    print(f"kwargs {model} {kwargs}: grids {grids} (default engine {default_grids}), keys as the default engine's, "
          f"items {({m: [e['bytes'] for e in v] for m, v in items.items()})} bytes")
    return {"model": model, "mm_processor_kwargs": json.dumps(kwargs, sort_keys=True), "media": keys,
            "prompt": kwargs_prompt(media, model), "prompt_token_ids": [int(t) for t in out["prompt_token_ids"]],
            "placeholders": {m: _placeholders(out["mm_placeholders"][m]) for m in media}, "hashes": hashes,
            "default_engine_hashes": hashes, "grids": grids, "default_engine_grids": default_grids, "items": items,
            "dtypes": {m: _dtypes(out["mm_kwargs"][m][0]) for m in media},
            **({"audio_as_default_engine": True} if "audio" in media else {})}


def _kwargs_refused(model: str, kwargs: dict, key: str, raw: bytes) -> dict:
    """What vLLM 0.33.0 makes of an image for an engine whose kwargs the sidecar refuses: the
    grid and its pixels (bounds that cross: past max_pixels), or the error its processor
    raises (the innermost cause)."""
    entry = {"model": model, "mm_processor_kwargs": json.dumps(kwargs, sort_keys=True), "media": key}
    try:
        proc, out = _vllm_apply(model, kwargs, {"image": [raw]})
    except Exception as e:  # noqa: BLE001 - vLLM's own failure is what is recorded
        while e.__cause__ is not None:
            e = e.__cause__
        entry["error"] = f"{type(e).__name__}: {e}"
    else:
        grid = out["mm_kwargs"]["image"][0]["image_grid_thw"].data.tolist()
        patch = proc.info.get_hf_config().vision_config.patch_size
        entry.update(grid=grid, pixels=grid[1] * grid[2] * patch * patch)
    print(f"kwargs refused {model} {kwargs}: {entry}")
    return entry


def _refused_entries(inputs: Path) -> list[dict]:
    """For each refused family whose HF processor the service reproduces in its PIL class:
    the image processor class transformers' AutoImageProcessor loads beside vLLM 0.33.0
    (torchvision installed: its backend), whether its pixels of the Llama 4 JPEGs equal the
    service's (with ``patch_size`` as PixtralProcessor passes it), and whether the PIL
    class's do (``backend="pil"``)."""
    import numpy as np
    from PIL import Image
    from transformers import AutoImageProcessor
    from transformers.image_processing_backends import TorchvisionBackend

    out = []
    with np.load(inputs) as npz, np.load(REFUSED_TENSORS) as tensors, tempfile.TemporaryDirectory() as root:
        images = [Image.open(io.BytesIO(npz[f"llama4/jpeg{i}"].tobytes())).convert("RGB")
                  for i in range(len(LLAMA4_IMAGES))]
        for model in REFUSED_MODELS:
            directory = _preset_dir(model, Path(root))
            pc = _preset(model).get("processor_config", {})
            kwargs = {}
            if pc.get("processor_class") == "PixtralProcessor":  # its images_kwargs["patch_size"]
                kwargs["patch_size"] = pc["patch_size"] * pc.get("spatial_merge_size", 1)
            want = tensors[model]
            entry: dict = {"model": model}
            for backend in (None, "pil"):
                processor = AutoImageProcessor.from_pretrained(directory, backend=backend)
                got = processor(images, return_tensors="np", **kwargs)["pixel_values"]
                equal = bool(got.shape == want.shape and np.array_equal(got, want))
                if backend is None:
                    entry.update(image_processor=type(processor).__name__, equal=equal,
                                 backend="torchvision" if isinstance(processor, TorchvisionBackend) else "pil",
                                 max_abs_diff=float(np.abs(got - want).max()) if got.shape == want.shape else None)
                else:
                    entry.update(pil_class=type(processor).__name__, pil_class_equal=equal)
            out.append(entry)
            print(f"refused {model}: {entry}")
    return out


def main() -> None:
    args = _parse_args()
    if args.make_inputs:
        make_inputs(args.make_inputs)
        return
    if not (args.inputs and args.out):
        sys.exit("--inputs and --out, or --make-inputs")
    _ensure_hash_seed(args.hash_seed)

    import msgspec
    import numpy as np
    import torch
    import vllm
    from transformers import BatchFeature
    from vllm.model_executor.models.qwen2_vl import _create_qwen2vl_field_factory
    from vllm.multimodal.inputs import MultiModalKwargsItem, MultiModalKwargsItems
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    if vllm.__version__ != EXPECTED_VLLM_VERSION:
        sys.exit(f"need vllm {EXPECTED_VLLM_VERSION}, found {vllm.__version__}")

    cases = _load_cases(args.inputs)
    args.out.mkdir(parents=True, exist_ok=True)

    encoder = MsgpackEncoder(size_threshold=SIZE_THRESHOLD)
    decoder = MsgpackDecoder(MultiModalKwargsItem)
    field_factory = _create_qwen2vl_field_factory(SPATIAL_MERGE_SIZE)

    files = []
    for case in sorted(cases):
        pv_np = cases[case]["pixel_values"]
        thw_np = cases[case]["image_grid_thw"]
        # raw uint8 pixels and int64 grids: call_hf_processor's cast leaves them as they are
        hf_inputs = _processor_output(BatchFeature(
            {
                "pixel_values": torch.from_numpy(pv_np),
                "image_grid_thw": torch.from_numpy(thw_np),
            }
        ))
        # Same two calls as BaseMultiModalProcessor._apply_hf_processor.
        config_by_key = field_factory(hf_inputs)
        mm_kwargs = MultiModalKwargsItems.from_hf_inputs(hf_inputs, config_by_key)
        if set(mm_kwargs.keys()) != {"image"}:
            raise AssertionError(f"unexpected modalities {list(mm_kwargs.keys())}")
        items = mm_kwargs["image"]
        if len(items) != thw_np.shape[0]:
            raise AssertionError(f"{case}: {len(items)} items, {thw_np.shape[0]} grids")

        row_starts = np.concatenate([[0], np.cumsum(thw_np.prod(-1))])
        for idx, item in enumerate(items):
            bufs = encoder.encode(item)
            if len(bufs) != 1:
                raise AssertionError(f"{case}_{idx}: encoder returned {len(bufs)} buffers")
            raw = bytes(bufs[0])
            fname = f"{case}_{idx}.msgpack"
            (args.out / fname).write_bytes(raw)

            # Round trip with vLLM's decoder and compare against the inputs.
            decoded = decoder.decode(raw)
            exp_pv = pv_np[row_starts[idx] : row_starts[idx + 1]]
            exp_thw = thw_np[idx]
            got_pv = decoded["pixel_values"].data
            got_thw = decoded["image_grid_thw"].data
            assert list(decoded.keys()) == list(item.keys())
            assert got_pv.dtype == torch.uint8 and tuple(got_pv.shape) == exp_pv.shape
            assert got_thw.dtype == torch.int64 and tuple(got_thw.shape) == exp_thw.shape
            assert np.array_equal(got_pv.numpy(), exp_pv)
            assert np.array_equal(got_thw.numpy(), exp_thw)
            assert decoded == item  # MultiModalFieldElem.__eq__ (data + field type)

            structure = _describe(msgspec.msgpack.decode(raw))
            files.append(
                {
                    "file": fname,
                    "case": case,
                    "index": idx,
                    "bytes": len(raw),
                    "sha256": hashlib.sha256(raw).hexdigest(),
                    "keys": list(item.keys()),
                    "structure": structure,
                }
            )
            print(
                f"{fname}: ok {len(raw)} bytes keys={list(item.keys())} "
                f"pixel_values={tuple(got_pv.shape)} "
                f"image_grid_thw={got_thw.tolist()} sha256={files[-1]['sha256'][:16]}"
            )

    llama4, llama4_dtypes = _llama4_items(LLAMA4_TENSORS, encoder, decoder)
    videos = _video_entries(args.inputs, encoder, decoder)
    families = [_inkling_entry(args.inputs, encoder, decoder), _qwen3_asr_entry(args.inputs, encoder, decoder),
                _inkling_audio_entry(args.inputs, encoder, decoder), _qwen2_audio_entry(args.inputs, encoder, decoder)]
    refused = _refused_entries(args.inputs)
    omni = [_omni_entry(model, args.inputs, encoder, decoder) for model in OMNI]
    engine_kwargs, engine_kwargs_refused = _kwargs_entries(args.inputs, encoder, decoder)

    manifest = {
        "generator": "scripts/gen_vllm_fixtures.py",
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "msgspec_version": msgspec.__version__,
        "python_version": sys.version.split()[0],
        "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
        "encoder": "MsgpackEncoder(size_threshold=2**62)",
        "spatial_merge_size": SPATIAL_MERGE_SIZE,
        "engine_dtype": f"torch.{ENGINE_DTYPE}",
        "inputs": args.inputs.name,
        "inputs_sha256": hashlib.sha256(args.inputs.read_bytes()).hexdigest(),
        "files": files,
        "hashes": vllm_hashes(args.inputs),
        "llama4": llama4,
        "llama4_dtypes": llama4_dtypes,
        "videos": videos,
        "families": families,
        "refused": refused,
        "omni": omni,
        "engine_kwargs": engine_kwargs,
        "engine_kwargs_refused": engine_kwargs_refused,
    }
    (args.out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {len(files)} files + MANIFEST.json to {args.out}")


if __name__ == "__main__":
    main()
