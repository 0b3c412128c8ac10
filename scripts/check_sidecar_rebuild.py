#!/usr/bin/env python3
"""The worker's own ``RedisMediaProcessor._rebuild`` (smg-grpc-servicer, with vLLM 0.33.0)
on results this sidecar made: the engine input vLLM then schedules.

    .venv/bin/python scripts/check_sidecar_rebuild.py --make-results DIR
    /path/to/vllm-venv/bin/python scripts/check_sidecar_rebuild.py --rebuild DIR

The first (the project's venv, with the sidecar extra) answers jobs for the PNGs of
tests/sidecar/fixtures/inputs.npz (one image, then two) with the sidecar's JobRunner and
writes each encoded JobResult, with the in-process tensors it must hold. The second (a
venv with vllm==0.33.0 and smg-grpc-servicer) decodes each result as the worker does,
rebuilds the engine input with ``_rebuild`` and checks its token ids, placeholder ranges,
hashes and every tensor (decoded by vLLM's MsgpackDecoder) against them.
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
MODEL = "Qwen/Qwen2-VL-7B-Instruct"
IDS = {1: [1, 151652, 151655, 151653, 2], 2: [1, 151652, 151655, 151653, 7, 151652, 151655, 151653, 2]}


def _fingerprint():
    from smg_grpc_servicer.mm_sidecar_protocol import Fingerprint

    return Fingerprint(model=MODEL, vllm_version="0.33.0", dtype="torch.bfloat16", video_backend="opencv",
                       media_io_kwargs="{}", mm_processor_kwargs="{}", limit_per_prompt='{"*": {"count": 8}}')


def make_results(out: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from smg_grpc_servicer.mm_sidecar_protocol import SCHEMA_VERSION, Job, JobItem, encode_result

    from sglang_mm_grpc import Preprocessor
    from sglang_mm_grpc.media import MediaFetcher
    from sglang_mm_grpc.sidecar.jobs import Engine, JobRunner

    out.mkdir(parents=True, exist_ok=True)
    with np.load(ROOT / "tests/sidecar/fixtures/inputs.npz") as npz:
        cases = {"one": [npz["one/png0"].tobytes()], "two": [npz["two/png0"].tobytes(), npz["two/png1"].tobytes()]}
    model = Preprocessor.from_model(MODEL, processor="torchvision", cache_bytes=0)

    async def run() -> None:
        fetcher = MediaFetcher()
        with ThreadPoolExecutor(1) as pool:
            runner = JobRunner(model, fetcher, Engine(_fingerprint(), raw=True, schemes="http,https,data"), pool)
            for case, pngs in cases.items():
                now = int(time.time() * 1000)
                items = [JobItem("image", "data:image/png;base64," + base64.b64encode(p).decode()) for p in pngs]
                job = Job(SCHEMA_VERSION, uuid.uuid4().hex, "check", _fingerprint(), IDS[len(pngs)], None, items,
                          now, now + 60_000)
                result = await runner.handle(job)
                assert result.ok, result.message
                (out / f"{case}.result").write_bytes(encode_result(result))
                want = model.preprocess(pngs, IDS[len(pngs)], raw=True)
                np.savez(out / f"{case}.npz", input_ids=want.input_ids, pixel_values=want.pixel_values,
                         image_grid_thw=want.tensors["image_grid_thw"],
                         ranges=np.array([im.structural_range for im in want.images]))
        await fetcher.aclose()

    asyncio.run(run())
    print(f"wrote {len(cases)} results to {out}")


def rebuild(directory: Path) -> None:
    import torch
    import vllm
    from smg_grpc_servicer.mm_sidecar_protocol import decode_result
    from smg_grpc_servicer.vllm.mm_processor import RedisMediaProcessor

    assert vllm.__version__ == "0.33.0", vllm.__version__
    worker = RedisMediaProcessor.__new__(RedisMediaProcessor)  # _rebuild reads only the engine's dtype
    worker._engine = type("Engine", (), {"model_config": type("ModelConfig", (), {"dtype": torch.bfloat16})()})()
    for path in sorted(directory.glob("*.result")):
        want = np.load(path.with_suffix(".npz"))
        prompt = worker._rebuild(decode_result(path.read_bytes()), None, 0.0)
        assert prompt["prompt_token_ids"] == want["input_ids"].tolist()
        ranges = [(r.offset, r.length) for r in prompt["mm_placeholders"]["image"]]
        assert ranges == [tuple(r) for r in want["ranges"].tolist()], ranges
        assert all(r.is_embed is None for r in prompt["mm_placeholders"]["image"])
        items = prompt["mm_kwargs"]["image"]
        assert len(prompt["mm_hashes"]["image"]) == len(items) == len(want["image_grid_thw"])
        rows = np.concatenate([item["pixel_values"].data.numpy() for item in items])
        assert all(item["pixel_values"].data.dtype == torch.uint8 for item in items)  # raw: not cast
        assert np.array_equal(rows, want["pixel_values"])
        grids = np.stack([item["image_grid_thw"].data.numpy() for item in items])
        assert np.array_equal(grids, want["image_grid_thw"])
        batched = prompt["mm_kwargs"].get_data()  # the keyword arguments the model is called with
        assert np.array_equal(batched["pixel_values"].numpy(), want["pixel_values"])
        print(f"{path.name}: rebuilt by vLLM {vllm.__version__}: {len(items)} item(s), ids, ranges, pixels "
              f"{tuple(batched['pixel_values'].shape)} {batched['pixel_values'].dtype} and grids equal")


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
