"""Model loading: a model name -> its family, ready to serve.

Sources are built-in presets (shipped JSON, no downloads) and HF model directories. A
preset holds the subset of a checkpoint's ``preprocessor_config.json``, ``config.json``
and (optional) ``processor_config.json`` that preprocessing reads, so both kinds of
source go through one path. ``load`` also picks which transformers class the family
reproduces (``@pil`` / ``@torchvision`` or a deployment-wide preference).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..core.errors import Code, PreprocessError
from ..families import PROCESSORS, ConfigError, Family, build_family
from . import tokens


@dataclass(frozen=True)
class ModelSource:
    name: str  # what requests call it
    source: str  # preset id or directory
    preprocessor_config: dict
    config: dict
    # processor_config.json: processor-level knobs (e.g. Pixtral's patch_size, spatial_merge_size)
    processor_config: dict = field(default_factory=dict)
    has_config: bool = True  # False: a directory without config.json (token ids are the family's defaults)
    #: video_preprocessor_config.json (None: absent; transformers then reads preprocessor_config.json)
    video_preprocessor_config: dict | None = None
    #: Token ids of a family's prompt text (Qwen3-VL's video timestamps): {"ids", "source"}, or None.
    timestamp_token_ids: dict | None = None

    def build(self) -> Family:
        processor = dict(self.processor_config)
        if self.video_preprocessor_config is not None and "video_processor" not in processor:
            processor["video_processor"] = self.video_preprocessor_config  # transformers' order of precedence
        if self.timestamp_token_ids is not None:
            processor["timestamp_token_ids"] = self.timestamp_token_ids
        try:
            return build_family(self.preprocessor_config, self.config, processor)
        except ConfigError as e:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"model {self.source}: {e}") from None
        except (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError) as e:
            # A value of the wrong JSON type or shape somewhere in the files.
            raise PreprocessError(
                Code.INVALID_ARGUMENT, f"model {self.source}: malformed config ({type(e).__name__}: {e})"
            ) from None


@lru_cache(maxsize=1)
def _presets() -> dict[str, dict]:
    out = {}
    for entry in resources.files(__package__).joinpath("presets").iterdir():
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text())
            out[data["id"]] = data
    return out


def preset_names() -> list[str]:
    return sorted(_presets())


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PreprocessError(Code.INVALID_ARGUMENT, f"cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise PreprocessError(Code.INVALID_ARGUMENT, f"{path} does not hold a JSON object")
    return data


def resolve(spec: str, name: str | None = None) -> ModelSource:
    """A preset id (any case), a model directory, or ``NAME=DIR`` -> its source (not yet built)."""
    if name is None and _named(spec):
        name, spec = spec.split("=", 1)
    preset = {k.lower(): k for k in _presets()}.get(spec.lower())
    if preset is not None:
        p = _presets()[preset]
        stamps = p.get("timestamp_token_ids")
        return ModelSource(name or preset, preset, p["preprocessor_config"], p["config"], p.get("processor_config", {}),
                           video_preprocessor_config=p.get("video_preprocessor_config"),
                           timestamp_token_ids={"ids": tuple(stamps["ids"]), "source": stamps["source"]} if stamps
                           else None)
    path = Path(spec).expanduser()
    if path.is_dir():
        return _directory_source(path, name or spec)
    raise _not_found(spec, path)


def _named(spec: str) -> bool:
    """``NAME=DIR`` (a directory whose own name holds "=" is taken as it is)."""
    return "=" in spec and not Path(spec).exists()


def _directory_source(path: Path, name: str) -> ModelSource:
    pre = path / "preprocessor_config.json"
    if not pre.is_file():
        raise PreprocessError(Code.INVALID_ARGUMENT, f"model directory {path} has no preprocessor_config.json")
    cfg = path / "config.json"
    proc = path / "processor_config.json"
    video = path / "video_preprocessor_config.json"
    return ModelSource(
        name,
        str(path),
        _read_json(pre),
        _read_json(cfg) if cfg.is_file() else {},
        _read_json(proc) if proc.is_file() else {},
        has_config=cfg.is_file(),
        video_preprocessor_config=_read_json(video) if video.is_file() else None,
        timestamp_token_ids=tokens.timestamp_ids(path / "tokenizer.json") if _qwen3(path / "config.json") else None,
    )


def _qwen3(config: Path) -> bool:
    """Whether the directory's model writes video timestamps as text (Qwen3-VL's kind),
    the one reader of tokenizer.json (a large file, read only then)."""
    return config.is_file() and str(_read_json(config).get("model_type", "")).startswith(("qwen3_vl", "qwen3_5"))


def _not_found(spec: str, path: Path) -> PreprocessError:
    """What to do about a model that is neither a preset nor a directory."""
    if path.exists():
        return PreprocessError(Code.INVALID_ARGUMENT, f"{spec} is a file, not a model directory")
    if spec.startswith(("/", ".", "~")) or path.parent.is_dir() and path.parent != Path("."):
        return PreprocessError(Code.NOT_FOUND, f"no such directory: {spec}")
    close = difflib.get_close_matches(spec.lower(), {k.lower(): k for k in _presets()}, n=1, cutoff=0.6)
    hint = f" Did you mean {_canonical(close[0])!r}?" if close else f" Built-in presets: {', '.join(preset_names())}."
    return PreprocessError(
        Code.NOT_FOUND,
        f"unknown model {spec!r}: not a built-in preset, and nothing is downloaded. To serve another checkpoint, "
        f"put its preprocessor_config.json and config.json (and processor_config.json if it has one) in a "
        f"directory and pass the directory, or NAME=DIR to serve it as NAME.{hint}",
    )


def _canonical(lowered: str) -> str:
    return {k.lower(): k for k in _presets()}[lowered]


@dataclass(frozen=True)
class LoadedModel:
    name: str  # what requests call it
    source: str  # preset id or directory
    family: Family
    notes: tuple[str, ...] = ()  # what the operator should know (e.g. token ids assumed)


def split_processor(model: str) -> tuple[str, str | None]:
    """``SPEC@PROCESSOR`` -> (SPEC, PROCESSOR); anything else -> (model, None)."""
    spec, sep, processor = model.rpartition("@")
    return (spec, processor) if sep and spec and processor in PROCESSORS else (model, None)


def load(model: str, name: str | None = None, processor: str | None = None) -> LoadedModel:
    """``model``: a built-in preset id (see ``preset_names()``), an HF model directory, or
    ``NAME=DIR``, optionally suffixed ``@PROCESSOR``.

    The processor picks which transformers class to reproduce: "pil" (the default where a
    family has it) or "torchvision" (e.g. Qwen-VL: ``Qwen2VLImageProcessor``, what
    vLLM/SGLang serve with the fast processor). ``processor`` is a deployment-wide
    preference that applies to the families offering it and leaves the others as they
    are; a ``@PROCESSOR`` suffix names one model's class (an error if its family lacks
    it) and, without ``NAME=``, is part of the served name, so both variants can be
    served side by side.
    """
    if processor is not None and processor not in PROCESSORS:
        raise PreprocessError(
            Code.INVALID_ARGUMENT, f"unknown processor {processor!r} (one of {', '.join(PROCESSORS)})")
    spec, suffix = split_processor(model)
    src = resolve(spec, name)
    if suffix is not None and name is None and not _named(spec):
        src = replace(src, name=f"{src.name}@{suffix}")
    family = src.build()
    choice = suffix or (processor if processor in family.processors else None)
    if choice is not None:
        try:
            family = family.with_processor(choice)
        except ConfigError as e:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"model {src.source}: {e}") from None
    notes = () if src.has_config else (
        f"{src.source} has no config.json: the {family.name} family's default token ids are assumed "
        f"({', '.join(f'{k}={v}' for k, v in family.token_ids().items())}); add the checkpoint's config.json "
        "if its tokenizer differs",)
    return LoadedModel(src.name, src.source, family, notes)
