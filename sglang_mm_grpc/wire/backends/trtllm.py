"""TensorRT-LLM (``trtllm``): the encoded images and the unexpanded ids; it decodes the ids
back to text and runs its own processor, which expands the placeholders. So no tensor,
no pixel dtype, no shared memory; no videos (its servicer takes images only)."""

from __future__ import annotations

from ..._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..payload import Backend, Job, Placer

_NO_TENSORS = "it receives the encoded images, not tensors"


def build(job: Job, payload: pb.BackendPayload, place: Placer) -> None:
    payload.trtllm.SetInParent()  # present even when empty, so the payload's oneof is set
    payload.trtllm.image_data.extend(job.out.raw_images)


BACKEND = Backend(
    name="trtllm", enum=pb.BACKEND_TRTLLM, label="TensorRT-LLM", build=build, default_dtype="",
    own_processor=True,
    pixel_dtypes=("", "float32"),
    dtype_refusal=(
        "TensorRT-LLM payloads carry the encoded images, not tensors: pixel_dtype {dtype} does not apply; "
        "leave it unspecified"
    ),
    no_shm=_NO_TENSORS,
    no_raw=_NO_TENSORS,
    # trtllm_service.proto's MultimodalInput carries only image_data, and
    # tensorrt_llm/grpc/smg/servicer.py passes multi_modal_data={'image': ...} to the engine.
    no_video="TensorRT-LLM's gRPC servicer takes images only",
    no_audio="TensorRT-LLM's MultimodalInput (trtllm_service.proto) carries image_data only",
)
