"""Raw pixels (``Preprocessor.preprocess(raw=True)``) against the installed HF processors
called with ``do_rescale=False, do_normalize=False``, for every family whose vLLM model
normalizes on the device; and vLLM's device formula (``device_norm``) applied to them
against the HF processor's normalized output.

Raw values are compared exactly (the PIL processors return the integers as float32 or
uint8, the torchvision one uint8); the device formula within 1e-6, as the fp32 affine
transform ``x * (rescale / std) + (-mean / std)`` rounds differently from HF's
``(x * rescale - mean) / std``.
"""

from __future__ import annotations

import numpy as np
import pytest

import imagegen
from device_norm import device_normalize
from references import pixtral as hf_pixtral
from references import qwen as hf_qwen
from references.common import reference_input
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.config import resolve

QWEN = ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"]
MISTRAL3 = "mistralai/Mistral-Small-3.1-24B-Instruct-2503"
#: Each family without device normalization in vLLM 0.33.
NO_DEVICE_NORM = ["llava-hf/llava-1.5-7b-hf", "llava-hf/llava-v1.6-mistral-7b-hf", "mistral-community/pixtral-12b",
                  "meta-llama/Llama-4-Scout-17B-16E-Instruct", "microsoft/Phi-3.5-vision-instruct",
                  "microsoft/Phi-4-multimodal-instruct", "thinkingmachines/Inkling"]
# (height, width): tiny, odd, already on the grid, one axis to resize, both, wide, tall, a photo size.
SIZES = [(1, 1), (13, 7), (56, 56), (56, 91), (97, 56), (255, 257), (90, 700), (700, 90), (720, 1280)]
RAW = {"do_rescale": False, "do_normalize": False}


def _images(sizes, kind: str = "png") -> list[bytes]:
    make = imagegen.png if kind == "png" else imagegen.jpeg
    return [make(h, w, seed=i) for i, (h, w) in enumerate(sizes)]


def _norm(src) -> tuple:
    cfg = src.preprocessor_config
    return cfg["image_mean"], cfg["image_std"], cfg.get("rescale_factor", 1 / 255)


def _check_device_formula(raw: np.ndarray, normalized: np.ndarray, src) -> None:
    got = device_normalize(raw, *_norm(src))
    assert got.shape == normalized.shape
    assert float(np.max(np.abs(got - normalized))) <= 1e-6


@pytest.fixture(scope="module", params=QWEN)
def qwen(request):
    src = resolve(request.param)
    return Preprocessor.from_model(request.param, cache_bytes=0), hf_qwen.processor(src), src


@pytest.mark.parametrize("kind", ["png", "jpeg"])
def test_qwen_raw_equals_hf(qwen, kind):
    pp, ref, src = qwen
    raws = _images(SIZES, kind)
    for i, raw in enumerate(raws):
        ours = pp.preprocess([raw], raw=True)
        want = ref([reference_input(raw)], return_tensors="np", **RAW)
        assert ours.pixel_values.dtype == np.uint8 and ours.pixel_values.shape == want["pixel_values"].shape, SIZES[i]
        assert np.array_equal(ours.pixel_values, want["pixel_values"]), SIZES[i]
        assert np.array_equal(ours.tensors["image_grid_thw"], want["image_grid_thw"])
        normalized = ref([reference_input(raw)], return_tensors="np")["pixel_values"]
        _check_device_formula(ours.pixel_values, normalized, src)
    batch = pp.preprocess(raws[:4], raw=True)  # several images into one tensor
    assert np.array_equal(batch.pixel_values, ref([reference_input(r) for r in raws[:4]], return_tensors="np",
                                                  **RAW)["pixel_values"])


def test_qwen_raw_options_and_cache(qwen):
    """Per-image options reach the raw variant; the cache keeps raw and normalized apart."""
    pp, ref, _src = qwen
    cached = Preprocessor.from_model(pp.name)
    raw = imagegen.jpeg(300, 400, seed=5)
    from sglang_mm_grpc.core.carriers import ImageOptions

    ours = pp.preprocess([raw], raw=True, options=ImageOptions(max_pixels=200_000))
    want = ref([reference_input(raw)], return_tensors="np", max_pixels=200_000, **RAW)
    assert np.array_equal(ours.pixel_values, want["pixel_values"])
    first = cached.preprocess([raw])
    second = cached.preprocess([raw], raw=True)
    third = cached.preprocess([raw])
    assert first.pixel_values.dtype == np.float32 and second.pixel_values.dtype == np.uint8
    assert not second.images[0].cached and third.images[0].cached
    assert np.array_equal(third.pixel_values, first.pixel_values)
    assert cached.preprocess([raw], raw=True).images[0].cached


def test_qwen_torchvision_raw_equals_hf():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")

    for model in QWEN:
        src = resolve(model)
        pp = Preprocessor.from_model(model + "@torchvision", cache_bytes=0)
        ref = hf_qwen.torchvision_reference(src.preprocessor_config)
        for i, raw in enumerate(_images(SIZES, "jpeg")):
            ours = pp.preprocess([raw], raw=True)
            want = ref([reference_input(raw)], return_tensors="pt", **RAW)["pixel_values"]
            assert want.dtype == torch.uint8
            assert np.array_equal(ours.pixel_values, want.numpy()), (model, SIZES[i])
            normalized = ref([reference_input(raw)], return_tensors="pt")["pixel_values"].numpy()
            _check_device_formula(ours.pixel_values, normalized, src)


@pytest.fixture(scope="module")
def mistral3():
    src = resolve(MISTRAL3)
    return Preprocessor.from_model(MISTRAL3, cache_bytes=0), hf_pixtral.processor(src), src


def test_mistral3_raw_equals_hf(mistral3):
    pp, ref, src = mistral3
    sizes = [(13, 7), (56, 91), (255, 257), (720, 1280), (1600, 900)]
    raws = _images(sizes, "jpeg")
    for raw in raws:
        ours = pp.preprocess([raw], raw=True)
        want = {k: np.asarray(v) for k, v in ref(images=[reference_input(raw)], text="[IMG]", return_tensors="np",
                                                **RAW).items()}
        assert ours.pixel_values.dtype == np.uint8 and np.array_equal(ours.pixel_values, want["pixel_values"])
        normalized = np.asarray(ref(images=[reference_input(raw)], text="[IMG]", return_tensors="np")["pixel_values"])
        _check_device_formula(ours.pixel_values, normalized, src)
    # a padded batch: the padding is zeros, as HF's
    ours = pp.preprocess(raws[:3], raw=True)
    want = np.asarray(ref(images=[reference_input(r) for r in raws[:3]], text="[IMG]" * 3, return_tensors="np",
                          **RAW)["pixel_values"])
    assert np.array_equal(ours.pixel_values, want)


@pytest.mark.parametrize("model", NO_DEVICE_NORM)
def test_raw_refused_where_vllm_does_not_normalize(model):
    pp = Preprocessor.from_model(model, cache_bytes=0)
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([imagegen.jpeg(64, 64)], raw=True)
    assert e.value.code == Code.FAILED_PRECONDITION
    assert pp.family.name in e.value.message and "supports_mm_device_do_normalize" in e.value.message
    assert "uint8" not in pp.plan([imagegen.jpeg(64, 64)]).pixel_bytes


def test_plan_pixel_bytes_per_dtype(qwen):
    pp, _ref, _src = qwen
    raws = _images([(56, 91), (255, 257)], "jpeg")
    plan = pp.plan(raws)
    out = pp.preprocess(raws)
    n = out.pixel_values.size
    assert plan.pixel_bytes == {"float32": 4 * n, "bfloat16": 2 * n, "float16": 2 * n, "uint8": n}
