"""TensorRT-LLM stub: decodes Generate as TensorRT-LLM's SMG servicer does
(tensorrt_llm/grpc/smg/servicer.py: each ``multimodal_input.image_data`` entry opened with
PIL, RGBA converted to RGB; one that PIL cannot open is an error).

The token ids are taken as they come: with images, TensorRT-LLM decodes them back to
text and runs its own processor on it (llmapi/llm.py ``generate_async``: "VLMs need to
process/tokenize the prompt in their own way"), which expands each placeholder; the
report counts the placeholders so a test can see they are one per image.
"""

from __future__ import annotations

import io

from PIL import Image, UnidentifiedImageError
from smg_grpc_proto.generated import trtllm_service_pb2 as pb
from smg_grpc_proto.generated import trtllm_service_pb2_grpc as pb_grpc

try:
    from . import _common as c
except ImportError:  # run as a script
    import _common as c


def load_image(data: bytes) -> tuple[Image.Image, str]:
    """(the image TensorRT-LLM's processor gets, its encoded format)."""
    try:
        im = Image.open(io.BytesIO(data))
        im.load()
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise c.Rejected(f"cannot open image: {e}") from None
    fmt = im.format
    return (im.convert("RGB") if im.mode == "RGBA" else im), fmt


def decode(req: pb.GenerateRequest) -> dict:
    if not req.HasField("tokenized"):
        raise c.Rejected("Missing tokenized input")
    ids = list(req.tokenized.input_token_ids)
    report = {"backend": "trtllm", "request_id": req.request_id, "input_ids": c.ids_digest(ids), "images": []}
    if req.HasField("multimodal_input"):
        for data in req.multimodal_input.image_data:
            im, fmt = load_image(data)
            report["images"].append({"sha256": c.sha256(data), "size": list(im.size), "mode": im.mode, "format": fmt})
    return report


class Servicer(pb_grpc.TrtllmServiceServicer):
    def Generate(self, request, context):
        yield c.complete(pb, decode, request, context, request_id=request.request_id)


if __name__ == "__main__":
    c.serve("trtllm", pb_grpc.add_TrtllmServiceServicer_to_server, Servicer())
