"""Model sources: built-in presets (shipped JSON, no downloads) and HF model directories.

A preset holds the subset of a checkpoint's ``preprocessor_config.json``,
``config.json`` and (optional) ``processor_config.json`` that preprocessing reads, so
both kinds of source go through one path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..errors import Code, PreprocessError
from ..families import ConfigError, Family, build_family


@dataclass(frozen=True)
class ModelSource:
    name: str  # what requests call it
    source: str  # preset id or directory
    preprocessor_config: dict
    config: dict
    # processor_config.json: processor-level knobs (e.g. Pixtral's patch_size, spatial_merge_size)
    processor_config: dict = field(default_factory=dict)

    def build(self) -> Family:
        try:
            return build_family(self.preprocessor_config, self.config, self.processor_config)
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
    """A preset id, a model directory, or ``NAME=DIR`` -> its source (not yet built)."""
    if name is None and "=" in spec and not Path(spec).exists():
        name, spec = spec.split("=", 1)
    presets = _presets()
    if spec in presets:
        p = presets[spec]
        return ModelSource(name or spec, spec, p["preprocessor_config"], p["config"], p.get("processor_config", {}))
    path = Path(spec)
    if path.is_dir():
        pre = path / "preprocessor_config.json"
        if not pre.is_file():
            raise PreprocessError(Code.INVALID_ARGUMENT, f"model directory {spec} has no preprocessor_config.json")
        cfg = path / "config.json"
        proc = path / "processor_config.json"
        return ModelSource(
            name or spec,
            str(path),
            _read_json(pre),
            _read_json(cfg) if cfg.is_file() else {},
            _read_json(proc) if proc.is_file() else {},
        )
    raise PreprocessError(
        Code.NOT_FOUND,
        f"unknown model {spec!r}: not a built-in preset ({', '.join(presets)}) and not a model directory",
    )
