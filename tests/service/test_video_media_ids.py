"""Media ids for videos through a real server on 127.0.0.1 (``Client(media_ids=...)``).

A video given as bytes goes by its blake3 hash; the server answers NOT_FOUND with the
trailer ``sglang-mm-missing-videos`` listing the videos it lacks (images have
``sglang-mm-missing-media``), and the client resends exactly those as data, once. Hit,
miss + resend, and a mixed request (an image and a video missing, another image held)
are checked against the server's media store counters and a plain call's answer.
"""

from __future__ import annotations

import grpc
import pytest
from smg_grpc_proto.generated import common_pb2

pytest.importorskip("av")

import imagegen  # noqa: E402
import videogen  # noqa: E402
from servers import Server  # noqa: E402
from service_support import qwen_prompt as ids  # noqa: E402
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb  # noqa: E402
from sglang_mm_grpc.client import (Client, missing_media, missing_videos, video_item,  # noqa: E402
                                   video_options)
from sglang_mm_grpc.core.hashing import content_hash  # noqa: E402

MODEL = "Qwen/Qwen2-VL-7B-Instruct"
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
FPS2 = video_options(fps=2)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # shared: each client below is a connection of its own (a caller of its own, without tokens)
    s = Server(tmp_path_factory.mktemp("video-media-ids"), "--shared-media-store", "--log-level", "WARNING",
               models=[MODEL], workers=1)
    yield s
    s.stop()


def client(server, **kw) -> Client:
    return Client(server.target, timeout=120, channel_options=OWN_CONNECTION, **kw)


def clip(seed: int) -> bytes:
    return videogen.clip(frames=12, fps=6, size=(56, 84), noise=6, seed=seed)


def media(server) -> pb.MediaStoreStats:
    return server.stats().media


def test_unknown_video_hash_is_named_in_its_own_trailer(server):
    unknown = content_hash(b"never sent")
    req = pb.PreprocessRequest(model=MODEL, input_ids=ids(0, 1), videos=[pb.MediaItem(media_id=unknown)])
    with client(server) as c, pytest.raises(grpc.RpcError) as e:
        c.stub.Preprocess(req, timeout=60)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "video 0" in e.value.details()
    assert missing_videos(e.value) == [0] and missing_media(e.value) is None


def test_a_held_video_goes_by_hash(server):
    video = clip(1)
    with client(server) as plain:
        want = plain.preprocess(MODEL, [], ids(0, 1), videos=[video], video_options=FPS2)
        plain.release(want.handle)
    before = media(server)
    with client(server, media_ids=True) as c:
        got = c.preprocess(MODEL, [], ids(0, 1), backend="vllm", videos=[video], video_options=FPS2)
    after = media(server)
    assert (after.hits - before.hits, after.misses - before.misses, after.stored - before.stored) == (1, 0, 0)
    assert list(got.input_ids) == list(want.input_ids) and got.videos[0].hash == content_hash(video)
    assert list(got.videos[0].frame_indices) == list(want.videos[0].frame_indices)
    assert got.payload.vllm.modality == common_pb2.VIDEO and len(got.payload.vllm.mm_hashes) == 1


def test_a_missing_video_is_resent_once(server):
    video = clip(2)
    before = media(server)
    with client(server, media_ids=True) as c:
        got = c.plan(MODEL, [], ids(0, 1), videos=[video_item(video, options=FPS2)])
        again = c.plan(MODEL, [], ids(0, 1), videos=[video_item(video, options=FPS2)])
    after = media(server)
    # first call: the id misses, the bytes are resent and stored; second: a hit
    assert (after.misses - before.misses, after.stored - before.stored, after.hits - before.hits) == (1, 1, 1)
    assert got.videos[0].hash == again.videos[0].hash == content_hash(video)
    assert got.videos[0].options.fps == 2 and list(got.videos[0].frame_indices) == list(again.videos[0].frame_indices)


def test_known_mode_sends_only_videos_sent_before(server):
    video = clip(3)
    with client(server, media_ids="known") as c:
        before = media(server)
        c.plan(MODEL, [], ids(0, 1), videos=[video])  # new to this client: as data
        mid = media(server)
        c.plan(MODEL, [], ids(0, 1), videos=[video])  # sent before: by hash
        after = media(server)
    assert (mid.misses - before.misses, mid.hits - before.hits, mid.stored - before.stored) == (0, 0, 1)
    assert (after.misses - mid.misses, after.hits - mid.hits) == (0, 1)


def test_mixed_images_and_videos_resend_only_the_missing(server):
    held_image, new_image, video = imagegen.jpeg(64, 96, seed=71), imagegen.jpeg(80, 60, seed=72), clip(4)
    prompt = ids(2, 1)
    with client(server) as plain:
        plain.plan(MODEL, [held_image], ids(1, 0))  # the server now holds this image only
    before = media(server)
    with client(server, media_ids=True) as c:
        got = c.preprocess(MODEL, [held_image, new_image], prompt, backend="tokenspeed", videos=[video])
    after = media(server)
    # the first call misses the new image and the video and finds the held image; the
    # resend sends those two as data (stored) and the held image by its id again
    assert (after.misses - before.misses, after.stored - before.stored, after.hits - before.hits) == (2, 2, 2)
    assert [im.hash for im in got.images] == [content_hash(held_image), content_hash(new_image)]
    assert got.videos[0].hash == content_hash(video)
    assert [i.modality for i in got.payload.tokenspeed.items] == [common_pb2.IMAGE, common_pb2.IMAGE, common_pb2.VIDEO]
    with client(server) as plain:
        want = plain.preprocess(MODEL, [held_image, new_image], prompt, videos=[video])
        plain.release(want.handle)
    assert list(got.input_ids) == list(want.input_ids)
