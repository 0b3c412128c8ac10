"""Shared-memory payloads through real servers and the real reader, and the hostile cases:
segments nobody reads (lease, Release, handle expiry), a server killed with segments
outstanding (removed at its next start), a full budget (inline instead, /dev/shm never
filled past it), AUTO against the namespace, backends without SHM, and a response over
the send limit refused before it is sent."""

from __future__ import annotations

import os
import signal
import time

import blake3
import grpc
import pytest

import imagegen
from servers import Server, wait_until
from service_support import QWEN2, expected_sglang, expected_vllm, generate, prompt, without
from sglang_mm_grpc import Preprocessor
from sglang_mm_grpc.client import Client, payload_options

RAWS = [imagegen.jpeg(300, 420, seed=81)]  # pixel_values 3.1 MB (660 patches): over 64 KiB
SHM = payload_options(transport="shm")
MiB = 1 << 20


def files(owner: str) -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"sglang-mm.{owner}."))


def shm_of(payload) -> str:
    return payload.vllm.pixel_values.shm.name


@pytest.fixture(scope="module")
def pp():
    return Preprocessor.from_model(QWEN2, cache_bytes=0)


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    """Leases of 1 s, handles of 2 s."""
    proc = Server(tmp_path_factory.mktemp("shm-short"), "--shm-lease", "1", "--handle-ttl", "2", models=[QWEN2])
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def long(tmp_path_factory):
    """Leases of 60 s, so only Release or expiry can remove a segment."""
    proc = Server(tmp_path_factory.mktemp("shm-long"), "--shm-lease", "60", "--handle-ttl", "2", models=[QWEN2])
    yield proc
    proc.stop()


def info(server):
    with Client(server.target) as c:
        return c.server_info()


def test_staged_pixels_are_handed_out_without_a_copy(long, stubs, pp):
    """Preprocess with SHM: the kernels write pixel_values into a segment; the first
    float32 SHM payload hands that segment out; later payloads copy; the kept result still
    reads its mapping after the worker removed the file."""
    ids = prompt(pp, 1)
    out = pp.preprocess(RAWS, input_ids=ids)
    hashes = [blake3.blake3(r).hexdigest() for r in RAWS]
    before = info(long).shm
    with Client(long.target) as c:
        handle = c.preprocess(QWEN2, RAWS, input_ids=ids, options=SHM).handle
        assert info(long).shm.written == before.written + 1
        first = c.assemble(handle, "vllm", options=SHM)
        assert info(long).shm.written == before.written + 1  # the staged segment itself
        _, report = generate("vllm", stubs["vllm"], first, request_id="r")
        assert without(report, "transport") == expected_vllm(out, pp.field_layout, hashes, "r")
        assert report["transport"]["pixel_values"] == "shm"
        assert not os.path.exists(f"/dev/shm/{shm_of(first)}")  # read and removed by the worker
        second = c.assemble(handle, "vllm", options=SHM)
        assert shm_of(second) != shm_of(first) and info(long).shm.written == before.written + 2
        _, report = generate("vllm", stubs["vllm"], second, request_id="r")
        assert without(report, "transport") == expected_vllm(out, pp.field_layout, hashes, "r")
        sg = c.assemble(handle, "sglang", release=True)  # inline, from the kept mapping
        _, report = generate("sglang", stubs["sglang"], sg, request_id="r")
        assert report == expected_sglang(out, RAWS, "r")


def test_unread_segment_removed_when_its_lease_ends(short):
    owner = info(short).shm_owner_id
    with Client(short.target) as c:
        payload = c.preprocess(QWEN2, RAWS, backend="vllm", options=SHM).payload
    name = shm_of(payload)
    assert name in files(owner)
    assert wait_until(lambda: name not in files(owner), 5)
    assert info(short).shm.removed["lease"] >= 1


def test_unread_segments_removed_on_release(long):
    owner = info(long).shm_owner_id
    with Client(long.target) as c:
        handle = c.preprocess(QWEN2, RAWS).handle
        names = [shm_of(c.assemble(handle, "vllm", options=SHM)) for _ in range(2)]
        assert set(names) <= set(files(owner))
        before = info(long).shm.removed["release"]
        assert c.release(handle)
    assert not set(names) & set(files(owner))
    assert info(long).shm.removed["release"] == before + 2


def test_staged_segment_removed_when_its_handle_expires(long):
    before = info(long).shm
    with Client(long.target) as c:
        # a new image (a cached one is not staged: its Assemble copies), never assembled or released
        c.preprocess(QWEN2, [imagegen.jpeg(300, 420, seed=82)], options=SHM)
    assert info(long).shm.segments == before.segments + 1 and info(long).shm.written == before.written + 1
    assert wait_until(lambda: info(long).shm.segments == before.segments, 8)
    assert info(long).shm.removed["expired"] == before.removed["expired"] + 1


def test_killed_server_segments_removed_at_next_start(tmp_path):
    owner = f"test-kill-{os.getpid()}"
    first = Server(tmp_path, "--shm-owner-id", owner, "--shm-lease", "600", models=[QWEN2], name="first")
    try:
        with Client(first.target) as c:
            names = {shm_of(c.preprocess(QWEN2, RAWS, backend="vllm", options=SHM).payload) for _ in range(2)}
        assert names <= set(files(owner))  # outstanding: nobody read them, nobody removed them
        first.signal(signal.SIGKILL)  # (from now on any server starting may sweep them as a dead owner's)
        first.wait(10)
        second = Server(tmp_path, "--shm-owner-id", owner, models=[QWEN2], name="second")
        try:
            assert not names & set(files(owner))
            # counted by the second's start-up, unless another server starting meanwhile (a
            # parallel test worker's) swept them first as a dead owner's: never some of them only
            removed = info(second).shm.removed["startup"]
            assert removed == 0 or removed >= len(names), removed
        finally:
            second.stop()
    finally:
        first.kill()
    assert files(owner) == []


def test_full_budget_sends_inline_and_never_holds_more(tmp_path, stubs, pp):
    server = Server(tmp_path, "--shm-budget", "1MiB", "--shm-lease", "60", models=[QWEN2])
    try:
        ids = prompt(pp, 1)
        out = pp.preprocess(RAWS, input_ids=ids)
        with Client(server.target) as c:
            payload = c.preprocess(QWEN2, RAWS, input_ids=ids, backend="vllm", options=SHM).payload
            assert payload.vllm.pixel_values.WhichOneof("payload") == "inline"  # 3.1 MB does not fit in 1 MiB
            small = c.preprocess(QWEN2, [imagegen.png(40, 40, seed=2)], backend="vllm",
                                 options=payload_options(transport="shm", shm_min_bytes=0)).payload
            assert small.vllm.pixel_values.WhichOneof("payload") == "shm"  # what fits still goes
            got = c.server_info().shm
        assert got.inline_fallbacks >= 1 and got.peak_bytes <= MiB
        _, report = generate("vllm", stubs["vllm"], payload, request_id="b")
        hashes = [blake3.blake3(r).hexdigest() for r in RAWS]
        assert without(report, "transport") == expected_vllm(out, pp.field_layout, hashes, "b")
    finally:
        server.stop()


def test_auto_uses_shm_only_in_the_same_namespace(long):
    with Client(long.target) as c:
        ns = c.server_info().shm_namespace_id
        assert ns and ns.count(":") == 1
        for namespace, want in ((ns, "shm"), ("", "inline"), (ns + "0", "inline"), ("other-host:27", "inline")):
            opts = payload_options(transport="auto", shm_namespace_id=namespace)
            p = c.preprocess(QWEN2, RAWS, backend="vllm", options=opts).payload
            assert p.vllm.pixel_values.WhichOneof("payload") == want, namespace
            if want == "shm":
                os.unlink(f"/dev/shm/{shm_of(p)}")  # as its reader would


def test_shm_asked_of_a_backend_without_it(long):
    with Client(long.target) as c:
        for backend in ("sglang", "trtllm"):
            with pytest.raises(grpc.RpcError) as e:
                c.preprocess(QWEN2, RAWS, backend=backend, options=SHM)
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "shared memory" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            c.preprocess(QWEN2, RAWS, backend="sglang", options=payload_options("bfloat16"))
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "float32" in e.value.details()
        # refused before anything is fetched (this URL would be PERMISSION_DENIED)
        with pytest.raises(grpc.RpcError) as e:
            c.preprocess(QWEN2, ["http://10.1.2.3/a.png"], backend="trtllm", options=SHM)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_server_default_applies_where_the_backend_can_use_it(tmp_path):
    server = Server(tmp_path, "--tensor-transport", "shm", models=[QWEN2])
    try:
        with Client(server.target) as c:
            assert c.server_info().default_transport == 2  # TENSOR_TRANSPORT_SHM
            p = c.preprocess(QWEN2, RAWS, backend="vllm").payload
            assert p.vllm.pixel_values.WhichOneof("payload") == "shm"
            os.unlink(f"/dev/shm/{shm_of(p)}")
            sg = c.preprocess(QWEN2, RAWS, backend="sglang").payload  # the default, not a demand
            assert sg.sglang.pixel_values.data
            inline = c.preprocess(QWEN2, RAWS, backend="vllm", options=payload_options(transport="inline")).payload
            assert inline.vllm.pixel_values.WhichOneof("payload") == "inline"
    finally:
        server.stop()


def test_env_sets_the_server_default(tmp_path):
    server = Server(tmp_path, models=[QWEN2], env={"SMG_MM_TENSOR_TRANSPORT": "auto", "SMG_MM_SHM_MIN_BYTES": "4096"})
    try:
        i = info(server)
        assert i.default_transport == 3 and i.default_shm_min_bytes == 4096
    finally:
        server.stop()


def test_response_over_the_send_limit_is_refused_before_sending(tmp_path):
    server = Server(tmp_path, "--max-send-bytes", "2MiB", models=[QWEN2])
    try:
        with Client(server.target) as c:
            with pytest.raises(grpc.RpcError) as e:
                c.preprocess(QWEN2, RAWS, backend="vllm")
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            msg = e.value.details()
            assert "over this server's send limit of 2097152 bytes" in msg and "TENSOR_TRANSPORT_SHM" in msg
            handle = c.preprocess(QWEN2, RAWS).handle
            with pytest.raises(grpc.RpcError) as e:
                c.assemble(handle, "vllm")
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            # the remedies work: half the bytes, or shared memory
            assert c.assemble(handle, "vllm", options=payload_options("bfloat16")).vllm.pixel_values.inline
            p = c.assemble(handle, "vllm", options=SHM, release=True)
            os.unlink(f"/dev/shm/{shm_of(p)}")
            assert c.health() == "SERVING"
        time.sleep(0.2)
        assert "Traceback" not in server.log_text()
    finally:
        server.stop()


def test_reused_files_carry_each_calls_own_pixels(long, pp):
    """One-shot raw payloads from four callers at once, images of three sizes: each
    worker's read equals the in-process raw pixels of its own image, though the server
    made later segments in the files of earlier ones its workers had read."""
    from concurrent.futures import ThreadPoolExecutor

    from smg_grpc_servicer import mm_shm

    raws = [imagegen.jpeg(h, w, seed=90 + h) for h, w in ((300, 420), (280, 392), (336, 448))]
    want = [pp.preprocess([r], raw=True).pixel_values.tobytes() for r in raws]
    raw_shm = payload_options("uint8", "shm")
    files_seen = []

    def caller(k: int) -> list[bool]:
        same = []
        with Client(long.target) as c:
            for n in range(8):
                i = (k + n) % len(raws)
                td = c.preprocess(QWEN2, [raws[i]], backend="vllm", options=raw_shm).payload.vllm.pixel_values
                files_seen.append(os.stat(f"/dev/shm/{td.shm.name}").st_ino)
                time.sleep(0.002 * (k % 2))  # readers late and early: segments out at once
                same.append(mm_shm.tensor_payload_bytes(td) == want[i])
        return same

    before = info(long).shm.reused
    with ThreadPoolExecutor(4) as ex:
        results = [ok for oks in ex.map(caller, range(4)) for ok in oks]
    assert len(results) == 32 and all(results)
    assert len(set(files_seen)) < 16, len(set(files_seen))  # files were reused, not made per call
    # every use of a file but its first here was a reuse (a first may be too: a file an
    # earlier test's read gave back), and the server counts each
    assert 32 - len(set(files_seen)) <= info(long).shm.reused - before <= 32
