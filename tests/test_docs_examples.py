"""Every code block in README.md and docs/*.md runs as written.

``bash`` and ``python`` blocks run in order, per document, as in one shell session from
a checkout (README first: it makes the sample image the others use; a block's
``mkdir -p DIR && cd DIR`` line, the README's into ``scratch/``, holds for the blocks
after it, and every file the examples leave must be in there), with the project's
``sglang-mm-grpc``, ``python`` and ``python3`` first on PATH (and ``.venv`` there, as in a
checkout), against a server this test starts on a free port: the address the examples
use (``127.0.0.1:50061``, the default) is replaced by it. A block fails the test when
it exits non-zero. Blocks in other languages (text, json, proto, yaml) are not code to
run. grpcurl is a test dependency: its blocks run with the real one. A block may be
skipped only by a marker on the line before its fence that names what it needs and this
machine lacks:

    <!-- example: needs network -->      reaches beyond this machine
    <!-- example: needs docker -->       run when a docker daemon answers
    <!-- example: needs kubernetes -->   a cluster
    <!-- example: covered by tests/FILE -->   e.g. the two commands (fresh clone test),
                                              which would start this very test suite

A ``text`` block right after a runnable one, marked ``<!-- output -->`` on the line before
its fence, is what that block prints: each of its lines must appear in the block's
output, in that order, with the timings (``12.3 ms``) masked.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from servers import REPO, Proc, free_port, health, wait_serving

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNABLE = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python"}
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"<!--\s*example:\s*(needs (network|docker|kubernetes)|covered by tests/\S+)\s*-->")
OUTPUT = re.compile(r"<!--\s*output\s*-->")
#: The parts of a shown output that differ from run to run.
VARIES = re.compile(r"\b\d+(\.\d+)? ms\b")
DOCUMENTED = re.compile(r"\b(127\.0\.0\.1|localhost):50061\b")
PORT = free_port()
TARGET = f"127.0.0.1:{PORT}"


def code_blocks(path: Path) -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, marker or None) of every fenced block in ``path``; the marker
    is a skip reason, or ``output`` for a shown output."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang, body = i + 1, m.group(1), []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        previous = next((lines[j] for j in range(start - 2, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(previous)
        blocks.append((start, lang, "\n".join(body) + "\n",
                       marker.group(1) if marker else "output" if OUTPUT.search(previous) else None))
        i += 1
    return blocks


def _skip_reason(marker: str | None) -> str | None:
    if marker is None:
        return None
    if marker == "needs docker" and shutil.which("docker"):
        if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0:
            return None
    return marker


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """The scratch directory the examples run in, with the server they talk to."""
    work = tmp_path_factory.mktemp("examples")
    (work / ".venv").symlink_to(sys.prefix)  # "source .venv/bin/activate", as beside a checkout
    server = Proc([sys.executable, "-m", "sglang_mm_grpc.cli", "serve", "--port", str(PORT),
                   "--workers", "2"], work / "server.log")
    try:
        wait_serving(TARGET, server, timeout=600, models=())  # every preset, as the docs call any
        yield work
    finally:
        server.signal(signal.SIGTERM)
        server.wait(60)


def _env(work: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["SGLANG_MM_GRPC_TARGET"] = TARGET  # where `sglang-mm-grpc call` goes without --target
    return env


def runnable_blocks(path: Path) -> list[tuple[tuple[int, str, str, str | None], str | None]]:
    """Each runnable block of ``path`` with the output shown after it (None if none)."""
    blocks = code_blocks(path)
    return [(b, after[2] if after and after[1] == "text" and after[3] == "output" else None)
            for b, after in zip(blocks, [*blocks[1:], None]) if b[1] in RUNNABLE]


def assert_shown(shown: str, printed: str, where: str) -> None:
    """Each line of ``shown`` is a line of ``printed``, in order, timings masked."""
    lines = iter(VARIES.sub("N ms", line).rstrip() for line in printed.splitlines())
    for want in shown.strip("\n").splitlines():
        want = VARIES.sub("N ms", want).rstrip()
        assert any(line == want for line in lines), f"{where}: shown output not printed: {want!r}\n{printed[-2000:]}"


CASES = [(doc, block, shown) for doc in DOCS for block, shown in runnable_blocks(doc)]
#: A line entering the directory the examples work in (for the blocks after it).
ENTER = re.compile(r"^mkdir -p (\S+) && cd \1\s*$", re.M)
#: Where the blocks run: the checkout's stand-in, then the directory a block entered.
_cwd: dict[str, Path] = {}


@pytest.mark.parametrize("doc, block, shown", CASES,
                         ids=[f"{d.relative_to(REPO)}:{b[0]}" for d, b, _ in CASES])
def test_example_runs_as_written(workdir, doc, block, shown):
    line, lang, code, marker = block
    reason = _skip_reason(marker)
    if reason:
        pytest.skip(f"{doc.relative_to(REPO)}:{line} {reason}")
    assert health(TARGET) == "SERVING"
    code = DOCUMENTED.sub(lambda m: f"{m.group(1)}:{PORT}", code)
    argv = ["bash", "-euo", "pipefail", "-c", code] if RUNNABLE[lang] == "bash" else [sys.executable, "-c", code]
    cwd = _cwd.get("now", workdir)
    r = subprocess.run(argv, cwd=cwd, env=_env(workdir), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{doc.relative_to(REPO)}:{line} exited {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    if shown is not None:
        assert_shown(shown, r.stdout, f"{doc.relative_to(REPO)}:{line}")
    entered = ENTER.findall(code) if RUNNABLE[lang] == "bash" else []
    if entered:
        _cwd["now"] = cwd / entered[-1]
    left = sorted(p.name for p in workdir.iterdir() if p.name not in (".venv", "server.log") and p != _cwd.get("now"))
    assert not left, f"{doc.relative_to(REPO)}:{line} left {left} outside the examples' directory"


def test_every_skip_marker_names_something_this_suite_knows():
    for doc in DOCS:
        for line, _, _, marker in code_blocks(doc):
            if marker and marker.startswith("covered by "):
                assert (REPO / marker.removeprefix("covered by ")).is_file(), f"{doc.name}:{line}: {marker}"


def test_examples_are_found():
    """The extraction itself: the README's Python and shell examples are among the cases."""
    langs = {b[1] for d, b, _ in CASES if d.name == "README.md"}
    assert {"bash", "python"} <= langs


def test_shown_outputs_are_checked():
    """Every ``<!-- output -->`` block follows a runnable one; the check itself passes a
    shown output with other timings and fails a changed value or a changed order."""
    for doc in DOCS:
        blocks = code_blocks(doc)
        for before, block in zip([None, *blocks], blocks):
            if block[3] == "output":
                assert block[1] == "text" and before and before[1] in RUNNABLE, f"{doc.name}:{block[0]}"
    assert sum(shown is not None for _, _, shown in CASES) >= 2
    printed = "a\n[0] x: 391 tokens, decode 2.1 ms, process 1.9 ms\nb\n"
    assert_shown("[0] x: 391 tokens, decode 10.6 ms, process 24.5 ms\nb\n", printed, "here")
    for wrong in ("[0] x: 392 tokens, decode 2.1 ms, process 1.9 ms", "b\na"):
        with pytest.raises(AssertionError):
            assert_shown(wrong, printed, "here")
