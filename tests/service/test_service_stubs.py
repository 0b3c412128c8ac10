"""The stub backends reject what the real servicers reject, and misread what they misread.

These pin the stubs' fidelity, and show why the assembler casts and lists what it does.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

import imagegen
from service_support import QWEN2, generate

RAWS = [imagegen.png(60, 90, seed=7), imagegen.jpeg(100, 80, seed=8)]


@pytest.fixture(scope="module")
def payloads(server):
    from sglang_mm_grpc.client import Client

    with Client(server) as c:
        return {b: c.preprocess(QWEN2, RAWS, backend=b).payload for b in ("sglang", "vllm", "trtllm")}


def rejected(backend, stubs, payload) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        generate(backend, stubs[backend], payload)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return e.value


def copy(p):
    q = type(p)()
    q.CopyFrom(p)
    return q


def test_sglang_reads_unknown_dtypes_as_float32(stubs, payloads):
    p = copy(payloads["sglang"])
    grid = p.sglang.model_specific_tensors["image_grid_thw"]
    want = np.frombuffer(grid.data, "<i8").reshape(list(grid.shape))
    grid.dtype, grid.data = "uint32", want.astype("<u4").tobytes()  # same shape, 4-byte elements
    _, report = generate("sglang", stubs["sglang"], p)
    got = report["items"][0]["model_specific_data"]["image_grid_thw"]
    assert got["dtype"] == "float32"  # silently misread: never send SGLang uint32
    misread = np.frombuffer(want.astype("<u4").tobytes(), "<f4")
    assert not np.array_equal(misread, want.reshape(-1))


def test_sglang_rejects_a_short_tensor(stubs, payloads):
    p = copy(payloads["sglang"])
    p.sglang.pixel_values.data = p.sglang.pixel_values.data[:-4]
    rejected("sglang", stubs, p)


def test_vllm_rejects_unknown_dtype(stubs, payloads):
    p = copy(payloads["vllm"])
    p.vllm.model_specific_tensors["image_grid_thw"].dtype = "bfloat16"
    assert "Unsupported proto tensor dtype" in rejected("vllm", stubs, p).details()


def test_vllm_needs_the_sizes_tensor(stubs, payloads):
    p = copy(payloads["vllm"])
    del p.vllm.model_specific_tensors["patches_per_image"]
    p.vllm.batched_keys.remove("patches_per_image")
    assert "patches_per_image" in rejected("vllm", stubs, p).details()


def test_vllm_needs_one_placeholder_per_item(stubs, payloads):
    p = copy(payloads["vllm"])
    del p.vllm.mm_placeholders[-1]
    del p.vllm.mm_hashes[-1]
    assert "placeholders" in rejected("vllm", stubs, p).details()


def test_vllm_unlisted_keys_are_shared(stubs, payloads):
    """Without the layout keys every tensor is 'shared': each item gets all rows."""
    p = copy(payloads["vllm"])
    del p.vllm.batched_keys[:]
    p.vllm.flat_keys.clear()
    _, report = generate("vllm", stubs["vllm"], p)
    rows = {it["fields"]["pixel_values"]["shape"][0] for it in report["items"]}
    grids = np.frombuffer(p.vllm.model_specific_tensors["image_grid_thw"].data, "<i8").reshape(-1, 3)
    assert rows == {int(grids.prod(axis=1).sum())}


def test_vllm_structural_tokens_make_is_embed(stubs, payloads):
    """A range holding non-patch tokens gets an is_embed mask built from im_token_id."""
    p = copy(payloads["vllm"])
    first = p.vllm.mm_placeholders[0]
    ids = list(p.input_ids)
    ids[first.offset] = 151652  # pretend the range starts with a structural token
    del p.input_ids[:]
    p.input_ids.extend(ids)
    _, report = generate("vllm", stubs["vllm"], p)
    item = report["items"][0]
    assert item["is_embed"] is not None and item["embed_count"] == first.length - 1


def test_trtllm_rejects_undecodable_image(stubs, payloads):
    p = copy(payloads["trtllm"])
    p.trtllm.image_data[1] = b"GIF89a but not really"
    assert "cannot open image" in rejected("trtllm", stubs, p).details()
