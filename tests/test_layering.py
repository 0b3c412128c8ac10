"""Who imports whom: every import in the package, checked against one table of layers.

Each .py file of the package (``sglang_mm_grpc/**`` and ``kernels/**``, which installs as
``sglang_mm_grpc.kernels``; not the generated ``sglang_mm_grpc/_proto``) is parsed with
``ast``; every import in it, at module level or inside a function, absolute or relative,
is resolved to a module name and checked against ``LAYERS`` below.

A module may import its own layer and the layers its entry names in ``may_import``
(always lower ones), the standard library, and the third-party packages its entry
names. Nothing in the package may import a test-only package (``TEST_ONLY``) or
anything under ``tests/``. A module the table does not place fails the test: add it to
the layer it belongs to (and say so in docs/DESIGN.md, "Layout of the repository").
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "sglang_mm_grpc"

# -- the table ------------------------------------------------------------------------
# Lowest layer first. "modules": a name ending in ".*" is that package or module and
# everything under it; any other name is exactly that one module ("sglang_mm_grpc" alone
# is the package's __init__). "may_import": the lower layers a module may import
# besides its own. "may_import_modules": single modules of another layer it may import
# although their layer is not listed. "third_party": import roots allowed besides the
# standard library ("google.protobuf" allows google.protobuf and its submodules only).
LAYERS: dict[str, dict[str, list[str]]] = {
    "kernels": {
        "modules": ["sglang_mm_grpc.kernels.*"],
        "may_import": [],
        "third_party": ["numpy", "numba", "llvmlite"],
    },
    "base": {  # values every layer shares
        "modules": [
            "sglang_mm_grpc.errors",
            "sglang_mm_grpc.hashing",
            "sglang_mm_grpc.carriers",
            "sglang_mm_grpc.layout",
            "sglang_mm_grpc.positions",
        ],
        "may_import": ["kernels"],
        "third_party": ["numpy", "blake3"],
    },
    "media": {  # fetching and decoding, and their policy
        "modules": ["sglang_mm_grpc.media.*"],
        "may_import": ["base", "kernels"],
        # httpcore: the connection layer under httpx; media/transport.py pins resolved
        # addresses (SSRF) with an httpcore network backend and maps its exceptions.
        "third_party": ["httpx", "httpcore", "PIL", "numpy", "av"],
    },
    "families": {  # data: what tensor, what layout, what positions
        "modules": ["sglang_mm_grpc.families.*"],
        "may_import": ["base", "kernels"],
        "third_party": ["numpy"],
    },
    "config": {  # model loading: presets, HF directories, picking the family and its processor class
        "modules": ["sglang_mm_grpc.config.*"],
        "may_import": ["families", "media", "base", "kernels"],
        "third_party": ["numpy"],
    },
    "driver": {  # owns the request flow and its failure semantics
        "modules": [
            "sglang_mm_grpc.driver",
            "sglang_mm_grpc.video_driver",
            "sglang_mm_grpc.cache",
            "sglang_mm_grpc.metrics",
            "sglang_mm_grpc.fanout",
        ],
        "may_import": ["config", "families", "media", "base", "kernels"],
        "third_party": ["numpy"],
    },
    "wire": {  # protobuf messages and payloads; receives values, never asks for them
        "modules": [
            "sglang_mm_grpc.assemble",
            "sglang_mm_grpc.tensors",
            "sglang_mm_grpc.wire",
            "sglang_mm_grpc.worker_info",
            # shm: where a payload's tensor bytes live when they do not travel in the message
            "sglang_mm_grpc.shm",
            "sglang_mm_grpc._proto.*",
        ],
        # kernels: the serializer converts float32 to the wire dtype while it copies (wirecast)
        "may_import": ["base", "kernels"],
        # smg_grpc_proto: the backends' messages are the gateway's own generated classes
        "third_party": ["numpy", "google.protobuf", "smg_grpc_proto"],
    },
    "service": {  # the gRPC servicer, the handle store, admission
        "modules": [
            "sglang_mm_grpc.servicer", "sglang_mm_grpc.store", "sglang_mm_grpc.admission",
            # owners: which replica and process a handle belongs to (the store names it in handles)
            "sglang_mm_grpc.owners",
            # callers: who a call comes from (a sibling's forwarded call keeps its caller)
            "sglang_mm_grpc.callers",
            # request_bounds: a PreprocessRequest's token ids counted before they are parsed
            "sglang_mm_grpc.request_bounds",
            # calls: a call's state after its handler returned (a response the client never got)
            "sglang_mm_grpc.calls",
            # transport: a call's payload options against the server's defaults, staging, kept segments
            "sglang_mm_grpc.transport",
            # media_store: encoded images kept by blake3 for media ids, client ids bound per caller
            "sglang_mm_grpc.media_store",
        ],
        "may_import": ["wire", "driver", "base"],
        # servicer names each image's source in logs and errors with media.sources.describe.
        "may_import_modules": ["sglang_mm_grpc.media.sources"],
        "third_party": ["grpc", "numpy"],
    },
    "server": {  # process: gRPC server, health, reflection, metrics endpoint, malloc tuning
        "modules": [
            "sglang_mm_grpc.server",
            "sglang_mm_grpc.transport_warmup",
            "sglang_mm_grpc.exporter",
            "sglang_mm_grpc.allocator",
            # gate: the interceptor every call passes (token, drain refusal, owner tag), TLS files
            "sglang_mm_grpc.gate",
            # siblings: the other processes of serve --processes (forwarding, summed GetStats)
            "sglang_mm_grpc.siblings",
            # processes: the supervisor of serve --processes (shared port, warm-up order, restarts)
            "sglang_mm_grpc.processes",
        ],
        "may_import": ["service", "wire", "config", "driver", "families", "media", "base", "kernels"],
        "third_party": ["grpc", "grpc_health", "grpc_reflection", "prometheus_client", "numpy"],
    },
    "entry": {  # what users call: the CLI, the client, the package's public names
        "modules": [
            "sglang_mm_grpc",
            "sglang_mm_grpc.cli",
            "sglang_mm_grpc.cli_remote",
            "sglang_mm_grpc.cli_call",
            "sglang_mm_grpc.client",
            # endpoints: the client's targets (several replicas, health, owner routing, TLS, token)
            "sglang_mm_grpc.endpoints",
        ],
        "may_import": ["server", "service", "wire", "config", "driver", "families", "media", "base", "kernels"],
        "third_party": [
            "numpy", "numba", "llvmlite", "PIL", "blake3", "httpx", "httpcore", "grpc", "grpc_health",
            "grpc_reflection", "grpc_tools", "google.protobuf", "prometheus_client",
        ],
    },
}

# Test-only packages (the test extra): never imported by the package (scripts/bench.py,
# outside it, times the HF processors).
TEST_ONLY = ["transformers", "torch", "torchvision", "pytest", "hypothesis", "tests"]

# -- the checker ----------------------------------------------------------------------

SOURCES = [ROOT / PKG, ROOT / "kernels"]
GENERATED = ROOT / PKG / "_proto"


def module_name(path: Path) -> tuple[str, bool]:
    """(dotted name as installed, is a package) of a source file in the repository."""
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "kernels":
        parts = [PKG, "kernels", *parts[1:]]
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def package_files() -> list[Path]:
    return sorted(p for src in SOURCES for p in src.rglob("*.py") if "__pycache__" not in p.parts)


def known_modules() -> set[str]:
    """Every module of the package, generated ones included (imports resolve against them)."""
    return {module_name(p)[0] for p in package_files()}


def helper_names_under_tests() -> set[str]:
    """Top-level names a test run can import from tests/: its folders and helper modules."""
    tests = ROOT / "tests"
    names = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    names |= {p.stem for p in tests.rglob("*.py") if p.stem not in ("__init__", "conftest")}
    return names


def _matches(name: str, entry: str) -> bool:
    if entry.endswith(".*"):
        base = entry[:-2]
        return name == base or name.startswith(base + ".")
    return name == entry


def _under(name: str, root: str) -> bool:
    return name == root or name.startswith(root + ".")


def layer_of(module: str) -> str | None:
    for layer, rule in LAYERS.items():
        if any(_matches(module, entry) for entry in rule["modules"]):
            return layer
    return None


def _describe(layer: str) -> str:
    rule = LAYERS[layer]
    allowed = [layer, *rule["may_import"], *rule.get("may_import_modules", [])]
    return f"layer {layer!r} may import only {', '.join(allowed)}"


def resolve(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The module names an import statement imports (one per name; `from X import y`
    imports X.y when that is a module of the package, else X; of a third-party X, X)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        up = node.level - 1
        if up > len(parts) - 1:
            raise ValueError(f"relative import beyond the top-level package: {ast.unparse(node)}")
        base = ".".join(parts[: len(parts) - up])
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module or ""
    if not _under(source, PKG):
        return [source]  # third-party: the module named is what the rules speak of
    return [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source for alias in node.names]


def check_source(
    path: str, module: str, is_package: bool, source: str, known: set[str], helpers: set[str]
) -> list[str]:
    """Every layering violation in one file, as "path:line: `import`: why" lines."""
    problems = []
    layer = layer_of(module)
    if layer is None:
        return [f"{path}: module {module} is in no layer: place it in one of LAYERS in tests/test_layering.py "
                f"(and in docs/DESIGN.md) before importing anything from it"]
    rule = LAYERS[layer]
    allowed_layers = {layer, *rule["may_import"]}
    allowed_modules = set(rule.get("may_import_modules", []))
    tree = ast.parse(source, filename=path)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        where = f"{path}:{node.lineno}: `{ast.unparse(node)}`"
        try:
            targets = resolve(node, module, is_package, known)
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        for target in dict.fromkeys(targets):
            root = target.split(".")[0]
            if root == PKG:
                t_layer = layer_of(target)
                if t_layer is None:
                    problems.append(f"{where}: imports {target}, which is in no layer: place it in LAYERS "
                                    f"in tests/test_layering.py")
                elif t_layer not in allowed_layers and not any(_matches(target, m) for m in allowed_modules):
                    problems.append(f"{where}: {module} ({layer}) imports {target} ({t_layer}); {_describe(layer)}")
            elif root in TEST_ONLY:
                problems.append(f"{where}: imports {target}: {root} is test-only, the package never imports it")
            elif root in sys.stdlib_module_names:
                continue
            elif any(_under(target, tp) for tp in rule["third_party"]):
                continue
            elif root in helpers:
                problems.append(f"{where}: imports {target}: that is a test helper under tests/, "
                                f"the package never imports it")
            else:
                problems.append(f"{where}: imports third-party {target}; layer {layer!r} may use only the "
                                f"standard library and {', '.join(rule['third_party']) or 'nothing else'}")
    return problems


def check_package() -> list[str]:
    known, helpers = known_modules(), helper_names_under_tests()
    problems = []
    for path in package_files():
        if GENERATED in path.parents:
            continue
        module, is_package = module_name(path)
        rel = str(path.relative_to(ROOT))
        problems += check_source(rel, module, is_package, path.read_text(encoding="utf-8"), known, helpers)
    return problems


# -- tests ----------------------------------------------------------------------------


def test_table_is_consistent():
    """Layers only look down, and no module sits in two layers."""
    names = list(LAYERS)
    for i, (layer, rule) in enumerate(LAYERS.items()):
        for lower in rule["may_import"]:
            assert lower in names[:i], f"layer {layer!r} may import {lower!r}, which is not below it"
        for m in rule.get("may_import_modules", []):
            owner = layer_of(m)
            assert owner is not None and owner in names[:i], f"{layer!r} names {m}, which is not in a lower layer"
    for module in known_modules():
        owners = [layer for layer, rule in LAYERS.items() if any(_matches(module, e) for e in rule["modules"])]
        assert len(owners) <= 1, f"{module} is in layers {owners}"


def test_imports_follow_the_layers():
    problems = check_package()
    assert not problems, f"{len(problems)} import(s) against the layering:\n" + "\n".join(problems)


def _check(module: str, source: str, *, is_package: bool = False, extra_known: tuple[str, ...] = ()) -> list[str]:
    known = known_modules() | {module, *extra_known}
    return check_source(f"<{module}>", module, is_package, source, known, helper_names_under_tests())


def test_checker_reports_violations():
    """The checker is not vacuous: synthetic sources breaking each kind of rule are reported."""
    fam = "sglang_mm_grpc.families.fake"
    ok = _check(fam, "import math\nimport numpy as np\nfrom ..carriers import ProcessedItem\n"
                     "from ..kernels import resample_pil\nfrom . import hf_keys\nfrom .base import Family\n")
    assert ok == []

    (p,) = _check(fam, "from ..driver import Preprocessor\n")
    assert p.startswith(f"<{fam}>:1: `from ..driver import Preprocessor`") and "sglang_mm_grpc.driver (driver)" in p
    (p,) = _check(fam, "def f():\n    from .. import config\n    return config\n")
    assert ":2:" in p and "sglang_mm_grpc.config (config)" in p
    (p,) = _check(fam, "import sglang_mm_grpc.media.decode\n")
    assert "(media)" in p
    (p,) = _check(fam, "def f():\n    import grpc\n")
    assert ":2:" in p and "third-party grpc" in p
    (p,) = _check(fam, "from google.protobuf import message\n")
    assert "third-party google.protobuf" in p

    kern = "sglang_mm_grpc.kernels.fake"
    (p,) = _check(kern, "import sglang_mm_grpc.errors\n")
    assert "sglang_mm_grpc.errors (base)" in p and "layer 'kernels' may import only kernels" in p
    (p,) = _check(kern, "from .. import errors\n")
    assert "sglang_mm_grpc.errors (base)" in p
    (p,) = _check("sglang_mm_grpc.kernels", "from .. import carriers\n", is_package=True)
    assert "sglang_mm_grpc.carriers (base)" in p
    assert _check(kern, "import numba\nfrom llvmlite import ir\nfrom . import resample_pil\n") == []

    # model loading sits below the driver, never the other way round
    (p,) = _check("sglang_mm_grpc.config", "from .. import driver\n", is_package=True)
    assert "sglang_mm_grpc.driver (driver)" in p
    assert _check("sglang_mm_grpc.driver", "from . import config as model_config\n") == []

    svc = "sglang_mm_grpc.servicer"
    assert _check(svc, "from .media.sources import describe\nfrom .driver import Preprocessor\nimport grpc\n") == []
    (p,) = _check(svc, "from .media.fetch import MediaFetcher\n")
    assert "sglang_mm_grpc.media.fetch (media)" in p and "sglang_mm_grpc.media.sources" in p
    (p,) = _check(svc, "from .families import Family\n")
    assert "(families)" in p
    (p,) = _check("sglang_mm_grpc.wire", "from .driver import Preprocessor\n")
    assert "(driver)" in p

    # test-only packages, anywhere, even behind except ImportError
    (p,) = _check("sglang_mm_grpc.driver", "def f():\n    import torch\n")
    assert ":2:" in p and "torch is test-only" in p
    (p,) = _check("sglang_mm_grpc.cli", "from tests.fixtures import x\n")
    assert "tests is test-only" in p
    (p,) = _check("sglang_mm_grpc.cli", "import imagegen\n")
    assert "test helper under tests/" in p
    (p,) = _check("sglang_mm_grpc.cli", "try:\n    import transformers\nexcept ImportError:\n    pass\n")
    assert "transformers is test-only" in p

    # modules the table does not place, as a file or as an import target
    (p,) = _check("sglang_mm_grpc.newroom", "import os\n")
    assert "is in no layer" in p and "LAYERS" in p
    (p,) = _check("sglang_mm_grpc.cli", "from .newroom import thing\n", extra_known=("sglang_mm_grpc.newroom",))
    assert "imports sglang_mm_grpc.newroom, which is in no layer" in p


def test_resolve_relative_and_absolute():
    known = known_modules()

    def targets(src: str, module: str, is_package: bool = False) -> list[str]:
        (node,) = ast.parse(src).body
        return resolve(node, module, is_package, known)

    assert targets("from . import config as c, errors", "sglang_mm_grpc.driver") == [
        "sglang_mm_grpc.config", "sglang_mm_grpc.errors"]
    assert targets("from . import Preprocessor", "sglang_mm_grpc.cli") == ["sglang_mm_grpc"]
    assert targets("from .media import FetchPolicy", "sglang_mm_grpc.server") == ["sglang_mm_grpc.media"]
    assert targets("from ..kernels import window", "sglang_mm_grpc.families.llava") == ["sglang_mm_grpc.kernels.window"]
    assert targets("from .base import Family", "sglang_mm_grpc.families", True) == ["sglang_mm_grpc.families.base"]
    assert targets("from .pixels import packed", "sglang_mm_grpc.kernels.resample_pil") == [
        "sglang_mm_grpc.kernels.pixels"]
    assert targets("from ._proto.sglang_mm.v1 import preprocessor_pb2 as pb", "sglang_mm_grpc.servicer") == [
        "sglang_mm_grpc._proto.sglang_mm.v1.preprocessor_pb2"]
    assert targets("import numpy.core, grpc", "sglang_mm_grpc.allocator") == ["numpy.core", "grpc"]
    assert targets("from google.protobuf.message import Message", "sglang_mm_grpc.wire") == ["google.protobuf.message"]
