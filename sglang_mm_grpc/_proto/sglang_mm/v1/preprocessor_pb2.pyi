from smg_grpc_proto.generated import sglang_scheduler_pb2 as _sglang_scheduler_pb2
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2 as _tokenspeed_scheduler_pb2
from smg_grpc_proto.generated import trtllm_service_pb2 as _trtllm_service_pb2
from smg_grpc_proto.generated import vllm_engine_pb2 as _vllm_engine_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Backend(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BACKEND_UNSPECIFIED: _ClassVar[Backend]
    BACKEND_SGLANG: _ClassVar[Backend]
    BACKEND_VLLM: _ClassVar[Backend]
    BACKEND_TRTLLM: _ClassVar[Backend]
    BACKEND_TOKENSPEED: _ClassVar[Backend]

class WireDtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WIRE_DTYPE_UNSPECIFIED: _ClassVar[WireDtype]
    WIRE_DTYPE_FLOAT32: _ClassVar[WireDtype]
    WIRE_DTYPE_BFLOAT16: _ClassVar[WireDtype]
    WIRE_DTYPE_FLOAT16: _ClassVar[WireDtype]
    WIRE_DTYPE_UINT8: _ClassVar[WireDtype]

class TensorTransport(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TENSOR_TRANSPORT_UNSPECIFIED: _ClassVar[TensorTransport]
    TENSOR_TRANSPORT_INLINE: _ClassVar[TensorTransport]
    TENSOR_TRANSPORT_SHM: _ClassVar[TensorTransport]
    TENSOR_TRANSPORT_AUTO: _ClassVar[TensorTransport]

class Detail(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DETAIL_UNSPECIFIED: _ClassVar[Detail]
    DETAIL_AUTO: _ClassVar[Detail]
    DETAIL_LOW: _ClassVar[Detail]
    DETAIL_HIGH: _ClassVar[Detail]
BACKEND_UNSPECIFIED: Backend
BACKEND_SGLANG: Backend
BACKEND_VLLM: Backend
BACKEND_TRTLLM: Backend
BACKEND_TOKENSPEED: Backend
WIRE_DTYPE_UNSPECIFIED: WireDtype
WIRE_DTYPE_FLOAT32: WireDtype
WIRE_DTYPE_BFLOAT16: WireDtype
WIRE_DTYPE_FLOAT16: WireDtype
WIRE_DTYPE_UINT8: WireDtype
TENSOR_TRANSPORT_UNSPECIFIED: TensorTransport
TENSOR_TRANSPORT_INLINE: TensorTransport
TENSOR_TRANSPORT_SHM: TensorTransport
TENSOR_TRANSPORT_AUTO: TensorTransport
DETAIL_UNSPECIFIED: Detail
DETAIL_AUTO: Detail
DETAIL_LOW: Detail
DETAIL_HIGH: Detail

class PayloadOptions(_message.Message):
    __slots__ = ("pixel_dtype", "transport", "shm_min_bytes", "shm_namespace_id", "vllm_server_info", "tokenspeed_server_info")
    PIXEL_DTYPE_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    SHM_MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHM_NAMESPACE_ID_FIELD_NUMBER: _ClassVar[int]
    VLLM_SERVER_INFO_FIELD_NUMBER: _ClassVar[int]
    TOKENSPEED_SERVER_INFO_FIELD_NUMBER: _ClassVar[int]
    pixel_dtype: WireDtype
    transport: TensorTransport
    shm_min_bytes: int
    shm_namespace_id: str
    vllm_server_info: _vllm_engine_pb2.GetServerInfoResponse
    tokenspeed_server_info: _tokenspeed_scheduler_pb2.GetServerInfoResponse
    def __init__(self, pixel_dtype: _Optional[_Union[WireDtype, str]] = ..., transport: _Optional[_Union[TensorTransport, str]] = ..., shm_min_bytes: _Optional[int] = ..., shm_namespace_id: _Optional[str] = ..., vllm_server_info: _Optional[_Union[_vllm_engine_pb2.GetServerInfoResponse, _Mapping]] = ..., tokenspeed_server_info: _Optional[_Union[_tokenspeed_scheduler_pb2.GetServerInfoResponse, _Mapping]] = ...) -> None: ...

class TensorData(_message.Message):
    __slots__ = ("data", "shape", "dtype")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    def __init__(self, data: _Optional[bytes] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ...) -> None: ...

class PlaceholderRange(_message.Message):
    __slots__ = ("offset", "length")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    length: int
    def __init__(self, offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class ImageOptions(_message.Message):
    __slots__ = ("min_pixels", "max_pixels", "max_tokens", "detail")
    MIN_PIXELS_FIELD_NUMBER: _ClassVar[int]
    MAX_PIXELS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    min_pixels: int
    max_pixels: int
    max_tokens: int
    detail: Detail
    def __init__(self, min_pixels: _Optional[int] = ..., max_pixels: _Optional[int] = ..., max_tokens: _Optional[int] = ..., detail: _Optional[_Union[Detail, str]] = ...) -> None: ...

class VideoOptions(_message.Message):
    __slots__ = ("fps", "num_frames", "min_frames", "max_frames", "min_pixels", "max_pixels", "max_tokens")
    FPS_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    MIN_FRAMES_FIELD_NUMBER: _ClassVar[int]
    MAX_FRAMES_FIELD_NUMBER: _ClassVar[int]
    MIN_PIXELS_FIELD_NUMBER: _ClassVar[int]
    MAX_PIXELS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    fps: float
    num_frames: int
    min_frames: int
    max_frames: int
    min_pixels: int
    max_pixels: int
    max_tokens: int
    def __init__(self, fps: _Optional[float] = ..., num_frames: _Optional[int] = ..., min_frames: _Optional[int] = ..., max_frames: _Optional[int] = ..., min_pixels: _Optional[int] = ..., max_pixels: _Optional[int] = ..., max_tokens: _Optional[int] = ...) -> None: ...

class AudioOptions(_message.Message):
    __slots__ = ("max_seconds",)
    MAX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    max_seconds: float
    def __init__(self, max_seconds: _Optional[float] = ...) -> None: ...

class MediaItem(_message.Message):
    __slots__ = ("url", "data", "media_id", "options", "bind_id", "video_options", "audio_options")
    URL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MEDIA_ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    BIND_ID_FIELD_NUMBER: _ClassVar[int]
    VIDEO_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    url: str
    data: bytes
    media_id: str
    options: ImageOptions
    bind_id: str
    video_options: VideoOptions
    audio_options: AudioOptions
    def __init__(self, url: _Optional[str] = ..., data: _Optional[bytes] = ..., media_id: _Optional[str] = ..., options: _Optional[_Union[ImageOptions, _Mapping]] = ..., bind_id: _Optional[str] = ..., video_options: _Optional[_Union[VideoOptions, _Mapping]] = ..., audio_options: _Optional[_Union[AudioOptions, _Mapping]] = ...) -> None: ...

class PreprocessRequest(_message.Message):
    __slots__ = ("request_id", "model", "input_ids", "images", "backend", "keep_handle", "max_image_tokens", "payload_options", "image_options", "videos", "video_options", "audios", "audio_options")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    KEEP_HANDLE_FIELD_NUMBER: _ClassVar[int]
    MAX_IMAGE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    VIDEOS_FIELD_NUMBER: _ClassVar[int]
    VIDEO_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    AUDIOS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    input_ids: _containers.RepeatedScalarFieldContainer[int]
    images: _containers.RepeatedCompositeFieldContainer[MediaItem]
    backend: Backend
    keep_handle: bool
    max_image_tokens: int
    payload_options: PayloadOptions
    image_options: ImageOptions
    videos: _containers.RepeatedCompositeFieldContainer[MediaItem]
    video_options: VideoOptions
    audios: _containers.RepeatedCompositeFieldContainer[MediaItem]
    audio_options: AudioOptions
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., input_ids: _Optional[_Iterable[int]] = ..., images: _Optional[_Iterable[_Union[MediaItem, _Mapping]]] = ..., backend: _Optional[_Union[Backend, str]] = ..., keep_handle: _Optional[bool] = ..., max_image_tokens: _Optional[int] = ..., payload_options: _Optional[_Union[PayloadOptions, _Mapping]] = ..., image_options: _Optional[_Union[ImageOptions, _Mapping]] = ..., videos: _Optional[_Iterable[_Union[MediaItem, _Mapping]]] = ..., video_options: _Optional[_Union[VideoOptions, _Mapping]] = ..., audios: _Optional[_Iterable[_Union[MediaItem, _Mapping]]] = ..., audio_options: _Optional[_Union[AudioOptions, _Mapping]] = ...) -> None: ...

class AudioInfo(_message.Message):
    __slots__ = ("hash", "token_count", "structural_range", "patch_ranges", "encoded_bytes", "cached", "sample_rate", "channels", "duration_s", "samples", "frames", "options")
    HASH_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURAL_RANGE_FIELD_NUMBER: _ClassVar[int]
    PATCH_RANGES_FIELD_NUMBER: _ClassVar[int]
    ENCODED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    hash: str
    token_count: int
    structural_range: PlaceholderRange
    patch_ranges: _containers.RepeatedCompositeFieldContainer[PlaceholderRange]
    encoded_bytes: int
    cached: bool
    sample_rate: int
    channels: int
    duration_s: float
    samples: int
    frames: int
    options: AudioOptions
    def __init__(self, hash: _Optional[str] = ..., token_count: _Optional[int] = ..., structural_range: _Optional[_Union[PlaceholderRange, _Mapping]] = ..., patch_ranges: _Optional[_Iterable[_Union[PlaceholderRange, _Mapping]]] = ..., encoded_bytes: _Optional[int] = ..., cached: _Optional[bool] = ..., sample_rate: _Optional[int] = ..., channels: _Optional[int] = ..., duration_s: _Optional[float] = ..., samples: _Optional[int] = ..., frames: _Optional[int] = ..., options: _Optional[_Union[AudioOptions, _Mapping]] = ...) -> None: ...

class ImageInfo(_message.Message):
    __slots__ = ("hash", "token_count", "structural_range", "patch_ranges", "height", "width", "resized_height", "resized_width", "encoded_bytes", "cached", "options", "grid")
    HASH_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURAL_RANGE_FIELD_NUMBER: _ClassVar[int]
    PATCH_RANGES_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    RESIZED_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    RESIZED_WIDTH_FIELD_NUMBER: _ClassVar[int]
    ENCODED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    hash: str
    token_count: int
    structural_range: PlaceholderRange
    patch_ranges: _containers.RepeatedCompositeFieldContainer[PlaceholderRange]
    height: int
    width: int
    resized_height: int
    resized_width: int
    encoded_bytes: int
    cached: bool
    options: ImageOptions
    grid: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, hash: _Optional[str] = ..., token_count: _Optional[int] = ..., structural_range: _Optional[_Union[PlaceholderRange, _Mapping]] = ..., patch_ranges: _Optional[_Iterable[_Union[PlaceholderRange, _Mapping]]] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., resized_height: _Optional[int] = ..., resized_width: _Optional[int] = ..., encoded_bytes: _Optional[int] = ..., cached: _Optional[bool] = ..., options: _Optional[_Union[ImageOptions, _Mapping]] = ..., grid: _Optional[_Iterable[int]] = ...) -> None: ...

class VideoInfo(_message.Message):
    __slots__ = ("hash", "token_count", "structural_range", "patch_ranges", "height", "width", "resized_height", "resized_width", "encoded_bytes", "cached", "options", "grid", "fps", "total_frames", "duration_s", "frame_indices", "timestamps_s", "second_per_grid")
    HASH_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURAL_RANGE_FIELD_NUMBER: _ClassVar[int]
    PATCH_RANGES_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    RESIZED_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    RESIZED_WIDTH_FIELD_NUMBER: _ClassVar[int]
    ENCODED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    FPS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FRAMES_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    FRAME_INDICES_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMPS_S_FIELD_NUMBER: _ClassVar[int]
    SECOND_PER_GRID_FIELD_NUMBER: _ClassVar[int]
    hash: str
    token_count: int
    structural_range: PlaceholderRange
    patch_ranges: _containers.RepeatedCompositeFieldContainer[PlaceholderRange]
    height: int
    width: int
    resized_height: int
    resized_width: int
    encoded_bytes: int
    cached: bool
    options: VideoOptions
    grid: _containers.RepeatedScalarFieldContainer[int]
    fps: float
    total_frames: int
    duration_s: float
    frame_indices: _containers.RepeatedScalarFieldContainer[int]
    timestamps_s: _containers.RepeatedScalarFieldContainer[float]
    second_per_grid: float
    def __init__(self, hash: _Optional[str] = ..., token_count: _Optional[int] = ..., structural_range: _Optional[_Union[PlaceholderRange, _Mapping]] = ..., patch_ranges: _Optional[_Iterable[_Union[PlaceholderRange, _Mapping]]] = ..., height: _Optional[int] = ..., width: _Optional[int] = ..., resized_height: _Optional[int] = ..., resized_width: _Optional[int] = ..., encoded_bytes: _Optional[int] = ..., cached: _Optional[bool] = ..., options: _Optional[_Union[VideoOptions, _Mapping]] = ..., grid: _Optional[_Iterable[int]] = ..., fps: _Optional[float] = ..., total_frames: _Optional[int] = ..., duration_s: _Optional[float] = ..., frame_indices: _Optional[_Iterable[int]] = ..., timestamps_s: _Optional[_Iterable[float]] = ..., second_per_grid: _Optional[float] = ...) -> None: ...

class MropePositions(_message.Message):
    __slots__ = ("positions", "delta")
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    positions: TensorData
    delta: int
    def __init__(self, positions: _Optional[_Union[TensorData, _Mapping]] = ..., delta: _Optional[int] = ...) -> None: ...

class StageTimings(_message.Message):
    __slots__ = ("fetch_ms", "decode_ms", "process_ms", "total_ms", "layout_ms", "assemble_ms")
    FETCH_MS_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ASSEMBLE_MS_FIELD_NUMBER: _ClassVar[int]
    fetch_ms: float
    decode_ms: float
    process_ms: float
    total_ms: float
    layout_ms: float
    assemble_ms: float
    def __init__(self, fetch_ms: _Optional[float] = ..., decode_ms: _Optional[float] = ..., process_ms: _Optional[float] = ..., total_ms: _Optional[float] = ..., layout_ms: _Optional[float] = ..., assemble_ms: _Optional[float] = ...) -> None: ...

class PreprocessResponse(_message.Message):
    __slots__ = ("request_id", "input_ids", "images", "mrope", "handle", "payload", "timings", "image_token_id", "videos", "video_token_id", "audios", "audio_token_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    MROPE_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    VIDEOS_FIELD_NUMBER: _ClassVar[int]
    VIDEO_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIOS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    input_ids: _containers.RepeatedScalarFieldContainer[int]
    images: _containers.RepeatedCompositeFieldContainer[ImageInfo]
    mrope: MropePositions
    handle: str
    payload: BackendPayload
    timings: StageTimings
    image_token_id: int
    videos: _containers.RepeatedCompositeFieldContainer[VideoInfo]
    video_token_id: int
    audios: _containers.RepeatedCompositeFieldContainer[AudioInfo]
    audio_token_id: int
    def __init__(self, request_id: _Optional[str] = ..., input_ids: _Optional[_Iterable[int]] = ..., images: _Optional[_Iterable[_Union[ImageInfo, _Mapping]]] = ..., mrope: _Optional[_Union[MropePositions, _Mapping]] = ..., handle: _Optional[str] = ..., payload: _Optional[_Union[BackendPayload, _Mapping]] = ..., timings: _Optional[_Union[StageTimings, _Mapping]] = ..., image_token_id: _Optional[int] = ..., videos: _Optional[_Iterable[_Union[VideoInfo, _Mapping]]] = ..., video_token_id: _Optional[int] = ..., audios: _Optional[_Iterable[_Union[AudioInfo, _Mapping]]] = ..., audio_token_id: _Optional[int] = ...) -> None: ...

class BackendPayload(_message.Message):
    __slots__ = ("backend", "input_ids", "sglang", "vllm", "trtllm", "tokenspeed", "vllm_extra")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    SGLANG_FIELD_NUMBER: _ClassVar[int]
    VLLM_FIELD_NUMBER: _ClassVar[int]
    TRTLLM_FIELD_NUMBER: _ClassVar[int]
    TOKENSPEED_FIELD_NUMBER: _ClassVar[int]
    VLLM_EXTRA_FIELD_NUMBER: _ClassVar[int]
    backend: Backend
    input_ids: _containers.RepeatedScalarFieldContainer[int]
    sglang: _sglang_scheduler_pb2.MultimodalInputs
    vllm: _vllm_engine_pb2.MultimodalInputs
    trtllm: _trtllm_service_pb2.MultimodalInput
    tokenspeed: _tokenspeed_scheduler_pb2.MultimodalInputs
    vllm_extra: _containers.RepeatedCompositeFieldContainer[_vllm_engine_pb2.MultimodalInputs]
    def __init__(self, backend: _Optional[_Union[Backend, str]] = ..., input_ids: _Optional[_Iterable[int]] = ..., sglang: _Optional[_Union[_sglang_scheduler_pb2.MultimodalInputs, _Mapping]] = ..., vllm: _Optional[_Union[_vllm_engine_pb2.MultimodalInputs, _Mapping]] = ..., trtllm: _Optional[_Union[_trtllm_service_pb2.MultimodalInput, _Mapping]] = ..., tokenspeed: _Optional[_Union[_tokenspeed_scheduler_pb2.MultimodalInputs, _Mapping]] = ..., vllm_extra: _Optional[_Iterable[_Union[_vllm_engine_pb2.MultimodalInputs, _Mapping]]] = ...) -> None: ...

class PlanResponse(_message.Message):
    __slots__ = ("request_id", "images", "input_ids_length", "image_token_id", "timings", "videos", "video_token_id", "pixel_bytes", "audios", "audio_token_id")
    class PixelBytesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    INPUT_IDS_LENGTH_FIELD_NUMBER: _ClassVar[int]
    IMAGE_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    VIDEOS_FIELD_NUMBER: _ClassVar[int]
    VIDEO_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    PIXEL_BYTES_FIELD_NUMBER: _ClassVar[int]
    AUDIOS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    images: _containers.RepeatedCompositeFieldContainer[ImageInfo]
    input_ids_length: int
    image_token_id: int
    timings: StageTimings
    videos: _containers.RepeatedCompositeFieldContainer[VideoInfo]
    video_token_id: int
    pixel_bytes: _containers.ScalarMap[str, int]
    audios: _containers.RepeatedCompositeFieldContainer[AudioInfo]
    audio_token_id: int
    def __init__(self, request_id: _Optional[str] = ..., images: _Optional[_Iterable[_Union[ImageInfo, _Mapping]]] = ..., input_ids_length: _Optional[int] = ..., image_token_id: _Optional[int] = ..., timings: _Optional[_Union[StageTimings, _Mapping]] = ..., videos: _Optional[_Iterable[_Union[VideoInfo, _Mapping]]] = ..., video_token_id: _Optional[int] = ..., pixel_bytes: _Optional[_Mapping[str, int]] = ..., audios: _Optional[_Iterable[_Union[AudioInfo, _Mapping]]] = ..., audio_token_id: _Optional[int] = ...) -> None: ...

class AssembleRequest(_message.Message):
    __slots__ = ("handle", "backend", "release", "payload_options")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    handle: str
    backend: Backend
    release: bool
    payload_options: PayloadOptions
    def __init__(self, handle: _Optional[str] = ..., backend: _Optional[_Union[Backend, str]] = ..., release: _Optional[bool] = ..., payload_options: _Optional[_Union[PayloadOptions, _Mapping]] = ...) -> None: ...

class AssembleResponse(_message.Message):
    __slots__ = ("payload",)
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    payload: BackendPayload
    def __init__(self, payload: _Optional[_Union[BackendPayload, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("handle",)
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    handle: str
    def __init__(self, handle: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: _Optional[bool] = ...) -> None: ...

class MultimodalIntermediate(_message.Message):
    __slots__ = ("model", "input_ids", "original_input_ids", "images", "pixel_values", "tensors", "image_data", "image_token_id", "batched_keys", "flat_keys", "mrope", "videos", "pixel_values_videos", "video_tensors", "video_data", "video_token_id", "audios", "audio_tensors", "audio_data", "audio_token_id")
    class TensorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TensorData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TensorData, _Mapping]] = ...) -> None: ...
    class FlatKeysEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class VideoTensorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TensorData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TensorData, _Mapping]] = ...) -> None: ...
    class AudioTensorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TensorData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TensorData, _Mapping]] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    PIXEL_VALUES_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DATA_FIELD_NUMBER: _ClassVar[int]
    IMAGE_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    BATCHED_KEYS_FIELD_NUMBER: _ClassVar[int]
    FLAT_KEYS_FIELD_NUMBER: _ClassVar[int]
    MROPE_FIELD_NUMBER: _ClassVar[int]
    VIDEOS_FIELD_NUMBER: _ClassVar[int]
    PIXEL_VALUES_VIDEOS_FIELD_NUMBER: _ClassVar[int]
    VIDEO_TENSORS_FIELD_NUMBER: _ClassVar[int]
    VIDEO_DATA_FIELD_NUMBER: _ClassVar[int]
    VIDEO_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIOS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_TENSORS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_DATA_FIELD_NUMBER: _ClassVar[int]
    AUDIO_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    input_ids: _containers.RepeatedScalarFieldContainer[int]
    original_input_ids: _containers.RepeatedScalarFieldContainer[int]
    images: _containers.RepeatedCompositeFieldContainer[ImageInfo]
    pixel_values: TensorData
    tensors: _containers.MessageMap[str, TensorData]
    image_data: _containers.RepeatedScalarFieldContainer[bytes]
    image_token_id: int
    batched_keys: _containers.RepeatedScalarFieldContainer[str]
    flat_keys: _containers.ScalarMap[str, str]
    mrope: MropePositions
    videos: _containers.RepeatedCompositeFieldContainer[VideoInfo]
    pixel_values_videos: TensorData
    video_tensors: _containers.MessageMap[str, TensorData]
    video_data: _containers.RepeatedScalarFieldContainer[bytes]
    video_token_id: int
    audios: _containers.RepeatedCompositeFieldContainer[AudioInfo]
    audio_tensors: _containers.MessageMap[str, TensorData]
    audio_data: _containers.RepeatedScalarFieldContainer[bytes]
    audio_token_id: int
    def __init__(self, model: _Optional[str] = ..., input_ids: _Optional[_Iterable[int]] = ..., original_input_ids: _Optional[_Iterable[int]] = ..., images: _Optional[_Iterable[_Union[ImageInfo, _Mapping]]] = ..., pixel_values: _Optional[_Union[TensorData, _Mapping]] = ..., tensors: _Optional[_Mapping[str, TensorData]] = ..., image_data: _Optional[_Iterable[bytes]] = ..., image_token_id: _Optional[int] = ..., batched_keys: _Optional[_Iterable[str]] = ..., flat_keys: _Optional[_Mapping[str, str]] = ..., mrope: _Optional[_Union[MropePositions, _Mapping]] = ..., videos: _Optional[_Iterable[_Union[VideoInfo, _Mapping]]] = ..., pixel_values_videos: _Optional[_Union[TensorData, _Mapping]] = ..., video_tensors: _Optional[_Mapping[str, TensorData]] = ..., video_data: _Optional[_Iterable[bytes]] = ..., video_token_id: _Optional[int] = ..., audios: _Optional[_Iterable[_Union[AudioInfo, _Mapping]]] = ..., audio_tensors: _Optional[_Mapping[str, TensorData]] = ..., audio_data: _Optional[_Iterable[bytes]] = ..., audio_token_id: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "family", "source", "modalities", "image_token_id", "token_ids", "reference_processor", "mrope", "max_images_per_request", "placeholder_token_id", "max_image_tokens", "video_token_id", "audio_token_id", "max_audios_per_request", "max_audio_tokens")
    class TokenIdsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    MODALITIES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_PROCESSOR_FIELD_NUMBER: _ClassVar[int]
    MROPE_FIELD_NUMBER: _ClassVar[int]
    MAX_IMAGES_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    PLACEHOLDER_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_IMAGE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    VIDEO_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIO_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_AUDIOS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MAX_AUDIO_TOKENS_FIELD_NUMBER: _ClassVar[int]
    name: str
    family: str
    source: str
    modalities: _containers.RepeatedScalarFieldContainer[str]
    image_token_id: int
    token_ids: _containers.ScalarMap[str, int]
    reference_processor: str
    mrope: bool
    max_images_per_request: int
    placeholder_token_id: int
    max_image_tokens: int
    video_token_id: int
    audio_token_id: int
    max_audios_per_request: int
    max_audio_tokens: int
    def __init__(self, name: _Optional[str] = ..., family: _Optional[str] = ..., source: _Optional[str] = ..., modalities: _Optional[_Iterable[str]] = ..., image_token_id: _Optional[int] = ..., token_ids: _Optional[_Mapping[str, int]] = ..., reference_processor: _Optional[str] = ..., mrope: _Optional[bool] = ..., max_images_per_request: _Optional[int] = ..., placeholder_token_id: _Optional[int] = ..., max_image_tokens: _Optional[int] = ..., video_token_id: _Optional[int] = ..., audio_token_id: _Optional[int] = ..., max_audios_per_request: _Optional[int] = ..., max_audio_tokens: _Optional[int] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("shm_namespace_id", "shm_owner_id", "default_transport", "default_shm_min_bytes", "shm_budget_bytes", "shm_bytes", "shm_lease_s", "max_send_bytes", "smg_grpc_proto_version", "shm")
    SHM_NAMESPACE_ID_FIELD_NUMBER: _ClassVar[int]
    SHM_OWNER_ID_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_SHM_MIN_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHM_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHM_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHM_LEASE_S_FIELD_NUMBER: _ClassVar[int]
    MAX_SEND_BYTES_FIELD_NUMBER: _ClassVar[int]
    SMG_GRPC_PROTO_VERSION_FIELD_NUMBER: _ClassVar[int]
    SHM_FIELD_NUMBER: _ClassVar[int]
    shm_namespace_id: str
    shm_owner_id: str
    default_transport: TensorTransport
    default_shm_min_bytes: int
    shm_budget_bytes: int
    shm_bytes: int
    shm_lease_s: float
    max_send_bytes: int
    smg_grpc_proto_version: str
    shm: ShmStats
    def __init__(self, shm_namespace_id: _Optional[str] = ..., shm_owner_id: _Optional[str] = ..., default_transport: _Optional[_Union[TensorTransport, str]] = ..., default_shm_min_bytes: _Optional[int] = ..., shm_budget_bytes: _Optional[int] = ..., shm_bytes: _Optional[int] = ..., shm_lease_s: _Optional[float] = ..., max_send_bytes: _Optional[int] = ..., smg_grpc_proto_version: _Optional[str] = ..., shm: _Optional[_Union[ShmStats, _Mapping]] = ...) -> None: ...

class ShmStats(_message.Message):
    __slots__ = ("segments", "peak_bytes", "written", "handed_out", "read", "removed", "inline_fallbacks", "reused")
    class RemovedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    HANDED_OUT_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    INLINE_FALLBACKS_FIELD_NUMBER: _ClassVar[int]
    REUSED_FIELD_NUMBER: _ClassVar[int]
    segments: int
    peak_bytes: int
    written: int
    handed_out: int
    read: int
    removed: _containers.ScalarMap[str, int]
    inline_fallbacks: int
    reused: int
    def __init__(self, segments: _Optional[int] = ..., peak_bytes: _Optional[int] = ..., written: _Optional[int] = ..., handed_out: _Optional[int] = ..., read: _Optional[int] = ..., removed: _Optional[_Mapping[str, int]] = ..., inline_fallbacks: _Optional[int] = ..., reused: _Optional[int] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusCount(_message.Message):
    __slots__ = ("method", "code", "count")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    method: str
    code: str
    count: int
    def __init__(self, method: _Optional[str] = ..., code: _Optional[str] = ..., count: _Optional[int] = ...) -> None: ...

class LatencyHistogram(_message.Message):
    __slots__ = ("stage", "count", "sum_ms", "upper_bounds_ms", "bucket_counts")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SUM_MS_FIELD_NUMBER: _ClassVar[int]
    UPPER_BOUNDS_MS_FIELD_NUMBER: _ClassVar[int]
    BUCKET_COUNTS_FIELD_NUMBER: _ClassVar[int]
    stage: str
    count: int
    sum_ms: float
    upper_bounds_ms: _containers.RepeatedScalarFieldContainer[float]
    bucket_counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, stage: _Optional[str] = ..., count: _Optional[int] = ..., sum_ms: _Optional[float] = ..., upper_bounds_ms: _Optional[_Iterable[float]] = ..., bucket_counts: _Optional[_Iterable[int]] = ...) -> None: ...

class FetchStats(_message.Message):
    __slots__ = ("started", "failed", "bytes_fetched", "in_flight", "refusals")
    class RefusalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STARTED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    BYTES_FETCHED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_FIELD_NUMBER: _ClassVar[int]
    started: int
    failed: int
    bytes_fetched: int
    in_flight: int
    refusals: _containers.ScalarMap[str, int]
    def __init__(self, started: _Optional[int] = ..., failed: _Optional[int] = ..., bytes_fetched: _Optional[int] = ..., in_flight: _Optional[int] = ..., refusals: _Optional[_Mapping[str, int]] = ...) -> None: ...

class CacheStats(_message.Message):
    __slots__ = ("hits", "misses", "evictions", "items", "bytes", "max_bytes", "too_large", "peak_bytes")
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TOO_LARGE_FIELD_NUMBER: _ClassVar[int]
    PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    hits: int
    misses: int
    evictions: int
    items: int
    bytes: int
    max_bytes: int
    too_large: int
    peak_bytes: int
    def __init__(self, hits: _Optional[int] = ..., misses: _Optional[int] = ..., evictions: _Optional[int] = ..., items: _Optional[int] = ..., bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ..., too_large: _Optional[int] = ..., peak_bytes: _Optional[int] = ...) -> None: ...

class MediaStoreStats(_message.Message):
    __slots__ = ("items", "bytes", "max_bytes", "hits", "misses", "stored", "evictions", "bound_ids", "peak_bytes", "remote_hits", "remote_misses", "remote_errors", "remote_invalid", "remote_written", "remote_dropped")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    BOUND_IDS_FIELD_NUMBER: _ClassVar[int]
    PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    REMOTE_HITS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_MISSES_FIELD_NUMBER: _ClassVar[int]
    REMOTE_ERRORS_FIELD_NUMBER: _ClassVar[int]
    REMOTE_INVALID_FIELD_NUMBER: _ClassVar[int]
    REMOTE_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    REMOTE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    items: int
    bytes: int
    max_bytes: int
    hits: int
    misses: int
    stored: int
    evictions: int
    bound_ids: int
    peak_bytes: int
    remote_hits: int
    remote_misses: int
    remote_errors: int
    remote_invalid: int
    remote_written: int
    remote_dropped: int
    def __init__(self, items: _Optional[int] = ..., bytes: _Optional[int] = ..., max_bytes: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., stored: _Optional[int] = ..., evictions: _Optional[int] = ..., bound_ids: _Optional[int] = ..., peak_bytes: _Optional[int] = ..., remote_hits: _Optional[int] = ..., remote_misses: _Optional[int] = ..., remote_errors: _Optional[int] = ..., remote_invalid: _Optional[int] = ..., remote_written: _Optional[int] = ..., remote_dropped: _Optional[int] = ...) -> None: ...

class StoreStats(_message.Message):
    __slots__ = ("items", "bytes", "max_items", "max_bytes", "evicted", "expired", "peak_bytes")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_ITEMS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    EXPIRED_FIELD_NUMBER: _ClassVar[int]
    PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    items: int
    bytes: int
    max_items: int
    max_bytes: int
    evicted: int
    expired: int
    peak_bytes: int
    def __init__(self, items: _Optional[int] = ..., bytes: _Optional[int] = ..., max_items: _Optional[int] = ..., max_bytes: _Optional[int] = ..., evicted: _Optional[int] = ..., expired: _Optional[int] = ..., peak_bytes: _Optional[int] = ...) -> None: ...

class WorkStats(_message.Message):
    __slots__ = ("busy", "image_steps", "image_steps_skipped", "images_decoded")
    BUSY_FIELD_NUMBER: _ClassVar[int]
    IMAGE_STEPS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_STEPS_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    IMAGES_DECODED_FIELD_NUMBER: _ClassVar[int]
    busy: int
    image_steps: int
    image_steps_skipped: int
    images_decoded: int
    def __init__(self, busy: _Optional[int] = ..., image_steps: _Optional[int] = ..., image_steps_skipped: _Optional[int] = ..., images_decoded: _Optional[int] = ...) -> None: ...

class VideoStats(_message.Message):
    __slots__ = ("videos", "video_bytes", "frames", "planned", "refusals", "stages", "cached")
    class RefusalsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    VIDEOS_FIELD_NUMBER: _ClassVar[int]
    VIDEO_BYTES_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    PLANNED_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    videos: int
    video_bytes: int
    frames: int
    planned: int
    refusals: _containers.ScalarMap[str, int]
    stages: _containers.RepeatedCompositeFieldContainer[LatencyHistogram]
    cached: int
    def __init__(self, videos: _Optional[int] = ..., video_bytes: _Optional[int] = ..., frames: _Optional[int] = ..., planned: _Optional[int] = ..., refusals: _Optional[_Mapping[str, int]] = ..., stages: _Optional[_Iterable[_Union[LatencyHistogram, _Mapping]]] = ..., cached: _Optional[int] = ...) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("uptime_s", "in_flight", "max_in_flight", "rejected_busy", "requests", "statuses", "images", "image_bytes", "fetch", "cache", "store", "work", "stages", "media", "video")
    class RequestsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    REJECTED_BUSY_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    IMAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    WORK_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    MEDIA_FIELD_NUMBER: _ClassVar[int]
    VIDEO_FIELD_NUMBER: _ClassVar[int]
    uptime_s: float
    in_flight: int
    max_in_flight: int
    rejected_busy: int
    requests: _containers.ScalarMap[str, int]
    statuses: _containers.RepeatedCompositeFieldContainer[StatusCount]
    images: int
    image_bytes: int
    fetch: FetchStats
    cache: CacheStats
    store: StoreStats
    work: WorkStats
    stages: _containers.RepeatedCompositeFieldContainer[LatencyHistogram]
    media: MediaStoreStats
    video: VideoStats
    def __init__(self, uptime_s: _Optional[float] = ..., in_flight: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., rejected_busy: _Optional[int] = ..., requests: _Optional[_Mapping[str, int]] = ..., statuses: _Optional[_Iterable[_Union[StatusCount, _Mapping]]] = ..., images: _Optional[int] = ..., image_bytes: _Optional[int] = ..., fetch: _Optional[_Union[FetchStats, _Mapping]] = ..., cache: _Optional[_Union[CacheStats, _Mapping]] = ..., store: _Optional[_Union[StoreStats, _Mapping]] = ..., work: _Optional[_Union[WorkStats, _Mapping]] = ..., stages: _Optional[_Iterable[_Union[LatencyHistogram, _Mapping]]] = ..., media: _Optional[_Union[MediaStoreStats, _Mapping]] = ..., video: _Optional[_Union[VideoStats, _Mapping]] = ...) -> None: ...
