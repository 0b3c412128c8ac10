"""Generate golden vLLM msgpack bytes for Qwen2-VL ``MultiModalKwargsItem``s.

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
import json
import os
import sys
import tempfile
from pathlib import Path

EXPECTED_VLLM_VERSION = "0.33.0"
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


def _load_cases(path: Path) -> dict[str, dict]:
    import numpy as np

    cases: dict[str, dict] = {}
    with np.load(path, allow_pickle=False) as npz:
        for key in npz.files:
            case, _, tensor = key.partition("/")
            if case in ("extra", "llama4", "video"):
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


def _llama4_items(path: Path, encoder, decoder) -> list[dict]:
    """sha256 of vLLM's bytes of each Llama 4 item (vllm/model_executor/models/mllama4.py
    ``Mllama4MultiModalProcessor._get_mm_fields_config``, which reads nothing of ``self``)."""
    import numpy as np
    import torch
    from transformers import BatchFeature
    from vllm.model_executor.models.mllama4 import Mllama4MultiModalProcessor
    from vllm.multimodal.inputs import MultiModalKwargsItems

    with np.load(path) as npz:
        hf_inputs = BatchFeature({k: torch.from_numpy(npz[k]) for k in npz.files})
    config = Mllama4MultiModalProcessor._get_mm_fields_config(None, hf_inputs, {})
    items = MultiModalKwargsItems.from_hf_inputs(hf_inputs, config)["image"]
    out = []
    for index, item in enumerate(items):
        (raw,) = encoder.encode(item)
        raw = bytes(raw)
        assert decoder.decode(raw) == item
        out.append({"index": index, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(),
                    "keys": list(item.keys())})
        print(f"llama4 item {index}: {len(raw)} bytes keys={list(item.keys())}")
    return out


def _video_entries(inputs: Path, encoder, decoder) -> list[dict]:
    """Per clip and model: what vLLM's loader samples (indices, metadata, sha256 of its RGB
    frames), vLLM's hash of the loaded video, and the sha256 of vLLM's bytes of the item
    built from the sidecar's tensors (fields: qwen2_vl.py ``_create_qwen2vl_field_factory``;
    Qwen2.5-VL's ``second_per_grid_ts`` as qwen2_5_vl.py adds it; Qwen3-VL's ``timestamps``
    as qwen3_vl.py ``_call_hf_processor`` returns them, a list of floats per video)."""
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
                hf = {k: torch.from_numpy(v) for k, v in batch.items() if k != "timestamps"}
                if "timestamps" in batch:
                    hf["timestamps"] = [[float(t) for t in row] for row in batch["timestamps"]]
                hf_inputs = BatchFeature(hf)
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
                                     "sha256": hashlib.sha256(raw).hexdigest()}})
                print(f"video {case} {model}: {len(metadata['frames_indices'])} frames {list(frames.shape)} "
                      f"hash {key[:16]} item {len(raw)} bytes keys={list(item.keys())}")
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
        hf_inputs = BatchFeature(
            {
                "pixel_values": torch.from_numpy(pv_np),
                "image_grid_thw": torch.from_numpy(thw_np),
            }
        )
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

    llama4 = _llama4_items(LLAMA4_TENSORS, encoder, decoder)
    videos = _video_entries(args.inputs, encoder, decoder)

    manifest = {
        "generator": "scripts/gen_vllm_fixtures.py",
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "msgspec_version": msgspec.__version__,
        "python_version": sys.version.split()[0],
        "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
        "encoder": "MsgpackEncoder(size_threshold=2**62)",
        "spatial_merge_size": SPATIAL_MERGE_SIZE,
        "inputs": args.inputs.name,
        "inputs_sha256": hashlib.sha256(args.inputs.read_bytes()).hexdigest(),
        "files": files,
        "hashes": vllm_hashes(args.inputs),
        "llama4": llama4,
        "videos": videos,
    }
    (args.out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {len(files)} files + MANIFEST.json to {args.out}")


if __name__ == "__main__":
    main()
