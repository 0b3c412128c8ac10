"""Who imports whom: the package's folders are its layers, and imports only go down.

Each .py file of the package (``sglang_mm_grpc/**`` and ``kernels/**``, which installs as
``sglang_mm_grpc.kernels``; not the generated ``sglang_mm_grpc/_proto``) is parsed with
``ast``; every import in it, at module level or inside a function, absolute or relative,
is resolved to a module name. A module's layer is its folder: ``sglang_mm_grpc.<folder>``
(the package's own ``__init__`` is the layer ``api``). A module may import its own layer,
the lower layers its rule names (``may_import``), the standard library and the
third-party packages its rule names. Nothing in the package may import a test-only
package (``TEST_ONLY``) or anything under ``tests/``; a folder without a rule, or a
module outside every folder, fails the test. The import graph has no cycle, within a
layer too. docs/ARCHITECTURE.md draws the same layers and the tree (checked below).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "sglang_mm_grpc"

# -- the rules, one per folder --------------------------------------------------------
# Lowest layer first. "may_import": the lower layers a module may import besides its own;
# "may_import_modules": single modules of another layer it may import although their
# layer is not listed; "third_party": import roots allowed besides the standard library
# ("google.protobuf" allows google.protobuf and its submodules only).
LAYERS: dict[str, dict[str, list[str]]] = {
    "kernels": {"may_import": [], "third_party": ["numpy", "numba", "llvmlite"]},
    "core": {"may_import": ["kernels"], "third_party": ["numpy", "blake3"]},
    # httpcore: the connection layer under httpx; media/transport.py pins resolved addresses
    # (SSRF) with an httpcore network backend and maps its exceptions; anyio: httpx's async
    # layer, whose cancel scopes httpcore's cleanups respect (media/fetch.py).
    "media": {"may_import": ["core", "kernels"], "third_party": ["httpx", "httpcore", "anyio", "PIL", "numpy", "av"]},
    "families": {"may_import": ["core", "kernels"], "third_party": ["numpy"]},
    "config": {"may_import": ["families", "media", "core", "kernels"], "third_party": ["numpy"]},
    "pipeline": {"may_import": ["config", "families", "media", "core", "kernels"], "third_party": ["numpy"]},
    # generated: the service's messages, on the gateway's own backend messages
    "_proto": {"may_import": [], "third_party": ["google.protobuf", "smg_grpc_proto"]},
    # kernels: the serializer converts float32 to the wire dtype while it copies (wirecast)
    "wire": {"may_import": ["_proto", "core", "kernels"], "third_party": ["numpy", "google.protobuf", "smg_grpc_proto"]},
    "service": {
        "may_import": ["wire", "_proto", "pipeline", "core"],
        # the servicer names each image's source in logs and errors with media.sources.describe
        "may_import_modules": ["sglang_mm_grpc.media.sources"],
        # redis: the media store's shared tier (media_remote.py), imported only when used
        "third_party": ["grpc", "numpy", "redis"],
    },
    "server": {
        "may_import": ["service", "wire", "_proto", "pipeline", "config", "families", "media", "core", "kernels"],
        "third_party": ["grpc", "grpc_health", "grpc_reflection", "prometheus_client", "numpy"],
    },
    "client": {"may_import": ["wire", "_proto", "core"], "third_party": ["grpc", "grpc_health", "numpy"]},
    # the vLLM worker's media sidecar: the gateway's Redis protocol, vLLM's msgpack
    "sidecar": {"may_import": ["pipeline", "config", "families", "media", "core"],
                "third_party": ["numpy", "blake3", "msgspec", "redis", "smg_grpc_servicer"]},
    # the package's public names (the in-process Preprocessor)
    "api": {"may_import": ["pipeline", "core"], "third_party": []},
    "cli": {
        "may_import": ["api", "client", "server", "service", "sidecar", "wire", "_proto", "pipeline", "config", "families",
                       "media", "core", "kernels"],
        "third_party": ["numpy", "grpc", "grpc_reflection", "google.protobuf", "redis", "smg_grpc_servicer"],
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


FOLDERS = {p.name for p in (ROOT / PKG).iterdir() if p.is_dir() and (p / "__init__.py").exists()} | {"kernels"}


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
    return name == entry or name.startswith(entry + ".")


def _under(name: str, root: str) -> bool:
    return name == root or name.startswith(root + ".")


def layer_of(module: str) -> str | None:
    """The folder a module of the package sits in (``api``: the package's ``__init__``)."""
    if module == PKG:
        return "api"
    parts = module.split(".")
    if parts[0] != PKG or parts[1] not in LAYERS:
        return None
    if len(parts) == 2 and parts[1] not in FOLDERS:
        return None  # a top-level module: the package keeps every module in a folder
    return parts[1]


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
        return [f"{path}: module {module} is in no layer: put it in one of the folders, or give its folder a "
                f"rule in LAYERS in tests/test_layering.py (and a row in docs/ARCHITECTURE.md)"]
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
                    problems.append(f"{where}: imports {target}, which is in no layer (no folder with a rule "
                                    f"in LAYERS in tests/test_layering.py)")
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


# -- the import graph -----------------------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (at any depth of its code)."""
    known = known_modules()
    graph: dict[str, set[str]] = {}
    for path in package_files():
        if GENERATED in path.parents:
            continue
        module, is_package = module_name(path)
        edges = graph.setdefault(module, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(t for t in resolve(node, module, is_package, known) if _under(t, PKG) and t != module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# -- tests ----------------------------------------------------------------------------


def test_every_folder_has_a_rule_and_every_module_a_folder():
    assert FOLDERS <= set(LAYERS), f"folders without a rule in LAYERS: {sorted(FOLDERS - set(LAYERS))}"
    assert set(LAYERS) - {"api"} <= FOLDERS, f"rules without a folder: {sorted(set(LAYERS) - {'api'} - FOLDERS)}"
    loose = sorted(m for m in known_modules() if layer_of(m) is None)
    assert not loose, f"modules outside every folder: {loose}"


def test_rules_only_look_down():
    names = list(LAYERS)
    for i, (layer, rule) in enumerate(LAYERS.items()):
        for lower in rule["may_import"]:
            assert lower in names[:i], f"layer {layer!r} may import {lower!r}, which is not below it"
        for m in rule.get("may_import_modules", []):
            owner = layer_of(m)
            assert owner is not None and owner in names[:i], f"{layer!r} names {m}, which is not in a lower layer"


def test_imports_follow_the_layers():
    problems = check_package()
    assert not problems, f"{len(problems)} import(s) against the layering:\n" + "\n".join(problems)


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_cycle_finder_finds_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _tree_in_architecture() -> set[str]:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- tree -->\n```text\n(.*?)```", text, re.S)
    assert block, "docs/ARCHITECTURE.md has no tree block (<!-- tree --> then ```text)"
    paths, stack = set(), []
    for line in block.group(1).splitlines():
        name = re.match(r"^(\s*)(\S+)", line)
        if not name:
            continue
        depth = len(name.group(1)) // 2
        stack[depth:] = [name.group(2)]
        if stack[-1].endswith(".py"):
            paths.add("".join(stack))
    return paths


def _tree_on_disk() -> set[str]:
    files = set()
    for path in package_files():
        if GENERATED in path.parents or path.name in ("__init__.py", "__main__.py"):
            continue
        files.add(str(path.relative_to(ROOT)))
    return files


def test_architecture_md_draws_the_tree():
    drawn, real = _tree_in_architecture(), _tree_on_disk()
    assert drawn == real, (f"docs/ARCHITECTURE.md's tree differs from the package: missing {sorted(real - drawn)}, "
                           f"not on disk {sorted(drawn - real)}")


def _check(module: str, source: str, *, is_package: bool = False, extra_known: tuple[str, ...] = ()) -> list[str]:
    known = known_modules() | {module, *extra_known}
    return check_source(f"<{module}>", module, is_package, source, known, helper_names_under_tests())


def test_checker_reports_violations():
    """The checker is not vacuous: synthetic sources breaking each kind of rule are reported."""
    fam = "sglang_mm_grpc.families.fake"
    ok = _check(fam, "import math\nimport numpy as np\nfrom ..core.carriers import ProcessedItem\n"
                     "from ..kernels import resample_pil\nfrom . import hf_keys\nfrom .base import Family\n")
    assert ok == []

    (p,) = _check(fam, "from ..pipeline.driver import Preprocessor\n")
    assert p.startswith(f"<{fam}>:1: `from ..pipeline.driver import Preprocessor`")
    assert "sglang_mm_grpc.pipeline.driver (pipeline)" in p
    (p,) = _check(fam, "def f():\n    from .. import config\n    return config\n")
    assert ":2:" in p and "sglang_mm_grpc.config (config)" in p
    (p,) = _check(fam, "import sglang_mm_grpc.media.decode\n")
    assert "(media)" in p
    (p,) = _check(fam, "def f():\n    import grpc\n")
    assert ":2:" in p and "third-party grpc" in p
    (p,) = _check(fam, "from google.protobuf import message\n")
    assert "third-party google.protobuf" in p

    kern = "sglang_mm_grpc.kernels.fake"
    (p,) = _check(kern, "import sglang_mm_grpc.core.errors\n")
    assert "sglang_mm_grpc.core.errors (core)" in p and "layer 'kernels' may import only kernels" in p
    (p,) = _check(kern, "from ..core import errors\n")
    assert "sglang_mm_grpc.core.errors (core)" in p
    (p,) = _check("sglang_mm_grpc.kernels", "from ..core import carriers\n", is_package=True)
    assert "sglang_mm_grpc.core.carriers (core)" in p
    assert _check(kern, "import numba\nfrom llvmlite import ir\nfrom . import resample_pil\n") == []

    # model loading sits below the pipeline, never the other way round
    (p,) = _check("sglang_mm_grpc.config", "from ..pipeline import driver\n", is_package=True)
    assert "sglang_mm_grpc.pipeline.driver (pipeline)" in p
    assert _check("sglang_mm_grpc.pipeline.driver", "from .. import config as model_config\n") == []

    svc = "sglang_mm_grpc.service.servicer"
    assert _check(svc, "from ..media.sources import describe\nfrom ..pipeline.driver import Preprocessor\n"
                       "import grpc\n") == []
    (p,) = _check(svc, "from ..media.fetch import MediaFetcher\n")
    assert "sglang_mm_grpc.media.fetch (media)" in p and "sglang_mm_grpc.media.sources" in p
    (p,) = _check(svc, "from ..families import Family\n")
    assert "(families)" in p
    (p,) = _check("sglang_mm_grpc.wire.serialize", "from ..pipeline.driver import Preprocessor\n")
    assert "(pipeline)" in p
    (p,) = _check("sglang_mm_grpc.client.client", "from ..server.app import Server\n")
    assert "(server)" in p

    # test-only packages, anywhere, even behind except ImportError
    (p,) = _check("sglang_mm_grpc.pipeline.driver", "def f():\n    import torch\n")
    assert ":2:" in p and "torch is test-only" in p
    (p,) = _check("sglang_mm_grpc.cli.commands", "from tests.fixtures import x\n")
    assert "tests is test-only" in p
    (p,) = _check("sglang_mm_grpc.cli.commands", "import imagegen\n")
    assert "test helper under tests/" in p
    (p,) = _check("sglang_mm_grpc.cli.commands", "try:\n    import transformers\nexcept ImportError:\n    pass\n")
    assert "transformers is test-only" in p

    # modules outside the folders with rules, as a file or as an import target
    (p,) = _check("sglang_mm_grpc.newroom", "import os\n")
    assert "is in no layer" in p and "LAYERS" in p
    (p,) = _check("sglang_mm_grpc.attic.thing", "import os\n")
    assert "is in no layer" in p
    (p,) = _check("sglang_mm_grpc.cli.commands", "from ..newroom import thing\n", extra_known=("sglang_mm_grpc.newroom",))
    assert "imports sglang_mm_grpc.newroom, which is in no layer" in p


def test_resolve_relative_and_absolute():
    known = known_modules()

    def targets(src: str, module: str, is_package: bool = False) -> list[str]:
        (node,) = ast.parse(src).body
        return resolve(node, module, is_package, known)

    assert targets("from .. import config as c", "sglang_mm_grpc.pipeline.driver") == ["sglang_mm_grpc.config"]
    assert targets("from ..core import errors, layout", "sglang_mm_grpc.pipeline.driver") == [
        "sglang_mm_grpc.core.errors", "sglang_mm_grpc.core.layout"]
    assert targets("from .. import Preprocessor", "sglang_mm_grpc.cli.commands") == ["sglang_mm_grpc"]
    assert targets("from ..media import FetchPolicy", "sglang_mm_grpc.server.app") == ["sglang_mm_grpc.media"]
    assert targets("from ...kernels import window", "sglang_mm_grpc.families.llava.llava") == [
        "sglang_mm_grpc.kernels.window"]
    assert targets("from .base import Family", "sglang_mm_grpc.families", True) == ["sglang_mm_grpc.families.base"]
    assert targets("from .pixels import packed", "sglang_mm_grpc.kernels.resample_pil") == [
        "sglang_mm_grpc.kernels.pixels"]
    assert targets("from .._proto.sglang_mm.v1 import preprocessor_pb2 as pb", "sglang_mm_grpc.service.servicer") == [
        "sglang_mm_grpc._proto.sglang_mm.v1.preprocessor_pb2"]
    assert targets("import numpy.core, grpc", "sglang_mm_grpc.server.allocator") == ["numpy.core", "grpc"]
    assert targets("from google.protobuf.message import Message", "sglang_mm_grpc.wire.serialize") == [
        "google.protobuf.message"]
