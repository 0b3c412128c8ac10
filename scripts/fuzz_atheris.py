#!/usr/bin/env python
"""Coverage-guided fuzzing with atheris (libFuzzer) of what parses untrusted input.

    pip install atheris        # not a project dependency; not run in CI
    python scripts/fuzz_atheris.py decode  -atheris_runs=200000
    python scripts/fuzz_atheris.py source  -max_total_time=300
    python scripts/fuzz_atheris.py config  -max_total_time=300
    python scripts/fuzz_atheris.py request --seed-corpus corpus/   # valid inputs to start from
    python scripts/fuzz_atheris.py request -max_total_time=300 corpus/

Targets: ``decode`` (encoded bytes -> RGB, media/decode.py), ``source`` (data URLs,
base64, URLs and paths, media/sources.py), ``config`` (the bytes split into
preprocessor_config.json and config.json of a model directory, config.resolve +
build), ``request`` (the bytes as a serialized PreprocessRequest, through the real
servicer in process, fetching from nowhere). A failure must be a PreprocessError
(in-process) or an abort with an expected status; anything else is reported as a crash.
tests/reliability/test_fuzz.py runs bounded hypothesis versions of the same targets.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import atheris

# Our code and Pillow are instrumented for coverage; the numba kernels are not (numba
# cannot compile instrumented bytecode).
_KERNELS = ["sglang_mm_grpc.kernels"] + [
    f"sglang_mm_grpc.kernels.{p.stem}" for p in (Path(__file__).resolve().parents[1] / "kernels").glob("*.py")
]
with atheris.instrument_imports(include=["sglang_mm_grpc", "PIL"], exclude=_KERNELS):
    from concurrent.futures import ThreadPoolExecutor

    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
    from sglang_mm_grpc.config import resolve
    from sglang_mm_grpc.pipeline.driver import Preprocessor
    from sglang_mm_grpc.core.errors import PreprocessError
    from sglang_mm_grpc.media.decode import decode_image
    from sglang_mm_grpc.media.failures import refused
    from sglang_mm_grpc.media.sources import classify, decode_base64, describe
    from sglang_mm_grpc.service.servicer import PreprocessorServicer
    from sglang_mm_grpc.service.handles import HandleStore

MODEL = "Qwen/Qwen2-VL-7B-Instruct"

EXPECTED = {"INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED", "PERMISSION_DENIED", "UNAVAILABLE", "DEADLINE_EXCEEDED"}


def fuzz_decode(data: bytes) -> None:
    try:
        decode_image(data, item=0, max_pixels=1 << 22)
    except PreprocessError:
        pass


def fuzz_source(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    raw = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes()) if fdp.ConsumeBool() else fdp.ConsumeBytes(fdp.remaining_bytes())
    describe(raw)
    try:
        src = classify(raw)
        if src.kind == "base64":
            out = asyncio.run(decode_base64(src.value))
            assert len(out) == src.size, (len(out), src.size)
    except PreprocessError:
        pass


_CONFIG_DIR = Path(tempfile.mkdtemp(prefix="fuzz-config-"))


def fuzz_config(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    (_CONFIG_DIR / "preprocessor_config.json").write_text(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 2048)))
    (_CONFIG_DIR / "config.json").write_text(fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes()))
    try:
        resolve(str(_CONFIG_DIR)).build()
    except PreprocessError:
        pass


class _Aborted(Exception):
    pass


class _Context:
    """What the servicer uses of a grpc.aio context."""

    def time_remaining(self):
        return 10.0

    def peer(self):
        return "ipv4:127.0.0.1:1"

    def invocation_metadata(self):
        return ()

    def trailing_metadata(self):
        return ()

    def set_trailing_metadata(self, metadata):
        pass

    def cancelled(self):
        return False

    async def abort(self, code, details):
        if code.name not in EXPECTED:
            raise AssertionError(f"unexpected status {code.name}: {details}")
        raise _Aborted


_SERVICER = None


def _servicer():
    global _SERVICER
    if _SERVICER is None:

        async def no_fetch(sources, deadline, items=None):
            # Inline data only: a URL is refused as the policy would refuse an unknown host.
            out = []
            for raw in sources:
                src = classify(raw)
                if src.kind == "bytes":
                    out.append(src.value)
                elif src.kind == "base64":
                    out.append(await decode_base64(src.value))
                else:
                    raise refused("domain_not_allowed", "fetching is off while fuzzing")
            return out

        pp = Preprocessor.from_model(MODEL, cache_bytes=0, max_image_pixels=1 << 22)
        _SERVICER = PreprocessorServicer(HandleStore(1 << 30, 64, 60), ThreadPoolExecutor(1), no_fetch, {MODEL: pp}, max_in_flight=64)
    return _SERVICER


def fuzz_request(data: bytes) -> None:
    try:
        req = pb.PreprocessRequest.FromString(data)
    except Exception:  # not a message: grpc would refuse it before the servicer
        return
    servicer = _servicer()
    try:
        resp = asyncio.run(servicer.Preprocess(req, _Context()))
    except _Aborted:
        return
    if isinstance(resp, bytes):  # serialized with its payload
        resp = pb.PreprocessResponse.FromString(resp)
    if resp.handle:
        servicer.store.pop(resp.handle)


TARGETS = {"decode": fuzz_decode, "source": fuzz_source, "config": fuzz_config, "request": fuzz_request}


def seeds(target: str) -> list[bytes]:
    """Valid inputs to start a corpus from (``--seed-corpus DIR`` writes them)."""
    import base64
    import io
    import json

    from PIL import Image

    images = []
    for fmt, mode in (("PNG", "RGB"), ("PNG", "RGBA"), ("PNG", "P"), ("JPEG", "RGB"), ("GIF", "P"), ("BMP", "RGB"), ("WEBP", "RGB")):
        buf = io.BytesIO()
        Image.new(mode, (13, 9), 90).save(buf, fmt)
        images.append(buf.getvalue())
    if target == "decode":
        return images
    if target == "source":
        return [f"data:image/png;base64,{base64.b64encode(b).decode()}".encode() for b in images[:3]] + [b"/tmp/x.png", b"https://a.example/x.png"]
    if target == "config":
        src = resolve(MODEL)
        pre = json.dumps(src.preprocessor_config)
        return [bytes([len(pre) % 256]) + pre.encode() + json.dumps(src.config).encode()]
    return [
        pb.PreprocessRequest(model=MODEL, images=[pb.MediaItem(data=b)], backend=k % 4).SerializeToString()
        for k, b in enumerate(images)
    ]


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(TARGETS)}}} [--seed-corpus DIR] [libFuzzer options] [corpus dirs]")
    target = TARGETS[sys.argv[1]]
    if len(sys.argv) > 3 and sys.argv[2] == "--seed-corpus":
        out = Path(sys.argv[3])
        out.mkdir(parents=True, exist_ok=True)
        for i, data in enumerate(seeds(sys.argv[1])):
            (out / f"seed-{i}").write_bytes(data)
        print(f"wrote {i + 1} seeds to {out}")
        return
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
