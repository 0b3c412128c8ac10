"""Assembly and tensor encoding, in-process: dtype rules per backend, ranges, field layout."""

from __future__ import annotations

import numpy as np
import pytest

from sglang_mm_grpc import Code, PreprocessError, assemble as asm, tensors
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc.carriers import ImageResult, PreprocessOutput
from sglang_mm_grpc.families import FieldLayout

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
        tensors.to_array(pb.TensorData(data=b"", shape=[0], dtype="bfloat16"))
    with pytest.raises(ValueError, match="no TensorData name"):
        tensors.fill(pb.TensorData(), np.zeros(2, np.complex64))


# -- SGLang -------------------------------------------------------------------------------


def test_sglang_payload():
    out = output()
    p = asm.assemble(out, "sglang", LAYOUT)
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
    mm = asm.sglang_inputs(out)
    assert [(r.offset, r.length) for r in mm.mm_placeholders][-1] == (9, 3)


# -- vLLM ---------------------------------------------------------------------------------


def test_vllm_payload():
    out = output()
    p = asm.assemble(out, pb.BACKEND_VLLM, LAYOUT)
    mm = p.vllm
    assert list(p.input_ids) == out.input_ids.tolist()
    dtypes = {k: v.dtype for k, v in mm.model_specific_tensors.items()}
    assert dtypes == {"sizes": "int64", "grid": "uint32", "scale": "float32", "mask": "int64", "count": "int64"}
    assert list(mm.batched_keys) == ["grid", "mask", "count", "sizes"]  # "absent" is not sent
    assert dict(mm.flat_keys) == {"pixel_values": "sizes"}
    assert [(r.offset, r.length) for r in mm.mm_placeholders] == [(1, 7), (9, 3)]
    assert list(mm.mm_hashes) == ["a" * 64, "b" * 64]
    assert mm.HasField("im_token_id") and mm.im_token_id == IMG


def test_vllm_sizes_tensor_must_exist():
    out = output()
    with pytest.raises(PreprocessError) as e:
        asm.vllm_inputs(out, FieldLayout(flat={"pixel_values": "nope"}))
    assert e.value.code == Code.INTERNAL and "nope" in e.value.message


# -- TensorRT-LLM ---------------------------------------------------------------------------


def test_trtllm_payload():
    out = output()
    p = asm.assemble(out, "BACKEND_TRTLLM", LAYOUT)
    assert list(p.input_ids) == out.original_input_ids.tolist()
    assert list(p.trtllm.image_data) == out.raw_images
    empty = asm.assemble(output(raw_images=[]), "trtllm", LAYOUT)
    assert empty.WhichOneof("mm_inputs") == "trtllm"


# -- the rest -------------------------------------------------------------------------------


def test_parse_backend():
    assert asm.parse_backend("vllm") == asm.parse_backend("BACKEND_VLLM") == asm.parse_backend(2) == pb.BACKEND_VLLM
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
