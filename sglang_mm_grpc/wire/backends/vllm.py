"""vLLM (``vllm.grpc.engine``): one ``MultimodalInputs`` batch per modality. ``TensorData``
has its ``payload`` oneof always set (``inline`` or ``shm``, zero-size tensors included).
A batch carries structural ranges (one per item), the items' hashes as ``mm_hashes``, the
family's field layout as ``batched_keys``/``flat_keys`` (every sizes tensor sent),
``keep_on_cpu_keys`` as vLLM declares them for the model, ``modality``, ``im_token_id``
(the image or video token: its is_embed mask); the payload has the expanded ids. Pixel
tensors go as float32 (default), bfloat16 or float16, or raw uint8 for an engine that
normalizes on the device (an output preprocessed raw: its pixels are uint8, and they go
on the wire as uint8 only).

Images: ``modality=IMAGE``, ``encoder_input_key`` where the model's kwarg for the pixel
tensor is not ``pixel_values`` (and that name in the layout keys). Videos:
``modality=VIDEO``, the pixels in ``pixel_values`` (the servicer registers them as
``pixel_values_videos``; the layout keys name them ``pixel_values``, as the gateway
does), the video tensors (``video_grid_thw``, ``patches_per_video``, Qwen2.5-VL's
``second_per_grid_ts``) laid out by the family's ``video_field_layout``. The first batch
goes in ``vllm`` (``mm_inputs``); videos with images go to ``vllm_extra``
(``GenerateRequest.extra_mm_inputs``, read by ``mm_keys.mm_batches``)."""

from __future__ import annotations

import numpy as np
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import vllm_engine_pb2 as vllm_pb

from .. import serialize as wire
from ..._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ...core.errors import Code, PreprocessError
from ..payload import Backend, Job, Placer, Source, sources, token_id, vllm_tensor

_PIXELS = wire.field_path(pb.BackendPayload, ("vllm", "pixel_values", "inline"))
_EXTRA = pb.BackendPayload.DESCRIPTOR.fields_by_name["vllm_extra"].number
_EXTRA_PIXELS = wire.field_path(vllm_pb.MultimodalInputs, ("pixel_values", "inline"))


def build(job: Job, payload: pb.BackendPayload, place: Placer) -> None:
    """The images' batch, then the videos'. A second batch is one ``vllm_extra`` entry,
    which travels whole in the tail (a repeated field's occurrences do not merge), its
    pixel tensor appended inside it."""
    for n, src in enumerate(sources(job, "this model declares no vLLM layout for its video tensors")):
        if n == 0:
            _batch(src, payload.vllm, place, job.dtype, _PIXELS)
            continue
        batch = vllm_pb.MultimodalInputs()
        place.res.tail.append(place.whole(_EXTRA, batch, lambda: _batch(src, batch, place, job.dtype, _EXTRA_PIXELS)))


def _batch(src: Source, msg: vllm_pb.MultimodalInputs, place: Placer, dtype: str, path: tuple[int, ...]) -> None:
    """One modality's batch, its pixel tensor placed at ``path`` of the message it travels in."""
    video = src.modality == common_pb2.VIDEO
    if not video:
        _check_unpadded(src)
    # the name the batch gives its pixel tensor: the model's kwarg for images; "pixel_values" for videos
    pixels_name = "pixel_values" if video else (getattr(src.layout, "encoder_input_key", "") or "pixel_values")

    def wire_key(k: str) -> str:
        return pixels_name if k == src.pixels_key else k

    msg.modality = src.modality
    if pixels_name != "pixel_values":
        msg.encoder_input_key = pixels_name
    msg.mm_hashes.extend(src.item_hash(r) for r in src.results)
    place.large(msg.pixel_values, path, src.pixels, dtype)
    for name, arr in src.tensors.items():
        place.small(msg.model_specific_tensors[name], vllm_tensor(name, arr))
    _keys(msg, src, wire_key, "video tensor" if video else "tensor")
    msg.im_token_id = token_id(src.token_id)
    for item in src.results:
        offset, length = item.structural_range
        msg.mm_placeholders.add(offset=offset, length=length)


def _keys(msg: vllm_pb.MultimodalInputs, src: Source, wire_key, what: str) -> None:
    """The batch's batched / flat / keep-on-CPU keys: the layout's keys of the tensors
    present (the pixels and ``src.tensors``), named as on the wire."""
    layout = src.layout
    present = {src.pixels_key, *src.tensors}
    msg.batched_keys.extend(wire_key(k) for k in layout.batched if k in present)
    for k, sizes_key in layout.flat.items():
        if k not in present:
            continue
        if sizes_key not in src.tensors:
            raise PreprocessError(
                Code.INTERNAL, f"vLLM layout splits {k!r} by {sizes_key!r}, but no such {what} was produced"
            )
        msg.flat_keys[wire_key(k)] = wire_key(sizes_key)
    msg.keep_on_cpu_keys.extend(wire_key(k) for k in getattr(layout, "keep_on_cpu", ()) if k in present)


def _check_unpadded(src: Source) -> None:
    """Refuse a padded batch for a model whose vLLM processor crops each item itself
    (the servicer's path skips the processor, so the tower would see the padding)."""
    sizes_key = getattr(src.layout, "unpadded_by", None)
    if not sizes_key or sizes_key not in src.tensors or src.pixels.ndim < 2:
        return
    sizes = np.asarray(src.tensors[sizes_key]).reshape(len(src.results), -1)
    full = tuple(int(d) for d in src.pixels.shape[-sizes.shape[1]:])
    padded = [i for i, s in enumerate(sizes.tolist()) if tuple(s) != full]
    if padded:
        shown = ", ".join(f"image {i} {'x'.join(map(str, sizes[i].tolist()))}" for i in padded[:4])
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"vLLM cannot take these images in one payload: this model's vLLM processor crops each image's "
            f"pixel_values to its own size before the vision tower, a step the gRPC servicer skips, and these "
            f"images were zero-padded to the batch's {'x'.join(map(str, full))} ({shown}), so the tower would "
            f"produce more image embeddings than the prompt has placeholders. Send images of one resized size "
            f"together, one image per request, or use the SGLang, TokenSpeed or TensorRT-LLM backend",
        )


BACKEND = Backend(
    name="vllm", enum=pb.BACKEND_VLLM, label="vLLM", build=build, default_dtype="float32",
    no_audio="vLLM's gRPC servicer (smg-grpc-servicer 0.14.1, vllm/mm_keys.py modality_name) registers every "
             "preprocessed batch that is not VIDEO under the image modality, so audio features would reach its image "
             "path; a vLLM worker takes audio as media_refs and processes it itself",
)
