"""The server process: the gRPC server and what runs beside it (health, reflection, metrics,
the interceptor, the sibling processes and their supervisor)."""

from .app import Server, ServerConfig, serve
from .launch import run

__all__ = ["Server", "ServerConfig", "run", "serve"]
