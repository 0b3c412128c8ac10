"""Small functions and classes: no function in the package (outside the kernels and
generated code) is over 60 lines, so every step of the request reads as a named function;
no class in the service layer is over 300 lines, so the servicer stays a sequence of calls
into collaborators with one job each."""

from __future__ import annotations

import ast
from pathlib import Path

from servers import REPO

LIMIT = 60
CLASS_LIMIT = 300


def _nodes(root: Path, kinds: tuple):
    for path in sorted(root.rglob("*.py")):
        if "_proto" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, kinds):
                yield path, node, node.end_lineno - node.lineno + 1


def test_no_function_over_60_lines():
    long = [f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)"
            for path, node, lines in _nodes(REPO / "sglang_mm_grpc", (ast.FunctionDef, ast.AsyncFunctionDef))
            if lines > LIMIT]
    assert not long, "split these into named steps:\n" + "\n".join(long)


def test_no_service_class_over_300_lines():
    """service/ only: pipeline/driver.py's Preprocessor and wire/shm.py's ShmArena are
    over the limit still."""
    long = [f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)"
            for path, node, lines in _nodes(REPO / "sglang_mm_grpc" / "service", (ast.ClassDef,))
            if lines > CLASS_LIMIT]
    assert not long, "give these classes' jobs to collaborators:\n" + "\n".join(long)
