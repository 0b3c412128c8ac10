"""TokenSpeed scheduler stub: decodes Generate as TokenSpeed's gRPC servicer does
(smg_grpc_servicer/tokenspeed/servicer.py ``_mm_inputs_from_itemized_proto``).

* ``mm_inputs`` present: ``items`` must not be empty; per item:
* ``modality``: IMAGE / VIDEO / AUDIO (anything else is refused);
* ``encoder_input``: ``_feature_from_proto``. A /dev/shm payload whose dtype is the model's
  (this stub's model runs in bfloat16, the usual) and whose offset is 0 is handed to the
  scheduler as a handle after checking its name (``mm_shm.validated_shm_name``) and that
  ``nbytes`` equals numel x width; the stub then reads it as the scheduler would. Any
  other payload is ``_tensor_from_proto``: ``mm_shm.tensor_payload_bytes``, then bfloat16
  read as uint16 bits, every other name through ``numpy.dtype(name)``, with a length check;
* ``model_specific_tensors``: ``_tensor_from_proto``, their dtypes kept;
* ``_validate_item_tensor_consistency``: an IMAGE item carries no ``video_grid_thw``, ...;
* ``placeholders``: at least one, each of positive length; offsets inclusive;
* ``content_hash``: the item's cache hash is its first 8 bytes, little-endian;
* ``placeholder_token_id``: one per modality (a conflict is refused).
"""

from __future__ import annotations

import numpy as np
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2 as pb
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2_grpc as pb_grpc
from smg_grpc_servicer import mm_shm

try:
    from . import _common as c
except ImportError:  # run as a script
    import _common as c

MODEL_DTYPE = "bfloat16"
_MODALITIES = {common_pb2.IMAGE: "image", common_pb2.VIDEO: "video", common_pb2.AUDIO: "audio"}
_FEATURE_DTYPES = {"bfloat16": 2, "float16": 2, "float32": 4}


def tensor_from_proto(td) -> np.ndarray:
    """``TokenSpeedSchedulerServicer._tensor_from_proto`` (without the cast)."""
    shape = [int(d) for d in td.shape]
    raw = c.payload_bytes(td)
    if td.dtype == "bfloat16":
        dt = np.dtype("<u2")
    else:
        try:
            dt = np.dtype(td.dtype)
        except TypeError:
            raise c.Rejected(f"data type {td.dtype!r} not understood") from None
    expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if len(raw) != expected:
        raise c.Rejected(f"TensorData byte length mismatch for dtype={td.dtype}, shape={shape}: "
                         f"expected {expected}, got {len(raw)}")
    return np.frombuffer(raw, dtype=dt).reshape(shape)


def feature_from_proto(td) -> tuple[np.ndarray, str]:
    """``_feature_from_proto``: (the tensor, how it reached the model)."""
    if td.WhichOneof("payload") == "remote":
        raise c.Rejected("TensorData.remote needs the RDMA puller, which this worker does not have")
    if td.WhichOneof("payload") != "shm" or td.dtype != MODEL_DTYPE or td.shm.offset != 0:
        return tensor_from_proto(td), "decoded"
    if td.dtype not in _FEATURE_DTYPES:
        raise c.Rejected(f"Unsupported TensorData dtype for SHM feature: {td.dtype!r}")
    shape = [int(d) for d in td.shape]
    expected = int(np.prod(shape, dtype=np.int64)) * _FEATURE_DTYPES[td.dtype]
    if int(td.shm.nbytes) != expected:
        raise c.Rejected(f"TensorData.shm byte length mismatch for dtype={td.dtype}, shape={shape}: "
                         f"expected {expected}, got {int(td.shm.nbytes)}")
    mm_shm.validated_shm_name(td.shm.name)
    return tensor_from_proto(td), "shm handle"  # the scheduler's later read


def decode(req: pb.GenerateRequest) -> dict:
    if not req.HasField("tokenized"):
        raise c.Rejected("tokenized input is required")
    ids = list(req.tokenized.input_ids)
    report = {"backend": "tokenspeed", "request_id": req.request_id, "input_ids": c.ids_digest(ids), "items": []}
    if not req.HasField("mm_inputs"):
        return report
    token_ids: dict[str, int] = {}
    for item in req.mm_inputs.items:
        if item.modality not in _MODALITIES:
            raise c.Rejected(f"Unsupported multimodal item modality: {item.modality}")
        modality = _MODALITIES[item.modality]
        feature, via = (None, None)
        if item.HasField("encoder_input"):
            feature, via = feature_from_proto(item.encoder_input)
        specific = {k: tensor_from_proto(td) for k, td in item.model_specific_tensors.items()}
        if modality == "image" and "video_grid_thw" in specific:
            raise c.Rejected("IMAGE MultimodalItem must not carry video_grid_thw")
        if modality == "video" and ("image_grid_thw" in specific or "video_grid_thw" not in specific):
            raise c.Rejected("VIDEO MultimodalItem must carry video_grid_thw and no image_grid_thw")
        if not item.placeholders:
            raise c.Rejected("MultimodalItem carried no placeholders")
        if any(p.length <= 0 for p in item.placeholders):
            raise c.Rejected("MultimodalItem.placeholders.length must be > 0")
        offsets = [(p.offset, p.offset + p.length - 1) for p in item.placeholders]
        for start, end in offsets:
            if end >= len(ids):
                raise c.Rejected(f"placeholder ({start}, {end}) is outside the {len(ids)} input ids")
        token = int(item.placeholder_token_id) if item.HasField("placeholder_token_id") else None
        if token is not None:
            if token_ids.setdefault(modality, token) != token:
                raise c.Rejected(f"Conflicting placeholder_token_id for {modality.upper()}: "
                                 f"{token_ids[modality]} != {token}")
        content = bytes(item.content_hash)
        report["items"].append({
            "modality": modality,
            "content_hash": content.hex(),
            "hash": int.from_bytes(content[:8], "little") if content else None,
            "encoder_input": None if feature is None else c.describe(feature, item.encoder_input.dtype),
            "encoder_input_via": via,
            "transport": {"encoder_input": c.transport(item.encoder_input),
                          **{k: c.transport(td) for k, td in sorted(item.model_specific_tensors.items())}},
            "model_specific": {k: c.describe(v, item.model_specific_tensors[k].dtype) for k, v in sorted(specific.items())},
            "offsets": offsets,
            "placeholder_token_id": token,
            "offset_tokens_not_placeholder": None if token is None
            else sum(int(ids[i] != token) for s, e in offsets for i in range(s, e + 1)),
        })
    if not report["items"]:
        raise c.Rejected("MultimodalInputs.items is empty")
    return report


class Servicer(pb_grpc.TokenSpeedSchedulerServicer):
    def Generate(self, request, context):
        yield c.complete(pb, decode, request, context, request_id=request.request_id)


if __name__ == "__main__":
    c.serve("tokenspeed", pb_grpc.add_TokenSpeedSchedulerServicer_to_server, Servicer())
