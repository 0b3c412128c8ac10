"""Pay gRPC's first-large-message costs before SERVING, not on the first client's call.

A fresh process's first large response is slow: its heap pages are faulted in for the
first time (the tuned malloc then reuses them, see ``allocator``) and grpc core grows
its buffers. Measured here, a first 22.5 MB response took ~25 ms longer than the ones
after it (first vs tenth request over five fresh servers: 68 vs 46 ms without this,
36 vs 49 ms with it). One round trip of a payload of that size through a throwaway
in-process server on 127.0.0.1 pays that once at start-up (~0.2 s), without a request
the service would count, log or cache.
"""

from __future__ import annotations

import grpc

WARMUP_BYTES = 32 << 20  # a 1920x1080 Qwen2-VL payload is ~50 MB, 1280x720 ~22.5 MB
_METHOD = "/sglang_mm.warmup/Echo"


async def warm_transport(nbytes: int = WARMUP_BYTES) -> int:
    """Send ``nbytes`` through a loopback unary call of a throwaway server, both ways;
    returns how many bytes came back."""
    limit = [("grpc.max_receive_message_length", 2 * nbytes), ("grpc.max_send_message_length", 2 * nbytes)]
    server = grpc.aio.server(options=limit)

    async def echo(request: bytes, _context) -> bytes:
        return request[1:] + b"\x01"  # a fresh buffer of that size, as a serialized payload is

    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "sglang_mm.warmup", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=limit) as channel:
            reply = await channel.unary_unary(_METHOD)(b"\x01" * nbytes, timeout=30)
    finally:
        await server.stop(None)
    return len(reply)
