"""The frames decoded apart (only the runs sampling needs) equal HF's: ``load_video(path,
backend="pyav", sample_indices_fn=...)`` (``read_video_pyav``: every frame decoded from the
first, kept where its number is sampled) on every clip kind, every frame choice, both
decoder thread types (torch venv; skipped without torch)."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("av")

import seek_clips  # noqa: E402
from transformers.video_utils import load_video  # noqa: E402

from sglang_mm_grpc.media import video as media_video  # noqa: E402

HF_CLIPS = sorted(set(seek_clips.CLIPS) - seek_clips.NO_FRAME_COUNT)


@pytest.fixture(scope="module")
def clips():
    return seek_clips.make()


def hf_frames(data: bytes, picks: list[int]):
    with tempfile.NamedTemporaryFile(suffix=".video", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        return load_video(path, backend="pyav", sample_indices_fn=lambda metadata, **kw: np.asarray(picks))
    finally:
        os.unlink(path)


@pytest.mark.parametrize("threads", [None, "AUTO"])
@pytest.mark.parametrize("name", HF_CLIPS)
def test_sampled_frames_equal_load_video(clips, name, threads):
    data = clips[name]
    meta = media_video.probe(data)
    for picks in seek_clips.choices(meta.total_num_frames):
        want, hf_meta = hf_frames(data, picks)  # a frame sampled twice comes once ("i in indices")
        assert hf_meta.total_num_frames == meta.total_num_frames
        stats: dict = {}
        got = np.stack(list(media_video.frames(data, picks, meta, threads=threads, stats=stats)))
        at = [sorted(set(picks)).index(i) for i in picks]
        assert got.shape == want[at].shape and np.array_equal(got, want[at]), (name, picks)
        assert stats["path"] == ("indexed" if name in seek_clips.INDEXED else "sequential")
