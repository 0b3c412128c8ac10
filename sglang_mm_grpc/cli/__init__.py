"""The ``sglang-mm-grpc`` command: local preprocess and plan, serve, and the remote calls."""

from .commands import main

__all__ = ["main"]
