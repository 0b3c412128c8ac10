"""Small functions: none in the package (outside the kernels and generated code) is over
60 lines, so every step of the request reads as a named function."""

from __future__ import annotations

import ast
from pathlib import Path

from servers import REPO

LIMIT = 60


def test_no_function_over_60_lines():
    long = []
    for path in sorted((REPO / "sglang_mm_grpc").rglob("*.py")):
        if "_proto" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LIMIT:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split these into named steps:\n" + "\n".join(long)
