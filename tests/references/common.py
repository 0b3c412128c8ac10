"""What every family's reference shares: the input the HF processors are handed, running
them, the word-level tokenizer of special tokens, and the fixture-set cases."""

from __future__ import annotations

import io
import logging
import warnings

import numpy as np
from PIL import Image, ImageOps

import fixtures
from fixtures import build_input

logging.getLogger("transformers").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", module="transformers")

#: The keys of preprocessor_config.json / processor_config.json that name classes: not
#: init kwargs.
CLASS_KEYS = ("image_processor_type", "processor_class")

WORDS = ("hello", "world", "describe", "these")


def init_kwargs(config: dict) -> dict:
    """A config file's values as the class's init kwargs (``CLASS_KEYS`` left out)."""
    return {k: v for k, v in config.items() if k not in CLASS_KEYS}


def reference_input(raw: bytes) -> Image.Image:
    """What the HF processor is handed: EXIF-transposed PIL image, first frame."""
    return ImageOps.exif_transpose(Image.open(io.BytesIO(raw)))


def run_reference(processor, raws: list[bytes]) -> dict[str, np.ndarray]:
    out = processor([reference_input(r) for r in raws], return_tensors="np")
    return {k: np.asarray(v) for k, v in out.items()}


def run_torch_reference(image_processor, raws: list[bytes]) -> dict[str, np.ndarray]:
    """A torchvision image processor's outputs as numpy: bfloat16 becomes float32 (exact)."""
    import torch

    out = image_processor([reference_input(r) for r in raws], return_tensors="pt")
    return {k: (v.float() if v.dtype == torch.bfloat16 else v).numpy() for k, v in out.items()}


def special_word_tokenizer(token_ids: dict[str, int]):
    """A whitespace word-level tokenizer in which each special token of ``token_ids`` has
    its id and ``WORDS`` follow the largest one (``special_word_ids``)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0} | dict(token_ids)
    vocab.update(special_word_ids(token_ids))
    wordlevel = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    wordlevel.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=wordlevel, unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(token_ids)})
    assert tokenizer.convert_tokens_to_ids(list(token_ids)) == list(token_ids.values())
    return tokenizer


def special_word_ids(token_ids: dict[str, int]) -> dict[str, int]:
    """The ids ``special_word_tokenizer(token_ids)`` gives ``WORDS``."""
    return {w: max(token_ids.values()) + 1 + i for i, w in enumerate(WORDS)}


# -- fixture sets (scripts/gen_fixtures.py; generating needs torch) -------------------------


def load_torch():
    """torch, on one thread (results do not depend on it; keeps runs quiet and comparable)."""
    import torch

    torch.set_num_threads(1)
    return torch


def case(case_id: str, recipe: dict, outputs: dict[str, np.ndarray], params: dict | None = None,
         inline_bytes: int = fixtures.INLINE_BYTES) -> dict:
    """One case: how to rebuild the input, the parameters, and the reference outputs."""
    return {
        "id": case_id,
        "input": recipe,
        "input_sha256": fixtures.input_digest(build_input(recipe)),
        "params": params or {},
        "outputs": {k: fixtures.digest(np.asarray(v), inline_bytes) for k, v in outputs.items()},
    }
