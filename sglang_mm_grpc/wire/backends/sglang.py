"""SGLang (``sglang.grpc.scheduler``): float32 ``pixel_values`` of all images, model-specific
tensors as float32 or int64 only (servicers before smg-grpc-servicer 0.14 read any other
dtype string as float32), patch-only ranges, ``im_token_id``, the encoded images in
``image_data``, ``modalities=["image"]``, expanded ids. Its ``TensorData`` has plain
``data`` bytes: no shared memory, no narrower dtype, no raw pixels; no videos
(docs/WIRE_CURRENT.md has the evidence)."""

from __future__ import annotations

import numpy as np

from .. import tensors, serialize as wire
from ..._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ...core.errors import Code, PreprocessError
from ..payload import Backend, Job, Placer, as_int64, patch_runs, token_id

_PIXELS = wire.field_path(pb.BackendPayload, ("sglang", "pixel_values", "data"))


def build(job: Job, payload: pb.BackendPayload, place: Placer) -> None:
    out, msg = job.out, payload.sglang
    msg.modalities.append("image")
    msg.image_data.extend(out.raw_images)
    place.large(msg.pixel_values, _PIXELS, out.pixel_values, "float32")
    for name, arr in out.tensors.items():
        tensors.fill(msg.model_specific_tensors[name], _tensor(name, arr))
    msg.im_token_id = token_id(out.image_token_id)
    for im in out.images:
        for offset, length in patch_runs(im):
            msg.mm_placeholders.add(offset=offset, length=length)


def _tensor(name: str, arr: np.ndarray) -> np.ndarray:
    """float32 or int64: SGLang's older servicers read every other dtype string as float32."""
    if arr.dtype.kind == "f":
        return arr.astype(np.float32, copy=False)
    if arr.dtype.kind in "iub":
        return as_int64(name, arr)
    raise PreprocessError(Code.INTERNAL, f"tensor {name!r} has dtype {arr.dtype}, which SGLang cannot take")


BACKEND = Backend(
    name="sglang", enum=pb.BACKEND_SGLANG, label="SGLang", build=build, default_dtype="float32",
    pixel_dtypes=("float32",),
    dtype_refusal=(
        "SGLang payloads carry float32 pixel values only: SGLang's servicer before smg-grpc-servicer 0.14 "
        "reads any dtype but float32 and int64 as float32 bytes, and the gateway sends it float32; "
        "ask for WIRE_DTYPE_FLOAT32 (or leave it unspecified), or use vLLM or TokenSpeed for {dtype}"
    ),
    no_shm="its TensorData (sglang_scheduler.proto) has only inline data bytes",
    no_raw="its servicer hands pixel_values to the model as the normalized tensor its own processor "
           "would make, and SGLang normalizes no pixels on the device",
    # smg_grpc_servicer/sglang/servicer.py `_parse_mm_inputs` turns every payload into one
    # MultimodalDataItem with modality=IMAGE from pixel_values and never reads video_data,
    # video_urls or modalities; the gateway routes no video to SGLang either
    # (model_gateway/src/routers/grpc/multimodal/capability.rs).
    no_video="SGLang's gRPC servicer takes images only (a video's tensors would reach its image encoder)",
    no_audio="SGLang's gRPC servicer (smg-grpc-servicer 0.14.1) builds every preprocessed item as an image",
)
