"""Local files: only regular files under --allowed-local-media-path, symlinks resolved."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fetch_helpers import fetch, fetch_error
from media_servers import payload
from sglang_mm_grpc.core.errors import Code
from sglang_mm_grpc.media import FetchPolicy


@pytest.fixture
def tree(tmp_path: Path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.png").write_bytes(payload(100))
    (root / "sub" / "b c.png").write_bytes(payload(50))
    outside = tmp_path / "secret.png"
    outside.write_bytes(b"secret")
    (root / "inside-link.png").symlink_to(root / "a.png")
    (root / "outside-link.png").symlink_to(outside)
    (root / "dir-link").symlink_to(tmp_path)
    return root, outside


def allow(root) -> FetchPolicy:
    return FetchPolicy(allowed_local_media_path=str(root))


def test_paths_and_file_urls_under_the_root(tree):
    root, _ = tree
    sources = [str(root / "a.png"), f"file://{root}/a.png", f"file://localhost{root}/sub/b%20c.png", str(root / "inside-link.png")]
    assert fetch(sources, allow(root)) == [payload(100), payload(100), payload(50), payload(100)]


def test_local_files_refused_without_the_flag(tree):
    root, _ = tree
    for source in (str(root / "a.png"), f"file://{root}/a.png"):
        err = fetch_error([source], FetchPolicy())
        assert err.code is Code.PERMISSION_DENIED
        assert "--allowed-local-media-path" in err.message


@pytest.mark.parametrize("name", ["outside-link.png", "dir-link/secret.png", "sub/../../secret.png"])
def test_escapes_from_the_root_are_refused(tree, name):
    root, _ = tree
    err = fetch_error([f"{root}/{name}"], allow(root))
    assert err.code is Code.PERMISSION_DENIED and "outside the allowed local media path" in err.message


def test_file_outside_the_root_is_refused(tree):
    root, outside = tree
    err = fetch_error([str(outside)], allow(root))
    assert err.code is Code.PERMISSION_DENIED
    assert str(root) not in err.message.replace(str(outside), "")  # the root itself is not disclosed


def test_root_given_through_a_symlink(tree, tmp_path):
    root, _ = tree
    link = tmp_path / "root-link"
    link.symlink_to(root)
    assert fetch([f"{link}/a.png", f"{root}/a.png"], allow(link)) == [payload(100)] * 2


def test_fifo_is_refused_without_blocking(tree):
    root, _ = tree
    fifo = root / "pipe.png"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    err = fetch_error([str(fifo)], allow(root))
    assert err.code is Code.PERMISSION_DENIED and "not a regular file" in err.message
    assert time.monotonic() - t0 < 1.0


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_dev_zero_is_refused():
    err = fetch_error(["/dev/zero"], FetchPolicy(allowed_local_media_path="/dev"))
    assert err.code is Code.PERMISSION_DENIED and "not a regular file" in err.message


def test_dev_zero_through_a_symlink_is_refused(tree):
    root, _ = tree
    (root / "zero.png").symlink_to("/dev/zero")
    err = fetch_error([str(root / "zero.png")], allow(root))
    assert err.code is Code.PERMISSION_DENIED


def test_directory_is_refused(tree):
    root, _ = tree
    assert fetch_error([str(root / "sub")], allow(root)).code is Code.PERMISSION_DENIED


def test_missing_and_empty_files(tree):
    root, _ = tree
    assert fetch_error([str(root / "nope.png")], allow(root)).code is Code.NOT_FOUND
    (root / "empty.png").write_bytes(b"")
    assert fetch_error([str(root / "empty.png")], allow(root)).code is Code.INVALID_ARGUMENT


def test_malformed_file_urls(tree):
    root, _ = tree
    for source in (f"file://example.com{root}/a.png", "file:relative.png", f"file://{root}/a.png?x=1"):
        assert fetch_error([source], allow(root)).code is Code.INVALID_ARGUMENT, source


def test_files_count_against_the_request_budget(tree):
    root, _ = tree
    policy = FetchPolicy(allowed_local_media_path=str(root), request_byte_budget=120)
    err = fetch_error([str(root / "a.png"), str(root / "sub" / "b c.png")], policy)
    assert err.code is Code.RESOURCE_EXHAUSTED and "request_byte_budget (120 B)" in err.message


def test_files_are_not_capped_per_stream(tree):
    root, _ = tree
    policy = FetchPolicy(allowed_local_media_path=str(root), max_remote_bytes=10)
    assert fetch([str(root / "a.png")], policy) == [payload(100)]
