"""The other processes of one ``serve --processes N``: forwarding to a handle's owner, and
GetStats for the whole replica.

Each process also listens on a private Unix socket (``address(dir, i)``, in a directory
only the server's user can enter). ``Assemble``/``Release`` for a handle kept by a
sibling are forwarded there with the caller's authorization, identity and remaining deadline, and
the owner's answer (its status, or its serialized response as it is) goes back
unchanged. A forwarded call is never forwarded again. ``GetStats`` asks every sibling
for its own counters and answers with the sums (``merge_stats``); metadata
``sglang-mm-stats-scope: process`` asks for the answering process's counters alone.
"""

from __future__ import annotations

import asyncio
import logging
import os

import grpc

from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..service.callers import CALLER, FORWARDED
from ..core.errors import Code, PreprocessError
from .gate import AUTHORIZATION
from ..core.owners import short
from ..service.servicer import SERVICE_NAME

log = logging.getLogger(__name__)

SCOPE = "sglang-mm-stats-scope"
PROCESSES = "sglang-mm-stats-processes"  # trailing metadata: how many processes the answer covers
_STATS_TIMEOUT_S = 2.0


def address(directory: str, index: int) -> str:
    return f"unix:{os.path.join(directory, f'p{index}.sock')}"


def _metadata(context) -> dict[str, str]:
    return {k: (v.decode("latin-1") if isinstance(v, bytes) else v) for k, v in context.invocation_metadata() or ()}


class Siblings:
    def __init__(self, index: int, count: int, directory: str, max_message_bytes: int):
        self.index, self.count, self.directory = index, count, directory
        self._options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
        ]
        self._channels: dict[int, grpc.aio.Channel] = {}

    @property
    def own_address(self) -> str:
        return address(self.directory, self.index)

    def _channel(self, i: int) -> grpc.aio.Channel:
        ch = self._channels.get(i)
        if ch is None:
            ch = self._channels[i] = grpc.aio.insecure_channel(address(self.directory, i), options=self._options)
        return ch

    async def forward(self, process: int, method: str, request, context, caller: str = "") -> bytes:
        """``method`` (Assemble or Release) on sibling ``process`` for ``caller`` (the
        identity the handle must belong to, ``callers.identity``); its serialized response."""
        md = _metadata(context)
        handle = getattr(request, "handle", "")
        if FORWARDED in md:
            raise PreprocessError(Code.NOT_FOUND, f"handle {short(handle)} is not kept by the process it names")
        if not 0 <= process < self.count:
            raise PreprocessError(
                Code.NOT_FOUND,
                f"handle {short(handle)} names process {process}, but this replica runs {self.count} "
                f"(0-{self.count - 1}): call Preprocess again",
            )
        outgoing = [(FORWARDED, str(self.index)), (CALLER, caller)]
        if AUTHORIZATION in md:
            outgoing.append((AUTHORIZATION, md[AUTHORIZATION]))
        call = self._channel(process).unary_unary(
            f"/{SERVICE_NAME}/{method}", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=lambda b: b,
        )
        try:
            return await call(request, timeout=context.time_remaining(), metadata=outgoing)
        except grpc.aio.AioRpcError as e:
            name = e.code().name
            code = Code(name) if name in Code.__members__ else Code.INTERNAL
            detail = e.details() or name
            if e.code() is grpc.StatusCode.UNAVAILABLE:
                detail = f"process {process} of this replica, which keeps handle {short(handle)}, " \
                         f"did not answer ({detail})"
            raise PreprocessError(code, detail) from None

    async def stats(self, own: pb.GetStatsResponse, context) -> pb.GetStatsResponse:
        """``own`` summed with every sibling's counters (unless asked for one process)."""
        md = _metadata(context)
        if md.get(SCOPE) == "process" or self.count == 1:
            _add_trailing(context, ((PROCESSES, "1"),))
            return own
        others = [i for i in range(self.count) if i != self.index]
        outgoing = [(SCOPE, "process")] + ([(AUTHORIZATION, md[AUTHORIZATION])] if AUTHORIZATION in md else [])

        async def one(i: int):
            stub = self._channel(i).unary_unary(
                f"/{SERVICE_NAME}/GetStats", request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=pb.GetStatsResponse.FromString,
            )
            return await stub(pb.GetStatsRequest(), timeout=_STATS_TIMEOUT_S, metadata=outgoing)

        answers = await asyncio.gather(*(one(i) for i in others), return_exceptions=True)
        parts = [own] + [a for a in answers if isinstance(a, pb.GetStatsResponse)]
        missing = [i for i, a in zip(others, answers) if not isinstance(a, pb.GetStatsResponse)]
        if missing:
            log.info("GetStats: processes %s did not answer; their counters are left out", missing)
        _add_trailing(context, ((PROCESSES, str(len(parts))),))
        return merge_stats(parts)

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for ch in channels:
            await ch.close()


def _add_trailing(context, metadata) -> None:
    context.set_trailing_metadata(tuple(context.trailing_metadata() or ()) + tuple(metadata))


# GetStatsResponse fields that are not summed: the longest uptime, the same bucket bounds.
_MAX = {"uptime_s"}
_KEEP = {"upper_bounds_ms"}
# Repeated messages merged by key (the rest are appended).
_KEYS = {"statuses": lambda m: (m.method, m.code), "stages": lambda m: m.stage}


def merge_stats(parts: list[pb.GetStatsResponse]) -> pb.GetStatsResponse:
    """The sum of several processes' counters: every count, byte total, gauge (in flight,
    items) and limit (max_in_flight, max_bytes) added; histograms added bucket by bucket;
    peaks are the sum of the per-process peaks; ``uptime_s`` the longest."""
    out = pb.GetStatsResponse()
    for part in parts:
        _add(out, part)
    return out


def _add(acc, msg) -> None:
    for fd, value in msg.ListFields():
        name = fd.name
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            target = getattr(acc, name)
            for k, v in value.items():
                target[k] += v
        elif fd.message_type is not None and fd.is_repeated:
            target = getattr(acc, name)
            key = _KEYS.get(name)
            index = {key(m): m for m in target} if key else {}
            for item in value:
                existing = index.get(key(item)) if key else None
                if existing is None:
                    target.add().CopyFrom(item)
                    if key:
                        index[key(item)] = target[-1]
                else:
                    _add(existing, item)
        elif fd.message_type is not None:
            _add(getattr(acc, name), value)
        elif fd.is_repeated:
            target = getattr(acc, name)
            if name in _KEEP or not len(target):
                if not len(target):
                    target.extend(value)
                continue
            for i, v in enumerate(value):
                if i < len(target):
                    target[i] += v
                else:
                    target.append(v)
        elif isinstance(value, str):
            if not getattr(acc, name):
                setattr(acc, name, value)
        elif name in _MAX:
            setattr(acc, name, max(getattr(acc, name), value))
        else:
            setattr(acc, name, getattr(acc, name) + value)
