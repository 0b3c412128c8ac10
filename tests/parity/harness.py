"""What every parity suite shares: ours and the HF reference side by side, the images they
run on, model directories, and the comparisons.

Every comparison is exact: a count of differing values that must be 0, or
``np.array_equal``; never a tolerance. What differs per family (which reference runs,
which tensors it returns) stays in the family's test file, as its ``assert_same``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import fixtures
import imagegen
from references.common import reference_input
from sglang_mm_grpc import Code, Preprocessor, PreprocessError
from sglang_mm_grpc.config import ModelSource, resolve

# -- ours and the reference -------------------------------------------------------------

_BUILT: dict = {}


def cached(build, *args):
    """``build(*args)``, built once per distinct arguments (compared as JSON)."""
    key = (build, json.dumps(args, sort_keys=True))
    if key not in _BUILT:
        _BUILT[key] = build(*args)
    return _BUILT[key]


class Pairs:
    """(ours, the HF reference) for each preset, each built once: ``pairs(preset)``.

    ``reference(src)`` builds the reference from the preset's ``ModelSource`` (the
    family's ``references.<family>.processor``).
    ``fixture()`` is the suite's module-scoped ``pair`` fixture, parametrized by preset
    when there are several. ``options`` go to ``Preprocessor.from_model`` (e.g. a token
    budget that lets the largest test photos through), as ``preprocessor`` takes them.
    """

    def __init__(self, presets, reference, **options):
        self.presets = [presets] if isinstance(presets, str) else list(presets)
        self._reference = reference
        self._options = options
        self._built: dict = {}

    def __call__(self, preset: str | None = None):
        preset = preset or self.presets[0]
        if preset not in self._built:
            ours = preprocessor(preset, **self._options)
            self._built[preset] = (ours, self._reference(resolve(preset.rpartition("@")[0] or preset)))
        return self._built[preset]

    def fixture(self):
        if len(self.presets) == 1:
            @pytest.fixture(scope="module", name="pair")
            def pair():
                return self()
        else:
            @pytest.fixture(scope="module", name="pair", params=self.presets)
            def pair(request):
                return self(request.param)
        return pair


def preprocessor(model: str, **kwargs) -> Preprocessor:
    """``Preprocessor.from_model(model, **kwargs)`` with no result cache unless asked
    (``cache_bytes``): the suites keep theirs for the run, and a photo's output (hundreds
    of MB at the largest sizes) would otherwise stay in each one's cache."""
    return Preprocessor.from_model(model, **{"cache_bytes": 0, **kwargs})


@functools.lru_cache(maxsize=None)
def preset(model: str, **kwargs) -> Preprocessor:
    """``preprocessor(model, **kwargs)``, built once."""
    return preprocessor(model, **kwargs)


# -- committed fixtures ---------------------------------------------------------------------


def case_images(case: dict) -> list[bytes]:
    """A fixture case's request: its input rebuilt (and checked), as a list of images."""
    value = fixtures.case_input(case)
    return value if isinstance(value, list) else [value]


def case_preprocessor(params: dict, config: dict | None = None, **kwargs) -> Preprocessor:
    """What a fixture case runs on: its preset (``preset``), or a model built from its
    preprocessor_config and ``config`` (by default the case's own)."""
    if "model" in params:
        return preset(params["model"], **kwargs)
    config = params["config"] if config is None else config
    src = ModelSource("fixture", "fixture", params["preprocessor_config"], config)
    return Preprocessor(src.build(), name="fixture", source="fixture", **kwargs)


# -- comparisons --------------------------------------------------------------------------


def assert_pixels(ours, expected: np.ndarray, detail=None) -> None:
    """Our pixel values are float32, of the reference's shape, and every value equals it.
    ``detail(differs)`` adds what the count alone does not say."""
    pv = ours.pixel_values
    assert pv.dtype == np.float32 and pv.shape == expected.shape
    differs = pv != expected
    mismatch = int(np.count_nonzero(differs))
    assert mismatch == 0, f"{mismatch} pixel values differ" + (f" ({detail(differs)})" if detail else "")


def assert_tensors(ours, ref, *names: str, dtype=np.int64) -> None:
    """Each named tensor of ours has ``dtype`` and is equal to the reference's."""
    for name in names:
        tensor = ours.tensors[name]
        assert tensor.dtype == dtype and np.array_equal(tensor, ref[name]), name


def assert_full_prompt(pp, processor, raws, assert_same, prompt):
    """Pixels (via the family's ``assert_same``) and the expanded ids against the whole HF
    processor on one prompt, ``prompt(n_images, image_token_id)`` -> (text, unexpanded ids);
    every image's expansion is one run of its image token."""
    text, ids = prompt(len(raws), pp.family.image_token_id)
    ref = processor(images=[reference_input(r) for r in raws], text=text, return_tensors="np")
    ours = pp.preprocess(raws, input_ids=ids)
    assert_same(ours, {k: np.asarray(v) for k, v in ref.items()})
    assert_image_runs(ours, np.asarray(ref["input_ids"])[0], pp.family.image_token_id)
    return ours


def assert_image_runs(ours, expected_ids: np.ndarray, image: int) -> None:
    """Our expanded ids are the processor's, and every image's expansion is one run of its
    image token, all of it patches."""
    assert ours.input_ids.dtype == np.int64 and np.array_equal(ours.input_ids, expected_ids)
    runs = np.flatnonzero(np.diff(np.concatenate(([0], expected_ids == image, [0]))))
    assert [(int(a), int(b - a)) for a, b in zip(runs[::2], runs[1::2])] == ours.structural_ranges
    assert [im.patch_ranges for im in ours.images] == [(r,) for r in ours.structural_ranges]


def assert_both_refuse(pp, reference, raw: bytes, cause: str) -> None:
    """The reference raises ValueError on ``raw``; we refuse it as image 1 of a request
    (after a good image), INVALID_ARGUMENT, saying ``cause``. ``reference(raws)``
    runs the reference."""
    with pytest.raises(ValueError):
        reference([raw])
    with pytest.raises(PreprocessError) as e:
        pp.preprocess([imagegen.png(10, 10), raw])
    assert e.value.code is Code.INVALID_ARGUMENT and e.value.item == 1
    assert "image 1" in str(e.value) and cause in str(e.value)


def plan_counts(pp, sizes) -> list[int]:
    """The token count the family plans for each (h, w), without any pixel work."""
    return [pp.family.plan(h, w, 0).token_count for h, w in sizes]


# -- sizes and images -----------------------------------------------------------------------


def size_id(size) -> str:
    return f"{size[0]}x{size[1]}"


def each_size(sizes):
    """``parametrize("size", sizes)`` with ids like ``300x500``."""
    return pytest.mark.parametrize("size", sizes, ids=size_id)


def each_large_size(sizes):
    """``each_size`` for the large photos: the largest stays in the fast tier, the others
    are ``slow`` (the full tier)."""
    largest = max(sizes, key=lambda s: s[0] * s[1])
    return pytest.mark.parametrize("size", [s if s == largest else pytest.param(s, marks=pytest.mark.slow)
                                            for s in sizes], ids=size_id)


each_kind = pytest.mark.parametrize("kind", ["noise", "smooth"])
each_mode = pytest.mark.parametrize("name", sorted(imagegen.modes_corpus()))


def examples(n: int):
    """Hypothesis settings for the suites: ``n`` examples, no deadline, fixtures allowed."""
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def random_sizes(seed: int, *draws: tuple[int, int, int]) -> list[tuple[int, int]]:
    """(h, w) pairs from one seeded generator: for each ``(low, high, n)``, ``n`` sizes
    with both sides in [low, high), in that order."""
    rng = np.random.default_rng(seed)
    return [(int(h), int(w)) for low, high, n in draws for h, w in rng.integers(low, high, (n, 2))]


def sized_png(size, kind: str) -> bytes:
    """The PNG the size tables run on: its seed follows from the size."""
    return imagegen.png(*size, seed=size[0] * 7 + size[1], kind=kind)


@functools.lru_cache(maxsize=None)
def large_jpeg(h: int, w: int) -> bytes:
    """A photo-sized JPEG made quickly: an upscaled smooth image plus tiled noise detail."""
    from PIL import Image

    smooth = Image.fromarray(imagegen.pixels(h // 16, w // 16, seed=3, kind="smooth")).resize((w, h), Image.BILINEAR)
    detail = np.tile(imagegen.pixels(61, 53, seed=4), (h // 61 + 1, w // 53 + 1, 1))[:h, :w]
    a = (np.asarray(smooth, dtype=np.int16) + detail // 4 - 32).clip(0, 255).astype(np.uint8)
    return imagegen.encode(Image.fromarray(a), "JPEG", quality=85)


def flat_png(h: int, w: int) -> bytes:
    """Cheap to make at any size: for tests of sizes, not content."""
    from PIL import Image

    return imagegen.encode(Image.new("RGB", (w, h), (h % 256, w % 256, 77)), "PNG", compress_level=1)


def png_and_jpeg(size) -> list[bytes]:
    """One request of a PNG and a JPEG of the same size."""
    return [imagegen.png(*size, seed=size[0]), imagegen.jpeg(*size, seed=size[1])]


def jpeg_and_png(sizes) -> list[bytes]:
    """One request of images of these sizes, JPEG and PNG in turn."""
    return [imagegen.png(*s, seed=s[0]) if i % 2 else imagegen.jpeg(*s, seed=s[1]) for i, s in enumerate(sizes)]


#: What a model-directory test sends: a PNG and a JPEG of each size (``png_and_jpeg``)...
DIR_SIZES = [(300, 500), (37, 2000), (1080, 1920), (13, 7)]
#: ... or these requests (``jpeg_and_png``).
DIR_REQUESTS = [[(300, 500), (13, 7)], [(37, 600), (500, 37), (720, 1280)]]


# -- the tests every family runs ----------------------------------------------------------


def image_tests(check, sizes, large_sizes, large=large_jpeg):
    """The image tests of a suite with a ``pair`` fixture, where ``check(pp, ref, raws)``
    compares ours with the reference on one request: a PNG of each of ``sizes`` in both
    kinds (``sized_png``), each image of ``imagegen.modes_corpus()``, and a photo
    (``large(h, w)``) of each of ``large_sizes`` (the largest in the fast tier). Assign them to the suite's names
    ``test_sizes_png, test_modes_and_formats, test_large_photos``."""

    @each_size(sizes)
    @each_kind
    def test_sizes_png(pair, size, kind):
        check(*pair, [sized_png(size, kind)])

    @each_mode
    def test_modes_and_formats(pair, name):
        check(*pair, [imagegen.modes_corpus()[name]])

    @each_large_size(large_sizes)
    def test_large_photos(pair, size):
        check(*pair, [large(*size)])

    return test_sizes_png, test_modes_and_formats, test_large_photos


# -- model directories --------------------------------------------------------------------


def write_model_dir(path: Path, pre: dict, config: dict | None = None, processor: dict | None = None) -> str:
    """preprocessor_config.json, and config.json and processor_config.json when given."""
    for name, content in (("preprocessor_config", pre), ("config", config), ("processor_config", processor)):
        if content is not None:
            (path / f"{name}.json").write_text(json.dumps(content))
    return str(path)


def load_dir(path: Path, pre: dict, config: dict | None = None, processor: dict | None = None) -> Preprocessor:
    return Preprocessor.from_model(write_model_dir(path, pre, config, processor))


def dir_error(path: Path, pre: dict, config: dict | None = None, processor: dict | None = None) -> PreprocessError:
    """The error that loading such a directory must raise."""
    directory = write_model_dir(path, pre, config, processor)
    with pytest.raises(PreprocessError) as e:
        Preprocessor.from_model(directory)
    return e.value
