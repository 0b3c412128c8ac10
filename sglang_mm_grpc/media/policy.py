"""What the media fetcher may do: one frozen value, validated once at startup.

Every limit lives here so an operator can read the whole fetch policy in one place and
a request can never loosen it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_FETCH_TIMEOUT_S = 3.0


def env_fetch_timeout(environ=None) -> float:
    """``REQUEST_TIMEOUT`` seconds (the name SGLang uses), default 3."""
    raw = (os.environ if environ is None else environ).get("REQUEST_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_FETCH_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"REQUEST_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"REQUEST_TIMEOUT must be positive, got {raw!r}")
    return value


def _normalize_domain(domain: str) -> str:
    host = domain.strip().lower().rstrip(".")
    if not host or "/" in host or "@" in host:
        raise ValueError(f"allowed_media_domains entries must be bare hostnames, got {domain!r}")
    return host


@dataclass(frozen=True)
class FetchPolicy:
    """Limits and permissions for turning image sources into bytes.

    ``allowed_media_domains``: exact hostnames (case-insensitive), checked on every
    redirect hop; None or empty means any host. ``allow_private_hosts`` turns off the
    address check (loopback, private, link-local, ...), for trusted networks and tests,
    except for cloud metadata addresses (169.254.169.254, fd00:ec2::254,
    100.100.100.200), which only ``allow_metadata_hosts`` opens.
    ``allowed_local_media_path``: the only directory local files may come from; None
    refuses every local file.
    """

    allowed_local_media_path: str | None = None
    allowed_media_domains: tuple[str, ...] | None = None
    allow_private_hosts: bool = False
    allow_metadata_hosts: bool = False
    request_byte_budget: int = 1_342_177_280  # 1.25 GiB
    max_remote_bytes: int = 64 << 20
    fetch_timeout_s: float = field(default_factory=env_fetch_timeout)
    max_redirects: int = 10
    max_concurrent_fetches: int = 32

    def __post_init__(self) -> None:
        for name in ("request_byte_budget", "max_remote_bytes", "max_concurrent_fetches"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.max_redirects, int) or self.max_redirects < 0:
            raise ValueError(f"max_redirects must be a non-negative integer, got {self.max_redirects!r}")
        if not float(self.fetch_timeout_s) > 0:
            raise ValueError(f"fetch_timeout_s must be positive, got {self.fetch_timeout_s!r}")
        object.__setattr__(self, "fetch_timeout_s", float(self.fetch_timeout_s))

        if self.allowed_media_domains is not None:
            if isinstance(self.allowed_media_domains, str):
                raise ValueError("allowed_media_domains must be a sequence of hostnames, not a string")
            domains = tuple(dict.fromkeys(_normalize_domain(d) for d in self.allowed_media_domains))
            object.__setattr__(self, "allowed_media_domains", domains or None)

        if self.allowed_local_media_path is not None:
            root = Path(self.allowed_local_media_path).expanduser()
            if not root.is_absolute():
                raise ValueError(f"allowed_local_media_path must be absolute, got {self.allowed_local_media_path!r}")
            # Resolved once here so containment checks compare real paths with real paths.
            resolved = root.resolve()
            if not resolved.is_dir():
                raise ValueError(f"allowed_local_media_path is not a directory: {self.allowed_local_media_path!r}")
            object.__setattr__(self, "allowed_local_media_path", str(resolved))

    @classmethod
    def from_env(cls, environ=None, **overrides) -> "FetchPolicy":
        """The policy with ``REQUEST_TIMEOUT`` read from the environment, then ``overrides``."""
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"unknown FetchPolicy fields: {sorted(unknown)}")
        values: dict[str, Any] = {"fetch_timeout_s": env_fetch_timeout(environ)}
        values.update(overrides)
        return cls(**values)

    def domain_allowed(self, host: str) -> bool:
        if not self.allowed_media_domains:
            return True
        return host.lower().rstrip(".") in self.allowed_media_domains
