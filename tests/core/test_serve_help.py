"""``serve --help`` shows the defaults the server really runs with: each value is read
back from the help text and compared with the field it names in ServerConfig or
FetchPolicy (and with admission's in-flight rule), so changing a default there changes
the help, and a help text that states a default of its own fails here."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import pytest

from sglang_mm_grpc.service.admission import default_max_in_flight
from sglang_mm_grpc.cli.remote import byte_size, size_text
from sglang_mm_grpc.media.policy import FetchPolicy, env_fetch_timeout
from sglang_mm_grpc.server.app import ServerConfig


def field_default(cls, name: str):
    (f,) = [f for f in dataclasses.fields(cls) if f.name == name]
    assert f.default is not dataclasses.MISSING, f"{cls.__name__}.{name} has no plain default"
    return f.default


@pytest.fixture(scope="module")
def helps() -> dict[str, str]:
    """flag -> its help text, from ``sglang-mm-grpc serve --help`` (wide enough for one line each)."""
    r = subprocess.run([sys.executable, "-m", "sglang_mm_grpc.cli", "serve", "--help"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "COLUMNS": "1000"})
    assert r.returncode == 0, r.stderr
    out, flag = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"  (--[\w-]+)(?:, --[\w-]+)*(?: [A-Z]+(?: \[[A-Z]+ \.\.\.\])?| \{[\w,]+\})?(?:\s{2,}(\S.*))?$", line)
        if m:
            flag = m.group(1)
            out[flag] = m.group(2)
        elif flag and out[flag] is None and line.startswith(" " * 3):  # a long flag: the help is on the next line
            out[flag] = line.strip()
    return out


def shown_default(text: str) -> str:
    m = re.search(r"\(default:? ([^;)]+)", text)
    assert m, f"no default in {text!r}"
    return m.group(1)


SIZES = [("--max-receive-bytes", ServerConfig, "max_receive_bytes"), ("--max-send-bytes", ServerConfig, "max_send_bytes"),
         ("--store-bytes", ServerConfig, "store_bytes"), ("--cache-bytes", ServerConfig, "cache_bytes"),
         ("--media-store-bytes", ServerConfig, "media_store_bytes"),
         ("--request-byte-budget", FetchPolicy, "request_byte_budget"),
         ("--max-remote-bytes", FetchPolicy, "max_remote_bytes"),
         ("--video-max-bytes", ServerConfig, "video_max_bytes"), ("--audio-max-bytes", ServerConfig, "audio_max_bytes")]
NUMBERS = [("--port", ServerConfig, "port"), ("--store-items", ServerConfig, "store_items"),
           ("--handle-ttl", ServerConfig, "handle_ttl_s"), ("--grace", ServerConfig, "grace_s"),
           ("--max-images", ServerConfig, "max_images"), ("--max-image-tokens", ServerConfig, "max_image_tokens"),
           ("--max-input-ids", ServerConfig, "max_input_ids"),
           ("--max-redirects", FetchPolicy, "max_redirects"),
           ("--processes", ServerConfig, "processes"), ("--drain-delay", ServerConfig, "drain_delay_s"),
           ("--max-concurrent-fetches", FetchPolicy, "max_concurrent_fetches"),
           ("--max-videos", ServerConfig, "max_videos"), ("--max-video-tokens", ServerConfig, "max_video_tokens"),
           ("--video-max-duration", ServerConfig, "video_max_duration_s"),
           ("--video-max-decoded-frames", ServerConfig, "video_max_decoded_frames"),
           ("--video-max-sampled-frames", ServerConfig, "video_max_sampled_frames"),
           ("--video-max-frame-pixels", ServerConfig, "video_max_frame_pixels"),
           ("--video-decode-timeout", ServerConfig, "video_decode_timeout_s"),
           ("--max-audios", ServerConfig, "max_audios"), ("--max-audio-tokens", ServerConfig, "max_audio_tokens"),
           ("--audio-max-duration", ServerConfig, "audio_max_duration_s"),
           ("--audio-max-sample-rate", ServerConfig, "audio_max_sample_rate"),
           ("--audio-max-channels", ServerConfig, "audio_max_channels"),
           ("--audio-max-decoded-samples", ServerConfig, "audio_max_decoded_samples"),
           ("--audio-decode-timeout", ServerConfig, "audio_decode_timeout_s"),
           ("--media-store-redis-ttl", ServerConfig, "media_store_redis_ttl_s"),
           ("--media-store-redis-timeout", ServerConfig, "media_store_redis_timeout_s")]


@pytest.mark.parametrize("flag, cls, name", SIZES, ids=[s[0] for s in SIZES])
def test_byte_sizes_are_the_defaults(helps, flag, cls, name):
    assert byte_size(shown_default(helps[flag])) == field_default(cls, name)


@pytest.mark.parametrize("flag, cls, name", NUMBERS, ids=[n[0] for n in NUMBERS])
def test_numbers_are_the_defaults(helps, flag, cls, name):
    assert float(shown_default(helps[flag])) == field_default(cls, name)


def test_host(helps):
    assert shown_default(helps["--host"]) == field_default(ServerConfig, "host")
    assert shown_default(helps["--metrics-host"]).split(":")[0] == field_default(ServerConfig, "metrics_host")


def test_max_image_pixels(helps):
    value = field_default(ServerConfig, "max_image_pixels")
    number, _, square = shown_default(helps["--max-image-pixels"]).partition(" = ")
    assert int(number) == value
    w, h = map(int, square.split("x"))
    assert w * h == value


def test_fetch_timeout_is_the_one_without_request_timeout(helps):
    text = shown_default(helps["--fetch-timeout"])
    assert text.startswith("$REQUEST_TIMEOUT or ")
    assert float(text.removeprefix("$REQUEST_TIMEOUT or ")) == env_fetch_timeout({})


def test_in_flight_rule_is_admissions(helps):
    m = re.fullmatch(r"(\d+) per worker, at least (\d+)", shown_default(helps["--max-in-flight"]))
    assert m, helps["--max-in-flight"]
    per_worker, floor = map(int, m.groups())
    assert all(default_max_in_flight(w) == max(floor, per_worker * w) for w in range(1, 1000))


def test_shm_defaults(helps):
    from sglang_mm_grpc.wire.shm import DEFAULT_BUDGET_CAP, DEFAULT_MIN_BYTES
    from sglang_mm_grpc.service.transport import default_min_bytes, default_transport

    assert shown_default(helps["--tensor-transport"]) == f"$SMG_MM_TENSOR_TRANSPORT, else {default_transport(env={})}"
    env, _, fallback = shown_default(helps["--shm-min-bytes"]).partition(", else ")
    assert env == "$SMG_MM_SHM_MIN_BYTES" and byte_size(fallback) == DEFAULT_MIN_BYTES == default_min_bytes(env={})
    assert shown_default(helps["--shm-budget"]) == f"a quarter of /dev/shm, at most {size_text(DEFAULT_BUDGET_CAP)}"
    assert float(shown_default(helps["--shm-lease"])) == field_default(ServerConfig, "shm_lease_s")
    assert int(shown_default(helps["--shm-mode"]), 8) == field_default(ServerConfig, "shm_mode")


def test_every_stated_default_was_checked(helps):
    """A new option with a number in its default joins the lists above."""
    checked = {f for f, _, _ in SIZES + NUMBERS} | {"--host", "--metrics-host", "--max-image-pixels", "--fetch-timeout", "--max-in-flight"}
    checked |= {"--shm-min-bytes", "--shm-budget", "--shm-lease", "--shm-mode"}  # test_shm_defaults
    stated = {flag for flag, text in helps.items() if text and re.search(r"\(default:? [^;)]*\d", text)}
    assert stated <= checked, sorted(stated - checked)


@pytest.mark.parametrize("n, text", [(512 << 20, "512MiB"), (2048 << 20, "2GiB"), (1_342_177_280, "1.25GiB"),
                                     (3 << 10, "3KiB"), (1000, "1000"), (0, "0"), ((1 << 30) + 1, str((1 << 30) + 1))])
def test_size_text_reads_back(n, text):
    assert size_text(n) == text and byte_size(text) == n


def test_building_the_parser_imports_no_grpc():
    """The defaults are read only when help is shown: other subcommands stay light."""
    code = "import sys; from sglang_mm_grpc.cli import commands; commands.build_parser(); print('grpc' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
