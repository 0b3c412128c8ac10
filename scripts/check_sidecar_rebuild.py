#!/usr/bin/env python3
"""The worker's own ``RedisMediaProcessor._rebuild`` (smg-grpc-servicer, with vLLM 0.33.0)
on results this sidecar made: the engine input vLLM then schedules.

    .venv/bin/python scripts/check_sidecar_rebuild.py --make-results DIR
    /path/to/vllm-venv/bin/python scripts/check_sidecar_rebuild.py --rebuild DIR

The first (the project's venv, with the sidecar extra) answers jobs for the images and clips
of tests/sidecar/fixtures/inputs.npz (Qwen2-VL: one image, then two; Qwen2.5-VL: an image
and a video, raw and normalized; Qwen3-VL: two videos; Inkling: two images, three
<|content_image|> markers, then an MP3 and a WAV; Llama 4: two images; Qwen3-ASR: the MP3
and the WAV) with the
sidecar's JobRunner for a bfloat16
engine and writes each encoded JobResult, with the in-process tensors it must hold. The
second (a venv with vllm==0.33.0 and smg-grpc-servicer) decodes each result as the worker
does, rebuilds the engine input with ``_rebuild`` and checks its token ids, placeholder
ranges and ``is_embed`` (on the embedding tokens only), hashes and every tensor (decoded by
vLLM's MsgpackDecoder) against them: raw pixels uint8, every floating tensor bfloat16 (the
service's float32 cast by torch) as the sidecar sent it, so ``_rebuild``'s cast to the
engine's dtype (``_cast_floats``) changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
START, PAD, VPAD, END = 151652, 151655, 151656, 151653
INKLING_MARKER, INKLING_TOKEN, INKLING_AUDIO_MARKER, INKLING_AUDIO = 200005, 200054, 200020, 200053
LLAMA4_IMAGE, LLAMA4_PATCH = 200090, 200092
ASR_START, ASR_PAD, ASR_END = 151669, 151676, 151670
#: case -> model, the images, videos and audio clips of tests/sidecar/fixtures/inputs.npz it
#: sends (in that order in the prompt), and --mm-device-do-normalize (None: vLLM's default)
CASES = {"one": ("Qwen/Qwen2-VL-7B-Instruct", ["one/png0"], [], [], None),
         "two": ("Qwen/Qwen2-VL-7B-Instruct", ["two/png0", "two/png1"], [], [], None),
         "qwen2_5_video": ("Qwen/Qwen2.5-VL-7B-Instruct", ["one/png0"], ["video/clamp"], [], None),
         "qwen2_5_normalized": ("Qwen/Qwen2.5-VL-7B-Instruct", ["one/png0"], ["video/clamp"], [], False),
         "qwen3_video": ("Qwen/Qwen3-VL-8B-Instruct", [], ["video/clamp", "video/tiny"], [], None),
         "inkling": ("thinkingmachines/Inkling", ["inkling/image0", "inkling/image1"], [], [], None),
         "inkling_audio": ("thinkingmachines/Inkling", [], [], ["audio/clip0", "audio/clip1"], None),
         "llama4": ("meta-llama/Llama-4-Scout-17B-16E-Instruct", ["llama4/jpeg0", "llama4/jpeg1"], [], [], None),
         "qwen3_asr": ("Qwen/Qwen3-ASR-1.7B-hf", [], [], ["audio/clip0", "audio/clip1"], None)}
#: modality -> its main tensor's key and the keys of its items' sizes (one is present)
PIXELS = {"image": ("pixel_values", ("image_grid_thw", "num_patches", "patches_per_image")),
          "video": ("pixel_values_videos", ("video_grid_thw",)),
          "audio": ("input_audio_features", ("audio_feature_lengths", "num_audio_tokens"))}


def _ids(model: str, images: int, videos: int, audios: int = 0) -> list[int]:
    """The worker's prompt: Qwen's vision markers around each placeholder; Inkling's
    <|content_image|> (or <|content_audio_input|>) marker alone per item (and one more, which
stays text); Llama 4's
    <|image|> per image."""
    if model.startswith("thinkingmachines/"):
        if audios:
            return [1] + [INKLING_AUDIO_MARKER, 7] * (audios + 1) + [2]
        return [1] + [INKLING_MARKER, 7] * (images + 1) + [2]
    if model.startswith("meta-llama/"):
        return [1] + [LLAMA4_IMAGE, 7] * images + [2]
    return [1] + [START, PAD, END] * images + [START, VPAD, END] * videos + [ASR_START, ASR_PAD, ASR_END] * audios + [2]


def _mime(image: bytes) -> str:
    return "png" if image.startswith(b"\x89PNG") else "jpeg"


def _fingerprint(model: str):
    from smg_grpc_servicer.mm_sidecar_protocol import Fingerprint

    return Fingerprint(model=model, vllm_version="0.33.0", dtype="torch.bfloat16", video_backend="opencv",
                       media_io_kwargs="{}", mm_processor_kwargs="{}", limit_per_prompt='{"*": {"count": 8}}')


def make_results(out: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from smg_grpc_servicer.mm_sidecar_protocol import SCHEMA_VERSION, Job, JobItem, encode_result

    from sglang_mm_grpc.media import MediaFetcher
    from sglang_mm_grpc.sidecar import jobs, vllm_audio, vllm_image, vllm_video

    out.mkdir(parents=True, exist_ok=True)
    with np.load(ROOT / "tests/sidecar/fixtures/inputs.npz") as npz:
        data = {key: npz[key].tobytes() for key in npz.files}

    async def run() -> None:
        fetcher = MediaFetcher()
        with ThreadPoolExecutor(1) as pool:
            for case, (name, pngs, clips, audios, normalize) in CASES.items():
                model = jobs.load_model(name, "torchvision")
                engine = jobs.engine_for(model, _fingerprint(name), "http,https,data", normalize)
                runner = jobs.JobRunner(model, fetcher, engine, pool)
                now = int(time.time() * 1000)
                items = [JobItem("image", f"data:image/{_mime(data[k])};base64," + base64.b64encode(data[k]).decode())
                         for k in pngs]
                items += [JobItem("video", "data:video/mp4;base64," + base64.b64encode(data[k]).decode())
                          for k in clips]
                items += [JobItem("audio", "data:audio/wav;base64," + base64.b64encode(data[k]).decode()) for k in audios]
                ids = _ids(name, len(pngs), len(clips), len(audios))
                job = Job(SCHEMA_VERSION, uuid.uuid4().hex, "check", _fingerprint(name), ids, None, items, now,
                          now + 60_000)
                result = await runner.handle(job)
                assert result.ok, result.message
                (out / f"{case}.result").write_bytes(encode_result(result))
                family = model.family.name
                prompt = vllm_audio.service_prompt(family, vllm_image.service_prompt(family, ids, len(pngs)), len(audios))
                want = model.preprocess([data[k] for k in pngs], prompt, videos=[data[k] for k in clips],
                                        audios=[data[k] for k in audios], raw=runner.engine.raw)
                embed = {"inkling": [INKLING_TOKEN, INKLING_AUDIO], "llama4": [LLAMA4_PATCH]}.get(family,
                                                                                                 [PAD, VPAD, ASR_PAD])
                arrays = {"input_ids": want.input_ids, "embed": embed}
                if pngs:
                    arrays.update(pixel_values=want.pixel_values, **want.tensors,
                                  image_ranges=np.array([vllm_image.vllm_span(family, im.structural_range)
                                                         for im in want.images]))
                if clips:
                    arrays.update({k: np.concatenate(v) if k == "timestamps" else v  # a list per video
                                   for k, v in vllm_video.video_batch(want).items()},
                                  video_ranges=np.array([v.structural_range for v in want.videos]))
                if audios:
                    batch = vllm_audio.audio_batch(want, model.family)
                    arrays.update({k: v for k, v in batch.items() if k != "feature_attention_mask"},
                                  audio_ranges=np.array([vllm_audio.vllm_span(family, a.structural_range)
                                                         for a in want.audios]))
                np.savez(out / f"{case}.npz", **arrays)
        await fetcher.aclose()

    asyncio.run(run())
    print(f"wrote {len(CASES)} results to {out}")


def rebuild(directory: Path) -> None:
    import torch
    import vllm
    from smg_grpc_servicer.mm_sidecar_protocol import decode_result
    from smg_grpc_servicer.vllm.mm_processor import RedisMediaProcessor
    from vllm.multimodal.inputs import MultiModalKwargsItem
    from vllm.v1.serial_utils import MsgpackDecoder

    assert vllm.__version__ == "0.33.0", vllm.__version__
    worker = RedisMediaProcessor.__new__(RedisMediaProcessor)  # _rebuild reads only the engine's dtype
    worker._engine = type("Engine", (), {"model_config": type("ModelConfig", (), {"dtype": torch.bfloat16})()})()
    decoder = MsgpackDecoder(MultiModalKwargsItem)
    for path in sorted(directory.glob("*.result")):
        want = np.load(path.with_suffix(".npz"))
        result = decode_result(path.read_bytes())
        sent = {modality: [{key: _dtype(elem.data) for key, elem in decoder.decode(blob).items()} for blob in blobs]
                for modality, blobs in result.mm_kwargs.items()}  # each tensor's dtype as the sidecar sent it
        prompt = worker._rebuild(result, None, 0.0)
        ids = want["input_ids"]
        assert prompt["prompt_token_ids"] == ids.tolist()
        said = []
        for modality, (pixels, sizes) in PIXELS.items():
            if f"{modality}_ranges" not in want.files:
                assert modality not in prompt["mm_kwargs"]
                continue
            places = prompt["mm_placeholders"][modality]
            assert [(r.offset, r.length) for r in places] == [tuple(r) for r in want[f"{modality}_ranges"].tolist()]
            for r in places:  # embeddings exactly on the image / video tokens
                span = ids[r.offset:r.offset + r.length]
                on = np.isin(span, want["embed"])
                assert (r.is_embed is None and on.all()) or (r.is_embed is not None and
                                                             np.array_equal(r.is_embed.numpy(), on))
            items = prompt["mm_kwargs"][modality]
            grid = next(key for key in sizes if key in want.files)
            assert len(prompt["mm_hashes"][modality]) == len(items) == len(want[grid])
            # the sidecar sent each tensor in the dtype the engine gets: _rebuild's cast is a no-op
            rebuilt = [{key: _dtype(elem.data) for key, elem in item.items()} for item in items]
            assert rebuilt == sent[modality], (rebuilt, sent[modality])
            # raw uint8 is not cast; float pixels are bfloat16 as vLLM's processor casts them
            dtype = {np.uint8: torch.uint8, np.int32: torch.int32}.get(want[pixels].dtype.type, torch.bfloat16)
            assert all(item[pixels].data.dtype == dtype for item in items)
            batched = prompt["mm_kwargs"].get_data()  # the keyword arguments the model is called with
            assert torch.equal(batched[pixels], torch.from_numpy(want[pixels]).to(dtype))
            assert np.array_equal(np.stack([item[grid].data.numpy() for item in items]), want[grid])
            for extra in ("second_per_grid_ts", "timestamps") if modality == "video" else ():
                if extra in want.files:
                    # second_per_grid_ts sent in the engine's dtype; timestamps a list of floats
                    got = torch.cat([torch.as_tensor(item[extra].data).reshape(-1) for item in items])
                    assert got.dtype == (torch.bfloat16 if extra == "second_per_grid_ts" else torch.float32), extra
                    assert torch.equal(got, torch.from_numpy(want[extra]).to(got.dtype)), extra
                    said.append(f"{extra} ({sent[modality][0][extra]} sent, {_dtype(items[0][extra].data)} rebuilt)")
            said.append(f"{len(items)} {modality} item(s), {pixels} {tuple(batched[pixels].shape)} "
                        f"{sent[modality][0][pixels]} sent, {_dtype(batched[pixels])} rebuilt")
        print(f"{path.name}: rebuilt by vLLM {vllm.__version__}: ids, ranges, is_embed, {', '.join(said)} equal")


def _dtype(data) -> str:
    """A rebuilt item's data type: a tensor's torch dtype without "torch.", or "list"."""
    return str(data.dtype).removeprefix("torch.") if hasattr(data, "dtype") else type(data).__name__


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make-results", type=Path)
    ap.add_argument("--rebuild", type=Path)
    args = ap.parse_args()
    if args.make_results:
        make_results(args.make_results)
    elif args.rebuild:
        rebuild(args.rebuild)
    else:
        sys.exit("--make-results DIR or --rebuild DIR")


if __name__ == "__main__":
    main()
