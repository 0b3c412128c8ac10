"""A backend's payload assembled into its response and serialized, in a pool thread.

Two callers: a one-shot Preprocess (``backend`` set), whose response carries the payload
next to everything else, and an Assemble of a kept result. Either way the kept result
owns the segments the payload handed out; a payload over the send limit is
RESOURCE_EXHAUSTED (``Transport.serialize``).
"""

from __future__ import annotations

import time

from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..core.carriers import PreprocessOutput
from ..wire import assemble as asm
from .kept import Kept
from .transport import Resolved, Transport


class Payloads:
    """Payloads written through the server's transport (its segments and send limit)."""

    def __init__(self, transport: Transport):
        self.transport = transport

    def with_response(self, resp, out: PreprocessOutput, layouts: tuple, backend, t0: float,
                      resolved: Resolved, staged, kept: Kept | None) -> tuple[bytes, float]:
        """(``resp`` with the payload for ``backend``, serialized; ms spent assembling).
        ``layouts``: the model's (image, video) field layouts, its images' default options
        and its audio field layout."""
        ta = time.perf_counter()
        assembled = asm.assemble(out, backend, layouts[0], into=resp.payload, options=resolved.wire,
                                 arena=self.transport.arena, staged=staged, video_field_layout=layouts[1],
                                 image_defaults=layouts[2], audio_field_layout=layouts[3],
                                 expanded_ids=resp.input_ids)
        now = time.perf_counter()
        assemble_ms = resp.timings.assemble_ms = (now - ta) * 1e3
        resp.timings.total_ms = (now - t0) * 1e3
        data = self.transport.serialize(resp, assembled)
        if kept is not None:
            kept.copied(assembled.segments)
        return data, assemble_ms

    def of_kept(self, kept: Kept, backend: int, resolved: Resolved) -> bytes:
        """An AssembleResponse with ``kept``'s payload for ``backend``, serialized."""
        resp = pb.AssembleResponse()
        assembled = asm.assemble(kept.output, backend, kept.field_layout, into=resp.payload, options=resolved.wire,
                                 arena=self.transport.arena, staged=kept.staged,
                                 video_field_layout=kept.video_field_layout, image_defaults=kept.image_defaults,
                                 audio_field_layout=kept.audio_field_layout)
        data = self.transport.serialize(resp, assembled)
        kept.copied(assembled.segments)
        return data
