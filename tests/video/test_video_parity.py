"""Videos against the real HF code (torch venv; skipped without torch): decoding and
metadata vs ``load_video(backend="pyav")``, frame indices vs each class's
``sample_frames``, pixel_values_videos / video_grid_thw bit for bit vs the video
processors, Qwen2.5-VL's second_per_grid_ts, Qwen3-VL's timestamp text and the
expansion vs the processors' ``replace_video_token``, positions vs ``get_rope_index``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("av")

import hf_video as hf  # noqa: E402
import videogen  # noqa: E402

from sglang_mm_grpc import Preprocessor  # noqa: E402
from sglang_mm_grpc.core.carriers import VideoMeta, VideoOptions  # noqa: E402
from sglang_mm_grpc.families.qwen import video as qwen_video  # noqa: E402
from sglang_mm_grpc.media import video as media_video  # noqa: E402

CLIPS = {
    "h264_24fps_13": dict(frames=13, fps=24, size=(120, 160)),
    "h264_30fps_rot90": dict(frames=9, fps=30, size=(64, 96), rotation=90),
    "h264_vfr": dict(frames=15, fps=25, size=(96, 128), vfr=True),
    "mpeg4_12fps_11": dict(frames=11, fps=12, size=(72, 88), codec="mpeg4"),
    "h264_29.97fps_odd": dict(frames=7, fps=30000 / 1001, size=(58, 114), noise=12),
    "mkv_h264_8fps": dict(frames=10, fps=8, size=(56, 56), container="matroska"),
    # about Qwen2-VL's per-frame minimum (3136 px) and Qwen3-VL's total bounds
    "tiny_56x56": dict(frames=5, fps=10, size=(56, 56)),
    "small_32x48": dict(frames=6, fps=5, size=(32, 48)),
}
MODELS = (hf.QWEN2, hf.QWEN25, hf.QWEN3)


@pytest.fixture(scope="module")
def clips():
    return {name: videogen.clip(**kw) for name, kw in CLIPS.items()}


@pytest.fixture(scope="module")
def models():
    return {m: Preprocessor.from_model(m + "@torchvision") for m in MODELS}


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("name", [n for n in CLIPS if CLIPS[n].get("container") != "matroska"])
def test_decode_and_metadata_equal_load_video(clips, name):
    frames, meta = hf.decode(clips[name])
    ours = media_video.probe(clips[name])
    assert (ours.total_num_frames, ours.fps, ours.duration_s, ours.height, ours.width) == (
        meta.total_num_frames, meta.fps, meta.duration, meta.height, meta.width)
    got = np.stack(list(media_video.frames(clips[name], range(ours.total_num_frames), ours)))
    assert np.array_equal(got, frames)
    picked = [0, 2, 2, ours.total_num_frames - 1]
    assert np.array_equal(np.stack(list(media_video.frames(clips[name], picked, ours))), frames[picked])


def test_mkv_without_frame_count_is_refused_as_hf_cannot_sample_it(clips):
    with pytest.raises(Exception):  # HF reads 0 frames and fails
        hf.decode(clips["mkv_h264_8fps"])
    with pytest.raises(Exception) as e:
        media_video.probe(clips["mkv_h264_8fps"])
    assert "INVALID_ARGUMENT" in repr(e.value) and "how many frames" in str(e.value)


SAMPLING = list(itertools.product(
    (1, 2, 3, 4, 5, 7, 16, 25, 33, 100, 301, 1000),  # total frames
    (1.0, 7.5, 23.976, 24.0, 29.97, 60.0),  # video fps
    ({}, {"fps": 2.0}, {"fps": 0.5}, {"fps": 1.0, "min_frames": 8}, {"fps": 4, "max_frames": 10},
     {"num_frames": 4}, {"num_frames": 7}, {"num_frames": 16}),
))


@pytest.mark.parametrize("kind", ["qwen2", "qwen3"])
def test_sampling_indices_equal_sample_frames(kind):
    model = hf.QWEN2 if kind == "qwen2" else hf.QWEN3
    checked = 0
    for total, fps, opts in SAMPLING:
        init = {k: v for k, v in opts.items() if k in ("min_frames", "max_frames")}
        call = {k: v for k, v in opts.items() if k in ("fps", "num_frames")}
        proc = hf.processor(model, **init)
        meta_hf = hf.VideoMetadata(total_num_frames=total, fps=fps)
        config = qwen_video.with_options(Preprocessor.from_model(model).family.video_config(), VideoOptions(**opts))
        meta = VideoMeta(total, fps, total / fps, 64, 64)
        try:
            if not call and not proc.do_sample_frames:  # Qwen2VLVideoProcessor's default: every frame
                want = np.arange(total)
            else:
                want = np.asarray(proc.sample_frames(meta_hf, **call)).astype(np.int64)
        except (ValueError, ZeroDivisionError):
            with pytest.raises(Exception):
                qwen_video.sample(config, meta)
            continue
        got = qwen_video.sample(config, meta)
        assert np.array_equal(got, want), (total, fps, opts)
        checked += 1
    assert checked > len(SAMPLING) // 2


CASES = [
    ("h264_24fps_13", {}), ("h264_24fps_13", {"fps": 2.0}), ("h264_24fps_13", {"num_frames": 6}),
    ("h264_30fps_rot90", {}), ("h264_vfr", {"fps": 4.0}), ("mpeg4_12fps_11", {"num_frames": 5}),
    ("h264_29.97fps_odd", {}), ("tiny_56x56", {}), ("small_32x48", {"num_frames": 4}),
    ("h264_24fps_13", {"max_pixels": 56 * 56 * 2, "min_pixels": 28 * 28}),
    ("h264_24fps_13", {"max_pixels": 100000, "min_pixels": 100000}),
]


def _hf_call(model: str, opts: dict) -> tuple[dict, dict]:
    """(init kwargs, call kwargs) that configure the processor as ``opts`` configure ours."""
    call, init = {}, {}
    if "fps" in opts or "num_frames" in opts:
        call.update(do_sample_frames=True, **{k: opts[k] for k in ("fps", "num_frames") if k in opts})
        if model == hf.QWEN3 and "num_frames" in opts:
            call["fps"] = None
    if "min_pixels" in opts or "max_pixels" in opts:
        base = hf.PROCESSOR_KWARGS[model][1]
        size = base.get("size") or {"shortest_edge": base["min_pixels"], "longest_edge": base["max_pixels"]}
        call["size"] = {"shortest_edge": opts.get("min_pixels", size["shortest_edge"]),
                        "longest_edge": opts.get("max_pixels", size["longest_edge"])}
    return init, call


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("name,opts", CASES)
def test_processing_equals_the_video_processor(clips, models, model, name, opts):
    init, call = _hf_call(model, opts)
    try:
        out_hf, meta, proc = hf.process(model, clips[name], call, init)
    except ValueError:
        with pytest.raises(Exception):
            models[model].preprocess([], videos=[clips[name]], video_options=VideoOptions(**opts))
        return
    ours = models[model].preprocess([], videos=[clips[name]], video_options=VideoOptions(**opts), use_cache=False)
    assert _equal(ours.pixel_values_videos, out_hf["pixel_values_videos"].numpy())
    grid = out_hf["video_grid_thw"].numpy()
    assert np.array_equal(ours.video_tensors["video_grid_thw"], grid)
    v = ours.videos[0]
    assert list(v.frame_indices) == [int(i) for i in meta.frames_indices]
    want_ids = hf.text_to_ids(hf.expansion_text(model, proc, grid[0].tolist(), meta))
    assert ours.input_ids.tolist() == want_ids and v.token_count == len(want_ids)
    if model == hf.QWEN25:
        spg = hf.second_per_grid(proc, meta)
        assert ours.video_tensors["second_per_grid_ts"].tolist() == [spg]
        assert np.float32(v.second_per_grid) == np.float32(spg)
    else:
        assert "second_per_grid_ts" not in ours.video_tensors
    plan = models[model].plan([], videos=[clips[name]], video_options=VideoOptions(**opts))
    assert plan.videos[0].token_count == v.token_count and plan.input_ids_length == len(ours.input_ids)


@pytest.mark.parametrize("model", MODELS)
def test_positions_equal_get_rope_index_video_only_and_mixed(clips, models, model, tmp_path):
    import io

    from PIL import Image

    img = io.BytesIO()
    Image.fromarray(videogen._frame(3, 90, 140, np.random.default_rng(0), 0)).save(img, format="PNG")
    v1, v2 = clips["h264_24fps_13"], clips["h264_vfr"]
    prompts = [
        ([1, 2, hf.VSTART, hf.VIDEO, hf.VEND, 7, 8], [], [v1]),
        ([1, hf.VSTART, hf.IMAGE, hf.VEND, 5, hf.VSTART, hf.VIDEO, hf.VEND, 9, hf.VSTART, hf.VIDEO, hf.VEND, 3],
         [img.getvalue()], [v1, v2]),
        ([hf.VSTART, hf.VIDEO, hf.VEND, 4, hf.VSTART, hf.IMAGE, hf.VEND], [img.getvalue()], [v2]),
    ]
    opts = VideoOptions(fps=6.0)
    for ids, images, videos in prompts:
        out = models[model].preprocess(images, ids, videos=videos, video_options=opts, use_cache=False)
        spg = out.video_tensors.get("second_per_grid_ts")
        pos, delta = hf.rope_index(model, out.input_ids, out.tensors.get("image_grid_thw", np.zeros((0, 3))).tolist(),
                                   out.video_tensors["video_grid_thw"].tolist(),
                                   spg.tolist() if spg is not None else None)
        assert np.array_equal(out.positions, pos) and out.rope_delta == delta


def test_qwen25_positions_follow_second_per_grid(clips, models):
    """A slow source (fps 7.5) sampled at 2 fps spaces Qwen2.5-VL's temporal positions by
    tokens_per_second x 1 s; Qwen2-VL's stay 1 apart."""
    ids = [hf.VSTART, hf.VIDEO, hf.VEND]
    data = videogen.clip(frames=30, fps=7.5, size=(56, 84))
    out = models[hf.QWEN25].preprocess([], ids, videos=[data], video_options=VideoOptions(fps=2.0))
    pos, delta = hf.rope_index(hf.QWEN25, out.input_ids, [], out.video_tensors["video_grid_thw"].tolist(),
                               out.video_tensors["second_per_grid_ts"].tolist())
    assert np.array_equal(out.positions, pos) and out.rope_delta == delta
    t = out.positions[0, 1:-1]
    assert len(set(np.diff(np.unique(t)).tolist())) == 1 and np.diff(np.unique(t))[0] == 2
