"""A small synchronous client for the MultimodalPreprocessor service.

    with Client("127.0.0.1:50061") as c:
        r = c.preprocess("Qwen/Qwen2-VL-7B-Instruct", [jpeg_bytes], backend="vllm")
        r.payload.vllm          # put into vllm GenerateRequest.mm_inputs
        r.payload.input_ids     # and these into its tokenized.input_ids

Failures raise ``RemoteError`` (``errors.py``): the ``PreprocessError`` the in-process API
raises (``code``, ``message``, ``item``), and a ``grpc.RpcError`` (``code()``, ``details()``).

Per-image options (``image_options(detail="low")``, for the request or per image with
``media_item(image, options=...)``) and ``Client.plan`` (what Preprocess would produce,
from the headers alone). ``Client(..., media_ids=True)`` sends each image and video given
as bytes by its blake3 hash first and resends as data only those the server does not hold
(it answers NOT_FOUND listing them), so a repeated image or video is not uploaded again.

Videos (docs/VIDEO.md) go beside the images: ``preprocess(model, images, ids,
videos=[Path("clip.mp4")], video_options=video_options(fps=2))``, each a bytes /
``Path`` / URL like an image, with one video placeholder per video in ``input_ids``.

Several servers (replicas): ``Client(["10.0.0.5:50061", "10.0.0.6:50061"])``, a
comma-separated string, or ``Client("mm-headless.ns.svc:50061", resolve=True)`` for every
address of a DNS name. Preprocess and ListModels go round-robin over the targets whose
health says SERVING; Assemble and Release go to the replica that owns the handle (named
in it); one-shot calls need no affinity. TLS (``tls``, ``tls_ca``, ``tls_cert``/``tls_key``
for mTLS) and a bearer ``token`` apply to every target (``endpoints.py``).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Iterable, Sequence, cast

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ..wire import tensors
from ..core.carriers import AudioOptions, ImageOptions, VideoOptions
from .endpoints import Endpoints
from .errors import raising_remote_errors
from ..core.hashing import content_hash
from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from .._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc

MiB = 1 << 20
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_BACKENDS = {"sglang": pb.BACKEND_SGLANG, "vllm": pb.BACKEND_VLLM, "trtllm": pb.BACKEND_TRTLLM,
             "tokenspeed": pb.BACKEND_TOKENSPEED}
_DTYPES = {"float32": pb.WIRE_DTYPE_FLOAT32, "bfloat16": pb.WIRE_DTYPE_BFLOAT16, "float16": pb.WIRE_DTYPE_FLOAT16,
           "bf16": pb.WIRE_DTYPE_BFLOAT16, "fp16": pb.WIRE_DTYPE_FLOAT16, "uint8": pb.WIRE_DTYPE_UINT8,
           "raw": pb.WIRE_DTYPE_UINT8}
_TRANSPORTS = {"inline": pb.TENSOR_TRANSPORT_INLINE, "shm": pb.TENSOR_TRANSPORT_SHM, "auto": pb.TENSOR_TRANSPORT_AUTO}
_DETAILS = {"auto": pb.DETAIL_AUTO, "low": pb.DETAIL_LOW, "high": pb.DETAIL_HIGH}
#: The trailing metadata a NOT_FOUND for media ids lists the missing images in ("0,2").
MISSING_MEDIA_KEY = "sglang-mm-missing-media"
#: ... and the missing videos (their indexes in ``PreprocessRequest.videos``).
MISSING_VIDEOS_KEY = "sglang-mm-missing-videos"
#: ... and the missing audio clips (their indexes in ``PreprocessRequest.audios``).
MISSING_AUDIOS_KEY = "sglang-mm-missing-audios"


def backend_value(backend) -> pb.Backend:
    """``"sglang"`` / ``"BACKEND_SGLANG"`` / the enum number -> the enum number."""
    if backend is None:
        return pb.BACKEND_UNSPECIFIED
    if isinstance(backend, str):
        key = backend.lower().removeprefix("backend_")
        if key not in _BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(_BACKENDS)}")
        return _BACKENDS[key]
    return cast("pb.Backend", int(backend))  # an enum number (the message checks nothing more)


def payload_options(pixel_dtype=None, transport=None, shm_min_bytes: int | None = None,
                    shm_namespace_id: str = "", worker_info=None) -> pb.PayloadOptions:
    """PayloadOptions from names (``"bfloat16"``, ``"uint8"``, ``"shm"``) or enum values; None:
    unspecified (the worker's or the backend's dtype, the server's transport and minimum
    size). ``worker_info``: the chosen worker's own GetServerInfo answer (a
    ``vllm.grpc.engine`` or ``tokenspeed.grpc.scheduler`` GetServerInfoResponse), which
    decides what those leave open (docs/WIRE_CURRENT.md)."""
    opts = pb.PayloadOptions(shm_namespace_id=shm_namespace_id or "")
    if worker_info is not None:
        name = worker_info.DESCRIPTOR.full_name
        field = {"vllm.grpc.engine.GetServerInfoResponse": "vllm_server_info",
                 "tokenspeed.grpc.scheduler.GetServerInfoResponse": "tokenspeed_server_info"}.get(name)
        if field is None:
            raise ValueError(f"worker_info must be a vLLM or TokenSpeed GetServerInfoResponse, not {name}")
        getattr(opts, field).CopyFrom(worker_info)
    if pixel_dtype is not None:
        opts.pixel_dtype = (_DTYPES[pixel_dtype.lower()] if isinstance(pixel_dtype, str)
                            else cast("pb.WireDtype", int(pixel_dtype)))
    if transport is not None:
        opts.transport = (_TRANSPORTS[transport.lower()] if isinstance(transport, str)
                          else cast("pb.TensorTransport", int(transport)))
    if shm_min_bytes is not None:
        opts.shm_min_bytes = int(shm_min_bytes)
    return opts


def image_options(min_pixels: int | None = None, max_pixels: int | None = None, max_tokens: int | None = None,
                  detail=None) -> pb.ImageOptions:
    """ImageOptions from values (None: unset, the model's); ``detail`` "auto" / "low" /
    "high" or the enum value. What each family honours: docs/REQUESTS.md."""
    opts = pb.ImageOptions()
    for name, value in (("min_pixels", min_pixels), ("max_pixels", max_pixels), ("max_tokens", max_tokens)):
        if value is not None:
            setattr(opts, name, int(value))
    if detail is not None:
        if isinstance(detail, str):
            if detail.lower() not in _DETAILS:
                raise ValueError(f"unknown detail {detail!r}; use one of {', '.join(_DETAILS)}")
            detail = _DETAILS[detail.lower()]
        opts.detail = cast("pb.Detail", int(detail))
    return opts


_VIDEO_FIELDS = ("fps", "num_frames", "min_frames", "max_frames", "min_pixels", "max_pixels", "max_tokens")


def video_options(fps: float | None = None, num_frames: int | None = None, min_frames: int | None = None,
                  max_frames: int | None = None, min_pixels: int | None = None, max_pixels: int | None = None,
                  max_tokens: int | None = None) -> pb.VideoOptions:
    """VideoOptions from values (None: unset, the model's video processor's own): frames
    sampled per second or exactly ``num_frames``, bounds on the frame count, each frame's
    pixel bounds, and the most tokens the whole video may expand into (docs/VIDEO.md)."""
    values = dict(zip(_VIDEO_FIELDS, (fps, num_frames, min_frames, max_frames, min_pixels, max_pixels, max_tokens)))
    opts = pb.VideoOptions()
    for name, value in values.items():
        if value is not None:
            setattr(opts, name, float(value) if name == "fps" else int(value))
    return opts


def _video_options_message(options) -> pb.VideoOptions | None:
    """``video_options`` accepted as a message, a ``VideoOptions`` value or a dict."""
    if options is None or isinstance(options, pb.VideoOptions):
        return options
    if isinstance(options, VideoOptions):
        return video_options(**options.as_dict())
    if isinstance(options, dict):
        return video_options(**options)
    raise TypeError(f"video options are pb.VideoOptions, VideoOptions or a dict, not {type(options).__name__}")


def audio_options(max_seconds: float | None = None) -> pb.AudioOptions:
    """AudioOptions from values (None: unset, the model's): keep only the clip's first
    ``max_seconds`` seconds."""
    opts = pb.AudioOptions()
    if max_seconds is not None:
        opts.max_seconds = float(max_seconds)
    return opts


def _audio_options_message(options) -> pb.AudioOptions | None:
    """``audio_options`` accepted as a message, an ``AudioOptions`` value or a dict."""
    if options is None or isinstance(options, pb.AudioOptions):
        return options
    if isinstance(options, AudioOptions):
        return audio_options(**options.as_dict())
    if isinstance(options, dict):
        return audio_options(**options)
    raise TypeError(f"audio options are pb.AudioOptions, AudioOptions or a dict, not {type(options).__name__}")


def audio_item(audio, *, options=None, bind_id: str = "") -> pb.MediaItem:
    """An audio clip's MediaItem: sources as ``media_item``; ``options``: this clip's
    ``audio_options``, over the request's."""
    item = media_item(audio, bind_id=bind_id)
    opts = _audio_options_message(options)
    if opts is not None:
        item.audio_options.CopyFrom(opts)
    return item


def video_item(video, *, options=None, bind_id: str = "") -> pb.MediaItem:
    """A video's MediaItem: sources as ``media_item`` (bytes, ``Path``, URL string or a
    MediaItem); ``options``: this video's ``video_options``, over the request's."""
    item = media_item(video, bind_id=bind_id)
    opts = _video_options_message(options)
    if opts is not None:
        item.video_options.CopyFrom(opts)
    return item


def _image_options_message(options) -> pb.ImageOptions | None:
    """``image_options`` accepted as a message, an ``ImageOptions`` value or a dict."""
    if options is None or isinstance(options, pb.ImageOptions):
        return options
    if isinstance(options, ImageOptions):
        return image_options(options.min_pixels, options.max_pixels, options.max_tokens, options.detail)
    if isinstance(options, dict):
        return image_options(**options)
    raise TypeError(f"image options are pb.ImageOptions, ImageOptions or a dict, not {type(options).__name__}")


def media_item(image, *, options=None, bind_id: str = "") -> pb.MediaItem:
    """bytes -> sent as data; ``Path`` -> read here and sent as data; str -> sent as it is,
    for the server to fetch or decode (a URL, a data URL, an absolute path on the server,
    or base64). A str naming a relative local file is refused here: pass a ``Path``.
    A ``pb.MediaItem`` is used as it is (e.g. ``pb.MediaItem(media_id=...)``).
    ``options``: this image's options (``image_options``), over the request's.
    ``bind_id``: name these bytes for later calls (``pb.MediaItem(media_id=bind_id)``)."""
    if isinstance(image, pb.MediaItem):
        item = pb.MediaItem()
        item.CopyFrom(image)
    elif isinstance(image, (bytes, bytearray, memoryview)):
        item = pb.MediaItem(data=bytes(image))
    elif isinstance(image, Path):
        item = pb.MediaItem(data=image.read_bytes())
    elif isinstance(image, str):
        if not _SCHEME.match(image) and not image.startswith("/") and os.path.isfile(image):
            raise ValueError(
                f"{image!r} is a local file, but a str is sent to the server as a URL, path or base64: "
                f"pass pathlib.Path({image!r}) (read and sent as bytes) or the bytes themselves")
        item = pb.MediaItem(url=image)
    else:
        raise TypeError(f"an image is bytes, a pathlib.Path, a URL string or a MediaItem, not {type(image).__name__}")
    opts = _image_options_message(options)
    if opts is not None:
        item.options.CopyFrom(opts)
    if bind_id:
        item.bind_id = bind_id
    return item


def missing_media(error: grpc.RpcError, key: str = MISSING_MEDIA_KEY) -> list[int] | None:
    """The image indexes a NOT_FOUND for media ids names (its trailing metadata), else
    None; with ``key=MISSING_VIDEOS_KEY`` the video indexes (``missing_videos``)."""
    if error.code() != grpc.StatusCode.NOT_FOUND:
        return None
    for name, value in error.trailing_metadata() or ():
        if name == key:
            text = value.decode() if isinstance(value, bytes) else value
            return [int(i) for i in text.split(",") if i.strip()]
    return None


def missing_videos(error: grpc.RpcError) -> list[int] | None:
    """The video indexes a NOT_FOUND for media ids names, else None."""
    return missing_media(error, MISSING_VIDEOS_KEY)


def missing_audios(error: grpc.RpcError) -> list[int] | None:
    """The audio clip indexes a NOT_FOUND for media ids names, else None."""
    return missing_media(error, MISSING_AUDIOS_KEY)


def payload_arrays(payload: pb.BackendPayload, read_shm=None) -> dict[str, np.ndarray]:
    """Every tensor of a payload by name, plus ``input_ids`` (int64); TokenSpeed's per item
    as ``items.<i>.<name>`` (its encoder input as ``items.<i>.encoder_input``). bfloat16
    tensors are widened to float32 (exactly). ``read_shm(handle) -> bytes`` reads tensors
    sent in shared memory (e.g. ``smg_grpc_servicer.mm_shm.tensor_payload_bytes_from_shm``,
    which removes the segment, as a worker does)."""
    arrays: dict[str, np.ndarray] = {}

    def put(name, td):
        a = tensors.to_array(td, read_shm)
        arrays[name] = tensors.bf16_as_float32(a) if td.dtype == "bfloat16" else a

    which = payload.WhichOneof("mm_inputs")
    if which in ("sglang", "vllm"):
        mm = getattr(payload, which)
        if mm.HasField("pixel_values"):
            put("pixel_values", mm.pixel_values)
        for name, td in mm.model_specific_tensors.items():
            put(name, td)
    elif which == "tokenspeed":
        for i, item in enumerate(payload.tokenspeed.items):
            if item.HasField("encoder_input"):
                put(f"items.{i}.encoder_input", item.encoder_input)
            for name, td in item.model_specific_tensors.items():
                put(f"items.{i}.{name}", td)
    for i, mm in enumerate(payload.vllm_extra):  # vLLM's further batches: extra.<i>.<name>
        if mm.HasField("pixel_values"):
            put(f"extra.{i}.pixel_values", mm.pixel_values)
        for name, td in mm.model_specific_tensors.items():
            put(f"extra.{i}.{name}", td)
    arrays["input_ids"] = np.asarray(payload.input_ids, dtype=np.int64)
    return arrays


class Client:
    def __init__(self, target, *, timeout: float | None = 60.0, max_message_bytes: int = 512 * MiB,
                 tls: bool = False, tls_ca: str | None = None, tls_cert: str | None = None,
                 tls_key: str | None = None, tls_server_name: str | None = None, token: str | None = None,
                 resolve: bool = False, health_interval: float = 1.0, channel_options: list | None = None,
                 media_ids=False, media_memory: int = 4096):
        """``target``: ``"host:port"``, several (a list or comma-separated), or with
        ``resolve`` a DNS name standing for all its addresses. ``tls``: TLS with the
        system's CAs (``tls_ca``: trust this CA file instead; ``tls_cert``/``tls_key``:
        client certificate for mTLS). ``token``: sent as ``authorization: Bearer``.
        ``channel_options``: more grpc channel arguments, e.g. ``[("grpc.use_local_subchannel_pool",
        1)]`` for a connection of its own (channels to one target otherwise share one, which
        ``serve --processes`` then cannot spread over its processes).
        ``media_ids``: send images and videos given as bytes (or a ``Path``) by their
        blake3 hash (``MediaItem.media_id``) and resend as data, at once and once, those
        the server answers it does not hold. True (or "always"): every such item goes by
        its hash first (the server may hold it from any caller; a new one costs one small
        extra call); "known": only items this client has sent before (the
        ``media_memory`` latest), the others as data. False: always as data."""
        self.target = target if isinstance(target, str) else ",".join(target)
        self.timeout = timeout
        self.endpoints = Endpoints(
            target,
            options=[
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes),
                *(channel_options or ()),
            ],
            tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, tls_server_name=tls_server_name,
            token=token, resolve=resolve, health_interval=health_interval,
        )
        if media_ids not in (False, True, "always", "known"):
            raise ValueError(f"media_ids is False, True, 'always' or 'known', not {media_ids!r}")
        self.media_ids = "always" if media_ids is True else media_ids
        self._media_memory = int(media_memory)
        self._sent: OrderedDict[str, None] = OrderedDict()  # hashes a server accepted from us
        self._sent_lock = threading.Lock()
        first = self.endpoints.endpoints[0]
        self._channel = first.channel  # the first target's (with one target: the only one)
        self.stub = first.stub
        self._health = first.health

    @raising_remote_errors
    def preprocess(
        self,
        model: str,
        images: Iterable,
        input_ids: Sequence[int] | None = None,
        backend=None,
        *,
        keep_handle: bool = False,
        request_id: str = "",
        timeout: float | None = None,
        max_image_tokens: int | None = None,
        options: pb.PayloadOptions | None = None,
        image_options=None,
        videos: Iterable = (),
        video_options=None,
        audios: Iterable = (),
        audio_options=None,
    ) -> pb.PreprocessResponse:
        """Preprocess ``images``; with ``backend`` the payload comes back in the response.

        ``input_ids`` None: the server assumes one placeholder per image and nothing else.
        Without ``backend`` (or with ``keep_handle``) the response's ``handle`` names the
        kept intermediate for ``assemble``. ``max_image_tokens``: this request's token
        budget per image (None: the model's, ``ModelInfo.max_image_tokens``); an image
        over it fails the call with RESOURCE_EXHAUSTED. ``options`` (``payload_options``):
        the payload's pixel dtype and tensor transport; without a backend, a hint that
        stages the pixel tensor in shared memory for the Assemble to come.
        ``image_options`` (``image_options(...)``, an ``ImageOptions`` or a dict): what this
        request asks of every image (pixel bounds, a token budget, detail); an image's own
        (``media_item(image, options=...)``) override them field by field.
        ``videos``: bytes, ``Path``, URL strings or ``video_item(...)``s, one video
        placeholder each in ``input_ids``; ``video_options`` (``video_options(...)``, a
        ``VideoOptions`` or a dict): what this request asks of every video. ``audios`` and
        ``audio_options`` likewise (``audio_item(...)``, ``audio_options(...)``), one audio
        placeholder each.
        """
        req = pb.PreprocessRequest(
            request_id=request_id,
            model=model,
            input_ids=list(input_ids or ()),
            backend=backend_value(backend),
            keep_handle=keep_handle,
            max_image_tokens=max_image_tokens or 0,
            payload_options=options,
            image_options=_image_options_message(image_options),
            video_options=_video_options_message(video_options),
            audio_options=_audio_options_message(audio_options),
        )
        return self._with_media("Preprocess", req, images, self._timeout(timeout), videos, audios)

    @raising_remote_errors
    def plan(self, model: str, images: Iterable, input_ids: Sequence[int] | None = None, *, request_id: str = "",
             timeout: float | None = None, max_image_tokens: int | None = None,
             image_options=None, videos: Iterable = (), video_options=None,
             options: pb.PayloadOptions | None = None, audios: Iterable = (), audio_options=None) -> pb.PlanResponse:
        """What ``preprocess`` with the same images, ids and options would produce, from the
        image headers alone: per image (``images``) its hash, sizes, grid, token count,
        ranges, effective options and ``cached``, and ``input_ids_length``. Nothing is
        decoded or kept; the server keeps the bytes for media ids. ``videos``: per video the
        same from its container header (``PlanResponse.videos``). ``options``: the payload
        options the Preprocess will carry (a worker's item limits and encoder budget are
        then checked here too)."""
        req = pb.PreprocessRequest(request_id=request_id, model=model, input_ids=list(input_ids or ()),
                                   max_image_tokens=max_image_tokens or 0, payload_options=options,
                                   image_options=_image_options_message(image_options),
                                   video_options=_video_options_message(video_options),
                                   audio_options=_audio_options_message(audio_options))
        return self._with_media("Plan", req, images, self._timeout(timeout), videos, audios)

    def _with_media(self, method: str, req: pb.PreprocessRequest, images: Iterable, timeout, videos: Iterable = (),
                    audios: Iterable = ()):
        """Call ``method`` with the images and videos; with ``media_ids``, bytes go by hash
        and the ones the server does not hold (its trailers list images and videos apart)
        are sent again as data (each at most once: an id that the server held at first and
        lost before the resend is resent too)."""
        digests: list[str] = []
        by_hash = {  # field -> {index: (bytes, hash)} of the items sent by hash (for a resend)
            "images": self._add_items(req.images, images, media_item, "options", digests),
            "videos": self._add_items(req.videos, videos, video_item, "video_options", digests),
            "audios": self._add_items(req.audios, audios, audio_item, "audio_options", digests),
        }
        while True:
            try:
                resp = self.endpoints.call_any(method, req, timeout)
                break
            except grpc.RpcError as e:
                if not any(by_hash.values()):
                    raise
                missing = {"images": missing_media(e) or [], "videos": missing_videos(e) or [],
                           "audios": missing_audios(e) or []}
                if not any(missing.values()) or any(i not in by_hash[f] for f, ix in missing.items() for i in ix):
                    raise  # not ids sent for bytes this call has
                for f, ix in missing.items():  # as data from now on (the loop ends: each item goes once)
                    for i in ix:
                        data, digest = by_hash[f].pop(i)
                        item = getattr(req, f)[i]
                        item.ClearField("media_id")
                        item.data = bytes(data)
                        self._forget(digest)
        self._remember(digests)
        return resp

    def _add_items(self, into, sources: Iterable, make_item, options_field: str, digests: list) -> dict:
        """Append each source's MediaItem to ``into`` (``req.images`` / ``req.videos``):
        with ``media_ids``, bytes (not bound to a client id) by their hash when
        ``media_ids`` says so. Returns {index: (bytes, hash)} of those sent by hash;
        ``digests`` gets every hash computed."""
        by_hash: dict[int, tuple] = {}
        for i, source in enumerate(sources):
            raw = self.media_ids and isinstance(source, (bytes, bytearray, memoryview, Path))
            item = None if raw else make_item(source)
            if item is not None and not (self.media_ids and item.WhichOneof("source") == "data" and not item.bind_id):
                into.append(item)
                continue
            # bytes this call may send by their hash
            data = item.data if item is not None else source.read_bytes() if isinstance(source, Path) else source
            digest = content_hash(data)
            digests.append(digest)
            if self.media_ids == "always" or self._was_sent(digest):
                by_hash[i] = (data, digest)
                by_id = into.add(media_id=digest)
                if item is not None and item.HasField(options_field):
                    getattr(by_id, options_field).CopyFrom(getattr(item, options_field))
            elif item is not None:
                into.append(item)
            else:
                into.add(data=bytes(data))
        return by_hash

    def _was_sent(self, digest: str) -> bool:
        with self._sent_lock:
            if digest in self._sent:
                self._sent.move_to_end(digest)
                return True
            return False

    def _remember(self, digests) -> None:
        with self._sent_lock:
            for d in digests:
                self._sent[d] = None
                self._sent.move_to_end(d)
            while len(self._sent) > self._media_memory:
                self._sent.popitem(last=False)

    def _forget(self, digest: str) -> None:
        with self._sent_lock:
            self._sent.pop(digest, None)

    @raising_remote_errors
    def assemble(self, handle: str, backend, *, release: bool = False, timeout: float | None = None,
                 options: pb.PayloadOptions | None = None) -> pb.BackendPayload:
        req = pb.AssembleRequest(handle=handle, backend=backend_value(backend), release=release,
                                 payload_options=options)
        return self.endpoints.call_owner(handle, "Assemble", req, self._timeout(timeout)).payload

    @raising_remote_errors
    def server_info(self, *, timeout: float | None = None) -> pb.GetServerInfoResponse:
        """The server's /dev/shm identity (compare a worker's GetServerInfo.shm_namespace_id
        with ``shm_namespace_id``), transport defaults and shared-memory counters."""
        return self.stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=self._timeout(timeout))

    @raising_remote_errors
    def release(self, handle: str, *, timeout: float | None = None) -> bool:
        return self.endpoints.call_owner(handle, "Release", pb.ReleaseRequest(handle=handle),
                                         self._timeout(timeout)).released

    @raising_remote_errors
    def list_models(self, *, timeout: float | None = None) -> list[pb.ModelInfo]:
        return list(self.endpoints.call_any("ListModels", pb.ListModelsRequest(), self._timeout(timeout)).models)

    @raising_remote_errors
    def stats(self, *, timeout: float | None = None) -> dict[str, pb.GetStatsResponse]:
        """GetStats of every target (each summed over its processes), by target."""
        out = {}
        for ep in list(self.endpoints.endpoints):
            out[ep.target] = ep.stub.GetStats(pb.GetStatsRequest(), timeout=self._timeout(timeout))
        return out

    @raising_remote_errors
    def health(self, service: str = "", *, timeout: float | None = 5.0) -> str:
        """SERVING, NOT_SERVING, SERVICE_UNKNOWN or UNKNOWN (raises RemoteError if unreachable)."""
        resp = self._health.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)

    def wait_until_serving(self, timeout: float = 120.0, *, service: str = "") -> None:
        """Poll health until every target says SERVING; TimeoutError after ``timeout`` seconds."""
        end = time.monotonic() + timeout
        waiting = {ep.target: "unreachable" for ep in self.endpoints.endpoints}
        while time.monotonic() < end:
            for ep in list(self.endpoints.endpoints):
                if ep.target in waiting:
                    try:
                        resp = ep.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=2.0)
                        waiting[ep.target] = health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)
                    except grpc.RpcError as e:
                        waiting[ep.target] = e.code().name
                    if waiting[ep.target] == "SERVING":
                        del waiting[ep.target]
            if not waiting:
                return
            time.sleep(0.1)
        raise TimeoutError(f"not SERVING after {timeout:.0f}s: {waiting}")

    def close(self) -> None:
        self.endpoints.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _timeout(self, timeout: float | None) -> float | None:
        return self.timeout if timeout is None else timeout
