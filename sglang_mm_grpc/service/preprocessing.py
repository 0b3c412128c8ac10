"""A Preprocess's and a Plan's work after their fetch, handed to the pool.

A Preprocess is one pool task: preprocess, remember the media it sent, keep the result
under a handle and, with a backend, assemble and serialize the payload, so the event
loop never holds the pixels. A call cancelled (or past its deadline) before its result
is kept keeps nothing; a result still kept for a call that has gone is dropped.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..core.carriers import ImageOptions, PlanOutput, PreprocessOutput
from ..core.errors import Code, PreprocessError
from ..pipeline.driver import Preprocessor
from ..pipeline.metrics import VIDEO_STAGES, RequestRecord
from . import messages
from .admission import Ticket
from .intake import Request
from .kept import Kept, KeptResults
from .media_ids import MediaIds
from .payloads import Payloads
from .pool import Deadline, WorkPool
from .transport import Resolved, Stager, Transport

#: A Plan runs on the event loop, without the hop to a worker, when every image is a
#: media id (nothing to hash: what is left is reading headers, about 0.1 ms a JPEG) and
#: there are at most this many: measured on a 12 MP JPEG by id (scripts/bench.py
#: controls), 0.33 ms inline vs 0.47 ms through the pool, server side.
PLAN_INLINE_IMAGES = 8


@dataclass(frozen=True)
class Job:
    """A Preprocess call's work after its fetch."""

    req: Request
    request: pb.PreprocessRequest
    backend: int | None  # assemble this backend's payload in the same task
    keep: bool  # keep the result under a handle
    rec: RequestRecord
    resolved: Resolved  # how the payload's tensors travel (and whether to stage them)
    caller: str  # who asks (the kept result is theirs alone)


@dataclass(frozen=True)
class Done:
    output: PreprocessOutput
    response: "pb.PreprocessResponse | bytes"  # bytes: serialized with its payload
    handle: str
    assemble_ms: float
    work_ms: float  # the pool task's own time (the rest of the call's wall time is queueing)


class Preprocessing:
    """Runs Preprocess and Plan work in the pool, keeping results and remembering media."""

    def __init__(self, pool: WorkPool, transport: Transport, kept: KeptResults, payloads: Payloads,
                 media_ids: MediaIds):
        self.pool = pool
        self.transport = transport
        self.kept = kept
        self.payloads = payloads
        self.media_ids = media_ids

    async def plan(self, req: Request, ticket: Ticket | None, deadline: Deadline) -> tuple[PlanOutput, float]:
        """(the Plan's output, ms its work took)."""
        if _plan_inline(req):  # headers of bytes already hashed: cheaper than the hop to a worker
            return self._plan_work(req, cancel=threading.Event())
        return await self.pool.cancellable(ticket, deadline, self._plan_work, req)

    async def preprocess(self, job: Job, ticket: Ticket | None, deadline: Deadline) -> Done:
        """Preprocess, keep, assemble and serialize: one pool task, the event loop free; what
        it still keeps after the call was cancelled is dropped."""
        return await self.pool.cancellable(ticket, deadline, self._work, job,
                                           abandoned=lambda done: self.kept.drop(done.handle))

    def _plan_work(self, req: Request, *, cancel: threading.Event) -> tuple[PlanOutput, float]:
        t0 = time.perf_counter()
        out = req.model.plan(req.raw, req.input_ids, cancel=cancel, max_image_tokens=req.max_image_tokens,
                             options=req.options, image_options=req.image_options, hashes=req.media.hashes,
                             encoder_budget=req.resolved.encoder_budget, scope=self.media_ids.cache_scope(req.media),
                             check_size=req.check_size, **req.videos.arguments(), **req.audios.arguments())
        self._remember(req, out)
        return out, (time.perf_counter() - t0) * 1e3

    def _work(self, job: Job, *, cancel: threading.Event) -> Done:
        """The whole of a Preprocess after its fetch, in a pool thread."""
        t0 = time.perf_counter()
        stager = self.transport.stager(job.resolved)  # the kernels write the pixel tensors into SHM
        try:
            out, resp, kept = self._preprocessed(job, stager, cancel)
        except BaseException:
            if stager is not None:
                stager.abandon("failed")
            raise
        if job.backend is None:
            resp.timings.total_ms = (time.perf_counter() - job.rec.t0) * 1e3
            return Done(out, resp, resp.handle, 0.0, (time.perf_counter() - t0) * 1e3)
        model = job.req.model
        try:
            wire_bytes, assemble_ms = self.payloads.with_response(
                resp, out, (model.field_layout, model.family.video_field_layout, _image_defaults(model),
                            _audio_layout(model)),
                job.backend, job.rec.t0,
                job.resolved, stager.segments if stager is not None else None, kept)
        except BaseException:
            self.kept.drop(resp.handle)
            if stager is not None:
                stager.abandon("failed")
            raise
        if kept is None and stager is not None and stager.segments:
            self.transport.drop(list(stager.segments.values()), "unused")  # handed out (its lease runs) or removed
        return Done(out, wire_bytes, resp.handle, assemble_ms, (time.perf_counter() - t0) * 1e3)

    def _preprocessed(self, job: Job, stager: Stager | None,
                      cancel: threading.Event) -> tuple[PreprocessOutput, pb.PreprocessResponse, Kept | None]:
        """(the output, its response without a payload, the result kept under the response's
        handle if the job keeps it); nothing kept once ``cancel`` is set."""
        req = job.req
        videos = {**req.videos.arguments(), **req.audios.arguments()}
        if videos:
            videos["deadline"] = req.deadline
        out = req.model.preprocess(req.raw, req.input_ids, cancel=cancel, max_image_tokens=req.max_image_tokens,
                                   allocate=stager, options=req.options, image_options=req.image_options,
                                   hashes=req.media.hashes, raw=req.resolved.raw,
                                   encoder_budget=req.resolved.encoder_budget,
                                   scope=self.media_ids.cache_scope(req.media), check_size=req.check_size, **videos)
        self._remember(req, out)
        resp = messages.preprocess_response(job.request, out)
        resp.timings.fetch_ms = job.rec.stages_ms["fetch"]
        resp.timings.layout_ms = float(out.timings_ms.get("layout_ms", 0.0))
        if cancel.is_set():
            raise PreprocessError(Code.CANCELLED, "request cancelled before its result was kept or assembled")
        kept = None
        if job.keep:
            # its staged segments before it is stored: an eviction from then on removes them
            kept = Kept(req.model.name, out, req.model.field_layout,
                        staged=dict(stager.segments) if stager is not None else {},
                        video_field_layout=req.model.family.video_field_layout,
                        audio_field_layout=_audio_layout(req.model),
                        image_defaults=_image_defaults(req.model), caller=job.caller)
            resp.handle = self.kept.keep(kept)
            if stager is not None:
                stager.keep(resp.handle)
        return out, resp, kept

    def _remember(self, req: Request, out: PlanOutput | PreprocessOutput) -> None:
        self.media_ids.remember(req.media, req.raw, out.images)
        self.media_ids.remember(req.videos.media, req.videos.raw, out.videos)
        self.media_ids.remember(req.audios.media, req.audios.raw, out.audios)


def record(rec: RequestRecord, done: Done, since: float) -> None:
    """A Preprocess's stage times (and its videos' counts) in its record; ``since``: when it
    was handed to the pool (what its work did not take was queueing)."""
    timings = done.output.timings_ms
    for stage in ("decode", "process", "layout"):
        rec.stages_ms[stage] = float(timings.get(f"{stage}_ms", 0.0))
    if done.output.videos:
        rec.video_ms = {stage: float(timings.get(f"{stage}_ms", 0.0)) for stage in VIDEO_STAGES}
        rec.video_frames = sum(len(v.frame_indices) for v in done.output.videos if not v.cached)
        rec.videos_cached = sum(1 for v in done.output.videos if v.cached)
    rec.stages_ms["assemble"] = done.assemble_ms
    rec.stages_ms["queue"] = max(0.0, (time.perf_counter() - since) * 1e3 - done.work_ms)


def _plan_inline(req: Request) -> bool:
    return (not req.videos.raw and len(req.media.hashes) <= PLAN_INLINE_IMAGES
            and all(h is not None for h in req.media.hashes))


def _image_defaults(pp: Preprocessor) -> ImageOptions:
    """The effective options of an image the request asks nothing of: an image whose own
    differ is another encoder input, keyed apart in the payload (``asm.image_item_hash``)."""
    return pp.family.effective_options(None)


def _audio_layout(model: Preprocessor):
    """The model's layout of its audio tensors (None: it takes no audio)."""
    return getattr(model.family, "audio_field_layout", None)
