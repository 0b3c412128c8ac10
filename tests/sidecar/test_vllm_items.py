"""vLLM's MultiModalKwargsItem bytes and mm hashes, made without torch, equal vLLM's own.

The fixtures are vLLM 0.33.0's ``MsgpackEncoder(size_threshold=2**62)`` bytes of the items
vLLM builds (``_create_qwen2vl_field_factory``, ``MultiModalKwargsItems.from_hf_inputs``)
from tensors this service produced, cast first as vLLM's ``call_hf_processor`` casts the HF
processor's output (``InputProcessingContext._postprocess_output``: floating tensors to the
engine's dtype, MANIFEST.json "engine_dtype", torch.bfloat16): scripts/gen_vllm_fixtures.py,
run in a venv with vllm 0.33.0 and torch 2.14.0 (fixtures/MANIFEST.json names the versions
and the hash seed).
The hashes are vLLM's ``MultiModalHasher.hash_kwargs`` of each PNG as ``ImageMediaIO.load_bytes``
loads it, under several hash factors. Videos: per clip and Qwen model, what vLLM's video
loader samples (indices, metadata, its OpenCV-decoded RGB frames by sha256), vLLM's key of
the loaded video, and the sha256 of vLLM's bytes of the item (MANIFEST.json "videos"). The
other served families (MANIFEST.json "families": Inkling images and clips, Qwen3-ASR and
Qwen2-Audio clips; "omni": an image, a video and two clips in one Qwen2.5-Omni or Qwen3-Omni
prompt): vLLM's item bytes by sha256, the expanded prompt and PlaceholderRanges vLLM's own
prompt-update code gives, and vLLM's keys; the refused ones: what vLLM's processor does that
the service does not (MANIFEST.json "refused", vllm_image.REFUSED). Engines started with
min_pixels / max_pixels processor kwargs: what vLLM's own processor (``apply``) made of a job
for each (MANIFEST.json "engine_kwargs"), and of the kwargs refused ("engine_kwargs_refused").
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import msgspec
import numpy as np
import pytest

from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.config import load as load_model_config
from sglang_mm_grpc.config import preset_names
from sglang_mm_grpc.sidecar import jobs, vllm_audio, vllm_hashes, vllm_image, vllm_items, vllm_video
from sglang_mm_grpc.sidecar.jobs import IMAGE_FIELDS

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MANIFEST = json.loads((FIXTURES / "MANIFEST.json").read_text())
DTYPE = MANIFEST["engine_dtype"]  # the engine's, as a fingerprint names it
QWEN = "Qwen/Qwen2-VL-7B-Instruct"
LLAMA4 = "meta-llama/Llama-4-Scout-17B-16E-Instruct"


def _inputs() -> dict[str, dict[str, np.ndarray]]:
    cases: dict[str, dict[str, np.ndarray]] = {}
    with np.load(FIXTURES / "inputs.npz") as npz:
        for key in npz.files:
            case, _, name = key.partition("/")
            if case in ("extra", "llama4", "video", "inkling", "audio"):
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


def _llama4_out():
    with np.load(FIXTURES / "inputs.npz") as npz:
        jpegs = [npz[f"llama4/jpeg{i}"].tobytes() for i in range(2)]
    return Preprocessor.from_model(LLAMA4, cache_bytes=0).preprocess(jpegs)


def test_llama4_items_encode_to_vllms_bytes():
    """Llama 4's tiles (1 and 7 of them), the service's float32 pixels cast to the engine's
    bfloat16 as vLLM's ``InputProcessingContext._postprocess_output`` casts the HF
    processor's output: the sha256 of vLLM's bytes is kept (the bytes themselves are 0.68 and
    4.7 MB, half of float32's), in the key order vLLM's run had."""
    out = _llama4_out()
    assert out.pixel_values.dtype == np.float32
    items = vllm_items.split_items(vllm_image.image_batch(out, "llama4", DTYPE), IMAGE_FIELDS["llama4"](out))
    assert [i["patches_per_image"][0].tolist() for i in items] == [1, 7]
    for entry, item in zip(MANIFEST["llama4"], items, strict=True):
        assert entry["dtypes"] == {"pixel_values": "bfloat16", "patches_per_image": "int64", "aspect_ratios": "int64"}
        raw = vllm_items.encode_item({key: item[key] for key in entry["keys"]})
        assert (len(raw), hashlib.sha256(raw).hexdigest()) == (entry["bytes"], entry["sha256"])


@pytest.mark.parametrize("entry", MANIFEST["llama4_dtypes"], ids=lambda e: e["dtype"])
def test_llama4_pixels_take_each_engine_dtype_as_vllms_do(entry):
    """vLLM's ``InputProcessingContext._postprocess_output`` for a bfloat16, float16 and
    float32 engine (its bytes of Llama 4's first item): the pixels in that dtype, the
    integer tensors as they were."""
    out = _llama4_out()
    item = vllm_items.split_items(vllm_image.image_batch(out, "llama4", entry["dtype"]), IMAGE_FIELDS["llama4"](out))[0]
    raw = vllm_items.encode_item({key: item[key] for key in entry["keys"]})
    assert (len(raw), hashlib.sha256(raw).hexdigest()) == (entry["bytes"], entry["sha256"])
    assert msgspec.msgpack.decode(raw)["pixel_values"]["data"][0] == entry["dtype"].removeprefix("torch.")


def test_only_floating_tensors_are_cast_and_an_unknown_dtype_is_refused():
    """As ``_postprocess_output``: floating tensors to the engine's dtype (float16 rounds as
    torch's, to inf past its range), integer and uint8 tensors and lists of floats kept; a
    dtype vLLM does not run in is an error (at start: ``jobs.Engine``)."""
    batch = {"pixel_values": np.array([[1.0, 65520.0, 1 / 3, 6e-8]], np.float32), "grid": np.array([[1, 2, 3]]),
             "raw": np.zeros((1, 2), np.uint8), "timestamps": [[0.25, 1.35]]}
    half = vllm_items.cast_floats(batch, "torch.float16")
    assert half["pixel_values"].dtype == np.float16 and half["pixel_values"].view(np.uint16).tolist() == [
        [0x3C00, 0x7C00, 0x3555, 0x0001]]
    bf16 = vllm_items.cast_floats(batch, "torch.bfloat16")["pixel_values"]
    assert isinstance(bf16, vllm_items.BFloat16) and bf16.bits.tolist() == [[0x3F80, 0x4780, 0x3EAB, 0x3381]]
    assert vllm_items.cast_floats(batch, "torch.float32")["pixel_values"] is batch["pixel_values"]
    for key in ("grid", "raw", "timestamps"):
        assert half[key] is batch[key]
    with pytest.raises(ValueError, match="'torch.float8_e4m3fn' is not one vLLM 0.33.0 runs a model in"):
        vllm_items.cast_floats(batch, "torch.float8_e4m3fn")
    with pytest.raises(TypeError, match="float64"):
        vllm_items.cast_floats({"x": np.zeros(1)}, "torch.bfloat16")
    from smg_grpc_servicer.mm_sidecar_protocol import Fingerprint

    fingerprint = Fingerprint(model=QWEN, vllm_version="0.33.0", dtype="bfloat16", video_backend="opencv",
                              media_io_kwargs="{}", mm_processor_kwargs="{}", limit_per_prompt="{}")
    with pytest.raises(ValueError, match="dtype 'bfloat16' is not one"):
        jobs.Engine(fingerprint, raw=True, schemes="data")


def test_a_batched_bfloat16_field_splits_into_0d_items():
    """Qwen2.5-VL's ``second_per_grid_ts`` (one per video, batched) once cast to bfloat16:
    each item a 0-d bfloat16 tensor, as torch indexes a 1-D one."""
    cast = vllm_items.cast_floats({"s": np.array([1.0, 0.5], np.float32)}, "torch.bfloat16")["s"]
    items = vllm_items.Batched(keep_on_cpu=True).split(cast)
    assert [i.bits.shape for i in items] == [(), ()] and [int(i.bits) for i in items] == [0x3F80, 0x3F00]
    data = msgspec.msgpack.decode(vllm_items.encode_item({"s": (items[1], vllm_items.Batched())}))["s"]["data"]
    assert data[:2] == ["bfloat16", []] and bytes(data[2].data) == b"\x00\x3f"


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
    vLLM's item bytes, in the key order vLLM's run had: Qwen2.5-VL's ``second_per_grid_ts``
    in the engine's bfloat16 as vLLM's ``InputProcessingContext._postprocess_output`` casts
    it, the raw uint8 pixels and the grid as they are, Qwen3-VL's timestamps a list of
    floats (added after that call, not cast)."""
    from sglang_mm_grpc.media import video as media_video

    out = _video_out(entry)
    (video,) = out.videos
    data = _clip(entry["case"])
    frames = None
    if entry["frames_smaller"]:
        assert vllm_video.frames_bytes(video) < len(data)
        frames = np.stack(list(media_video.frames(data, video.frame_indices, media_video.probe(data))))
    assert vllm_hashes.video_hash(data, entry["model"], vllm_video.metadata(video), frames=frames) == entry["hash"]
    batch = vllm_items.cast_floats(vllm_video.video_batch(out), DTYPE)
    (item,) = vllm_items.split_items(batch, vllm_video.VIDEO_FIELDS["qwen_vl"](out))
    assert sorted(item) == sorted(entry["item"]["keys"])
    assert entry["item"]["dtypes"]["pixel_values_videos"] == "uint8"
    assert entry["item"]["dtypes"].get("second_per_grid_ts", "bfloat16") == "bfloat16"
    assert entry["item"]["dtypes"].get("timestamps", "list") == "list"
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


FAMILIES = MANIFEST["families"]


def _fingerprint(model: str, mm_processor_kwargs: str = "{}", media_io_kwargs: str = "{}"):
    from smg_grpc_servicer.mm_sidecar_protocol import Fingerprint

    return Fingerprint(model=model, vllm_version="0.33.0", dtype="torch.bfloat16", video_backend="opencv",
                       media_io_kwargs=media_io_kwargs, mm_processor_kwargs=mm_processor_kwargs, limit_per_prompt="{}")


def _run_job(model: str, prompt: list[int], images: list[bytes], modality: str | list[str] = "image",
             mm_processor_kwargs: str = "{}"):
    """The sidecar's result for a job of ``images`` (its fetched bytes, of ``modality``: every
    item's, or each item's in order) and ``prompt``, for an engine started with
    ``mm_processor_kwargs``."""
    from smg_grpc_servicer.mm_sidecar_protocol import SCHEMA_VERSION, Job, JobItem

    fingerprint = _fingerprint(model, mm_processor_kwargs)
    pp = jobs.load_model(model, "torchvision")
    runner = jobs.JobRunner(pp, None, jobs.engine_for(pp, fingerprint, "data"), None)
    modalities = [modality] * len(images) if isinstance(modality, str) else modality
    job = Job(v=SCHEMA_VERSION, job_id="j", request_id="r", fingerprint=fingerprint, prompt_token_ids=prompt,
              prompt=None, items=[JobItem(modality=m, url="data:") for m in modalities], enqueued_ms=0,
              deadline_ms=0)
    return runner._processed(job, images)


def _in_order(raw: bytes, keys: list[str]) -> bytes:
    """An item's bytes with its keys in ``keys``' order (vLLM's run's: its hash seed's)."""
    item = msgspec.msgpack.decode(raw)
    assert sorted(item) == sorted(keys)
    return msgspec.msgpack.encode({key: item[key] for key in keys})


@pytest.mark.parametrize("entry", FAMILIES, ids=lambda e: f"{e['model']}-{'audio' if 'clips' in e else 'image'}")
def test_other_families_results_are_vllms(entry):
    """The sidecar's whole result for vLLM's prompt and images (Qwen3-ASR: audio clips): the
    expanded ids, each item's PlaceholderRange (offset, length, is_embed) and key as vLLM
    0.33.0 gives them, and the sha256 of each item's bytes equal to vLLM's."""
    modality, name = ("audio", "audio/clip") if "clips" in entry else ("image", f"{entry['family']}/image")
    with np.load(FIXTURES / "inputs.npz") as npz:
        media = [npz[f"{name}{i}"].tobytes() for i in range(len(entry["items"]))]
    result = _run_job(entry["model"], entry["prompt"], media, modality)
    assert result.prompt_token_ids == entry["prompt_token_ids"]
    assert [{"offset": p.offset, "length": p.length, "is_embed": p.is_embed}
            for p in result.mm_placeholders[modality]] == entry["placeholders"]
    assert result.mm_hashes == {modality: entry["hashes"]}
    for raw, want in zip(result.mm_kwargs[modality], entry["items"], strict=True):
        raw = _in_order(raw, want["keys"])
        assert (len(raw), hashlib.sha256(raw).hexdigest()) == (want["bytes"], want["sha256"])


def test_qwen3_asr_clips_are_items_as_vllms_own_path_makes_them():
    """vLLM's Qwen3-ASR items (checked against vLLM's own path by the fixture script: the HF
    processor on each clip, then vLLM's post-processing): bfloat16 features split along the
    frames (dim 1), the processor's int32 mask padded to 100 frames, an int64 length."""
    (entry,) = [e for e in FAMILIES if e["family"] == "qwen3_asr"]
    assert entry["dtypes"] == {"input_audio_features": "bfloat16", "feature_attention_mask": "int32",
                               "audio_feature_lengths": "int64"}
    with np.load(FIXTURES / "inputs.npz") as npz:
        result = _run_job(entry["model"], entry["prompt"][:5] + [2], [npz["audio/clip0"].tobytes()], "audio")
    item = msgspec.msgpack.decode(result.mm_kwargs["audio"][0])
    frames = entry["samples"][0] // 160
    assert item["input_audio_features"]["field"] == ["flat", {"keep_on_cpu": False, "slices": [
        [[None, None, None], [0, frames, None]]], "dim": 1}]
    assert item["input_audio_features"]["data"][:2] == ["bfloat16", [128, frames]]
    assert item["feature_attention_mask"]["data"][:2] == ["int32", [-(-frames // 100) * 100]]
    assert item["audio_feature_lengths"]["data"][:2] == ["int64", []]


def test_inkling_is_upscaled_and_cast_as_vllm_does():
    """vLLM's Inkling processor resizes by 2.0 where the checkpoint sets no
    rescale_image_frac (its pixels, equal to the sidecar's: the fixtures), casts the pixels
    to bfloat16 and keeps the marker before each image's tokens; a third marker with two
    images stays text."""
    (entry,) = [e for e in FAMILIES if e["family"] == "inkling" and "clips" not in e]
    assert entry["pixels_equal_vllms"] and entry["image_processor"] == "InklingImageProcessor"
    assert load_model_config(entry["model"]).family.config.rescale_image_frac is None
    assert jobs.load_model(entry["model"], "torchvision").family.config.rescale_image_frac == 2.0
    ids = entry["prompt_token_ids"]
    assert ids.count(vllm_image.INKLING_MARKER) == 3 and ids[-2:] == [vllm_image.INKLING_MARKER, 2]
    for p in entry["placeholders"]:
        assert ids[p["offset"]] == vllm_image.INKLING_MARKER and p["is_embed"] == [False] + [True] * (p["length"] - 1)
    with np.load(FIXTURES / "inputs.npz") as npz:
        result = _run_job(entry["model"], entry["prompt"], [npz["inkling/image0"].tobytes()])
    item = msgspec.msgpack.decode(result.mm_kwargs["image"][0])
    assert item["pixel_values"]["data"][0] == "bfloat16" and item["num_patches"]["field"] == [
        "batched", {"keep_on_cpu": True}]


def test_a_prompt_holding_inklings_image_token_is_refused():
    from sglang_mm_grpc.core.errors import PreprocessError

    with pytest.raises(PreprocessError, match="holds the image token 200054 itself"):
        vllm_image.service_prompt("inkling", [1, 200005, 200054, 2], 1)
    assert vllm_image.service_prompt("inkling", [1, 200005, 2, 200005], 1) == [1, 200005, 200054, 2, 200005]
    assert vllm_image.service_prompt("qwen_vl", [1, 151655, 2], 1) == [1, 151655, 2]


OMNI = MANIFEST["omni"]


def _omni_media(entry: dict) -> tuple[list[str], list[bytes]]:
    """The fixture's Omni (or engine kwargs) job: its items' modalities and bytes, in prompt order."""
    with np.load(FIXTURES / "inputs.npz") as npz:
        items = [(m, npz[key].tobytes()) for m, keys in entry["media"].items() for key in keys]
    return [m for m, _ in items], [raw for _, raw in items]


@pytest.mark.parametrize("entry", OMNI, ids=lambda e: e["model"])
def test_omni_results_are_vllms(entry):
    """An image, a video and two clips in one Omni prompt: the sidecar's expanded ids, each
    item's PlaceholderRange and key, and the sha256 of each item's bytes, per modality, as
    vLLM 0.33.0 gives them (its items checked against its own processor's path by the fixture
    script: the same keys, fields, dtypes and shapes, equal pixels and masks)."""
    pytest.importorskip("av")
    assert entry["like_vllms_own_path"] and entry["video_loader"] == "qwen2_vl"
    modalities, media = _omni_media(entry)
    _assert_per_modality(_run_job(entry["model"], entry["prompt"], media, modalities), entry)


def _assert_per_modality(result, entry: dict) -> None:
    """``result`` is what vLLM 0.33.0 made of the fixture's job (MANIFEST.json "omni",
    "engine_kwargs"): its ids and keys, and per modality each item's range and the sha256 of
    its bytes (in vLLM's run's key order)."""
    assert result.prompt_token_ids == entry["prompt_token_ids"]
    assert result.mm_hashes == entry["hashes"]
    for modality, items in entry["items"].items():
        assert [{"offset": p.offset, "length": p.length, "is_embed": p.is_embed}
                for p in result.mm_placeholders[modality]] == entry["placeholders"][modality]
        for raw, want in zip(result.mm_kwargs[modality], items, strict=True):
            raw = _in_order(raw, want["keys"])
            assert (len(raw), hashlib.sha256(raw).hexdigest()) == (want["bytes"], want["sha256"])


@pytest.mark.parametrize("entry", OMNI, ids=lambda e: e["model"])
def test_omni_items_hold_what_vllm_makes_of_them(entry):
    """vLLM's Omni models normalize nothing on the device (float pixels, cast to the engine's
    bfloat16; ``--mm-device-do-normalize`` refused); a video item shares the bool
    ``use_audio_in_video`` (False); the clips' masks are Qwen2.5-Omni's int32 300 s buffer
    and Qwen3-Omni's float32 ones, made after vLLM's cast."""
    from smg_grpc_servicer.mm_sidecar_protocol import Fingerprint

    assert entry["device_normalize"] is False
    float_keys = {"pixel_values", "pixel_values_videos", "input_audio_features", "second_per_grid_ts"}
    assert {k for d in entry["dtypes"].values() for k, v in d.items() if v == "bfloat16"} == float_keys
    assert entry["dtypes"]["video"]["use_audio_in_video"] == "bool"
    qwen3 = entry["family"] == "qwen3_omni"
    assert entry["dtypes"]["audio"]["feature_attention_mask"] == ("float32" if qwen3 else "int32")
    pp = jobs.load_model(entry["model"], "torchvision")
    fingerprint = Fingerprint(model=entry["model"], vllm_version="0.33.0", dtype=DTYPE, video_backend="opencv",
                              media_io_kwargs="{}", mm_processor_kwargs="{}", limit_per_prompt="{}")
    assert not jobs.engine_for(pp, fingerprint, "data").raw
    with pytest.raises(ValueError, match="does not normalize pixels on the device"):
        jobs.engine_for(pp, fingerprint, "data", device_normalize=True)
    modalities, media = _omni_media(entry)
    result = _run_job(entry["model"], entry["prompt"], media, modalities)
    video = msgspec.msgpack.decode(result.mm_kwargs["video"][0])
    assert video["use_audio_in_video"]["field"] == ["shared", {"keep_on_cpu": True, "batch_size": 1}]
    shared = video["use_audio_in_video"]["data"]
    assert shared[:2] == ["bool", []] and bytes(shared[2].data) == b"\0"
    masks = [msgspec.msgpack.decode(raw)["feature_attention_mask"]["data"][:2] for raw in result.mm_kwargs["audio"]]
    assert masks == ([["float32", [110]], ["float32", [30]]] if qwen3 else [["int32", [30000]]] * 2)


def test_a_qwen2_5_omni_clip_over_its_buffer_is_refused():
    """vLLM calls Qwen2.5-Omni's extractor with truncation=False, so a clip over its 300 s
    buffer is not cut there as the service cuts it: refused (limit_exceeded)."""
    from types import SimpleNamespace

    from sglang_mm_grpc.core.errors import Code, PreprocessError

    family = jobs.load_model("Qwen/Qwen2.5-Omni-7B", "torchvision").family
    out = SimpleNamespace(audio_tensors={"input_audio_features": np.zeros((1, 128, 1), np.float32),
                                         "audio_feature_lengths": np.array([1])},
                          audio_waves=[np.zeros(4_800_001, np.float32)])
    with pytest.raises(PreprocessError, match="over the 4800000 of Qwen2.5-Omni's extractor buffer") as e:
        vllm_audio.audio_batch(out, family)
    assert e.value.code is Code.RESOURCE_EXHAUSTED and jobs._process_code(e.value) == "limit_exceeded"


def test_bfloat16_rounds_as_torch_does():
    """Ties to even on the bits, overflow to inf, NaN as 0xFFFF (the kernels' bf16, which
    their tests hold to torch)."""
    from sglang_mm_grpc.kernels import bf16

    special = np.array([1.00390625, 1.01171875, 3.4e38, -0.0, 1e-40, np.inf, np.nan], np.float32)
    x = np.concatenate([special, np.random.default_rng(0).standard_normal(1000).astype(np.float32)])
    got = vllm_items.BFloat16.of(x.reshape(-1, 1))
    assert got.bits.shape == (x.size, 1) and np.array_equal(got.bits[:, 0], bf16.to_bf16_bits(x))
    assert np.array_equal(got[2:4].bits, got.bits[2:4])


@pytest.mark.parametrize("model", preset_names())
def test_every_family_is_served_or_refused_with_vllms_reason(model):
    """Every preset's family: served (its item fields known), or refused at start with the
    vLLM 0.33.0 source that decides it."""
    pp = jobs.load_model(model, "torchvision")
    name = pp.family.name
    if name in vllm_image.REFUSED:
        with pytest.raises(ValueError, match=f"does not serve the {name} family: vLLM 0.33.0"):
            jobs.check_served(pp)
    else:
        jobs.check_served(pp)
        assert name in IMAGE_FIELDS or name in vllm_audio.AUDIO_FIELDS


@pytest.mark.parametrize("entry", MANIFEST["refused"], ids=lambda e: e["model"])
def test_refused_for_vllms_torchvision_class(entry):
    """vLLM 0.33.0's transformers loads the torchvision class, whose pixels are not the
    service's; the PIL class's are (so the class is the only difference)."""
    assert entry["backend"] == "torchvision" and not entry["equal"] and entry["max_abs_diff"] > 0.01
    assert entry["pil_class"] == entry["image_processor"] + "Pil" and entry["pil_class_equal"]
    name = jobs.load_model(entry["model"], "torchvision").family.name
    assert entry["image_processor"].split("ImageProcessor")[0] in vllm_image.REFUSED[name]


ENGINE_KWARGS = MANIFEST["engine_kwargs"]
OMNI3 = "Qwen/Qwen3-Omni-30B-A3B-Instruct"


@pytest.mark.parametrize("entry", ENGINE_KWARGS, ids=lambda e: f"{e['model']}-{e['mm_processor_kwargs']}")
def test_engine_kwargs_results_are_vllms(entry):
    """An engine started with ``--mm-processor-kwargs`` min_pixels / max_pixels: the
    sidecar's ids, ranges, keys and item bytes are what vLLM 0.33.0's own processor
    (``apply``) made of the job for that engine; its grids are not the default engine's,
    its keys are (the engine's kwargs are no hash factor). An Omni job's clip: its range is
    vLLM's, its item the one the sidecar makes for an engine without kwargs, as vLLM's is (the
    fixture script; the sidecar's clips are like vLLM's own path but for float rounding of
    the features: "omni")."""
    if "video" in entry["media"]:
        pytest.importorskip("av")
    assert entry["hashes"] == entry["default_engine_hashes"] and entry["grids"] != entry["default_engine_grids"]
    modalities, media = _omni_media(entry)
    result = _run_job(entry["model"], entry["prompt"], media, modalities, entry["mm_processor_kwargs"])
    _assert_per_modality(result, {**entry, "items": {m: v for m, v in entry["items"].items() if m != "audio"}})
    if "audio" in entry["media"]:
        assert entry["audio_as_default_engine"]
        assert [{"offset": p.offset, "length": p.length, "is_embed": p.is_embed}
                for p in result.mm_placeholders["audio"]] == entry["placeholders"]["audio"]
        default = _run_job(entry["model"], entry["prompt"], media, modalities)
        assert result.mm_kwargs["audio"] == default.mm_kwargs["audio"]
    for modality, grids in entry["grids"].items():
        got = [msgspec.msgpack.decode(raw)[f"{modality}_grid_thw"]["data"][2].data for raw in result.mm_kwargs[modality]]
        assert [np.frombuffer(g, np.int64).tolist() for g in got] == grids


def test_the_engine_kwargs_fixtures_change_each_bound_and_both_modalities():
    """A min that raises the PNG's grid and a max that lowers the JPEG's in one job, a max
    alone, Qwen2.5-VL's video, Qwen3-VL's images; each Omni thinker's image, video and clip,
    and Qwen3-Omni's max alone, whose video min is the checkpoint's 3136 (below that max)."""
    kwargs = {(e["model"], e["mm_processor_kwargs"]): e for e in ENGINE_KWARGS}
    both = kwargs[(QWEN, '{"max_pixels": 50176, "min_pixels": 12544}')]
    (png, jpeg), (png0, jpeg0) = both["grids"]["image"], both["default_engine_grids"]["image"]
    assert png[1] * png[2] > png0[1] * png0[2] and jpeg[1] * jpeg[2] < jpeg0[1] * jpeg0[2]
    assert (QWEN, '{"max_pixels": 12544}') in kwargs
    assert {m for e in ENGINE_KWARGS if "Qwen2.5" in e["model"] for m in e["grids"]} >= {"video"}
    assert any("Qwen3" in e["model"] for e in ENGINE_KWARGS)
    omni = {e["model"]: e for e in ENGINE_KWARGS if "Omni" in e["model"]}
    assert set(omni) == {"Qwen/Qwen2.5-Omni-7B", OMNI3} and all(set(e["media"]) == {"image", "video", "audio"}
                                                                for e in omni.values())
    (video,) = kwargs[(OMNI3, '{"max_pixels": 12544}')]["grids"]["video"]
    assert video[1] * video[2] * 16 * 16 <= 12544


def test_bounds_that_cross_are_refused_where_vllm_scales_past_max_pixels():
    """Qwen3-VL's image processor keeps its min_pixels 65536 for an engine given max_pixels
    50176 alone: vLLM's image then has more pixels than max_pixels (the fixtures), which
    the service would not give (it lowers min_pixels to max_pixels): refused at start."""
    (entry,) = [e for e in MANIFEST["engine_kwargs_refused"] if "grid" in e]
    assert entry["pixels"] > json.loads(entry["mm_processor_kwargs"])["max_pixels"]
    pp = jobs.load_model(entry["model"], "torchvision")
    with pytest.raises(ValueError, match=r"min_pixels 65536 \(the image processor's default\) above max_pixels 50176 "
                                         r"\(the engine's\): HF's smart_resize does not check min <= max"):
        jobs.engine_for(pp, _fingerprint(entry["model"], entry["mm_processor_kwargs"]), "data")


@pytest.mark.parametrize("model, kwargs, says", [
    (QWEN, '{"fps": 1.0}', "'fps' (1.0) is not reproduced: this sidecar reproduces min_pixels and max_pixels only"),
    (QWEN, '{"do_resize": false}', "'do_resize' (false) is not reproduced"),
    (QWEN, '{"images_kwargs": {"max_pixels": 12544}}', "'images_kwargs' ({\"max_pixels\": 12544}) is a scoped form"),
    (QWEN, '{"videos_kwargs": {"min_pixels": 3136}}', "'videos_kwargs' ({\"min_pixels\": 3136}) is a scoped form"),
    (QWEN, '{"min_pixels": null}', "'min_pixels' is null: vLLM 0.33.0 passes None to the HF processor"),
    (QWEN, '{"max_pixels": true}', "'max_pixels' (true) is not a positive integer"),
    (QWEN, '{"max_pixels": 12544.0}', "'max_pixels' (12544.0) is not a positive integer"),
    (QWEN, '{"min_pixels": 0}', "'min_pixels' (0) is not a positive integer"),
    (QWEN, '{"min_pixels": 20000000}', "min_pixels 20000000 (the engine's) above max_pixels 12845056 (the image "
                                       "processor's default)"),
    ("Qwen/Qwen2.5-Omni-7B", '{"max_pixels": 2000}', "min_pixels 3136 (the image processor's default) above "
                                                      "max_pixels 2000 (the engine's)"),
    (OMNI3, '{"min_pixels": 20000000}', "min_pixels 20000000 (the engine's) above max_pixels 12845056"),
    (OMNI3, '{"fps": 1.0}', "'fps' (1.0) is not reproduced"),
    (LLAMA4, '{"max_pixels": 12544}', "not for llama4"),
    ("thinkingmachines/Inkling", '{"max_pixels": 12544}', "not for inkling"),
])
def test_engine_kwargs_it_does_not_reproduce_are_refused(model, kwargs, says):
    """Each with what is refused and why, when the engine is made (at the sidecar's start)."""
    pp = jobs.load_model(model, "torchvision")
    with pytest.raises(ValueError, match=re.escape(says)):
        jobs.engine_for(pp, _fingerprint(model, kwargs), "data")


def test_a_null_bound_fails_in_vllm_itself():
    """vLLM 0.33.0 hands a null bound to the HF processor, which refuses it (the fixtures):
    such an engine serves no image, so the sidecar refuses it rather than read null as absent."""
    (entry,) = [e for e in MANIFEST["engine_kwargs_refused"] if "error" in e]
    assert "null" in entry["mm_processor_kwargs"] and "expected int, got NoneType" in entry["error"]


def test_media_io_kwargs_are_refused_and_the_pixel_bounds_reach_each_job():
    """Non-empty media_io_kwargs (sampling, decoders) are refused; equal bounds are taken,
    and the effective bounds of both processors are each job's options."""
    pp = jobs.load_model("Qwen/Qwen3-VL-8B-Instruct", "torchvision")
    with pytest.raises(ValueError, match=re.escape('media_io_kwargs ({"video": {"fps": 1}}) change its processing')):
        jobs.engine_for(pp, _fingerprint(pp.name, media_io_kwargs='{"video": {"fps": 1}}'), "data")
    image, video = jobs.engine_for(pp, _fingerprint(pp.name, '{"max_pixels": 65536}'), "data").options
    assert (image.min_pixels, image.max_pixels, video.min_pixels, video.max_pixels) == (65536, 65536, 4096, 65536)
    assert jobs.engine_for(pp, _fingerprint(pp.name), "data").options == (None, None)


def test_an_omni_videos_bound_not_given_is_the_checkpoints():
    """For an Omni thinker vLLM resizes a video by the video processor's own size under the
    engine's kwargs (qwen2_5_omni_thinker.py:591-605), not by the processor's ``videos_kwargs``
    of an engine without them: the min for a max alone is 3136, not 131072."""
    pp = jobs.load_model(OMNI3, "torchvision")
    assert (pp.family.config.video.min_pixels, pp.family.config.video.max_pixels) == (131072, 786432)
    image, video = jobs.engine_for(pp, _fingerprint(OMNI3, '{"max_pixels": 12544}'), "data").options
    assert (image.min_pixels, image.max_pixels, video.min_pixels, video.max_pixels) == (3136, 12544, 3136, 12544)
