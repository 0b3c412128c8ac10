"""``serve --processor torchvision``: Qwen models reproduce ``Qwen2VLImageProcessor``, say so
in ListModels, and serve what the in-process torchvision backend computes; a
``@pil`` suffix keeps one model on the PIL class; families without the option keep theirs.
"""

from __future__ import annotations

import numpy as np
import pytest

import imagegen
from servers import Server
from service_support import PIXTRAL, QWEN2
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.client import Client, payload_arrays


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    proc = Server(
        tmp_path_factory.mktemp("resample"), "--processor", "torchvision",
        models=[QWEN2, f"{QWEN2}@pil", PIXTRAL], name="resample",
    )
    yield proc.target
    proc.stop()


def test_list_models_names_the_reference(target):
    with Client(target) as client:
        models = {m.name: m.reference_processor for m in client.list_models()}
    assert models == {
        QWEN2: "Qwen2VLImageProcessor",
        f"{QWEN2}@pil": "Qwen2VLImageProcessorPil",
        PIXTRAL: Preprocessor.from_model(PIXTRAL).info["reference_processor"],
    }


def test_served_pixels_are_the_torchvision_backend(target):
    raws = [imagegen.png(300, 500, seed=4), imagegen.jpeg(480, 640, seed=5)]
    want = {
        QWEN2: Preprocessor.from_model(QWEN2, processor="torchvision").preprocess(raws).pixel_values,
        f"{QWEN2}@pil": Preprocessor.from_model(QWEN2).preprocess(raws).pixel_values,
    }
    with Client(target) as client:
        for name, pixels in want.items():
            got = payload_arrays(client.preprocess(name, raws, backend="sglang").payload)["pixel_values"]
            assert got.dtype == np.float32 and np.array_equal(got, pixels), name
    assert not np.array_equal(*want.values())
