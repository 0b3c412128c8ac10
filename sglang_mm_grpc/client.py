"""A small synchronous client for the MultimodalPreprocessor service.

    with Client("127.0.0.1:50061") as c:
        r = c.preprocess("Qwen/Qwen2-VL-7B-Instruct", [jpeg_bytes], backend="vllm")
        r.payload.vllm          # put into vllm GenerateRequest.mm_inputs
        r.payload.input_ids     # and these into its tokenized.input_ids

Failures raise ``grpc.RpcError`` (``.code()``, ``.details()``) as the server sent them.

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
import time
from pathlib import Path
from typing import Iterable, Sequence

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc

from . import tensors
from .endpoints import Endpoints
from ._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc

MiB = 1 << 20
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_BACKENDS = {"sglang": pb.BACKEND_SGLANG, "vllm": pb.BACKEND_VLLM, "trtllm": pb.BACKEND_TRTLLM,
             "tokenspeed": pb.BACKEND_TOKENSPEED}
_DTYPES = {"float32": pb.WIRE_DTYPE_FLOAT32, "bfloat16": pb.WIRE_DTYPE_BFLOAT16, "float16": pb.WIRE_DTYPE_FLOAT16,
           "bf16": pb.WIRE_DTYPE_BFLOAT16, "fp16": pb.WIRE_DTYPE_FLOAT16}
_TRANSPORTS = {"inline": pb.TENSOR_TRANSPORT_INLINE, "shm": pb.TENSOR_TRANSPORT_SHM, "auto": pb.TENSOR_TRANSPORT_AUTO}


def backend_value(backend) -> int:
    """``"sglang"`` / ``"BACKEND_SGLANG"`` / the enum number -> the enum number."""
    if backend is None:
        return pb.BACKEND_UNSPECIFIED
    if isinstance(backend, str):
        key = backend.lower().removeprefix("backend_")
        if key not in _BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(_BACKENDS)}")
        return _BACKENDS[key]
    return int(backend)


def payload_options(pixel_dtype=None, transport=None, shm_min_bytes: int | None = None,
                    shm_namespace_id: str = "") -> pb.PayloadOptions:
    """PayloadOptions from names (``"bfloat16"``, ``"shm"``) or enum values; None: unspecified
    (the backend's dtype, the server's transport and minimum size)."""
    opts = pb.PayloadOptions(shm_namespace_id=shm_namespace_id or "")
    if pixel_dtype is not None:
        opts.pixel_dtype = _DTYPES[pixel_dtype.lower()] if isinstance(pixel_dtype, str) else int(pixel_dtype)
    if transport is not None:
        opts.transport = _TRANSPORTS[transport.lower()] if isinstance(transport, str) else int(transport)
    if shm_min_bytes is not None:
        opts.shm_min_bytes = int(shm_min_bytes)
    return opts


def media_item(image) -> pb.MediaItem:
    """bytes -> sent as data; ``Path`` -> read here and sent as data; str -> sent as it is,
    for the server to fetch or decode (a URL, a data URL, an absolute path on the server,
    or base64). A str naming a relative local file is refused here: pass a ``Path``."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return pb.MediaItem(data=bytes(image))
    if isinstance(image, Path):
        return pb.MediaItem(data=image.read_bytes())
    if isinstance(image, str):
        if not _SCHEME.match(image) and not image.startswith("/") and os.path.isfile(image):
            raise ValueError(
                f"{image!r} is a local file, but a str is sent to the server as a URL, path or base64: "
                f"pass pathlib.Path({image!r}) (read and sent as bytes) or the bytes themselves")
        return pb.MediaItem(url=image)
    raise TypeError(f"an image is bytes, a pathlib.Path or a URL string, not {type(image).__name__}")


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
    arrays["input_ids"] = np.asarray(payload.input_ids, dtype=np.int64)
    return arrays


class Client:
    def __init__(self, target, *, timeout: float | None = 60.0, max_message_bytes: int = 512 * MiB,
                 tls: bool = False, tls_ca: str | None = None, tls_cert: str | None = None,
                 tls_key: str | None = None, tls_server_name: str | None = None, token: str | None = None,
                 resolve: bool = False, health_interval: float = 1.0, channel_options: list | None = None):
        """``target``: ``"host:port"``, several (a list or comma-separated), or with
        ``resolve`` a DNS name standing for all its addresses. ``tls``: TLS with the
        system's CAs (``tls_ca``: trust this CA file instead; ``tls_cert``/``tls_key``:
        client certificate for mTLS). ``token``: sent as ``authorization: Bearer``.
        ``channel_options``: more grpc channel arguments, e.g. ``[("grpc.use_local_subchannel_pool",
        1)]`` for a connection of its own (channels to one target otherwise share one, which
        ``serve --processes`` then cannot spread over its processes)."""
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
        first = self.endpoints.endpoints[0]
        self._channel = first.channel  # the first target's (with one target: the only one)
        self.stub = first.stub
        self._health = first.health

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
    ) -> pb.PreprocessResponse:
        """Preprocess ``images``; with ``backend`` the payload comes back in the response.

        ``input_ids`` None: the server assumes one placeholder per image and nothing else.
        Without ``backend`` (or with ``keep_handle``) the response's ``handle`` names the
        kept intermediate for ``assemble``. ``max_image_tokens``: this request's token
        budget per image (None: the model's, ``ModelInfo.max_image_tokens``); an image
        over it fails the call with RESOURCE_EXHAUSTED. ``options`` (``payload_options``):
        the payload's pixel dtype and tensor transport; without a backend, a hint that
        stages the pixel tensor in shared memory for the Assemble to come.
        """
        req = pb.PreprocessRequest(
            request_id=request_id,
            model=model,
            input_ids=list(input_ids or ()),
            images=[media_item(im) for im in images],
            backend=backend_value(backend),
            keep_handle=keep_handle,
            max_image_tokens=max_image_tokens or 0,
            payload_options=options,
        )
        return self.endpoints.call_any("Preprocess", req, self._timeout(timeout))

    def assemble(self, handle: str, backend, *, release: bool = False, timeout: float | None = None,
                 options: pb.PayloadOptions | None = None) -> pb.BackendPayload:
        req = pb.AssembleRequest(handle=handle, backend=backend_value(backend), release=release,
                                 payload_options=options)
        return self.endpoints.call_owner(handle, "Assemble", req, self._timeout(timeout)).payload

    def server_info(self, *, timeout: float | None = None) -> pb.GetServerInfoResponse:
        """The server's /dev/shm identity (compare a worker's GetServerInfo.shm_namespace_id
        with ``shm_namespace_id``), transport defaults and shared-memory counters."""
        return self.stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=self._timeout(timeout))

    def release(self, handle: str, *, timeout: float | None = None) -> bool:
        return self.endpoints.call_owner(handle, "Release", pb.ReleaseRequest(handle=handle),
                                         self._timeout(timeout)).released

    def list_models(self, *, timeout: float | None = None) -> list[pb.ModelInfo]:
        return list(self.endpoints.call_any("ListModels", pb.ListModelsRequest(), self._timeout(timeout)).models)

    def stats(self, *, timeout: float | None = None) -> dict[str, pb.GetStatsResponse]:
        """GetStats of every target (each summed over its processes), by target."""
        out = {}
        for ep in list(self.endpoints.endpoints):
            out[ep.target] = ep.stub.GetStats(pb.GetStatsRequest(), timeout=self._timeout(timeout))
        return out

    def health(self, service: str = "", *, timeout: float | None = 5.0) -> str:
        """SERVING, NOT_SERVING, SERVICE_UNKNOWN or UNKNOWN (raises grpc.RpcError if unreachable)."""
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
