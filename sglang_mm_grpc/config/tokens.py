"""Token ids a family needs beyond config.json's, read from a checkpoint's tokenizer.json.

Qwen3-VL writes each video frame group's timestamp as text ("<1.5 seconds>") between the
video's tokens; expanding a video in token ids needs the ids of those pieces. Qwen's
pre-tokenizer splits digits one by one (``\\p{N}`` alone in its pattern), so the text is
always "<", single digits, ".", " seconds", ">": each a vocabulary entry.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..families.qwen.video import TIMESTAMP_PIECES

#: The split Qwen2's pre-tokenizer pattern makes of numbers: one digit per piece.
_SINGLE_DIGITS = "|\\p{N}|"


def timestamp_ids(path: Path) -> dict | None:
    """{"ids": ids of TIMESTAMP_PIECES, "source": ...} from ``path`` (a tokenizer.json),
    or None when it is absent, unreadable, splits digits otherwise or lacks a piece."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        vocab = data["model"]["vocab"]
        patterns = list(_patterns(data.get("pre_tokenizer")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(vocab, dict) or not any(_SINGLE_DIGITS in p for p in patterns):
        return None
    try:
        ids = tuple(int(vocab[piece]) for piece in TIMESTAMP_PIECES)
    except (KeyError, TypeError, ValueError):
        return None
    return {"ids": ids, "source": str(path)}


def _patterns(node):
    """Every split pattern (``{"Regex": ...}``) in a pre_tokenizer tree."""
    if isinstance(node, dict):
        if isinstance(node.get("Regex"), str):
            yield node["Regex"]
        for value in node.values():
            yield from _patterns(value)
    elif isinstance(node, list):
        for value in node:
            yield from _patterns(value)
