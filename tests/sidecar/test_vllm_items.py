"""vLLM's MultiModalKwargsItem bytes and mm hashes, made without torch, equal vLLM's own.

The fixtures are vLLM 0.33.0's ``MsgpackEncoder(size_threshold=2**62)`` bytes of the items
vLLM builds (``_create_qwen2vl_field_factory``, ``MultiModalKwargsItems.from_hf_inputs``)
from tensors this service produced: scripts/gen_vllm_fixtures.py, run in a venv with
vllm 0.33.0 and torch 2.14.0 (fixtures/MANIFEST.json names the versions and the hash seed).
The hashes are vLLM's ``MultiModalHasher.hash_kwargs`` of each PNG as ``ImageMediaIO.load_bytes``
loads it, under several hash factors. Videos: per clip and Qwen model, what vLLM's video
loader samples (indices, metadata, its OpenCV-decoded RGB frames by sha256), vLLM's key of
the loaded video, and the sha256 of vLLM's bytes of the item (MANIFEST.json "videos").
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec
import numpy as np
import pytest

from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.sidecar import jobs, vllm_hashes, vllm_items, vllm_video
from sglang_mm_grpc.sidecar.jobs import IMAGE_FIELDS

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MANIFEST = json.loads((FIXTURES / "MANIFEST.json").read_text())
QWEN = "Qwen/Qwen2-VL-7B-Instruct"
LLAMA4 = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def _inputs() -> dict[str, dict[str, np.ndarray]]:
    cases: dict[str, dict[str, np.ndarray]] = {}
    with np.load(FIXTURES / "inputs.npz") as npz:
        for key in npz.files:
            case, _, name = key.partition("/")
            if case in ("extra", "llama4", "video"):
                continue
            cases.setdefault(case, {})[name] = npz[key]
    return cases


CASES = _inputs()


def _qwen_items(batch: dict[str, np.ndarray]) -> list[dict]:
    """Qwen2-VL's image fields (vllm/model_executor/models/qwen2_vl.py, _qwen2vl_field_config)."""
    fields = {"pixel_values": vllm_items.flat_from_sizes(batch["image_grid_thw"].prod(-1)),
              "image_grid_thw": vllm_items.Batched(keep_on_cpu=True)}
    return vllm_items.split_items(batch, fields)


def test_the_fixtures_come_from_vllm_0_33_0():
    assert MANIFEST["vllm_version"] == "0.33.0"
    assert MANIFEST["encoder"] == "MsgpackEncoder(size_threshold=2**62)"
    assert sorted(f["file"] for f in MANIFEST["files"]) == ["one_0.msgpack", "two_0.msgpack", "two_1.msgpack"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_service_still_produces_the_fixtures_tensors(case):
    arrays = CASES[case]
    pngs = [arrays[k].tobytes() for k in sorted(k for k in arrays if k.startswith("png"))]
    out = Preprocessor.from_model(QWEN, cache_bytes=0).preprocess(pngs, raw=True)
    assert out.pixel_values.dtype == np.uint8
    assert np.array_equal(out.pixel_values, arrays["pixel_values"])
    assert np.array_equal(out.tensors["image_grid_thw"], arrays["image_grid_thw"])


@pytest.mark.parametrize("entry", MANIFEST["files"], ids=lambda e: e["file"])
def test_items_encode_to_vllms_bytes(entry):
    """Byte for byte, in the fixture's key order: vLLM orders an item's keys as a set of
    them iterates, which follows the process's hash seed (the manifest's)."""
    want = (FIXTURES / entry["file"]).read_bytes()
    item = _qwen_items(CASES[entry["case"]])[entry["index"]]
    assert list(item) == ["pixel_values", "image_grid_thw"]
    in_vllms_order = {key: item[key] for key in entry["keys"]}
    assert vllm_items.encode_item(in_vllms_order) == want


def test_the_other_key_order_decodes_to_the_same_item():
    item = _qwen_items(CASES["two"])[1]
    swapped = {key: item[key] for key in reversed(list(item))}
    a, b = (msgspec.msgpack.decode(vllm_items.encode_item(x)) for x in (item, swapped))
    assert a == b and list(a) != list(b)


def test_a_flat_field_keeps_every_items_slices():
    """As vLLM's MultiModalFlatField does: each item's field is the batch's."""
    items = _qwen_items(CASES["two"])
    fields = [msgspec.msgpack.decode(vllm_items.encode_item(i))["pixel_values"]["field"] for i in items]
    assert fields[0] == fields[1] == ["flat", {"keep_on_cpu": False, "slices": [[[0, 24, None]], [[24, 72, None]]],
                                               "dim": 0}]
    assert [i["pixel_values"][0].shape for i in items] == [(24, 1176), (48, 1176)]


def test_a_tensor_without_a_torch_dtype_is_refused():
    with pytest.raises(TypeError, match="no torch dtype"):
        vllm_items.encode_item({"x": (np.zeros(2, np.complex64), vllm_items.Batched())})


def _png(key: str) -> bytes:
    with np.load(FIXTURES / "inputs.npz") as npz:
        return npz[key].tobytes()


@pytest.mark.parametrize("entry", MANIFEST["hashes"], ids=lambda e: f"{e['png']}-{sorted(e['factors'])}")
def test_image_hashes_are_vllms(entry):
    """An RGBA image is converted as vLLM loads it, so its key carries the conversion."""
    got = vllm_hashes.image_hash(_png(entry["png"]), QWEN, io_config=entry["io_config"], factors=entry["factors"])
    assert got == entry["hash"]


def test_a_hash_depends_on_every_part():
    png = _png("one/png0")
    base = vllm_hashes.image_hash(png, QWEN)
    assert len({base, vllm_hashes.image_hash(png + b"\0", QWEN), vllm_hashes.image_hash(png, QWEN + "x"),
                vllm_hashes.image_hash(png, QWEN, io_config={"image_mode": "RGB"}),
                vllm_hashes.image_hash(png, QWEN, factors={"mm_processor_kwargs": {"max_pixels": 1}})}) == 5


def test_llama4_items_encode_to_vllms_bytes():
    """Llama 4's float32 tiles (1 and 7 of them): the sha256 of vLLM's bytes is kept (the
    bytes themselves are 1.4 and 9.5 MB), in the key order vLLM's run had."""
    with np.load(FIXTURES / "inputs.npz") as npz:
        jpegs = [npz[f"llama4/jpeg{i}"].tobytes() for i in range(2)]
    out = Preprocessor.from_model(LLAMA4, cache_bytes=0).preprocess(jpegs)
    items = vllm_items.split_items({"pixel_values": out.pixel_values, **out.tensors}, IMAGE_FIELDS["llama4"](out))
    assert [i["patches_per_image"][0].tolist() for i in items] == [1, 7]
    for entry, item in zip(MANIFEST["llama4"], items, strict=True):
        raw = vllm_items.encode_item({key: item[key] for key in entry["keys"]})
        assert (len(raw), hashlib.sha256(raw).hexdigest()) == (entry["bytes"], entry["sha256"])


VIDEOS = MANIFEST["videos"]


def _clip(case: str) -> bytes:
    with np.load(FIXTURES / "inputs.npz") as npz:
        return npz[f"video/{case}"].tobytes()


def _video_out(entry: dict):
    pytest.importorskip("av")
    return jobs.load_model(entry["model"], "torchvision").preprocess([], videos=[_clip(entry["case"])], raw=True)


def test_the_video_fixtures_cover_each_qwen_model_and_both_hash_paths():
    assert {e["model"] for e in VIDEOS} == {QWEN, "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"}
    assert {e["loader"] for e in VIDEOS} == {"qwen2_vl", "qwen3_vl"}
    assert {e["frames_smaller"] for e in VIDEOS} == {True, False}
    clamped = next(e for e in VIDEOS if e["case"] == "clamp" and e["loader"] == "qwen2_vl")
    assert clamped["metadata"]["frames_indices"][-2:] == [69, 74]  # 75 from the float32 step, clamped


@pytest.mark.parametrize("entry", VIDEOS, ids=lambda e: f"{e['case']}-{e['model']}")
def test_videos_are_sampled_and_decoded_as_vllms_loader_does(entry):
    """The loader's indices and metadata, and its frames (OpenCV) equal PyAV's here."""
    from sglang_mm_grpc.media import video as media_video

    (video,) = _video_out(entry).videos
    assert vllm_video.metadata(video) == entry["metadata"]
    data = _clip(entry["case"])
    frames = np.stack(list(media_video.frames(data, video.frame_indices, media_video.probe(data))))
    assert [list(frames.shape), hashlib.sha256(frames).hexdigest()] == entry["frames"]


@pytest.mark.parametrize("entry", VIDEOS, ids=lambda e: f"{e['case']}-{e['model']}")
def test_video_hashes_and_items_are_vllms(entry):
    """vLLM's key (on the bytes, or on the frames where they are smaller) and the sha256 of
    vLLM's item bytes, in the key order vLLM's run had."""
    from sglang_mm_grpc.media import video as media_video

    out = _video_out(entry)
    (video,) = out.videos
    data = _clip(entry["case"])
    frames = None
    if entry["frames_smaller"]:
        assert vllm_video.frames_bytes(video) < len(data)
        frames = np.stack(list(media_video.frames(data, video.frame_indices, media_video.probe(data))))
    assert vllm_hashes.video_hash(data, entry["model"], vllm_video.metadata(video), frames=frames) == entry["hash"]
    (item,) = vllm_items.split_items(vllm_video.video_batch(out), vllm_video.VIDEO_FIELDS["qwen_vl"](out))
    assert sorted(item) == sorted(entry["item"]["keys"])
    raw = vllm_items.encode_item({key: item[key] for key in entry["item"]["keys"]})
    assert (len(raw), hashlib.sha256(raw).hexdigest()) == (entry["item"]["bytes"], entry["item"]["sha256"])


def test_hf_sampling_refuses_the_index_vllms_loader_clamps():
    """Without the loader's clamp, the float32 step's index 75 of a 75-frame clip is past
    its end (HF indexes past it): the service's own sampling refuses it."""
    pytest.importorskip("av")
    from sglang_mm_grpc.core.carriers import VideoOptions
    from sglang_mm_grpc.core.errors import PreprocessError

    with pytest.raises(PreprocessError, match="frame 75 is missing"):
        Preprocessor.from_model(QWEN, cache_bytes=0).preprocess(
            [], videos=[_clip("clamp")], video_options=VideoOptions(fps=2.0), raw=True)
