"""One request's byte budget, shared by all of its sources.

Bytes are reserved before they are allocated (a decoded base64 size, a Content-Length,
a file size) or charged as they stream in, so concurrent fetches of one request stop at
their combined size rather than each at its own. Everything runs on one event loop, so
plain integers suffice.
"""

from __future__ import annotations

from .failures import exhausted, human_bytes


class ByteBudget:
    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0

    @property
    def remaining(self) -> int:
        return self.limit - self.used

    def reserve(self, n: int) -> None:
        """Take ``n`` bytes or fail with RESOURCE_EXHAUSTED naming the budget."""
        if n > self.remaining:
            raise exhausted(
                "request_byte_budget",
                f"request_byte_budget ({human_bytes(self.limit)}) exceeded: "
                f"{human_bytes(self.used)} already reserved, {human_bytes(n)} more needed",
            )
        self.used += n

    def release(self, n: int) -> None:
        """Give back part of a reservation that turned out larger than the data."""
        self.used -= min(n, self.used)
