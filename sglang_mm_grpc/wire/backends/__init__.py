"""One module per backend: the payload it builds and what it refuses, as a ``Backend``
(``wire.payload``) that ``wire.assemble`` dispatches on. ``ALL`` is in the Backend
enum's order, the order messages list them in."""

from . import sglang, tokenspeed, trtllm, vllm

ALL = (sglang.BACKEND, vllm.BACKEND, trtllm.BACKEND, tokenspeed.BACKEND)
