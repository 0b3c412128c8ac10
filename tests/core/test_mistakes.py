"""A newcomer's mistakes get a message that says what to do, with the right code.

In-process: the Python API, source strings and model names. (Through a server and the
CLI: tests/service/test_mistakes_served.py.)
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

import imagegen
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.client import media_item
from sglang_mm_grpc.media.sources import classify

LLAVA = "llava-hf/llava-1.5-7b-hf"
PNG = imagegen.png(30, 40, seed=3)


@pytest.fixture(scope="module")
def pp():
    return Preprocessor.from_model(LLAVA)


def refused(fn, *args, **kwargs) -> PreprocessError:
    with pytest.raises(PreprocessError) as e:
        fn(*args, **kwargs)
    return e.value


def test_a_str_image_names_what_to_pass(pp):
    err = refused(pp.preprocess, ["photo.jpg"])
    assert err.code is Code.INVALID_ARGUMENT
    assert err.message == ("image 0: got a str 'photo.jpg': pass the encoded bytes, or a pathlib.Path to read "
                           "(URLs are fetched by the server, not by Preprocessor)")


def test_one_image_instead_of_a_list(pp):
    err = refused(pp.preprocess, PNG)
    assert err.code is Code.INVALID_ARGUMENT and "pass [image]" in err.message


def test_a_path_is_read(pp, tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(PNG)
    assert np.array_equal(pp.preprocess([path]).pixel_values, pp.preprocess([PNG]).pixel_values)
    err = refused(pp.preprocess, [PNG, tmp_path / "missing.png"])
    assert err.code is Code.INVALID_ARGUMENT and err.item == 1 and "No such file" in err.message


@pytest.mark.parametrize("wrap", ["\n", "\r\n", " "])
def test_base64_wrapped_in_lines_is_accepted(wrap):
    text = base64.b64encode(PNG).decode()
    wrapped = wrap.join(text[i:i + 76] for i in range(0, len(text), 76)) + "\n"
    assert classify(wrapped).size == len(PNG)
    assert classify("data:image/png;base64," + wrapped).size == len(PNG)


def test_a_relative_file_name_as_a_source_says_to_send_bytes():
    with pytest.raises(PreprocessError) as e:
        classify("photos/cat.JPG")
    assert e.value.code is Code.INVALID_ARGUMENT
    assert e.value.message.startswith("looks like a relative file name")
    assert "send its bytes" in e.value.message and "pathlib.Path" in e.value.message


def test_the_client_refuses_a_str_naming_a_local_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("cat.png").write_bytes(PNG)
    with pytest.raises(ValueError, match=r"pass pathlib.Path\('cat.png'\)"):
        media_item("cat.png")
    assert media_item(Path("cat.png")).data == PNG
    assert media_item("https://example.invalid/cat.png").url == "https://example.invalid/cat.png"


def test_preset_ids_are_case_insensitive():
    pp = Preprocessor.from_model("LLAVA-HF/llava-1.5-7B-HF")
    assert pp.name == LLAVA
    assert Preprocessor.from_model("qwen/qwen2-vl-7b-instruct@torchvision").name == "Qwen/Qwen2-VL-7B-Instruct@torchvision"


def test_a_hub_id_says_nothing_is_downloaded_and_suggests_a_preset():
    err = refused(Preprocessor.from_model, "llava-hf/llava-1.5-7b")
    assert err.code is Code.NOT_FOUND
    assert "not a built-in preset, and nothing is downloaded" in err.message
    assert "pass the directory, or NAME=DIR" in err.message
    assert err.message.endswith(f"Did you mean {LLAVA!r}?")
    err = refused(Preprocessor.from_model, "acme/unrelated-model")
    assert "Built-in presets: " in err.message and LLAVA in err.message


def test_a_missing_directory_or_a_file(tmp_path):
    err = refused(Preprocessor.from_model, str(tmp_path / "no-such-model"))
    assert err.code is Code.NOT_FOUND and err.message == f"no such directory: {tmp_path / 'no-such-model'}"
    (tmp_path / "config.json").write_text("{}")
    err = refused(Preprocessor.from_model, str(tmp_path / "config.json"))
    assert err.code is Code.INVALID_ARGUMENT and err.message.endswith("is a file, not a model directory")


def test_a_directory_without_config_json_says_which_token_ids_it_assumed(tmp_path):
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"image_processor_type": "Qwen2VLImageProcessor"}))
    pp = Preprocessor.from_model(str(tmp_path))
    (note,) = pp.notes
    assert note.startswith(f"{tmp_path} has no config.json: the qwen_vl family's default token ids are assumed")
    assert "image_pad=151655" in note
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_vl"}))
    assert Preprocessor.from_model(str(tmp_path)).notes == ()
