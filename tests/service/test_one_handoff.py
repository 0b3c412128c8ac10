"""One thread pool, one hand-off per call: the server's executor is the only pool, and a
call's CPU work (preprocess, keep, assemble, serialize) is one task in it."""

from __future__ import annotations

import asyncio

import grpc

import imagegen
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2_grpc as pb_grpc
from sglang_mm_grpc.server.app import Server, ServerConfig

MODEL = "llava-hf/llava-1.5-7b-hf"
IMAGE = 32000


async def _calls() -> tuple[list[str], bool]:
    server = Server(ServerConfig(port=0, models=[MODEL], tune_malloc=False, cache_bytes=0))
    port = await server.start()
    await server.load()
    shared = all(pp.executor is server.executor for pp in server.preprocessors.values())
    tasks: list[str] = []
    submit = server.executor.submit

    def counting(fn, *args, **kwargs):
        tasks.append(getattr(fn, "__name__", None) or getattr(getattr(fn, "func", None), "__name__", "?"))
        return submit(fn, *args, **kwargs)

    server.executor.submit = counting
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.MultimodalPreprocessorStub(channel)
            image = pb.MediaItem(data=imagegen.png(200, 300))
            one_shot = await stub.Preprocess(
                pb.PreprocessRequest(model=MODEL, input_ids=[1, IMAGE, 2], images=[image], backend=pb.BACKEND_VLLM))
            assert one_shot.payload.vllm.pixel_values.shape == [1, 3, 336, 336]
            tasks.append("|")
            kept = await stub.Preprocess(pb.PreprocessRequest(model=MODEL, input_ids=[1, IMAGE, 2], images=[image]))
            tasks.append("|")
            await stub.Assemble(pb.AssembleRequest(handle=kept.handle, backend=pb.BACKEND_SGLANG, release=True))
    finally:
        await server.stop(0)
    return tasks, shared


def test_each_call_is_one_task_in_the_one_pool():
    tasks, shared = asyncio.run(_calls())
    assert shared, "every model runs its images on the server's executor"
    one_shot, preprocess, assemble = " ".join(tasks).split(" | ")
    assert one_shot.split() == ["_work"]  # preprocess + keep + assemble + serialize
    assert preprocess.split() == ["_work"]
    assert assemble.split() == ["_timed"]
