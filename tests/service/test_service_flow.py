"""A router's flows over real processes: Preprocess -> pick a backend -> Assemble -> Generate.

What each stub backend decoded must equal the in-process Preprocessor output bit for
bit (sha256 of tensor bytes, shapes, dtypes, ranges, ids).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import blake3
import grpc
import numpy as np
import pytest

import imagegen
from service_support import (BACKENDS, NAMED, PIXTRAL, QWEN2, QWEN3, expected_sglang, expected_tokenspeed,
                             expected_trtllm, expected_vllm, generate, prompt, without)
from sglang_mm_grpc.wire import tensors
_CORPUS = imagegen.modes_corpus()
CASES = {
    "one": [imagegen.png(100, 150, seed=1)],
    "several": [imagegen.jpeg(333, 500, seed=2), _CORPUS["png_rgba"], imagegen.png(40, 60, seed=3)],
}


def check_response(resp, out, raws):
    """The PreprocessResponse a router routes on equals the in-process result."""
    assert list(resp.input_ids) == out.input_ids.tolist()
    assert resp.image_token_id == out.image_token_id
    assert len(resp.images) == len(raws)
    for info, im, raw in zip(resp.images, out.images, raws):
        assert info.hash == blake3.blake3(raw).hexdigest() == im.hash
        assert info.encoded_bytes == len(raw)
        assert info.token_count == im.token_count
        assert (info.structural_range.offset, info.structural_range.length) == im.structural_range
        assert [(r.offset, r.length) for r in info.patch_ranges] == [tuple(r) for r in im.patch_ranges]
        assert (info.height, info.width, info.resized_height, info.resized_width) == (
            im.height, im.width, im.resized_height, im.resized_width,
        )
    if out.positions is None:
        assert not resp.HasField("mrope")
    else:
        got = tensors.to_array(resp.mrope.positions)
        assert got.dtype == np.int64 and np.array_equal(got, out.positions)
        assert resp.mrope.delta == out.rope_delta
    assert resp.timings.total_ms > 0


def expected(backend, pp, out, raws, ids, request_id):
    """What the stub reports, without the tensors' transport (inline here)."""
    hashes = [blake3.blake3(r).hexdigest() for r in raws]
    if backend == "sglang":
        return expected_sglang(out, raws, request_id)
    if backend == "vllm":
        return expected_vllm(out, pp.field_layout, hashes, request_id)
    if backend == "tokenspeed":
        return expected_tokenspeed(out, pp.field_layout, hashes, request_id)
    return expected_trtllm(ids, raws, request_id)


def inline(report: dict) -> dict:
    """``report`` without its transport entries, which must all say inline."""
    for t in [report.get("transport", {})] + [it.get("transport", {}) for it in report.get("items", [])]:
        assert set(t.values()) <= {"inline"}, t
    return without(report, "transport")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", [QWEN2, PIXTRAL])
def test_two_phase(client, stubs, pps, model, backend, case):
    """Qwen: one patch run per image. Pixtral: rows of [IMG] split by [IMG_BREAK] and
    ended by [IMG_END], so SGLang gets one range per row and vLLM an is_embed mask."""
    raws = CASES[case]
    pp = pps[model]
    ids = prompt(pp, len(raws))
    rid = f"two-phase-{backend}-{case}"

    resp = client.preprocess(model, raws, input_ids=ids, request_id=rid)
    assert resp.request_id == rid and resp.handle and not resp.HasField("payload")
    out = pp.preprocess(raws, input_ids=ids)
    check_response(resp, out, raws)

    if backend == "vllm" and model == PIXTRAL and case == "several":
        # images of different sizes are zero-padded to one batch, which vLLM's Pixtral
        # cannot split (its processor crops them, a step the servicer skips)
        with pytest.raises(grpc.RpcError) as e:
            client.assemble(resp.handle, backend)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "one image per request" in e.value.details()
        return
    payload = client.assemble(resp.handle, backend)
    responses, report = generate(backend, stubs[backend], payload, request_id=rid)
    assert responses[-1].WhichOneof("response") == "complete"
    assert inline(report) == expected(backend, pp, out, raws, ids, rid)
    structural = model == PIXTRAL
    if backend == "vllm":
        assert all((item["is_embed"] is not None) == structural for item in report["items"])
    if backend == "sglang":
        assert (len(report["items"][0]["offsets"]) > len(raws)) == structural


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_shot(client, stubs, pps, backend):
    """backend in the request: the payload comes back at once, nothing is kept."""
    raws = CASES["several"]
    pp = pps[QWEN3]
    ids = prompt(pp, len(raws))
    resp = client.preprocess(QWEN3, raws, input_ids=ids, backend=backend, request_id="one-shot")
    assert resp.handle == "" and resp.payload.WhichOneof("mm_inputs") == backend
    out = pp.preprocess(raws, input_ids=ids)
    check_response(resp, out, raws)
    _, report = generate(backend, stubs[backend], resp.payload, request_id="one-shot")
    assert inline(report) == expected(backend, pp, out, raws, ids, "one-shot")


def test_one_shot_keep_handle_matches_assemble(client):
    raws = CASES["several"]
    resp = client.preprocess(QWEN2, raws, backend="vllm", keep_handle=True)
    assert resp.handle
    again = client.assemble(resp.handle, "vllm", release=True)
    assert again.SerializeToString(deterministic=True) == resp.payload.SerializeToString(deterministic=True)
    with pytest.raises(grpc.RpcError) as e:
        client.assemble(resp.handle, "vllm")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_one_handle_every_backend(client, stubs, pps):
    """The router may assemble the same intermediate for several workers (e.g. a retry)."""
    raws = CASES["several"]
    pp = pps[NAMED]
    ids = prompt(pp, len(raws))
    resp = client.preprocess(NAMED, raws, input_ids=ids)
    out = pp.preprocess(raws, input_ids=ids)
    check_response(resp, out, raws)
    for i, backend in enumerate(BACKENDS):
        payload = client.assemble(resp.handle, backend, release=i == len(BACKENDS) - 1)
        _, report = generate(backend, stubs[backend], payload, request_id="same-handle")
        assert inline(report) == expected(backend, pp, out, raws, ids, "same-handle")
    assert client.release(resp.handle) is False  # released by the last Assemble


def test_default_prompt_is_one_placeholder_per_image(client, pps):
    raws = CASES["several"]
    resp = client.preprocess(QWEN2, raws)
    out = pps[QWEN2].preprocess(raws)
    check_response(resp, out, raws)
    assert client.release(resp.handle) is True


def test_vllm_qwen_rows_follow_grid(client, stubs):
    """Independent of the field layout: image i's pixel rows are t*h*w of its grid."""
    raws = CASES["several"]
    resp = client.preprocess(QWEN2, raws, backend="vllm")
    _, report = generate("vllm", stubs["vllm"], resp.payload)
    for item in report["items"]:
        grid = item["fields"]["image_grid_thw"]
        assert grid["shape"] == [3]
        assert item["fields"]["pixel_values"]["shape"][1] == 1176
    grids = tensors.to_array(resp.payload.vllm.model_specific_tensors["image_grid_thw"])
    rows = [it["fields"]["pixel_values"]["shape"][0] for it in report["items"]]
    assert rows == [int(np.prod(g)) for g in grids]


def test_concurrent_requests(client, pps):
    """Requests in parallel (the worker pool) each get their own, correct result."""
    pp = pps[QWEN2]
    jobs = [[imagegen.jpeg(120 + 17 * k, 200 - 9 * k, seed=20 + k)] for k in range(8)]

    def call(raws):
        return client.preprocess(QWEN2, raws, backend="sglang")

    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(call, jobs))
    for raws, resp in zip(jobs, results):
        out = pp.preprocess(raws)
        assert list(resp.payload.input_ids) == out.input_ids.tolist()
        got = tensors.to_array(resp.payload.sglang.pixel_values)
        assert got.tobytes() == out.pixel_values.tobytes()


def test_list_models(client, pps, model_dir):
    models = {m.name: m for m in client.list_models()}
    assert set(models) == {QWEN2, QWEN3, PIXTRAL, NAMED}
    for name, pp in pps.items():
        m, info = models[name], pp.info
        assert (m.family, m.image_token_id, m.mrope, m.reference_processor) == (
            info["family"], info["image_token_id"], info["mrope"], info["reference_processor"],
        )
        assert dict(m.token_ids) == info["token_ids"]
        assert list(m.modalities) == info["modalities"]
        assert m.max_images_per_request == info["max_images_per_request"]
        assert m.placeholder_token_id == info["placeholder_token_id"] == pp.family.placeholder_token_id
        assert m.max_image_tokens == info["max_image_tokens"] == pp.max_image_tokens
    assert models[NAMED].source == str(model_dir)
