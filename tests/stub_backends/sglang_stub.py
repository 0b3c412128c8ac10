"""SGLang scheduler stub: decodes Generate as SGLang's gRPC servicer does
(smg_grpc_servicer/sglang/servicer.py ``_convert_generate_request`` / ``_parse_mm_inputs``).

* ``mm_inputs`` is parsed only when ``pixel_values`` is set; the tensors are
  ``tensor_from_parts(data, shape, dtype)``: the servicer's dtype table, refusing any
  other name and a byte length that does not match (servicers before 0.14 read every
  dtype but float32 / int64 as float32: reported as ``older_servicer_misreads``);
* one image item built from the whole ``pixel_values`` plus every model-specific tensor;
* offsets are inclusive ``(offset, offset + length - 1)`` per placeholder range;
* ``image_data``, the url lists and ``modalities`` are ignored by SGLang (reported only).
"""

from __future__ import annotations

from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as pb_grpc

try:
    from . import _common as c
except ImportError:  # run as a script
    import _common as c


def decode_tensor(td):
    return c.tensor_from_parts(td.data, td.shape, td.dtype)


def decode(req: pb.GenerateRequest) -> dict:
    if not req.HasField("tokenized"):
        raise c.Rejected("Tokenized input must be provided")
    ids = list(req.tokenized.input_ids)
    report = {"backend": "sglang", "request_id": req.request_id, "input_ids": c.ids_digest(ids), "items": []}
    mm = req.mm_inputs
    if not (req.HasField("mm_inputs") and mm.HasField("pixel_values")):
        return report
    feature = decode_tensor(mm.pixel_values)
    specific = {k: decode_tensor(td) for k, td in mm.model_specific_tensors.items()}
    offsets = [(p.offset, p.offset + p.length - 1) for p in mm.mm_placeholders] or None
    for start, end in offsets or ():
        if end < start or end >= len(ids):
            raise c.Rejected(f"placeholder ({start}, {end}) is outside the {len(ids)} input ids")
    im_token_id = mm.im_token_id if mm.HasField("im_token_id") else None
    report["items"].append(
        {
            "modality": "image",
            "feature": c.describe(feature, mm.pixel_values.dtype),
            "model_specific_data": {
                k: c.describe(v, mm.model_specific_tensors[k].dtype) for k, v in sorted(specific.items())},
            "offsets": offsets,
            # What SGLang pads with im_token_id: how many tokens in the ranges are not it.
            "offset_tokens_not_im_token": None
            if im_token_id is None or offsets is None
            else sum(int(ids[i] != im_token_id) for s, e in offsets for i in range(s, e + 1)),
        }
    )
    dtypes = [mm.pixel_values.dtype, *(td.dtype for td in mm.model_specific_tensors.values())]
    report["older_servicer_misreads"] = sorted({d for d in dtypes if d not in ("float32", "int64")})
    report["im_token_id"] = im_token_id
    report["image_data_sha256"] = [c.sha256(b) for b in mm.image_data]
    report["modalities"] = list(mm.modalities)
    report["urls"] = [len(mm.image_urls), len(mm.video_urls), len(mm.audio_urls)]
    return report


class Servicer(pb_grpc.SglangSchedulerServicer):
    def Generate(self, request, context):
        yield c.complete(pb, decode, request, context, request_id=request.request_id)


if __name__ == "__main__":
    c.serve("sglang", pb_grpc.add_SglangSchedulerServicer_to_server, Servicer())
