"""Sources as messages name them: a client's control characters never reach the message
(and so the server's log) raw, so a source cannot forge log lines or terminal escapes."""

from __future__ import annotations

import pytest

from fetch_helpers import fetch_error
from sglang_mm_grpc.core.errors import Code
from sglang_mm_grpc.media import FetchPolicy
from sglang_mm_grpc.media.sources import describe


@pytest.mark.parametrize(
    "source, shown",
    [
        ("/tmp/a\nERROR forged", "/tmp/a\\nERROR forged"),
        ("/tmp/a\x00b", "/tmp/a\\x00b"),
        ("/tmp/\x1b[31mred\u202e", "/tmp/\\x1b[31mred\\u202e"),
        ("data:image/png\r\nX: y;base64,AAAA", "data:image/png\\r\\nX: y;base64,…(4 chars)"),
        ("/tmp/ünïcode.png", "/tmp/ünïcode.png"),  # printable text is left alone
    ],
)
def test_describe_escapes_control_characters(source, shown):
    assert describe(source) == shown


def test_long_escaped_source_is_still_clipped():
    shown = describe("/a" + "\n" * 500 + "b")
    assert "\n" not in shown and shown.endswith("…") and len(shown) <= 161


@pytest.mark.parametrize("source", ["/tmp/x\n2026-01-01 ERROR forged line", "file:///tmp/x%0Aforged"])
def test_failure_message_is_one_line(source):
    err = fetch_error([source], FetchPolicy())
    assert err.code is Code.PERMISSION_DENIED
    assert err.message.startswith("image 0: ") and "\n" not in err.message
