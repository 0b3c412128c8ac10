"""M-RoPE positions against HF ``get_rope_index`` (transformers 5.24, Qwen2-VL).

``hf_get_rope_index`` below is the HF algorithm transcribed line by line with numpy (HF's
own method needs torch); when torch is installed the real method is run as well.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import imagegen
from sglang_mm_grpc import Preprocessor

IMG, VS, VE = 151655, 151652, 151653


def hf_get_rope_index(input_ids, mm_token_type_ids, image_grid_thw, spatial_merge_size):
    grids = iter(image_grid_thw)
    groups = []
    for key, group in itertools.groupby(enumerate(mm_token_type_ids.tolist()), lambda x: x[1]):
        group = list(group)
        groups.append((key, group[0][0], group[-1][0] + 1))
    current_pos = 0
    parts = []
    for modality, start, end in groups:
        if modality == 0:
            n = end - start
            parts.append(np.broadcast_to(np.arange(n) + current_pos, (3, n)))
            current_pos += n
        else:
            t, h, w = next(grids)
            lt, lh, lw = t, h // spatial_merge_size, w // spatial_merge_size
            T, H, W = np.meshgrid(np.arange(lt), np.arange(lh) + current_pos, np.arange(lw) + current_pos, indexing="ij")
            v = np.stack([T, H, W]).reshape(3, -1)
            v[0] += current_pos
            parts.append(v)
            current_pos += max(h, w) // spatial_merge_size
    pos = np.concatenate(parts, axis=1)
    return pos, int(pos.max()) + 1 - len(input_ids)


def torch_get_rope_index(input_ids, mm_token_type_ids, image_grid_thw, merge):
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    fake = SimpleNamespace(config=SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=merge)))
    fake.get_vision_position_ids = lambda *a, **k: Qwen2VLModel.get_vision_position_ids(fake, *a, **k)
    pos, delta = Qwen2VLModel.get_rope_index(
        fake, torch.tensor([input_ids]), torch.tensor([mm_token_type_ids]), torch.tensor(image_grid_thw)
    )
    return pos[:, 0].numpy(), int(delta.item())


PROMPTS = {
    "one_image": [1, 2, VS, IMG, VE, 3, 4],
    "image_first": [VS, IMG, VE, 9],
    "image_last": [5, 6, 7, VS, IMG, VE],
    "three_images_text_between": [1, VS, IMG, VE, 2, 3, VS, IMG, VE, 4, VS, IMG, VE, 5, 6, 7],
    "image_only": [IMG],
}


@pytest.mark.parametrize("preset", ["Qwen/Qwen2-VL-7B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"])
@pytest.mark.parametrize("prompt", sorted(PROMPTS))
def test_positions_match_hf(preset, prompt):
    pp = Preprocessor.from_model(preset)
    ids = PROMPTS[prompt]
    n = ids.count(IMG)
    sizes = [(300, 500), (1080, 1920), (28, 900)][:n]
    out = pp.preprocess([imagegen.png(h, w, seed=h) for h, w in sizes], input_ids=ids)
    types = (out.input_ids == IMG).astype(np.int64)
    want, delta = hf_get_rope_index(out.input_ids, types, out.tensors["image_grid_thw"], 2)
    assert out.positions.dtype == np.int64 and out.positions.shape == (3, len(out.input_ids))
    assert np.array_equal(out.positions, want)
    assert out.rope_delta == delta
    try:
        tpos, tdelta = torch_get_rope_index(out.input_ids.tolist(), types.tolist(), out.tensors["image_grid_thw"].tolist(), 2)
    except pytest.skip.Exception:
        return
    assert np.array_equal(out.positions, tpos) and out.rope_delta == tdelta


def test_documented_example():
    """100x76 -> 112x84, grid [1,8,6], 12 tokens; prompt of 5 ids -> 16, delta -8."""
    pp = Preprocessor.from_model("Qwen/Qwen2-VL-7B-Instruct")
    out = pp.preprocess([imagegen.png(76, 100)], input_ids=[1, VS, IMG, VE, 2])
    assert out.tensors["image_grid_thw"].tolist() == [[1, 6, 8]]
    assert len(out.input_ids) == 16 and out.images[0].structural_range == (2, 12)
    assert out.rope_delta == -8
