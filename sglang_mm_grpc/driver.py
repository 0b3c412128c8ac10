"""The request driver: owns the steps and their failure semantics.

admit -> per image (hash, decode, plan) -> allocate pixel_values once -> per image
process into its slot -> layout -> apply -> positions. Any failure rejects the whole
request with one PreprocessError; there is no partial result.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Callable, Sequence, TypeVar

import numpy as np

from . import config as model_config
from .cache import CachedItem, PreprocessCache
from .carriers import DecodedImage, ImageResult, PreprocessOutput, ProcessedItem
from .errors import Code, PreprocessError, invalid
from .families import ConfigError, Family, FieldLayout, ItemPlan
from .hashing import content_hash
from .layout import apply_layout, placeholder_layout
from .media.decode import DEFAULT_FORMATS, DEFAULT_MAX_PIXELS, decode_image
from .metrics import WorkCounters

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_MAX_IMAGES = 64
DEFAULT_CACHE_BYTES = 1 << 30
#: Which transformers class a model reproduces (see ``Preprocessor.from_model``).
BACKENDS = ("pil", "torchvision")


def split_backend(model: str) -> tuple[str, str | None]:
    """``SPEC@BACKEND`` -> (SPEC, BACKEND); anything else -> (model, None)."""
    spec, sep, backend = model.rpartition("@")
    return (spec, backend) if sep and spec and backend in BACKENDS else (model, None)


class Preprocessor:
    """One model's preprocessing: bytes + token ids in, the HF processor's tensors out."""

    def __init__(
        self,
        family: Family,
        *,
        name: str,
        source: str,
        max_images: int = DEFAULT_MAX_IMAGES,
        max_image_pixels: int = DEFAULT_MAX_PIXELS,
        formats: frozenset[str] = DEFAULT_FORMATS,
        threads: int = 1,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        cache: PreprocessCache | None = None,
    ):
        """``cache``: share one cache between models (keys include the model spec);
        otherwise the model gets its own of ``cache_bytes`` (0 disables caching)."""
        self.family = family
        self.name = name
        self.source = source
        self.max_images = max_images
        self.max_image_pixels = max_image_pixels
        self.formats = formats
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="mm-item") if threads > 1 else None
        #: Everything that decides the output for given bytes; part of every cache key.
        self.spec_key = family.fingerprint()
        self.cache = cache if cache is not None else (PreprocessCache(cache_bytes) if cache_bytes > 0 else None)
        #: Per-image steps run, and skipped because the request was cancelled.
        self.work = WorkCounters()

    @classmethod
    def from_model(
        cls, model: str, *, name: str | None = None, resample: str | None = None, **options
    ) -> "Preprocessor":
        """``model``: a built-in preset id (see ``sglang_mm_grpc.config.preset_names()``),
        an HF model directory, or ``NAME=DIR``, optionally suffixed ``@BACKEND``.

        The backend picks which transformers class to reproduce: "pil" (every family's
        default) or "torchvision" (Qwen-VL: ``Qwen2VLImageProcessor``, what vLLM/SGLang
        serve with the fast processor). ``resample`` is a deployment-wide preference that
        applies to the families offering it and leaves the others as they are; a
        ``@BACKEND`` suffix names one model's backend (an error if its family lacks it)
        and, without ``NAME=``, is part of the served name, so both variants can be
        served side by side.
        """
        if resample is not None and resample not in BACKENDS:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"unknown backend {resample!r} (one of {', '.join(BACKENDS)})")
        spec, backend = split_backend(model)
        src = model_config.resolve(spec, name)
        if backend is not None and src.name == spec:
            src = replace(src, name=model)
        family = src.build()
        offered = getattr(family, "backends", ("pil",))
        if backend is not None and backend not in offered:
            raise PreprocessError(
                Code.INVALID_ARGUMENT,
                f"model {src.source}: the {family.name} family has no {backend!r} backend (it offers {', '.join(offered)})",
            )
        choice = backend or (resample if resample in offered else None)
        if choice is not None and hasattr(family, "with_backend"):
            try:
                family = family.with_backend(choice)
            except ConfigError as e:
                raise PreprocessError(Code.INVALID_ARGUMENT, f"model {src.source}: {e}") from None
        return cls(family, name=src.name, source=src.source, **options)

    @property
    def field_layout(self) -> FieldLayout:
        return self.family.field_layout

    @property
    def info(self) -> dict:
        f = self.family
        return {
            "name": self.name,
            "family": f.name,
            "source": self.source,
            "modalities": list(f.modalities),
            "image_token_id": f.image_token_id,
            "placeholder_token_id": f.placeholder_token_id,
            "token_ids": f.token_ids(),
            "reference_processor": f.reference_processor,
            "mrope": f.uses_mrope,
            "max_images_per_request": self.max_images,
        }

    def warmup(self) -> None:
        """Compile every kernel this model's requests can reach, so none pays for it.

        The family warms its kernels; then whole requests run through decode (so the
        arrays have exactly the types requests bring) at sizes that take the resize
        paths (both passes, one axis, none, several images in one batch), past the cache.
        """
        self.family.warmup()
        sizes = [(37, 53), (300, 40), (40, 300)]
        sizes.append(self.family.plan(64, 64, 0).resized_size)  # already at target size
        images = [_warmup_png(h, w, seed) for seed, (h, w) in enumerate(sizes)]
        for batch in ([images[0]], [images[-1]], images):
            try:
                self.preprocess(batch, use_cache=False)
            except PreprocessError:
                pass  # a family may refuse a warmup shape; its kernels are compiled anyway

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    # -- the request ------------------------------------------------------------------

    def preprocess(
        self, images: Sequence[bytes], input_ids=None, *, cancel: threading.Event | None = None,
        use_cache: bool = True,
    ) -> PreprocessOutput:
        """``cancel``: set it (e.g. when the RPC is cancelled or its deadline passes) and the
        request stops at the next image boundary with a CANCELLED error. ``use_cache``
        False: the cache is neither read nor written (nor counted)."""
        t0 = time.perf_counter()
        family = self.family
        n = len(images)
        if n == 0:
            raise invalid("the request has no images")
        if n > self.max_images:
            raise PreprocessError(
                Code.RESOURCE_EXHAUSTED, f"{n} images in one request, over the limit of {self.max_images}"
            )
        if input_ids is None:
            ids = np.full(n, family.placeholder_token_id, dtype=np.int64)
        else:
            ids = np.asarray(input_ids, dtype=np.int64).reshape(-1)
        placeholders = int(np.count_nonzero(ids == family.placeholder_token_id))
        if placeholders != n:  # fail before any pixel work
            raise invalid(
                f"input_ids hold {placeholders} image placeholder(s) (token id {family.placeholder_token_id}) "
                f"but the request has {n} image(s); put exactly one placeholder per image"
            )

        cache = self.cache if use_cache else None

        def admit(i: int) -> _Admitted:
            data = images[i]
            h = content_hash(data)
            if cache is not None:
                hit = cache.get((h, self.spec_key))
                if hit is not None:
                    return _Admitted(h, hit.height, hit.width, hit.plan, None, hit, 0.0)
            td = time.perf_counter()
            img = decode_image(data, item=i, max_pixels=self.max_image_pixels, formats=self.formats)
            decode_ms = (time.perf_counter() - td) * 1e3
            return _Admitted(h, img.height, img.width, family.plan(img.height, img.width, i), img, None, decode_ms)

        admitted = self._fan_out(admit, range(n), cancel)
        t1 = time.perf_counter()
        plans = [a.plan for a in admitted]
        if n == 1 and admitted[0].cached is not None:  # the cached tensor itself, no copy
            pixel_values, slots = admitted[0].cached.pixel_values, [admitted[0].cached.slot]
        else:
            shape, slots = family.batch_shape(plans)
            pixel_values = _new_batch(shape, slots, family.pads_batch)

        def process(i: int) -> tuple[ProcessedItem, float]:
            a = admitted[i]
            tp = time.perf_counter()
            slot = pixel_values[slots[i]]
            if a.cached is not None:
                if n > 1:
                    slot[...] = a.cached.pixel_values[a.cached.slot]
                item = ProcessedItem(slot, a.cached.aux, a.cached.geometry, a.cached.resized_size)
            else:
                item = family.process_item(a.image, a.plan, slot)
                if cache is not None:
                    cache.put((a.hash, self.spec_key), self._cache_entry(a, item, pixel_values if n == 1 else None, slots[i]))
            return item, (time.perf_counter() - tp) * 1e3

        processed = self._fan_out(process, range(n), cancel)
        items = [p[0] for p in processed]
        t2 = time.perf_counter()

        layout = placeholder_layout(ids, family.placeholder_token_id, [family.expansion(it) for it in items])
        applied = apply_layout(layout)
        pos = family.positions(applied, items)
        results = [
            ImageResult(
                hash=a.hash,
                height=a.height,
                width=a.width,
                resized_height=it.resized_size[0],
                resized_width=it.resized_size[1],
                encoded_bytes=len(images[i]),
                token_count=applied.structural_ranges[i][1],
                structural_range=applied.structural_ranges[i],
                patch_ranges=applied.patch_ranges[i],
            )
            for i, (a, it) in enumerate(zip(admitted, items))
        ]
        t3 = time.perf_counter()
        return PreprocessOutput(
            input_ids=applied.input_ids,
            original_input_ids=ids,
            pixel_values=pixel_values,
            tensors=family.batch_tensors(items),
            images=results,
            image_token_id=family.image_token_id,
            positions=pos[0] if pos is not None else None,
            rope_delta=pos[1] if pos is not None else None,
            raw_images=[bytes(b) if not isinstance(b, bytes) else b for b in images],
            timings_ms={
                "decode_ms": sum(a.decode_ms for a in admitted),
                "admit_ms": (t1 - t0) * 1e3,
                "process_ms": (t2 - t1) * 1e3,
                "layout_ms": (t3 - t2) * 1e3,
                "total_ms": (t3 - t0) * 1e3,
            },
            item_timings_ms=[
                {"decode_ms": a.decode_ms, "process_ms": p[1], "cached": a.cached is not None}
                for a, p in zip(admitted, processed)
            ],
        )

    def _cache_entry(self, a: "_Admitted", item: ProcessedItem, batch, slot) -> CachedItem:
        """The item as a single-image batch: the request's own arrays when it had one
        image (no copy), else a copy of its slot into a fresh single-image batch."""
        if batch is None:
            shape, (single_slot,) = self.family.batch_shape([a.plan])
            batch = _new_batch(shape, [single_slot], self.family.pads_batch)
            batch[single_slot] = item.feature
            slot = single_slot
        return CachedItem(a.height, a.width, a.plan, batch, slot, item.aux, item.geometry, item.resized_size)

    def _fan_out(self, fn: Callable[[int], R], indices, cancel: threading.Event | None) -> list[R]:
        """The one place that decides threading. Errors: the lowest failing index wins."""
        indices = list(indices)
        if self._pool is None or len(indices) < 2:
            return [_guard(fn, i, cancel, self.work) for i in indices]
        futures = [self._pool.submit(_guard, fn, i, cancel, self.work) for i in indices]
        results, first_error = [], None
        for f in futures:
            try:
                results.append(f.result())
            except PreprocessError as e:
                first_error = first_error or e
        if first_error is not None:
            raise first_error
        return results


@dataclass
class _Admitted:
    hash: str
    height: int
    width: int
    plan: ItemPlan
    image: DecodedImage | None  # None on a cache hit
    cached: CachedItem | None
    decode_ms: float


def _new_batch(shape: tuple[int, ...], slots: list[tuple], pads: bool) -> np.ndarray:
    """pixel_values to write the items' slots into. A padding family's batch starts as
    zeros, unless its slots (which never overlap) cover all of it, as for one image:
    then there is no padding and the batch is not written twice."""
    if pads:
        whole = np.broadcast_to(np.zeros((), np.bool_), shape)  # sizes only, no memory
        if sum(whole[slot].size for slot in slots) != whole.size:
            return np.zeros(shape, dtype=np.float32)
    return np.empty(shape, dtype=np.float32)


def _guard(fn: Callable[[int], R], i: int, cancel: threading.Event | None, work: WorkCounters) -> R:
    if cancel is not None and cancel.is_set():
        work.add(skipped=1)
        raise PreprocessError(Code.CANCELLED, "request cancelled (client gone or deadline passed)", item=i)
    work.add(run=1)
    try:
        return fn(i)
    except PreprocessError:
        raise
    except MemoryError:
        raise PreprocessError(Code.RESOURCE_EXHAUSTED, "out of memory while processing", item=i) from None
    except Exception as e:  # a bug, not the client's fault: say so, keep serving
        raise PreprocessError(Code.INTERNAL, f"internal error: {type(e).__name__}: {e}", item=i) from e


def _warmup_png(h: int, w: int, seed: int) -> bytes:
    import io

    from PIL import Image

    rgb = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "PNG", compress_level=0)
    return buf.getvalue()


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
