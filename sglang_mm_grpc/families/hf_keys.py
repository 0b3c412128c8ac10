"""Readers for the key variants found in real ``preprocessor_config.json`` files.

Checkpoints spell the same knob several ways (``size`` as height/width or
shortest_edge/longest_edge, ``patch_size`` as an int or a dict, ``norm_mean`` for
``image_mean`` ...). Each reader returns one canonical value or raises ``ConfigError``.
"""

from __future__ import annotations

import math
from typing import Any


class ConfigError(ValueError):
    """A model configuration this service cannot reproduce exactly."""


def get(cfg: dict, *names: str, default: Any = None) -> Any:
    if not isinstance(cfg, dict):
        raise ConfigError(f"expected a JSON object holding {names[0]!r}, got {type(cfg).__name__} {cfg!r:.60}")
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


def as_int(value: Any, what: str) -> int:
    if isinstance(value, dict):
        vals = {value.get("height"), value.get("width")} - {None}
        if len(vals) != 1:
            raise ConfigError(f"{what} {value} must be square")
        value = vals.pop()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value <= 0:
        raise ConfigError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def triple(value: Any, what: str) -> tuple[float, float, float]:
    """Three finite numbers (a std, which normalization divides by, also non-zero)."""
    out: tuple[float, float, float]
    if _number(value):
        out = (float(value),) * 3
    elif isinstance(value, (list, tuple)) and len(value) == 3 and all(_number(v) for v in value):
        out = (float(value[0]), float(value[1]), float(value[2]))
    else:
        raise ConfigError(f"{what} must be a number or 3 numbers, got {value!r}")
    if not all(math.isfinite(v) for v in out) or ("std" in what and 0.0 in out):
        raise ConfigError(f"{what} must be finite{' and non-zero' if 'std' in what else ''}, got {value!r}")
    return out


def mean_std(cfg: dict, default_mean, default_std) -> dict[str, tuple[float, float, float]]:
    """``image_mean`` / ``image_std``, or their ``norm_mean`` / ``norm_std`` spellings."""
    return {
        "image_mean": triple(get(cfg, "image_mean", "norm_mean", default=default_mean), "image_mean"),
        "image_std": triple(get(cfg, "image_std", "norm_std", default=default_std), "image_std"),
    }


def normalization(cfg: dict, default_mean, default_std, default_rescale: float = 1 / 255) -> dict[str, Any]:
    """The five rescale+normalize knobs under their config field names: mean and std
    (either spelling), ``rescale_factor``, ``do_rescale``, ``do_normalize``."""
    return {
        **mean_std(cfg, default_mean, default_std),
        "rescale_factor": float(get(cfg, "rescale_factor", default=default_rescale)),
        "do_rescale": flag(cfg, "do_rescale", True),
        "do_normalize": flag(cfg, "do_normalize", True),
    }


def refuse_false(cfg: dict, family: str, *names: str) -> None:
    """Flags this family always applies (e.g. ``do_resize``, ``do_convert_rgb``)."""
    for name in names:
        if not flag(cfg, name, True):
            raise ConfigError(f"{name}=false is not supported for the {family} family")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def resample(cfg: dict, default: int) -> int:
    value = get(cfg, "resample", "resampling", default=default)
    if isinstance(value, bool) or not isinstance(value, int) or value not in range(6):
        raise ConfigError(f"resample must be a PIL filter code 0..5, got {value!r}")
    return value


def flag(cfg: dict, name: str, default: bool) -> bool:
    value = cfg.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    return value


def pixel_bounds(cfg: dict, default_min: int, default_max: int) -> tuple[int, int]:
    """(min_pixels, max_pixels) the way Qwen2VLImageProcessor reads them.

    ``size.shortest_edge``/``longest_edge`` hold them; top-level ``min_pixels``/``max_pixels``
    override; ``size.min_pixels``/``max_pixels`` are accepted as aliases.
    """
    size = cfg.get("size") or {}
    if not isinstance(size, dict):
        raise ConfigError(f"size must be an object, got {size!r}")
    if {"height", "width"} & set(size) and not {"shortest_edge", "longest_edge"} & set(size):
        raise ConfigError("this family needs size.shortest_edge/longest_edge (pixel bounds), not height/width")
    lo = get(cfg, "min_pixels", default=get(size, "shortest_edge", "min_pixels", default=default_min))
    hi = get(cfg, "max_pixels", default=get(size, "longest_edge", "max_pixels", default=default_max))
    lo, hi = as_int(lo, "min_pixels"), as_int(hi, "max_pixels")
    if lo > hi:
        raise ConfigError(f"min_pixels {lo} is larger than max_pixels {hi}")
    return lo, hi


def size_dict(value: Any, what: str, default_to_square: bool) -> dict[str, int]:
    """HF's ``get_size_dict``: an int is ``{shortest_edge}`` (or a square when
    ``default_to_square``), ``[h, w]`` is ``{height, width}``, a dict is kept."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        s = as_int(value, what)
        return {"height": s, "width": s} if default_to_square else {"shortest_edge": s}
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return {"height": as_int(value[0], what), "width": as_int(value[1], what)}
    if isinstance(value, dict):
        out = {k: as_int(v, f"{what}.{k}") for k, v in value.items() if v is not None}
        if out:
            return out
    raise ConfigError(f"{what} must be an int, [height, width] or a size object, got {value!r}")


def pinpoints(value: Any) -> tuple[tuple[int, int], ...]:
    """``image_grid_pinpoints``: a non-empty list of [height, width] pairs."""
    if not isinstance(value, (list, tuple)) or not value:
        raise ConfigError(f"image_grid_pinpoints must be a list of [height, width], got {value!r}")
    out = []
    for p in value:
        if not isinstance(p, (list, tuple)) or len(p) != 2:
            raise ConfigError(f"image_grid_pinpoints entries must be [height, width], got {p!r}")
        out.append((as_int(p[0], "image_grid_pinpoints"), as_int(p[1], "image_grid_pinpoints")))
    return tuple(out)


def token_id(config: dict, *names: str, default: int) -> int:
    """A token id from config.json, at the top level or in ``text_config``."""
    text = config.get("text_config") or {}
    return as_int(get(config, *names, default=get(text, *names, default=default)), names[0])


def longest_edge_box(cfg: dict, default: int) -> tuple[int, int]:
    """(max_height, max_width) of a longest-edge fit, the way PixtralImageProcessor reads ``size``.

    ``size.longest_edge`` L gives (L, L); otherwise ``size.height``/``width``; an int is square.
    """
    size = cfg.get("size")
    if size is None:
        return default, default
    if isinstance(size, (int, float)) and not isinstance(size, bool):
        n = as_int(size, "size")
        return n, n
    if not isinstance(size, dict):
        raise ConfigError(f"size must be an object or an integer, got {size!r}")
    if size.get("longest_edge"):
        n = as_int(size["longest_edge"], "size.longest_edge")
        return n, n
    if size.get("height") and size.get("width"):
        return as_int(size["height"], "size.height"), as_int(size["width"], "size.width")
    raise ConfigError(f"size must hold longest_edge, or height and width; got {size!r}")


def claims(preprocessor: dict, config: dict, model_types, processor: str) -> bool:
    """A family's checkpoint: ``model_type`` is one of its types (with its image processor,
    or none named), or there is no model_type and the image processor is named."""
    kind = str(preprocessor.get("image_processor_type") or "")
    model_type = config.get("model_type")
    if model_type in model_types:
        return not kind or kind.startswith(processor)
    return model_type is None and kind.startswith(processor)
