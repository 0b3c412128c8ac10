"""The models this server serves, as a request names them.

Until the server has loaded them every call that needs one is UNAVAILABLE; an unknown
name is NOT_FOUND with the closest served name, if any, and the list of them.
"""

from __future__ import annotations

import difflib
from typing import Mapping

from ..core.errors import Code, PreprocessError
from ..pipeline.driver import Preprocessor


class ServedModels:
    """The loaded models by name (None until the server has loaded them)."""

    def __init__(self, models: Mapping[str, Preprocessor] | None = None):
        self.models: dict[str, Preprocessor] | None = dict(models) if models is not None else None

    def set(self, models: Mapping[str, Preprocessor]) -> None:
        self.models = dict(models)

    def ready(self) -> dict[str, Preprocessor]:
        if self.models is None:
            raise PreprocessError(Code.UNAVAILABLE, "the server is still loading its models; retry shortly")
        return self.models

    def named(self, name: str) -> Preprocessor:
        """The model ``name`` (case aside)."""
        models = self.ready()
        if not name:
            raise PreprocessError(Code.INVALID_ARGUMENT, f"model is required; this server serves: {', '.join(models)}")
        pp = models.get(name) or {k.lower(): v for k, v in models.items()}.get(name.lower())
        if pp is None:
            close = difflib.get_close_matches(name.lower(), [k.lower() for k in models], n=1, cutoff=0.6)
            hint = next((f"did you mean {k!r}? " for k in models if close and k.lower() == close[0]), "")
            raise PreprocessError(
                Code.NOT_FOUND, f"unknown model {name!r}; {hint}this server serves: {', '.join(models)}")
        return pp

    def check_takes_video(self, pp: Preprocessor, name: str, videos: int) -> None:
        """FAILED_PRECONDITION, naming the models that do, unless ``pp`` takes video."""
        if "video" in pp.info["modalities"]:
            return
        takers = [k for k, m in (self.models or {}).items() if "video" in m.info["modalities"]]
        raise PreprocessError(
            Code.FAILED_PRECONDITION,
            f"model {name!r} ({pp.info['family']}) takes no video, and the request has {videos}; "
            + (f"models here that take video: {', '.join(takers)}" if takers else "no model here takes video"))

    def work(self) -> dict[str, int]:
        """The models' image work so far, for a Snapshot (none before they are loaded)."""
        models = self.models or {}
        return {
            "image_steps": sum(pp.work.run for pp in models.values()),
            "image_steps_skipped": sum(pp.work.skipped for pp in models.values()),
            "images_decoded": sum(pp.work.decoded for pp in models.values()),
        }
