"""Assembly and tensor encoding, in-process: dtype rules per backend, ranges, field layout,
the vLLM fields the gateway sends today, TokenSpeed items, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

import blake3
from smg_grpc_proto.generated import common_pb2

from sglang_mm_grpc import Code, PreprocessError
from sglang_mm_grpc.wire import assemble as asm, tensors
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc.core.carriers import ImageResult, PreprocessOutput
from sglang_mm_grpc.families import FieldLayout
from sglang_mm_grpc.kernels import bf16

IMG, START, SEP, END = 200, 201, 202, 203


def output(**over) -> PreprocessOutput:
    """Two images with structural tokens: image 0 = START p p SEP p p END, image 1 = START p END."""
    ids = np.array([1, START, IMG, IMG, SEP, IMG, IMG, END, 2, START, IMG, END, 3], dtype=np.int64)
    images = [
        ImageResult("a" * 64, 10, 20, 28, 28, 111, 7, (1, 7), ((2, 2), (5, 2))),
        ImageResult("b" * 64, 5, 5, 28, 28, 222, 3, (9, 3), ((10, 1),)),
    ]
    base = dict(
        input_ids=ids,
        original_input_ids=np.array([1, IMG, 2, IMG, 3], dtype=np.int64),
        pixel_values=np.arange(5 * 4, dtype=np.float64).reshape(5, 4),
        tensors={
            "sizes": np.array([4, 1], dtype=np.int64),
            "grid": np.array([[1, 2, 2], [1, 1, 1]], dtype=np.uint32),
            "scale": np.array([0.5, 2.0], dtype=np.float16),
            "mask": np.array([[True, False], [True, True]]),
            "count": np.array([7, 3], dtype=np.int32),
        },
        images=images,
        image_token_id=IMG,
        raw_images=[b"jpeg-0", b"png-1"],
    )
    base.update(over)
    return PreprocessOutput(**base)


LAYOUT = FieldLayout(batched=("grid", "mask", "count", "sizes", "absent"), flat={"pixel_values": "sizes"})


def build(out, backend, layout=LAYOUT, **options):
    return asm.assemble(out, backend, layout, options=asm.WireOptions(**options)).message()


# -- tensors ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<i8", ">i8", "<u4", ">u4", "<f2", "<i4", "u1"])
def test_tensor_round_trip_is_little_endian_c_order(dtype):
    a = (np.arange(24).reshape(2, 3, 4) % 200).astype(dtype).transpose(2, 0, 1)  # not C-contiguous
    td = tensors.fill(pb.TensorData(), a)
    assert list(td.shape) == [4, 2, 3]
    assert td.data == np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
    back = tensors.to_array(td)
    assert back.dtype.byteorder in "<|=" and np.array_equal(back, a)


def test_tensor_scalar_and_empty():
    td = tensors.fill(pb.TensorData(), np.int64(7))
    assert list(td.shape) == [] and tensors.to_array(td).shape == () and tensors.to_array(td) == 7
    td = tensors.fill(pb.TensorData(), np.zeros((0, 3), np.float32))
    assert tensors.to_array(td).shape == (0, 3)


def test_tensor_errors():
    with pytest.raises(ValueError, match="needs"):
        tensors.to_array(pb.TensorData(data=b"\0" * 7, shape=[2], dtype="float32"))
    with pytest.raises(ValueError, match="unknown TensorData dtype"):
        tensors.to_array(pb.TensorData(data=b"", shape=[0], dtype="float64"))
    with pytest.raises(ValueError, match="no TensorData name"):
        tensors.fill(pb.TensorData(), np.zeros(2, np.complex64))


# -- SGLang -------------------------------------------------------------------------------


def test_upstream_tensor_data_always_sets_its_payload():
    """vLLM's and TokenSpeed's TensorData carry bytes in a oneof: set even when empty."""
    from smg_grpc_proto.generated import tokenspeed_scheduler_pb2, vllm_engine_pb2

    for cls in (vllm_engine_pb2.TensorData, tokenspeed_scheduler_pb2.TensorData):
        td = tensors.fill(cls(), np.zeros((0, 3), np.float32))
        assert td.WhichOneof("payload") == "inline" and td.inline == b""
        back = cls.FromString(td.SerializeToString())
        assert back.WhichOneof("payload") == "inline" and tensors.to_array(back).shape == (0, 3)


def test_sglang_payload():
    out = output()
    p = build(out, "sglang")
    assert p.backend == pb.BACKEND_SGLANG and p.WhichOneof("mm_inputs") == "sglang"
    assert list(p.input_ids) == out.input_ids.tolist()
    mm = p.sglang
    assert mm.pixel_values.dtype == "float32"
    assert np.array_equal(tensors.to_array(mm.pixel_values), out.pixel_values.astype(np.float32))
    # only float32 and int64 reach SGLang
    dtypes = {k: v.dtype for k, v in mm.model_specific_tensors.items()}
    assert dtypes == {"sizes": "int64", "grid": "int64", "scale": "float32", "mask": "int64", "count": "int64"}
    for k, v in out.tensors.items():
        assert np.array_equal(tensors.to_array(mm.model_specific_tensors[k]), v)
    # patch-only ranges, each run separately
    assert [(r.offset, r.length) for r in mm.mm_placeholders] == [(2, 2), (5, 2), (10, 1)]
    assert mm.HasField("im_token_id") and mm.im_token_id == IMG
    assert list(mm.image_data) == out.raw_images and list(mm.modalities) == ["image"]
    assert not mm.image_urls and not mm.video_urls and not mm.audio_urls


def test_sglang_falls_back_to_structural_range():
    out = output()
    out.images[1] = ImageResult("b" * 64, 5, 5, 28, 28, 222, 3, (9, 3), ())
    mm = build(out, "sglang").sglang
    assert [(r.offset, r.length) for r in mm.mm_placeholders][-1] == (9, 3)


# -- vLLM ---------------------------------------------------------------------------------


def test_vllm_payload():
    out = output()
    p = build(out, pb.BACKEND_VLLM)
    mm = p.vllm
    assert list(p.input_ids) == out.input_ids.tolist()
    dtypes = {k: v.dtype for k, v in mm.model_specific_tensors.items()}
    assert dtypes == {"sizes": "int64", "grid": "uint32", "scale": "float32", "mask": "int64", "count": "int64"}
    assert list(mm.batched_keys) == ["grid", "mask", "count", "sizes"]  # "absent" is not sent
    assert dict(mm.flat_keys) == {"pixel_values": "sizes"}
    assert [(r.offset, r.length) for r in mm.mm_placeholders] == [(1, 7), (9, 3)]
    assert list(mm.mm_hashes) == ["a" * 64, "b" * 64]
    assert mm.HasField("im_token_id") and mm.im_token_id == IMG
    assert mm.modality == common_pb2.IMAGE and not mm.HasField("encoder_input_key")
    assert not mm.keep_on_cpu_keys
    for td in (mm.pixel_values, *mm.model_specific_tensors.values()):
        assert td.WhichOneof("payload") == "inline"


def test_vllm_keep_on_cpu_and_encoder_input_key():
    """The model's kwarg names the pixel tensor in the layout keys too (the servicer
    registers it under encoder_input_key and looks the keys up by that name)."""
    out = output()
    layout = FieldLayout(batched=("grid", "pixel_values"), flat={"count": "sizes"}, keep_on_cpu=("grid", "absent"),
                         encoder_input_key="input_image_embeds")
    mm = build(out, "vllm", layout).vllm
    assert mm.encoder_input_key == "input_image_embeds"
    assert list(mm.batched_keys) == ["grid", "input_image_embeds"]
    assert dict(mm.flat_keys) == {"count": "sizes"}
    assert list(mm.keep_on_cpu_keys) == ["grid"]  # only tensors that are sent
    assert "pixel_values" not in mm.model_specific_tensors


def test_vllm_sizes_tensor_must_exist():
    out = output()
    with pytest.raises(PreprocessError) as e:
        build(out, "vllm", FieldLayout(flat={"pixel_values": "nope"}))
    assert e.value.code == Code.INTERNAL and "nope" in e.value.message


def test_vllm_refuses_padded_items_of_a_model_that_crops_them():
    """Pixtral-like: pixel_values [N, 3, Hmax, Wmax] padded, image_sizes per image."""
    sizes = np.array([[4, 6], [2, 6]], dtype=np.int64)
    out = output(pixel_values=np.zeros((2, 3, 4, 6), np.float32), tensors={"image_sizes": sizes})
    layout = FieldLayout(batched=("pixel_values", "image_sizes"), unpadded_by="image_sizes")
    with pytest.raises(PreprocessError) as e:
        build(out, "vllm", layout)
    assert e.value.code == Code.FAILED_PRECONDITION
    assert "image 1 2x6" in e.value.message and "4x6" in e.value.message and "one image per request" in e.value.message
    # the same sizes: nothing is padded, nothing refused; other backends are not concerned
    same = output(pixel_values=np.zeros((2, 3, 4, 6), np.float32), tensors={"image_sizes": np.array([[4, 6], [4, 6]])})
    assert len(build(same, "vllm", layout).vllm.mm_placeholders) == 2
    for backend in ("sglang", "tokenspeed", "trtllm"):
        build(out, backend, layout)


# -- TokenSpeed ---------------------------------------------------------------------------


def test_tokenspeed_items():
    out = output()
    p = build(out, "tokenspeed")
    assert list(p.input_ids) == out.input_ids.tolist()
    items = p.tokenspeed.items
    assert len(items) == 2
    pixels = out.pixel_values.astype(np.float32)
    rows = [pixels[:4], pixels[4:5]]  # flat by "sizes" = [4, 1]
    for i, item in enumerate(items):
        assert item.modality == common_pb2.IMAGE
        assert item.content_hash == blake3.blake3(out.images[i].hash.encode()).digest()
        assert item.placeholder_token_id == IMG
        assert [(r.offset, r.length) for r in item.placeholders] == list(out.images[i].patch_ranges)
        enc = item.encoder_input
        assert enc.dtype == "bfloat16" and enc.WhichOneof("payload") == "inline"  # the gateway's default
        assert np.array_equal(tensors.to_array(enc), bf16.to_bf16_bits(rows[i]))
        # batched tensors keep the item dim; unlisted ones ("scale") go whole to each item
        assert tensors.to_array(item.model_specific_tensors["grid"]).tolist() == [out.tensors["grid"][i].tolist()]
        assert tensors.to_array(item.model_specific_tensors["scale"]).tolist() == [0.5, 2.0]


def test_tokenspeed_float32_on_request():
    out = output()
    item = build(out, "tokenspeed", pixel_dtype="float32").tokenspeed.items[0]
    assert item.encoder_input.dtype == "float32"
    assert np.array_equal(tensors.to_array(item.encoder_input), out.pixel_values[:4].astype(np.float32))


# -- wire dtypes and refusals ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_vllm_narrow_pixels_round_to_nearest_even(dtype):
    out = output(pixel_values=np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
    td = build(out, "vllm", pixel_dtype=dtype).vllm.pixel_values
    assert td.dtype == dtype and list(td.shape) == [5, 4]
    want = bf16.to_bf16_bits(out.pixel_values) if dtype == "bfloat16" else out.pixel_values.astype(np.float16)
    assert tensors.to_array(td).tobytes() == want.tobytes()


@pytest.mark.parametrize("backend, dtype", [("sglang", "bfloat16"), ("sglang", "float16"), ("trtllm", "bfloat16")])
def test_narrow_dtypes_refused_where_the_consumer_cannot_take_them(backend, dtype):
    with pytest.raises(PreprocessError) as e:
        build(output(), backend, pixel_dtype=dtype)
    assert e.value.code == Code.FAILED_PRECONDITION and dtype in e.value.message


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
def test_shm_asked_for_by_name_is_refused_where_the_message_cannot_carry_it(backend):
    with pytest.raises(PreprocessError) as e:
        build(output(), backend, shm=True, shm_required=True)
    assert e.value.code == Code.FAILED_PRECONDITION and "shared memory" in e.value.message
    build(output(), backend, shm=True)  # the server's default or AUTO: inline there


def test_parse_pixel_dtype():
    assert asm.parse_pixel_dtype(0) == asm.parse_pixel_dtype(None) == ""
    assert asm.parse_pixel_dtype(pb.WIRE_DTYPE_BFLOAT16) == asm.parse_pixel_dtype("bf16") == "bfloat16"
    for bad in (9, "float64"):
        with pytest.raises(PreprocessError) as e:
            asm.parse_pixel_dtype(bad)
        assert e.value.code == Code.INVALID_ARGUMENT


# -- TensorRT-LLM ---------------------------------------------------------------------------


def test_trtllm_payload():
    out = output()
    p = build(out, "BACKEND_TRTLLM")
    assert list(p.input_ids) == out.original_input_ids.tolist()
    assert list(p.trtllm.image_data) == out.raw_images
    empty = build(output(raw_images=[]), "trtllm")
    assert empty.WhichOneof("mm_inputs") == "trtllm"


# -- the rest -------------------------------------------------------------------------------


def test_parse_backend():
    assert asm.parse_backend("vllm") == asm.parse_backend("BACKEND_VLLM") == asm.parse_backend(2) == pb.BACKEND_VLLM
    assert asm.parse_backend("tokenspeed") == asm.parse_backend(4) == pb.BACKEND_TOKENSPEED
    for bad in ("tgi", 0, 9):
        with pytest.raises(PreprocessError) as e:
            asm.parse_backend(bad)
        assert e.value.code == Code.INVALID_ARGUMENT


def test_token_ids_must_fit_uint32():
    with pytest.raises(PreprocessError):
        asm.token_ids(np.array([1, 2**32]))
    with pytest.raises(PreprocessError):
        asm.token_ids(np.array([-1]))
    assert asm.token_ids(np.array([0, 2**32 - 1])) == [0, 2**32 - 1]


def test_output_nbytes_counts_arrays_and_raw_bytes():
    out = output()
    want = sum(a.nbytes for a in (out.input_ids, out.original_input_ids, out.pixel_values, *out.tensors.values()))
    assert asm.output_nbytes(out) == want + len(b"jpeg-0") + len(b"png-1")
