"""The committed generated code matches proto/: regenerate into a temp dir and compare.

Fix a failure with ``python scripts/gen_proto.py`` and commit the result.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "sglang_mm_grpc" / "_proto"
_VERSION = re.compile(r"^(# Protobuf Python Version: .*|GRPC_GENERATED_VERSION = .*)$", re.MULTILINE)
_SERIALIZED = re.compile(r"AddSerializedFile\((b'.*?')\)\n", re.DOTALL)


def gen_proto():
    spec = importlib.util.spec_from_file_location("gen_proto", REPO / "scripts" / "gen_proto.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def descriptor(text: str) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto.FromString(ast.literal_eval(_SERIALIZED.search(text).group(1)))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("proto") / "_proto"
    gen_proto().generate(out)
    return files(out)


def test_same_files(fresh):
    assert sorted(fresh) == sorted(files(COMMITTED)), "generated files differ: run scripts/gen_proto.py"


def test_same_descriptors(fresh):
    """What the protos say (independent of the protoc version that wrote the code)."""
    committed = files(COMMITTED)
    for name, text in fresh.items():
        if name.endswith("_pb2.py"):
            assert descriptor(committed[name]) == descriptor(text), f"{name} is stale: run scripts/gen_proto.py"


def test_same_code(fresh):
    committed = files(COMMITTED)
    versions = {m for t in fresh.values() for m in _VERSION.findall(t)}
    if versions != {m for t in committed.values() for m in _VERSION.findall(t)}:
        pytest.skip(f"installed protoc/grpc tools differ from the ones that generated the code: {sorted(versions)}")
    stale = [name for name, text in fresh.items() if committed.get(name) != text]
    assert not stale, f"stale generated code {stale}: run scripts/gen_proto.py"


def test_no_top_level_imports_of_proto_packages():
    """Never import (or make installable) top-level sglang / vllm / trtllm modules, nor the
    upstream generated modules by their bare names (they come from smg_grpc_proto)."""
    bad = re.compile(r"^\s*(from|import) (sglang_mm|sglang|vllm|trtllm|tokenspeed)[. ]", re.MULTILINE)
    bare = re.compile(r"^\s*import \w+_pb2\b", re.MULTILINE)
    for name, text in files(COMMITTED).items():
        assert not bad.search(text) and not bare.search(text), name


def test_only_this_services_proto_is_generated_here():
    """The backends' messages are smg-grpc-proto's: proto/ holds sglang_mm/v1 only."""
    assert sorted(gen_proto().proto_files()) == ["sglang_mm/v1/preprocessor.proto"]
    assert sorted(p for p in files(COMMITTED) if p.endswith("_pb2.py")) == ["sglang_mm/v1/preprocessor_pb2.py"]
