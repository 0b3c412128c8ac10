"""A Python router imports smg-grpc-proto's classes and this package's in one process, in
either order: every upstream file is registered once (by smg-grpc-proto), and this
service's messages embed those very classes. Each order runs in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

UPSTREAM = "import smg_grpc_proto.generated.vllm_engine_pb2, smg_grpc_proto.generated.tokenspeed_scheduler_pb2"
OURS = "import sglang_mm_grpc._proto.sglang_mm.v1.preprocessor_pb2, sglang_mm_grpc.client, sglang_mm_grpc.wire.assemble"
CHECK = """
import warnings
from smg_grpc_proto.generated import sglang_scheduler_pb2, tokenspeed_scheduler_pb2, trtllm_service_pb2, vllm_engine_pb2
from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2 as pb
oneof = {f.name: f.message_type for f in pb.BackendPayload.DESCRIPTOR.oneofs_by_name["mm_inputs"].fields}
assert oneof["vllm"] is vllm_engine_pb2.MultimodalInputs.DESCRIPTOR
assert oneof["sglang"] is sglang_scheduler_pb2.MultimodalInputs.DESCRIPTOR
assert oneof["trtllm"] is trtllm_service_pb2.MultimodalInput.DESCRIPTOR
assert oneof["tokenspeed"] is tokenspeed_scheduler_pb2.MultimodalInputs.DESCRIPTOR
p = pb.BackendPayload(vllm=vllm_engine_pb2.MultimodalInputs(mm_hashes=["a"]))
assert isinstance(p.vllm, vllm_engine_pb2.MultimodalInputs)
print("ok")
"""


@pytest.mark.parametrize("first, second", [(UPSTREAM, OURS), (OURS, UPSTREAM)], ids=["upstream-first", "ours-first"])
def test_both_packages_in_one_process(first, second):
    code = "\n".join(["import warnings", "warnings.simplefilter('error')", first, second, CHECK])
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_protobuf_runtime_accepts_both_gencodes():
    """smg-grpc-proto's modules are protobuf 6.33 gencode, ours 7.x: the 7.x runtime loads
    both (a runtime takes gencode of its own and the previous major version)."""
    import google.protobuf
    from smg_grpc_proto.generated import vllm_engine_pb2

    from sglang_mm_grpc._proto.sglang_mm.v1 import preprocessor_pb2

    major = int(google.protobuf.__version__.split(".")[0])
    assert major >= 7
    for module in (vllm_engine_pb2, preprocessor_pb2):
        text = open(module.__file__).read()
        gencode = int(text.split("Protobuf Python Version: ")[1].split(".")[0])
        assert major - 1 <= gencode <= major, module.__name__
