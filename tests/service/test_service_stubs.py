"""The stub backends reject what the real servicers reject, and read what they read.

These pin the stubs' fidelity to smg-grpc-servicer, and show why the assembler casts and
lists what it does.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import grpc
import numpy as np
import pytest

import imagegen
from service_support import QWEN2, generate
from stub_backends import _common

RAWS = [imagegen.png(60, 90, seed=7), imagegen.jpeg(100, 80, seed=8)]


@pytest.fixture(scope="module")
def payloads(server):
    from sglang_mm_grpc.client import Client

    with Client(server) as c:
        return {b: c.preprocess(QWEN2, RAWS, backend=b).payload for b in ("sglang", "vllm", "trtllm", "tokenspeed")}


def rejected(backend, stubs, payload) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        generate(backend, stubs[backend], payload)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return e.value


def copy(p):
    q = type(p)()
    q.CopyFrom(p)
    return q


def test_dtype_table_is_the_servicers():
    """tensor_wire.py imports torch; its PROTO_DTYPE_MAP keys are read from the source."""
    spec = importlib.util.find_spec("smg_grpc_servicer")
    source = (Path(spec.origin).parent / "tensor_wire.py").read_text()
    (node,) = [n for n in ast.walk(ast.parse(source))
               if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "PROTO_DTYPE_MAP"]
    keys = [k.value for k in node.value.keys]
    assert sorted(keys) == sorted(_common.PROTO_DTYPES)


def test_sglang_reads_the_servicer_table_and_flags_what_older_servicers_misread(stubs, payloads):
    p = copy(payloads["sglang"])
    grid = p.sglang.model_specific_tensors["image_grid_thw"]
    want = np.frombuffer(grid.data, "<i8").reshape(list(grid.shape))
    grid.dtype, grid.data = "uint32", want.astype("<u4").tobytes()
    _, report = generate("sglang", stubs["sglang"], p)
    assert report["items"][0]["model_specific_data"]["image_grid_thw"]["dtype"] == "uint32"
    # before smg-grpc-servicer 0.14 SGLang read this as float32: never send it uint32
    assert report["older_servicer_misreads"] == ["uint32"]


def test_sglang_rejects_an_unknown_dtype_and_a_short_tensor(stubs, payloads):
    p = copy(payloads["sglang"])
    p.sglang.model_specific_tensors["image_grid_thw"].dtype = "float64"
    assert "Unsupported proto tensor dtype" in rejected("sglang", stubs, p).details()
    p = copy(payloads["sglang"])
    p.sglang.pixel_values.data = p.sglang.pixel_values.data[:-4]
    assert "byte length mismatch" in rejected("sglang", stubs, p).details()


def test_vllm_rejects_unknown_dtype(stubs, payloads):
    p = copy(payloads["vllm"])
    p.vllm.model_specific_tensors["image_grid_thw"].dtype = "float64"
    assert "Unsupported proto tensor dtype" in rejected("vllm", stubs, p).details()


def test_vllm_rejects_a_tensor_without_payload(stubs, payloads):
    """What a zero-size tensor sent as plain proto3 bytes looks like: the oneof unset."""
    p = copy(payloads["vllm"])
    p.vllm.model_specific_tensors["image_grid_thw"].ClearField("inline")
    assert "TensorData payload is required" in rejected("vllm", stubs, p).details()


def test_vllm_needs_the_sizes_tensor(stubs, payloads):
    p = copy(payloads["vllm"])
    del p.vllm.model_specific_tensors["patches_per_image"]
    p.vllm.batched_keys.remove("patches_per_image")
    assert "patches_per_image" in rejected("vllm", stubs, p).details()


def test_vllm_needs_one_placeholder_per_item(stubs, payloads):
    p = copy(payloads["vllm"])
    del p.vllm.mm_placeholders[-1]
    del p.vllm.mm_hashes[-1]
    assert "batch sizes" in rejected("vllm", stubs, p).details()


def test_vllm_unlisted_keys_are_shared(stubs, payloads):
    """Without the layout keys every tensor is 'shared': each item gets all rows."""
    p = copy(payloads["vllm"])
    del p.vllm.batched_keys[:]
    p.vllm.flat_keys.clear()
    _, report = generate("vllm", stubs["vllm"], p)
    rows = {it["fields"]["pixel_values"]["shape"][0] for it in report["items"]}
    grids = np.frombuffer(p.vllm.model_specific_tensors["image_grid_thw"].inline, "<i8").reshape(-1, 3)
    assert rows == {int(grids.prod(axis=1).sum())}


def test_vllm_registers_the_pixels_under_encoder_input_key(stubs, payloads):
    """encoder_input_key renames the pixel tensor; layout keys must use the new name, or
    the tensor is shared (every item gets all of it)."""
    p = copy(payloads["vllm"])
    p.vllm.encoder_input_key = "input_image_embeds"
    _, report = generate("vllm", stubs["vllm"], p)
    assert "input_image_embeds" in report["layout"]["shared"]
    p.vllm.flat_keys["input_image_embeds"] = p.vllm.flat_keys.pop("pixel_values")
    _, report = generate("vllm", stubs["vllm"], p)
    assert report["layout"]["flat"] == {"input_image_embeds": "patches_per_image"}
    assert "pixel_values" not in report["items"][0]["fields"]


def test_vllm_reports_keep_on_cpu_and_modality(stubs, payloads):
    _, report = generate("vllm", stubs["vllm"], payloads["vllm"])
    assert report["layout"]["keep_on_cpu"] == ["image_grid_thw"] and report["modality"] == "image"


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


def test_tokenspeed_rules(stubs, payloads):
    p = copy(payloads["tokenspeed"])
    del p.tokenspeed.items[0].placeholders[:]
    assert "no placeholders" in rejected("tokenspeed", stubs, p).details()
    p = copy(payloads["tokenspeed"])
    p.tokenspeed.items[1].placeholder_token_id += 1
    assert "Conflicting placeholder_token_id" in rejected("tokenspeed", stubs, p).details()
    p = copy(payloads["tokenspeed"])
    p.tokenspeed.items[0].model_specific_tensors["video_grid_thw"].CopyFrom(
        p.tokenspeed.items[0].model_specific_tensors["image_grid_thw"])
    assert "video_grid_thw" in rejected("tokenspeed", stubs, p).details()
    p = copy(payloads["tokenspeed"])
    p.tokenspeed.items[0].modality = 9
    assert "modality" in rejected("tokenspeed", stubs, p).details()


@pytest.mark.parametrize("name", ["../etc/passwd", "a/b", "", ".", "..", "x\x00y"])
def test_shm_names_that_are_not_one_path_component_are_refused(stubs, payloads, name):
    """The reader (mm_shm) refuses them before opening anything."""
    for backend in ("vllm", "tokenspeed"):
        p = copy(payloads[backend])
        td = p.vllm.pixel_values if backend == "vllm" else p.tokenspeed.items[0].encoder_input
        nbytes = int(np.prod(td.shape)) * {"float32": 4, "bfloat16": 2}[td.dtype]
        td.shm.name, td.shm.offset, td.shm.nbytes = name, 0, nbytes
        assert td.WhichOneof("payload") == "shm"
        err = rejected(backend, stubs, p).details()
        assert "Invalid TensorData.shm name" in err, err


def test_shm_symlinks_and_missing_segments_are_refused(stubs, payloads, tmp_path):
    import os
    import secrets

    target = tmp_path / "secret"
    target.write_bytes(b"\0" * 16)
    link = f"sglang-mm-test-link-{secrets.token_hex(8)}"
    os.symlink(target, f"/dev/shm/{link}")
    try:
        p = copy(payloads["vllm"])
        td = p.vllm.pixel_values
        td.shm.name, td.shm.offset, td.shm.nbytes = link, 0, 16
        assert "symlink" in rejected("vllm", stubs, p).details()
        td.shm.name = f"sglang-mm-test-missing-{secrets.token_hex(8)}"
        assert "No such file" in rejected("vllm", stubs, p).details()
    finally:
        os.unlink(f"/dev/shm/{link}")
    assert target.read_bytes() == b"\0" * 16


def test_trtllm_rejects_undecodable_image(stubs, payloads):
    p = copy(payloads["trtllm"])
    p.trtllm.image_data[1] = b"GIF89a but not really"
    assert "cannot open image" in rejected("trtllm", stubs, p).details()
