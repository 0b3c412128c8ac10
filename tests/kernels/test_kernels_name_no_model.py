"""The kernels know no models (docs/ARCHITECTURE.md): no kernel source names a model or a model
family, in identifiers, docstrings, comments or messages. Each operation is described by
what it computes; which family uses it is the family's business."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
MODEL_WORDS = re.compile(r"qwen|llava|llama|phi-?[34]|pixtral|mistral|inkling", re.IGNORECASE)


def test_the_kernel_sources_are_found():
    assert {"resample_pil.py", "resample_tv.py", "bicubic_f32.py", "patchify.py"} <= {
        p.name for p in KERNELS.glob("*.py")}


@pytest.mark.parametrize("path", sorted(KERNELS.glob("*.py")), ids=lambda p: p.name)
def test_kernel_names_no_model(path):
    hits = [f"{path.name}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
            if MODEL_WORDS.search(line)]
    assert not hits, "kernels describe what they compute, not which model uses them:\n" + "\n".join(hits)


@pytest.mark.parametrize("text", ["Qwen2-VL", "LLaVA-NeXT", "Llama 4", "Phi-3", "phi4", "Phi-4", "Pixtral",
                                  "mistral", "Inkling"])
def test_the_pattern_catches_each_spelling(text):
    assert MODEL_WORDS.search(text)
