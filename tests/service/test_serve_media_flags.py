"""``serve``'s media flags become the FetchPolicy and ServerConfig the server runs with
(the server itself is not started: ``launch.run`` is replaced to capture the config)."""

from __future__ import annotations

import pytest

from sglang_mm_grpc.cli import commands as cli
from sglang_mm_grpc.server import launch
from sglang_mm_grpc.cli.remote import byte_size
from sglang_mm_grpc.pipeline.driver import DEFAULT_MAX_IMAGE_TOKENS
from sglang_mm_grpc.media.decode import DEFAULT_MAX_PIXELS


@pytest.fixture
def serve(monkeypatch):
    """argv -> (exit code, the ServerConfig run() got, or None)."""
    monkeypatch.delenv("REQUEST_TIMEOUT", raising=False)
    got = []

    def fake_run(config):
        got.append(config)
        return 0

    monkeypatch.setattr(launch, "run", fake_run)

    def go(*argv):
        rc = cli.main(["serve", *argv])
        return rc, (got[-1] if got else None)

    return go


def test_defaults(serve):
    rc, cfg = serve()
    p = cfg.fetch_policy
    assert rc == 0
    assert (p.allowed_local_media_path, p.allowed_media_domains, p.allow_private_hosts) == (None, None, False)
    assert (p.request_byte_budget, p.max_remote_bytes) == (1_342_177_280, 64 << 20)
    assert (p.fetch_timeout_s, p.max_redirects, p.max_concurrent_fetches) == (3.0, 10, 32)
    assert (cfg.max_images, cfg.max_image_pixels) == (64, DEFAULT_MAX_PIXELS)
    assert cfg.max_image_tokens == DEFAULT_MAX_IMAGE_TOKENS


def test_every_media_flag(serve, tmp_path):
    rc, cfg = serve(
        "--allowed-local-media-path", str(tmp_path),
        "--allowed-media-domains", "Images.Example", "cdn.example,static.example",
        "--allowed-media-domain", "legacy.example",
        "--allow-private-media-hosts",
        "--max-images", "8",
        "--request-byte-budget", "1.5GiB",
        "--max-remote-bytes", "2MiB",
        "--fetch-timeout", "1.5",
        "--max-redirects", "0",
        "--max-concurrent-fetches", "4",
        "--max-image-pixels", "1000000",
        "--max-image-tokens", "4096",
    )
    p = cfg.fetch_policy
    assert rc == 0
    assert p.allowed_local_media_path == str(tmp_path.resolve())
    assert p.allowed_media_domains == ("images.example", "cdn.example", "static.example", "legacy.example")
    assert p.allow_private_hosts is True
    assert (p.request_byte_budget, p.max_remote_bytes) == (1536 << 20, 2 << 20)
    assert (p.fetch_timeout_s, p.max_redirects, p.max_concurrent_fetches) == (1.5, 0, 4)
    assert (cfg.max_images, cfg.max_image_pixels, cfg.max_image_tokens) == (8, 1_000_000, 4096)


def test_old_spelling_of_the_private_hosts_flag(serve):
    assert serve("--allow-private-hosts")[1].fetch_policy.allow_private_hosts is True


def test_request_timeout_env_is_the_fetch_timeout_default(serve, monkeypatch):
    monkeypatch.setenv("REQUEST_TIMEOUT", "7")
    assert serve()[1].fetch_policy.fetch_timeout_s == 7.0
    assert serve("--fetch-timeout", "2")[1].fetch_policy.fetch_timeout_s == 2.0


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-images", "0"],
        ["--max-image-pixels", "-1"],
        ["--max-image-tokens", "0"],
        ["--max-concurrent-fetches", "x"],
        ["--request-byte-budget", "lots"],
    ],
)
def test_bad_values_are_usage_errors(serve, argv, capsys):
    with pytest.raises(SystemExit) as e:
        serve(*argv)
    assert e.value.code == 2 and argv[0] in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max-redirects", "-1"], "max_redirects"),
        (["--fetch-timeout", "0"], "fetch_timeout_s"),
        (["--allowed-media-domains", "user@host"], "bare hostnames"),
        (["--allowed-local-media-path", "relative/dir"], "must be absolute"),
    ],
)
def test_policy_errors_exit_2_before_serving(serve, argv, message, capsys):
    rc, cfg = serve(*argv)
    assert rc == 2 and cfg is None and message in capsys.readouterr().err


def test_byte_sizes():
    assert byte_size("1.25GiB") == 1_342_177_280
    assert byte_size("64MiB") == byte_size("64M") == 64 << 20
    assert byte_size("4096") == 4096


@pytest.mark.parametrize("flag", ["--processor", "--resample"])
def test_processor_flag_and_its_former_name(serve, flag):
    rc, cfg = serve(flag, "torchvision")
    assert rc == 0 and cfg.processor == "torchvision"
