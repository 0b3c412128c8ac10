"""The models this server serves, as a request names them.

Until the server has loaded them every call that needs one is UNAVAILABLE; so is a
call for a model still loading while others serve (a first start, compiling); an
unknown name is NOT_FOUND with the closest served name, if any, and the list of them.
"""

from __future__ import annotations

import difflib
from typing import Mapping, Sequence

from ..core.errors import Code, PreprocessError
from ..pipeline.driver import Preprocessor


class ServedModels:
    """The loaded models by name (None until the server has loaded them)."""

    def __init__(self, models: Mapping[str, Preprocessor] | None = None):
        self.models: dict[str, Preprocessor] | None = dict(models) if models is not None else None
        self.loading: list[str] = []  # names served once loaded (a first start compiles them)

    def set(self, models: Mapping[str, Preprocessor], loading: Sequence[str] = ()) -> None:
        self.models = dict(models)
        self.loading = list(loading)

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
        if pp is None and name.lower() in (k.lower() for k in self.loading):
            raise PreprocessError(
                Code.UNAVAILABLE,
                f"model {name!r} is still loading: this first start compiles its kernels ({len(models)} of "
                f"{len(models) + len(self.loading)} models ready); retry shortly, or wait for health service "
                f"{name!r} to be SERVING")
        if pp is None:
            close = difflib.get_close_matches(name.lower(), [k.lower() for k in models], n=1, cutoff=0.6)
            hint = next((f"did you mean {k!r}? " for k in models if close and k.lower() == close[0]), "")
            raise PreprocessError(
                Code.NOT_FOUND, f"unknown model {name!r}; {hint}this server serves: {', '.join(models)}"
                + (f" (and, once loaded, {', '.join(self.loading)})" if self.loading else ""))
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
