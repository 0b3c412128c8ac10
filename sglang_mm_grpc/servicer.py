"""The MultimodalPreprocessor RPCs: fetch -> preprocess -> keep/assemble, with status mapping.

Every failure leaves as one gRPC status: a PreprocessError keeps its code and message,
a passed deadline is DEADLINE_EXCEEDED, anything unexpected is INTERNAL (and logged).
CPU work runs in the executor the server hands in, never on the event loop.
Media fetching goes through the single ``fetch`` coroutine given to the servicer.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping, Sequence

import grpc

from . import assemble as asm
from . import tensors
from ._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
from .carriers import PreprocessOutput
from .driver import Preprocessor
from .errors import Code, PreprocessError
from .store import HandleStore, TooLarge

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["MultimodalPreprocessor"].full_name

# sources (URL / data URL / path / base64 strings, or bytes) + absolute time.monotonic()
# deadline -> encoded bytes in order, or PreprocessError. The server passes
# media.MediaFetcher.fetch_all.
Fetch = Callable[[Sequence["str | bytes"], "float | None"], Awaitable[list[bytes]]]


@dataclass(frozen=True)
class Kept:
    """One kept intermediate: what Assemble needs to build any backend's payload."""

    model: str
    output: PreprocessOutput
    field_layout: object  # families.FieldLayout (batched, flat)


class _Deadline:
    """The request's deadline as seen from the server (None: the client set none)."""

    def __init__(self, context: grpc.aio.ServicerContext):
        remaining = context.time_remaining()
        self.at = None if remaining is None else time.monotonic() + remaining

    def check(self, before: str) -> None:
        if self.at is not None and time.monotonic() >= self.at:
            raise PreprocessError(Code.DEADLINE_EXCEEDED, f"deadline exceeded before {before}")


class PreprocessorServicer(pb_grpc.MultimodalPreprocessorServicer):
    def __init__(
        self,
        store: HandleStore[Kept],
        executor: Executor,
        fetch: Fetch,
        models: Mapping[str, Preprocessor] | None = None,
    ):
        self.store = store
        self.executor = executor
        self.fetch = fetch
        self.models: dict[str, Preprocessor] | None = dict(models) if models is not None else None

    def set_models(self, models: Mapping[str, Preprocessor]) -> None:
        """Install the loaded models; until then every RPC answers UNAVAILABLE."""
        self.models = dict(models)

    # -- RPCs ----------------------------------------------------------------------------

    async def Preprocess(self, request: pb.PreprocessRequest, context) -> pb.PreprocessResponse:
        return await self._run(context, self._preprocess, request, context)

    async def Assemble(self, request: pb.AssembleRequest, context) -> pb.AssembleResponse:
        return await self._run(context, self._assemble, request, context)

    async def Release(self, request: pb.ReleaseRequest, context) -> pb.ReleaseResponse:
        return pb.ReleaseResponse(released=self.store.pop(request.handle) is not None)

    async def ListModels(self, request: pb.ListModelsRequest, context) -> pb.ListModelsResponse:
        return await self._run(context, self._list_models)

    # -- the work ------------------------------------------------------------------------

    async def _preprocess(self, request: pb.PreprocessRequest, context) -> pb.PreprocessResponse:
        t0 = time.perf_counter()
        deadline = _Deadline(context)
        pp = self._model(request.model)
        backend = asm.parse_backend(request.backend) if request.backend else None
        n = len(request.images)
        if n == 0:
            raise PreprocessError(Code.INVALID_ARGUMENT, "the request has no images")
        limit = pp.info["max_images_per_request"]
        if n > limit:  # before any fetch
            raise PreprocessError(Code.RESOURCE_EXHAUSTED, f"{n} images in one request, over the limit of {limit}")
        sources = []
        for i, item in enumerate(request.images):
            which = item.WhichOneof("source")
            if which is None:
                raise PreprocessError(Code.INVALID_ARGUMENT, "empty MediaItem: set url or data", item=i)
            sources.append(item.url if which == "url" else item.data)

        deadline.check("fetching")
        tf = time.perf_counter()
        raw = await self.fetch(sources, deadline.at)
        fetch_ms = (time.perf_counter() - tf) * 1e3

        deadline.check("preprocessing")
        input_ids = list(request.input_ids) if request.input_ids else None
        out = await self._cancellable(deadline, pp.preprocess, raw, input_ids)

        deadline.check("building the response")
        resp = await self._in_pool(_response, request, out, pp.field_layout, backend)
        if backend is None or request.keep_handle:
            resp.handle = self._keep(Kept(pp.name, out, pp.field_layout))
        resp.timings.fetch_ms = fetch_ms
        resp.timings.total_ms = (time.perf_counter() - t0) * 1e3
        return resp

    async def _assemble(self, request: pb.AssembleRequest, context) -> pb.AssembleResponse:
        if not request.backend:
            raise PreprocessError(Code.INVALID_ARGUMENT, "backend is required (sglang, vllm or trtllm)")
        backend = asm.parse_backend(request.backend)
        kept = self.store.get(request.handle)
        if kept is None:
            why = self.store.why_missing(request.handle)
            raise PreprocessError(
                Code.NOT_FOUND,
                f"handle {request.handle!r} is {why}"
                f"{' (or was never issued)' if why == 'unknown' else ''}: call Preprocess again",
            )
        _Deadline(context).check("assembling")
        payload = await self._in_pool(asm.assemble, kept.output, backend, kept.field_layout)
        if request.release:
            self.store.pop(request.handle)
        return pb.AssembleResponse(payload=payload)

    async def _list_models(self) -> pb.ListModelsResponse:
        models = self._ready()
        return pb.ListModelsResponse(models=[_model_info(pp.info) for pp in models.values()])

    # -- helpers -------------------------------------------------------------------------

    def _ready(self) -> dict[str, Preprocessor]:
        if self.models is None:
            raise PreprocessError(Code.UNAVAILABLE, "the server is still loading its models; retry shortly")
        return self.models

    def _model(self, name: str) -> Preprocessor:
        models = self._ready()
        if not name:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"model is required; this server serves: {', '.join(models)}")
        pp = models.get(name)
        if pp is None:
            raise PreprocessError(Code.NOT_FOUND, f"unknown model {name!r}; this server serves: {', '.join(models)}")
        return pp

    def _keep(self, kept: Kept) -> str:
        try:
            return self.store.put(kept, asm.output_nbytes(kept.output))
        except TooLarge as e:
            raise PreprocessError(
                Code.RESOURCE_EXHAUSTED,
                f"{e}; cannot keep this request: set backend in PreprocessRequest to get the payload in one call",
            ) from None

    async def _cancellable(self, deadline: "_Deadline", fn, *args):
        """Run ``fn(*args, cancel=event)`` in the pool; the event is set when the deadline
        passes or the call is cancelled, so the worker stops at its next image boundary
        instead of finishing work nobody will read."""
        cancel = threading.Event()
        loop = asyncio.get_running_loop()
        timer = None
        if deadline.at is not None:
            timer = loop.call_later(max(0.0, deadline.at - time.monotonic()), cancel.set)
        try:
            return await loop.run_in_executor(self.executor, functools.partial(fn, *args, cancel=cancel))
        except asyncio.CancelledError:
            cancel.set()
            raise
        finally:
            if timer is not None:
                timer.cancel()

    async def _in_pool(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def _run(self, context, fn, *args):
        try:
            return await fn(*args)
        except PreprocessError as e:
            log.info("%s: %s", e.code.value, e.message)
            await context.abort(e.grpc_code, e.message)
        except asyncio.CancelledError:
            # grpc cancels the handler when the deadline passes or the client goes away;
            # work already handed to a worker thread runs to its end and is dropped.
            remaining = context.time_remaining()
            why = "deadline exceeded" if remaining is not None and remaining < 0.01 else "cancelled by the client"
            log.info("%s: %s", fn.__name__.lstrip("_"), why)
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as e:  # a bug: report it, keep serving
            log.exception("internal error")
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(e).__name__}: {e}")


def _response(request, out: PreprocessOutput, field_layout, backend) -> pb.PreprocessResponse:
    resp = pb.PreprocessResponse(
        request_id=request.request_id,
        input_ids=asm.token_ids(out.input_ids),
        image_token_id=out.image_token_id,
    )
    for im in out.images:
        info = resp.images.add(
            hash=im.hash,
            token_count=im.token_count,
            height=im.height,
            width=im.width,
            resized_height=im.resized_height,
            resized_width=im.resized_width,
            encoded_bytes=im.encoded_bytes,
        )
        info.structural_range.offset, info.structural_range.length = im.structural_range
        for offset, length in im.patch_ranges:
            info.patch_ranges.add(offset=offset, length=length)
    if out.positions is not None:
        tensors.fill(resp.mrope.positions, out.positions)
        resp.mrope.delta = int(out.rope_delta or 0)
    if backend is not None:
        asm.assemble(out, backend, field_layout, into=resp.payload)
    t = out.timings_ms
    resp.timings.decode_ms = float(t.get("decode_ms", 0.0))
    resp.timings.process_ms = float(t.get("process_ms", 0.0))
    return resp


def _model_info(info: dict) -> pb.ModelInfo:
    return pb.ModelInfo(
        name=info["name"],
        family=info["family"],
        source=info["source"],
        modalities=info["modalities"],
        image_token_id=info["image_token_id"],
        token_ids=info["token_ids"],
        reference_processor=info["reference_processor"],
        mrope=info["mrope"],
        max_images_per_request=info["max_images_per_request"],
    )
