"""What the chosen worker's own GetServerInfo answer says about the payload it wants.

A router holds each worker's ``GetServerInfoResponse`` (vLLM's or TokenSpeed's upstream
message) and may pass it in ``PayloadOptions``; the fields read here, with the upstream
code that sets them (docs/WIRE_CURRENT.md, "Payloads from the worker's server info"):

* vLLM ``mm_device_do_normalize`` (19): the engine rescales and normalizes pixels on the
  device and takes the pixels' own uint8 bytes (a float tensor would be normalized twice);
* vLLM ``multimodal_encoder_dtype`` (22): the dtype the servicer casts float inputs to;
* vLLM ``mm_item_limits`` (21): ``"image=8,video=2"``, the engine's per-prompt limits;
* vLLM ``mm_encoder_budget`` (25): the most feature tokens one item may carry;
* vLLM ``shm_namespace_id`` (10), TokenSpeed ``scheduler_info["shm_namespace_id"]``: the
  worker's /dev/shm identity, for AUTO transport.

A field left at its zero value (an older worker) says nothing, so the payload is what
it was without the worker info.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from ..core.errors import Code, PreprocessError

#: The encoder dtype names a worker may give, as wire dtype names.
_ENCODER_DTYPES = {
    "float32": "float32", "float": "float32", "fp32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "half": "float16", "fp16": "float16",
}


@dataclass(frozen=True)
class WorkerInfo:
    """The payload-shaping facts of one worker's server info."""

    backend: str  # "vllm" or "tokenspeed": whose message it was
    device_normalize: bool = False
    encoder_dtype: str = ""  # a wire dtype name; "" when the worker does not say
    item_limits: dict[str, int] = field(default_factory=dict)  # modality -> most items per prompt
    encoder_budget: int = 0  # most feature tokens per item; 0: unknown
    shm_namespace_id: str = ""

    def pixel_dtype(self) -> tuple[str, str]:
        """(the wire dtype this worker wants for pixels, or "": the backend's default;
        the field that says so, for messages)."""
        if self.device_normalize:
            return "uint8", f"the {self.backend} worker's server info (mm_device_do_normalize)"
        if self.encoder_dtype:
            return self.encoder_dtype, f"the {self.backend} worker's server info (multimodal_encoder_dtype)"
        return "", ""

    def check_items(self, images: int, videos: int, audios: int = 0) -> None:
        """INVALID_ARGUMENT when the request has more items of a modality than the
        worker's ``mm_item_limits`` allow (its engine would refuse the prompt)."""
        for modality, count in (("image", images), ("video", videos), ("audio", audios)):
            limit = self.item_limits.get(modality)
            if limit is not None and count > limit:
                raise PreprocessError(
                    Code.INVALID_ARGUMENT,
                    f"{count} {modality}(s) in one request, over the worker's limit of {limit} "
                    f"(its server info's mm_item_limits {_limits_text(self.item_limits)!r}, vLLM's "
                    f"--limit-mm-per-prompt)")

    def check_output(self, images, videos) -> None:
        """A kept result's items against the worker's limits (an Assemble, whose Preprocess
        may not have known the worker): ``check_items``, then RESOURCE_EXHAUSTED for an
        item of more feature tokens (its patch runs) than ``encoder_budget``."""
        self.check_items(len(images), len(videos))
        if not self.encoder_budget:
            return
        for kind, items in (("image", images), ("video", videos)):
            for i, item in enumerate(items):
                features = sum(length for _offset, length in item.patch_ranges)
                if features > self.encoder_budget:
                    raise PreprocessError(
                        Code.RESOURCE_EXHAUSTED,
                        f"it carries {features} feature tokens, over the worker's encoder budget of "
                        f"{self.encoder_budget} per item (its server info's mm_encoder_budget: the engine could "
                        f"never schedule it)", item=i, kind=kind)


def from_options(options: pb.PayloadOptions) -> WorkerInfo | None:
    """The worker info ``options`` carries, read (None: none); INVALID_ARGUMENT or
    FAILED_PRECONDITION naming the field for a value this server cannot follow."""
    which = options.WhichOneof("worker_info")
    if which == "vllm_server_info":
        return _from_vllm(options.vllm_server_info)
    if which == "tokenspeed_server_info":
        return _from_tokenspeed(options.tokenspeed_server_info)
    return None


def _from_vllm(info) -> WorkerInfo:
    where = "payload_options.vllm_server_info"
    if info.mm_encoder_budget < 0:
        raise PreprocessError(Code.INVALID_ARGUMENT,
                              f"{where}.mm_encoder_budget must not be negative, got {info.mm_encoder_budget}")
    return WorkerInfo(
        backend="vllm",
        device_normalize=info.mm_device_do_normalize,
        encoder_dtype=_encoder_dtype(info.multimodal_encoder_dtype, f"{where}.multimodal_encoder_dtype"),
        item_limits=parse_item_limits(info.mm_item_limits, f"{where}.mm_item_limits"),
        encoder_budget=int(info.mm_encoder_budget),
        shm_namespace_id=info.shm_namespace_id,
    )


def _from_tokenspeed(info) -> WorkerInfo:
    """TokenSpeed's server info has no typed field on pixels or limits
    (``tokenspeed_scheduler.proto`` GetServerInfoResponse; its engine normalizes nothing
    on the device, and its encoder dtype is in GetModelInfo): only the /dev/shm identity,
    which its servicer puts in ``scheduler_info`` (``tokenspeed/servicer.py``
    ``scheduler_info_struct["shm_namespace_id"]``)."""
    namespace = info.scheduler_info.fields.get("shm_namespace_id")
    return WorkerInfo(backend="tokenspeed",
                      shm_namespace_id=namespace.string_value if namespace is not None else "")


def _encoder_dtype(value: str, where: str) -> str:
    raw = value.strip().lower().removeprefix("torch.")
    if not raw or raw == "auto":
        return ""
    dtype = _ENCODER_DTYPES.get(raw)
    if dtype is None:
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"{where} {value!r} is not a dtype this server can send pixels in (float32, bfloat16, float16); "
            "name payload_options.pixel_dtype yourself")
    return dtype


def parse_item_limits(text: str, where: str = "mm_item_limits") -> dict[str, int]:
    """``"image=8,video=2"`` -> {"image": 8, "video": 2} ("" -> {})."""
    limits: dict[str, int] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        modality, sep, count = pair.partition("=")
        modality = modality.strip().lower()
        if not sep or not modality or not count.strip().isdigit():
            raise PreprocessError(Code.INVALID_ARGUMENT,
                                  f"{where} {text!r} is not <modality>=<count> pairs (e.g. \"image=8,video=2\")")
        limits[modality] = int(count)
    return limits


def _limits_text(limits: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(limits.items()))
