"""Raw uint8 pixels and payloads shaped by the worker's own server info, through a real
server (and the real vLLM stub) in separate processes on 127.0.0.1.

Acceptance: each family whose vLLM model normalizes on the device (Qwen-VL, Mistral 3)
x {one image, two of different sizes, a video for Qwen} x {inline, shm}: the uint8
payload parses with the upstream classes, reads back through the servicer's own
``smg_grpc_servicer.mm_shm`` equal to the HF processor's raw output (the PIL processors
with do_rescale=False, do_normalize=False; for videos the in-process raw tensor, which
tests/video/test_video_fixtures.py holds equal to HF's), and vLLM's device formula
(``device_norm``) applied to it equals HF's normalized output within 1e-6.

Then each worker-info field, shown to change the payload or the refusal it should.
"""

from __future__ import annotations

import os

import grpc
import numpy as np
import pytest
from google.protobuf import struct_pb2
from smg_grpc_proto.generated import tokenspeed_scheduler_pb2 as ts_pb
from smg_grpc_proto.generated import vllm_engine_pb2 as vllm_pb
from smg_grpc_servicer import mm_shm

import imagegen
from device_norm import device_normalize
from references import pixtral as hf_pixtral
from references import qwen as hf_qwen
from references.common import reference_input
from servers import Server, free_port
from service_support import generate
from test_wire_current import UPSTREAM, no_unknown_fields
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.config import resolve
from sglang_mm_grpc.client import Client, payload_options

QWEN25 = "Qwen/Qwen2.5-VL-7B-Instruct"
QWEN3 = "Qwen/Qwen3-VL-8B-Instruct"
MISTRAL3 = "mistralai/Mistral-Small-3.1-24B-Instruct-2503"
LLAVA = "llava-hf/llava-1.5-7b-hf"
MODELS = [QWEN25, QWEN3, MISTRAL3, LLAVA]
ONE = [imagegen.jpeg(90, 140, seed=31)]
TWO = [imagegen.jpeg(90, 140, seed=31), imagegen.jpeg(200, 120, seed=32)]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    proc = Server(tmp_path_factory.mktemp("raw-pixels"), "--shm-lease", "60", "--allow-private-hosts",
                  "--log-level", "WARNING", models=MODELS)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(served):
    with Client(served.target, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def refs():
    """HF's image processors (PIL) per model, and each model's normalization knobs."""
    out = {}
    for model in (QWEN25, QWEN3, MISTRAL3):
        src = resolve(model)
        ref = hf_qwen.processor(src) if model != MISTRAL3 else hf_pixtral.processor(src)
        cfg = src.preprocessor_config
        out[model] = ref, (cfg["image_mean"], cfg["image_std"], cfg.get("rescale_factor", 1 / 255))
    return out


def hf_pixels(model: str, ref, raws: list[bytes], **kwargs) -> np.ndarray:
    images = [reference_input(r) for r in raws]
    if model == MISTRAL3:
        return np.asarray(ref(images=images, text="[IMG]" * len(raws), return_tensors="np", **kwargs)["pixel_values"])
    return np.asarray(ref(images, return_tensors="np", **kwargs)["pixel_values"])


def prompt(client, model: str, images: int, videos: int = 0) -> list[int]:
    info = next(m for m in client.list_models() if m.name == model)
    return [1, *([info.placeholder_token_id] * images), *([info.video_token_id] * videos), 2]


def read_tensor(td) -> np.ndarray:
    """A vLLM TensorData as the servicer reads it (inline, or from /dev/shm, removing it)."""
    data = mm_shm.tensor_payload_bytes(td)
    assert td.dtype == "uint8" and len(data) == int(np.prod(td.shape))
    return np.frombuffer(data, np.uint8).reshape(tuple(td.shape))


def vllm_info(**fields) -> vllm_pb.GetServerInfoResponse:
    return vllm_pb.GetServerInfoResponse(server_type="vllm-grpc", **fields)


# -- acceptance ---------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["inline", "shm"])
@pytest.mark.parametrize("case", ["one", "two"])
@pytest.mark.parametrize("model", [QWEN25, QWEN3, MISTRAL3])
def test_uint8_images_reach_vllm(client, refs, model, case, transport):
    raws = ONE if case == "one" else TWO
    if model == MISTRAL3 and case == "two":
        # vLLM crops each Mistral 3 image to its own size; a padded batch is refused ...
        with pytest.raises(grpc.RpcError) as e:
            client.preprocess(model, raws, prompt(client, model, 2), backend="vllm",
                              options=payload_options("uint8", transport, shm_min_bytes=0))
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "padded" in e.value.details()
        raws = [raws[0], imagegen.jpeg(90, 140, seed=33)]  # ... two images of one size are not
    ref, norm = refs[model]
    resp = client.preprocess(model, raws, prompt(client, model, len(raws)), backend="vllm",
                             options=payload_options("uint8", transport, shm_min_bytes=0))
    batch = resp.payload.vllm
    no_unknown_fields(UPSTREAM["vllm"].FromString(batch.SerializeToString()))
    assert batch.pixel_values.WhichOneof("payload") == ("shm" if transport == "shm" else "inline")
    name = batch.pixel_values.shm.name
    pixels = read_tensor(batch.pixel_values)
    if transport == "shm":
        assert not os.path.exists(f"/dev/shm/{name}")  # the reader removed it
    assert np.array_equal(pixels, hf_pixels(model, ref, raws, do_rescale=False, do_normalize=False))
    normalized = hf_pixels(model, ref, raws)
    assert float(np.max(np.abs(device_normalize(pixels, *norm) - normalized))) <= 1e-6


@pytest.mark.parametrize("transport", ["inline", "shm"])
@pytest.mark.parametrize("model", [QWEN25, QWEN3])
def test_uint8_video_reaches_vllm(client, model, transport):
    pytest.importorskip("av")
    import videogen

    clip = videogen.clip(frames=12, fps=8, size=(72, 100), noise=8, seed=3)
    pp = Preprocessor.from_model(model + "@torchvision", cache_bytes=0)
    ids = prompt(client, model, 1, 1)
    want = pp.preprocess(ONE, ids, videos=[clip], raw=True)
    normalized = pp.preprocess(ONE, ids, videos=[clip])
    resp = client.preprocess(model, ONE, ids, backend="vllm", videos=[clip],
                             options=payload_options("uint8", transport, shm_min_bytes=0))
    assert len(resp.payload.vllm_extra) == 1  # the image batch, then the video batch
    video = resp.payload.vllm_extra[0]
    no_unknown_fields(UPSTREAM["vllm"].FromString(video.SerializeToString()))
    pixels = read_tensor(video.pixel_values)
    assert np.array_equal(pixels, want.pixel_values_videos)
    c = pp.family.config.video
    got = device_normalize(pixels, c.image_mean, c.image_std, c.rescale_factor)
    assert float(np.max(np.abs(got - normalized.pixel_values_videos))) <= 1e-6


def test_the_vllm_stub_reads_uint8(client, stubs):
    """The vLLM stub (the servicer's rules: dtype table, lengths, layout keys) takes it."""
    resp = client.preprocess(QWEN3, TWO, prompt(client, QWEN3, 2), backend="vllm",
                             options=payload_options("uint8", "inline"))
    _, report = generate("vllm", stubs["vllm"], resp.payload, request_id="raw")
    assert {it["fields"]["pixel_values"]["dtype"] for it in report["items"]} == {"uint8"}


def test_two_phase_raw_and_mismatches(client):
    ids = prompt(client, QWEN3, 1)
    normalizes = payload_options(worker_info=vllm_info(mm_device_do_normalize=True))
    kept = client.preprocess(QWEN3, ONE, ids, options=normalizes)  # a hint: the kernels write uint8
    payload = client.assemble(kept.handle, "vllm", options=normalizes)
    assert payload.vllm.pixel_values.dtype == "uint8"
    assert client.assemble(kept.handle, "vllm").vllm.pixel_values.dtype == "uint8"  # what it holds
    for backend, options, words in (
            ("vllm", payload_options("float32"), "kept raw"),
            ("sglang", None, "SGLang cannot take raw uint8"),
            ("tokenspeed", None, "TokenSpeed cannot take raw uint8")):
        with pytest.raises(grpc.RpcError) as e:
            client.assemble(kept.handle, backend, options=options)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and words in e.value.details(), backend
    assert client.assemble(kept.handle, "trtllm").trtllm.image_data == ONE  # the encoded images
    normal = client.preprocess(QWEN3, ONE, ids)
    with pytest.raises(grpc.RpcError) as e:
        client.assemble(normal.handle, "vllm", options=normalizes)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "normalize them twice" in e.value.details()


def test_raw_refused_for_a_family_vllm_does_not_normalize(client, served):
    before = served.stats().fetch.started
    for options in (payload_options("uint8"), payload_options(worker_info=vllm_info(mm_device_do_normalize=True))):
        with pytest.raises(grpc.RpcError) as e:
            client.preprocess(LLAVA, [f"http://127.0.0.1:{free_port()}/x.jpg"], backend="vllm", options=options)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "llava" in e.value.details() and "supports_mm_device_do_normalize" in e.value.details()
    assert served.stats().fetch.started == before  # refused before any fetch


# -- each worker-info field ---------------------------------------------------------------


def dtype_of(client, info, backend="vllm", **options) -> str:
    resp = client.preprocess(QWEN3, ONE, prompt(client, QWEN3, 1), backend=backend,
                             options=payload_options(worker_info=info, **options))
    if backend == "vllm":
        return resp.payload.vllm.pixel_values.dtype
    return resp.payload.tokenspeed.items[0].encoder_input.dtype


def test_mm_device_do_normalize(client):
    assert dtype_of(client, vllm_info(mm_device_do_normalize=True)) == "uint8"
    assert dtype_of(client, vllm_info(mm_device_do_normalize=False)) == "float32"
    # an explicit dtype wins over the worker info
    assert dtype_of(client, vllm_info(mm_device_do_normalize=True), pixel_dtype="float32") == "float32"


def test_multimodal_encoder_dtype(client):
    assert dtype_of(client, vllm_info(multimodal_encoder_dtype="bfloat16")) == "bfloat16"
    assert dtype_of(client, vllm_info(multimodal_encoder_dtype="float16")) == "float16"
    assert dtype_of(client, vllm_info(multimodal_encoder_dtype="torch.float32")) == "float32"
    assert dtype_of(client, vllm_info(multimodal_encoder_dtype="bfloat16", mm_device_do_normalize=True)) == "uint8"
    assert dtype_of(client, vllm_info(multimodal_encoder_dtype="bfloat16"), pixel_dtype="float32") == "float32"
    with pytest.raises(grpc.RpcError) as e:
        dtype_of(client, vllm_info(multimodal_encoder_dtype="float8_e4m3fn"))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "multimodal_encoder_dtype" in e.value.details()


def test_mm_item_limits_refused_before_any_fetch(client, served):
    url = f"http://127.0.0.1:{free_port()}/x.jpg"  # nothing listens: a fetch would fail otherwise
    before = served.stats().fetch.started
    info = vllm_info(mm_item_limits="image=1,video=0")
    for call in (client.preprocess, client.plan):
        kwargs = {"backend": "vllm"} if call == client.preprocess else {}
        with pytest.raises(grpc.RpcError) as e:
            call(QWEN3, [url, url], prompt(client, QWEN3, 2), options=payload_options(worker_info=info), **kwargs)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "over the worker's limit of 1" in e.value.details() and "image=1,video=0" in e.value.details()
    assert served.stats().fetch.started == before
    assert dtype_of(client, info) == "float32"  # one image is within it
    kept = client.preprocess(QWEN3, TWO, prompt(client, QWEN3, 2))
    with pytest.raises(grpc.RpcError) as e:  # Assemble holds a kept result to it too
        client.assemble(kept.handle, "vllm", options=payload_options(worker_info=info))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        dtype_of(client, vllm_info(mm_item_limits="image:8"))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "mm_item_limits" in e.value.details()


def test_mm_encoder_budget(client):
    ids = prompt(client, QWEN3, 1)
    tokens = client.plan(QWEN3, ONE, ids).images[0].token_count  # Qwen: every expansion token is a feature
    for call in (client.preprocess, client.plan):
        kwargs = {"backend": "vllm"} if call == client.preprocess else {}
        with pytest.raises(grpc.RpcError) as e:
            call(QWEN3, ONE, ids, options=payload_options(worker_info=vllm_info(mm_encoder_budget=tokens - 1)),
                 **kwargs)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"{tokens} feature tokens, over the worker's encoder budget of {tokens - 1}" in e.value.details()
        assert "not decoded" in e.value.details()
    assert dtype_of(client, vllm_info(mm_encoder_budget=tokens)) == "float32"
    kept = client.preprocess(QWEN3, ONE, ids)
    with pytest.raises(grpc.RpcError) as e:
        client.assemble(kept.handle, "vllm", options=payload_options(worker_info=vllm_info(mm_encoder_budget=2)))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "image 0" in e.value.details()


def test_shm_namespace_id_for_auto(client):
    ns = client.server_info().shm_namespace_id
    if not ns:
        pytest.skip("this machine has no /dev/shm identity")
    ids = prompt(client, QWEN3, 1)
    for info, want in ((vllm_info(shm_namespace_id=ns), "shm"), (vllm_info(shm_namespace_id="other:1"), "inline"),
                       (vllm_info(), "inline")):
        resp = client.preprocess(QWEN3, ONE, ids, backend="vllm",
                                 options=payload_options(transport="auto", shm_min_bytes=0, worker_info=info))
        td = resp.payload.vllm.pixel_values
        assert td.WhichOneof("payload") == want
        mm_shm.tensor_payload_bytes(td)  # read (and removed) as the worker would
    scheduler = struct_pb2.Struct()
    scheduler.update({"shm_namespace_id": ns})
    resp = client.preprocess(QWEN3, ONE, ids, backend="tokenspeed", options=payload_options(
        transport="auto", shm_min_bytes=0, worker_info=ts_pb.GetServerInfoResponse(scheduler_info=scheduler)))
    item = resp.payload.tokenspeed.items[0]
    assert item.encoder_input.WhichOneof("payload") == "shm" and item.encoder_input.dtype == "bfloat16"
    mm_shm.tensor_payload_bytes(item.encoder_input)


def test_an_old_worker_info_changes_nothing(client):
    """A server info without these fields (an older worker) gives today's payload."""
    assert dtype_of(client, vllm_pb.GetServerInfoResponse()) == "float32"
    assert dtype_of(client, ts_pb.GetServerInfoResponse(), backend="tokenspeed") == "bfloat16"


def test_worker_info_of_another_backend_is_refused(client):
    with pytest.raises(grpc.RpcError) as e:
        dtype_of(client, vllm_info(), backend="tokenspeed")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "vllm worker's server info" in e.value.details()


def test_plan_reports_pixel_bytes(client):
    ids = prompt(client, QWEN3, 2)
    plan = client.plan(QWEN3, TWO, ids)
    resp = client.preprocess(QWEN3, TWO, ids, backend="vllm", options=payload_options("uint8", "inline"))
    n = int(np.prod(resp.payload.vllm.pixel_values.shape))
    assert dict(plan.pixel_bytes) == {"float32": 4 * n, "bfloat16": 2 * n, "float16": 2 * n, "uint8": n}
    assert "uint8" not in client.plan(LLAVA, ONE, prompt(client, LLAVA, 1)).pixel_bytes
