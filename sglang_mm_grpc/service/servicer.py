"""The MultimodalPreprocessor RPCs: fetch -> preprocess -> keep/assemble, with status mapping.

Every failure leaves as one gRPC status: a PreprocessError keeps its code and message,
a passed deadline is DEADLINE_EXCEEDED, anything unexpected is INTERNAL (and logged).
CPU work runs in the executor the server hands in, never on the event loop.
Media fetching goes through the single ``fetch`` coroutine given to the servicer; media
ids are resolved from the media store (``service/media_store.py``) before anything is fetched.
Preprocess, Plan and Assemble pass an in-flight limit first (refused at once when full);
every call is counted and logged as one JSON line (``metrics.py``).

Each RPC here is the sequence of its steps; the steps are the collaborators':
``status`` (the one status, counters, log line), ``intake`` (checks, media ids, fetch),
``preprocessing`` (the pool task), ``kept`` and ``routing`` (handles), ``payloads``,
``pool`` (the executor hand-off, deadlines, cancellation) and ``messages`` (protobuf).
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import Executor
from typing import Callable, Mapping, Sequence

from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from .._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
from ..core import owners
from ..core.errors import Code, PreprocessError
from ..pipeline.driver import Preprocessor
from ..pipeline.metrics import Metrics, RequestRecord, Snapshot
from ..wire import assemble as asm
from . import callers, calls, messages, preprocessing, request_bounds
from .admission import Admission, Ticket
from .handles import HandleStore
from .intake import Fetch, Intake, naming_source
from .kept import Kept, KeptResults
from .media_ids import MediaIds
from .media_remote import RemoteMedia
from .media_store import MediaStore
from .models import ServedModels
from .payloads import Payloads
from .pool import Deadline, WorkPool
from .routing import HandleRouter
from .status import CallRunner, refused
from .transport import Transport

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["MultimodalPreprocessor"].full_name


class PreprocessorServicer(pb_grpc.MultimodalPreprocessorServicer):
    def __init__(
        self,
        store: HandleStore[Kept],
        executor: Executor,
        fetch: Fetch,
        models: Mapping[str, Preprocessor] | None = None,
        *,
        max_in_flight: int,
        metrics: Metrics | None = None,
        stats_parts: Callable[[], dict] | None = None,
        transport: Transport | None = None,
        owner: "owners.Owner | None" = None,
        forward: Callable | None = None,
        merge_stats: Callable | None = None,
        media: MediaStore | None = None,
        caller: Callable | None = None,
        media_remote: RemoteMedia | None = None,
    ):
        """``max_in_flight``: Preprocess/Assemble calls at once (past it: RESOURCE_EXHAUSTED).
        ``stats_parts``: returns the other parts' counters for a Snapshot (fetch, cache, store).
        ``transport``: payload dtype/SHM defaults, the shared-memory segments and the send limit.
        ``owner``: this process's owner id (the store's handles name it); with it, Assemble
        and Release of another replica's handle answer FAILED_PRECONDITION naming the owner,
        and of another process's handle go to ``forward(process, method, request, context)``
        (-> the owner's serialized response). ``merge_stats(own, context)``: GetStats for the
        whole replica (``siblings.py``). ``media``: the encoded images kept for media ids
        (None: none kept). ``caller(context)``: the caller's identity that scopes its client
        media ids (default: the peer address). ``media_remote``: the media store's shared
        tier (serve --media-store-redis), or None."""
        self.store = store
        self.transport = transport or Transport(None)
        self.metrics = metrics or Metrics()
        self.admission = Admission(max_in_flight)
        self.media = media if media is not None else MediaStore(0)
        self.models = ServedModels(models)
        self.pool = WorkPool(executor)
        self.kept = KeptResults(store, self.transport)
        self.router = HandleRouter(self._identity, owner, forward)
        self.payloads = Payloads(self.transport)
        self.media_ids = media_ids = MediaIds(self.media, media_remote)
        self.intake = Intake(fetch, self._identity, self.models, media_ids, self.transport, store)
        self.preprocessing = preprocessing.Preprocessing(self.pool, self.transport, self.kept, self.payloads,
                                                         media_ids)
        self.runner = CallRunner(self.metrics, self.admission)
        self._stats_parts = stats_parts
        self._merge_stats = merge_stats
        self._caller = caller or (lambda context: "peer:" + (context.peer() or ""))

    @property
    def busy(self) -> int:
        """Pool tasks submitted and not finished (a cancelled call's included)."""
        return self.pool.busy

    def set_models(self, models: Mapping[str, Preprocessor], loading: Sequence[str] = ()) -> None:
        """Install the loaded models; until then every RPC answers UNAVAILABLE, as a call
        for a model named in ``loading`` does until it is installed too."""
        self.models.set(models, loading)

    def set_owner(self, owner: owners.Owner) -> None:
        """Name this process the owner of its handles (known once the port is bound)."""
        self.router.owner = owner

    def cancel_all(self) -> None:
        """Stop every preprocessing call at its next image (shutdown, past the grace period)."""
        self.pool.cancel_all()

    # -- RPCs ----------------------------------------------------------------------------

    async def Preprocess(self, request: pb.PreprocessRequest, context) -> pb.PreprocessResponse:
        request, refusal = request_bounds.unwrap(request)
        rec = RequestRecord("Preprocess", request_id=request.request_id, model=request.model,
                            videos=len(request.videos))
        return await self.runner.run(context, rec, refused(refusal) or self._preprocess, request, context, admit=True)

    async def Plan(self, request: pb.PreprocessRequest, context) -> pb.PlanResponse:
        request, refusal = request_bounds.unwrap(request)
        rec = RequestRecord("Plan", request_id=request.request_id, model=request.model, videos=len(request.videos))
        return await self.runner.run(context, rec, refused(refusal) or self._plan, request, context, admit=True)

    async def Assemble(self, request: pb.AssembleRequest, context) -> pb.AssembleResponse:
        rec = RequestRecord("Assemble", handle=request.handle)
        return await self.runner.run(context, rec, self._assemble, request, context, admit=True)

    async def Release(self, request: pb.ReleaseRequest, context) -> pb.ReleaseResponse:
        return await self.runner.run(context, RequestRecord("Release", handle=request.handle), self._release,
                                     request, context)

    async def ListModels(self, request: pb.ListModelsRequest, context) -> pb.ListModelsResponse:
        return await self.runner.run(context, RequestRecord("ListModels"), self._list_models)

    async def GetServerInfo(self, request: pb.GetServerInfoRequest, context) -> pb.GetServerInfoResponse:
        """Not counted or logged (a router asks it once per worker it discovers)."""
        return self.transport.info()

    async def GetStats(self, request: pb.GetStatsRequest, context) -> pb.GetStatsResponse:
        """Not counted or logged itself (monitoring polls it)."""
        resp = messages.stats_response(self.snapshot())
        return resp if self._merge_stats is None else await self._merge_stats(resp, context)

    def snapshot(self) -> Snapshot:
        """Every counter now: this servicer's, the models' work, and ``stats_parts``."""
        parts = dict(self._stats_parts()) if self._stats_parts is not None else {}
        parts.setdefault("store", self.store.stats())
        parts.setdefault("media", self.media_ids.stats())
        return self.metrics.snapshot(
            in_flight=self.admission.in_flight,
            max_in_flight=self.admission.limit,
            rejected_busy=self.admission.rejected,
            work_busy=self.pool.busy,
            **self.models.work(),
            **parts,
        )

    # -- each RPC's steps (a cancelled call's log line names its method: _preprocess -> preprocess)

    async def _plan(self, request: pb.PreprocessRequest, context, *, rec: RequestRecord, ticket: Ticket):
        deadline = Deadline(context)
        pp = self.models.named(request.model)
        backend = asm.parse_backend(request.backend) if request.backend else None
        resolved = self.transport.resolve(request.payload_options, backend, len(request.images), len(request.videos),
                                          len(request.audios))
        req = await self.intake.fetched(request, context, rec, deadline, pp, resolved)
        deadline.check("planning")
        tw = time.perf_counter()
        try:
            out, work_ms = await self.preprocessing.plan(req, ticket, deadline)
        except PreprocessError as e:
            raise naming_source(e, req) from None
        rec.stages_ms["queue"] = max(0.0, (time.perf_counter() - tw) * 1e3 - work_ms)
        resp = messages.plan_response(request, out, req.model.info)
        resp.timings.fetch_ms = rec.stages_ms["fetch"]
        resp.timings.total_ms = (time.perf_counter() - rec.t0) * 1e3
        return resp

    async def _preprocess(self, request: pb.PreprocessRequest, context, *, rec: RequestRecord, ticket: Ticket):
        deadline = Deadline(context)
        pp = self.models.named(request.model)
        backend = asm.parse_backend(request.backend) if request.backend else None
        rec.backend = asm.BACKEND_NAMES[backend] if backend is not None else ""
        resolved = self.transport.resolve(request.payload_options, backend, len(request.images), len(request.videos),
                                          len(request.audios))
        if backend is not None:  # before anything is fetched
            asm.check_videos(backend, len(request.videos))
            asm.check_audios(backend, len(request.audios))
        req = await self.intake.fetched(request, context, rec, deadline, pp, resolved)
        deadline.check("preprocessing")
        job = preprocessing.Job(req, request, backend, backend is None or request.keep_handle, rec, resolved,
                                req.media.scope)  # the caller, as the intake told it
        tw = time.perf_counter()
        try:
            done = await self.preprocessing.preprocess(job, ticket, deadline)
        except PreprocessError as e:
            raise naming_source(e, req) from None
        preprocessing.record(rec, done, since=tw)
        if deadline.passed():
            # The client's deadline is never later than ours: it has given up, so the
            # handle could never reach it.
            self.kept.drop(done.handle)
            raise PreprocessError(Code.DEADLINE_EXCEEDED, "deadline exceeded as the result was ready; nothing kept")
        rec.handle = done.handle
        call = calls.CURRENT.get()
        if done.handle and call is not None:  # dropped if the response never reaches the client
            call.handle = done.handle
            call.on_lost.append(functools.partial(self.kept.drop, done.handle))
        return done.response

    async def _assemble(self, request: pb.AssembleRequest, context, *, rec: RequestRecord, ticket: Ticket):
        if not request.backend:
            raise PreprocessError(Code.INVALID_ARGUMENT, "backend is required (sglang, vllm, trtllm or tokenspeed)")
        backend = asm.parse_backend(request.backend)
        rec.backend = asm.BACKEND_NAMES[backend]
        resolved = self.transport.resolve(request.payload_options, backend)
        routed = await self.router.route(request.handle, "Assemble", request, context)
        if routed is not None:
            return routed
        kept = self.kept.owned(request.handle, self._identity(context))
        rec.model, rec.images = kept.model, len(kept.output.images)
        if resolved.worker is not None:
            resolved.worker.check_output(kept.output.images, asm.videos_of(kept.output))
        Deadline(context).check("assembling")
        ta = time.perf_counter()
        wire_bytes, assemble_ms = await self.pool.timed(self.payloads.of_kept, kept, backend, resolved,
                                                        ticket=ticket)
        rec.stages_ms["assemble"] = assemble_ms
        rec.stages_ms["queue"] = max(0.0, (time.perf_counter() - ta) * 1e3 - assemble_ms)
        if request.release:
            self.kept.assembled(request.handle)
        return wire_bytes

    async def _release(self, request: pb.ReleaseRequest, context=None, **_) -> pb.ReleaseResponse:
        routed = await self.router.route(request.handle, "Release", request, context)
        if routed is not None:
            return routed
        return pb.ReleaseResponse(released=self.kept.release(request.handle, self._identity(context)))

    async def _list_models(self, **_) -> pb.ListModelsResponse:
        return messages.models_response(pp.info for pp in self.models.ready().values())

    def _identity(self, context) -> str:
        return callers.identity(context, self._caller)
