"""The private numba API the kernels use is still there, with the shape they rely on.

The kernels reach under numba's public API in a few places (LLVM IR intrinsics, the CPU
features numba compiles for, the cache locator that puts their cache in one directory).
numba may change any of that in a minor release, so pyproject.toml bounds numba below
the next minor release not tested; this test is what to run before raising that bound.
``PRIVATE`` lists every such name with the kernel modules that use it and a check of what
they rely on; ``test_the_table_is_complete`` scans kernels/*.py and fails on a private
name the table lacks (or lists but no kernel uses, or lists with other modules).

Public (not listed): ``numba.njit`` and its options, ``numba.prange``, ``numba.types``,
and the high-level extension API of ``numba.extending`` (``intrinsic``, ``overload``,
``overload_method``, ``overload_attribute``, ``register_jitable``): numba documents and
keeps them. Private: everything else under ``numba`` (``numba.core``, ``numba.np``,
``numba.cpython``, ``numba.typed`` internals, ``numba.misc``...), and the members of the
target context an ``@intrinsic``'s codegen is handed (a ``numba.core`` object). One
llvmlite trick is listed too: llvmlite's version is pinned by numba's.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numba
import pytest
from llvmlite import ir
from numba import types

KERNELS = Path(__file__).resolve().parents[2] / "kernels"

PUBLIC = ("numba.njit", "numba.jit", "numba.prange", "numba.types", "numba.extending.intrinsic",
          "numba.extending.overload", "numba.extending.overload_method", "numba.extending.overload_attribute",
          "numba.extending.register_jitable")
#: Where a ``context.<name>`` in a codegen function resolves (the CPU target's context).
CONTEXT_CLASSES = "numba.core.cpu.CPUContext"
#: ``set.add(fn.attributes, ...)``: a string function attribute llvmlite's own ``add`` refuses.
SET_ADD_ATTRIBUTES = "llvmlite.ir.values.FunctionAttributes"


def _module():
    m = ir.Module()
    f = ir.Function(m, ir.FunctionType(ir.VoidType(), []), "f")
    return m, f, ir.IRBuilder(f.append_basic_block())


def _params(fn, *names):
    got = list(inspect.signature(fn).parameters)[:len(names)]
    assert got == list(names), f"parameters {got}, expected {list(names)} first"


def _cpu_context():
    from numba.core.registry import cpu_target

    return cpu_target.target_context


# -- the checks ----------------------------------------------------------------------


def _check_get_or_insert_function():
    from numba.core import cgutils

    _params(cgutils.get_or_insert_function, "module", "fnty", "name")
    m, _, _ = _module()
    fnty = ir.FunctionType(ir.FloatType(), [ir.FloatType()] * 3)
    fn = cgutils.get_or_insert_function(m, fnty, "llvm.fma.f32")
    assert isinstance(fn, ir.Function) and fn.name == "llvm.fma.f32", f"returned {fn!r}"
    assert cgutils.get_or_insert_function(m, fnty, "llvm.fma.f32") is fn, "a second call declares a second function"


def _check_alloca_once_value():
    from numba.core import cgutils

    _params(cgutils.alloca_once_value, "builder", "value")
    _, _, b = _module()
    value = ir.Constant(ir.VectorType(ir.IntType(32), 16), [0] * 16)
    ptr = cgutils.alloca_once_value(b, value)
    assert isinstance(ptr, ir.AllocaInstr) and ptr.type.pointee == value.type, f"returned {ptr!r}"


def _check_for_range():
    from numba.core import cgutils

    _params(cgutils.for_range, "builder", "count")
    _, f, b = _module()
    i64 = ir.IntType(64)
    with cgutils.for_range(b, ir.Constant(i64, 4)) as loop:
        assert loop.index.type == i64, f"index {loop.index.type}"
    b.ret_void()
    assert len(f.blocks) > 1, "no loop blocks"


def _check_raw_memcpy():
    from numba.core import cgutils

    _params(cgutils.raw_memcpy, "builder", "dst", "src", "count", "itemsize")
    m, _, b = _module()
    p = ir.Constant(ir.PointerType(ir.IntType(8)), None)
    cgutils.raw_memcpy(b, p, p, ir.Constant(ir.IntType(64), 3), 4)
    assert "llvm.memcpy" in str(m), "no llvm.memcpy emitted"


def _check_cache_locator():
    from numba.core import caching

    assert inspect.isabstract(caching._CacheLocator), "no longer an abstract base"
    assert caching._CacheLocator.__abstractmethods__ == {"get_cache_path", "get_source_stamp", "get_disambiguator"}, \
        f"abstract methods {set(caching._CacheLocator.__abstractmethods__)}"
    assert callable(caching._CacheLocator.ensure_cache_path), "no ensure_cache_path"
    assert isinstance(inspect.getattr_static(caching._CacheLocator, "from_function"), classmethod), \
        "from_function is not a classmethod"


def _check_source_file_mixin():
    """The mixin reads ``_py_file`` and ``_lineno``, which the kernels' locator sets."""
    import sglang_mm_grpc.kernels as kernels
    from sglang_mm_grpc.kernels import resample_pil

    py_func = resample_pil.sinc.py_func
    locator = kernels._KernelCacheLocator.from_function(py_func, resample_pil.__file__)
    assert locator is not None, "from_function gave no locator for a kernel"
    assert locator.get_cache_path() == kernels.CACHE_DIR, f"cache path {locator.get_cache_path()}"
    assert locator.get_disambiguator() == str(py_func.__code__.co_firstlineno), \
        f"disambiguator {locator.get_disambiguator()!r} is not the line number"
    assert locator.get_source_stamp() is not None, "no source stamp"


def _check_locator_classes():
    import sglang_mm_grpc.kernels as kernels
    from numba.core import caching
    from sglang_mm_grpc.kernels import resample_pil

    classes = caching.CacheImpl._locator_classes
    assert isinstance(classes, list), f"a {type(classes).__name__}, not a list"
    assert classes[0] is kernels._KernelCacheLocator, "the kernels' locator is not consulted first"
    impl = caching.CompileResultCacheImpl(resample_pil.sinc.py_func)
    assert isinstance(impl._locator, kernels._KernelCacheLocator), f"numba picked {type(impl._locator).__name__}"


def _check_target_context():
    from numba.core.base import BaseContext

    ctx = _cpu_context()
    assert isinstance(ctx, BaseContext), f"a {type(ctx).__name__}"
    assert callable(getattr(ctx, "codegen", None)), "no codegen()"


def _check_make_array():
    ctx = _cpu_context()
    _, _, b = _module()
    ary = ctx.make_array(types.uint8[::1])(ctx, b)
    assert ary.data.type == ir.PointerType(ir.IntType(8)), f"data is {ary.data.type}"


def _check_get_dummy_value():
    assert isinstance(_cpu_context().get_dummy_value(), ir.Constant), "not an LLVM constant"


def _check_sizeof():
    ctx = _cpu_context()
    assert ctx.get_abi_sizeof(ctx.get_data_type(types.float32)) == 4
    assert ctx.get_abi_sizeof(ctx.get_data_type(types.uint8)) == 1


def _check_tm_features():
    features = _cpu_context().codegen()._tm_features
    assert isinstance(features, str), f"a {type(features).__name__}"
    items = features.split(",")
    assert items and all(f[:1] in "+-" for f in items if f), f"not +feature,-feature: {features[:80]}"


def _check_function_attributes():
    m, f, _ = _module()
    assert issubclass(type(f.attributes), set), f"{type(f.attributes).__name__} is not a set"
    set.add(f.attributes, '"prefer-vector-width"="512"')
    assert '"prefer-vector-width"="512"' in str(m), "the string attribute is not written out"


def _check_inliner_copy():
    """``inline_ir`` copies the callee block by block with ``copy.deepcopy``, its module's
    only use of ``copy``, which ``inline_copy`` stands in for; an inlined kernel still runs."""
    from numba.core import inline_closurecall
    from sglang_mm_grpc.kernels import inline_copy

    assert inline_closurecall.copy is inline_copy._copier, "the inliner's copy is not the kernels' one"
    assert inline_closurecall.InlineWorker.inline_ir is inline_copy._inline_ir_sharing_memos, "inline_ir not wrapped"
    _params(inline_copy._inline_ir, "self", "caller_ir", "block", "i", "callee_ir")
    source = inspect.getsource(inline_copy._inline_ir)
    assert "copy.deepcopy(the_ir.blocks[block_label])" in source, "inline_ir no longer copies block by block"
    module = inspect.getsource(inline_closurecall)
    uses = {line.strip() for line in module.splitlines() if "copy." in line and "deepcopy(" in line}
    assert uses == {"new_block = copy.deepcopy(the_ir.blocks[block_label])"}, f"copy used as {uses}"

    @numba.njit(inline="always")
    def callee(a, n):
        s = 0
        for i in range(n):
            if a[i] > 2:
                s += a[i]
            else:
                s -= 1
        return s

    @numba.njit
    def caller(a):
        return callee(a, a.size) + callee(a, 2)

    import numpy as np

    assert caller(np.arange(6)) == (3 + 4 + 5 - 3) + (-2), "an inlined function computes something else"


def _check_compile_locks():
    """What ``compile_locks`` wraps: ``Dispatcher.compile(self, sig)`` takes numba's
    (reentrant) compiler lock and tries the disk cache before compiling; the index's
    ``save`` reads the index, picks a name and writes it back; ``Cache._index_key`` is the
    cache's key of a signature."""
    import threading

    from numba.core import caching, compiler_lock, dispatcher, sigutils

    compile_one = dispatcher.Dispatcher.compile
    assert getattr(compile_one, "_kernel_locks", False), "Dispatcher.compile is not wrapped"
    original = inspect.getsource(compile_one.__wrapped__)
    _params(compile_one.__wrapped__, "self", "sig")
    assert "global_compiler_lock" in original and "self._cache.load_overload(sig" in original, \
        "compile no longer loads from the cache under the compiler lock"
    save = inspect.getsource(caching.IndexDataCacheFile.save.__wrapped__)
    _params(caching.IndexDataCacheFile.save.__wrapped__, "self", "key", "data")
    assert "self._load_index()" in save and "self._save_index(overloads)" in save, "save changed shape"
    assert "_index_path" in inspect.getsource(caching.IndexDataCacheFile.__init__), "no _index_path"
    _params(caching.Cache._index_key, "self", "sig", "codegen")
    lock = compiler_lock.global_compiler_lock
    with lock:
        with lock:  # reentrant: a compile inside a compile
            pass
    assert isinstance(threading.RLock(), type(lock._lock)), "not an RLock"
    args, ret = sigutils.normalize_signature((types.int32, types.float64))
    assert tuple(args) == (types.int32, types.float64) and ret is None, f"normalize_signature gave {args, ret}"


# -- the table -----------------------------------------------------------------------


@dataclass(frozen=True)
class Private:
    api: str
    modules: tuple[str, ...]  # kernels/<module>.py that use it
    check: Callable[[], None]


def _check_cast():
    from numba.core.base import BaseContext

    _params(BaseContext.cast, "self", "builder", "val", "fromty", "toty")
    _, _, b = _module()
    out = _cpu_context().cast(b, ir.Constant(ir.IntType(64), 3), types.int64, types.float64)
    assert out.type == ir.DoubleType(), f"cast to {out.type}"


def _check_unpack_tuple():
    from numba.core import cgutils

    _params(cgutils.unpack_tuple, "builder", "tup", "count")
    _, _, b = _module()
    i64 = ir.IntType(64)
    tup = ir.Constant(ir.LiteralStructType([i64, i64]), [ir.Constant(i64, 2), ir.Constant(i64, 5)])
    items = cgutils.unpack_tuple(b, tup, 2)
    assert len(items) == 2 and all(v.type == i64 for v in items), f"returned {items!r}"


def _check_primitive_model():
    from numba.core.datamodel.registry import default_manager
    from numba.extending import models, register_model

    _params(models.PrimitiveModel.__init__, "self", "dmm", "fe_type", "be_type")
    assert callable(register_model), "register_model is gone"
    vec = ir.VectorType(ir.DoubleType(), 8)
    model = models.PrimitiveModel(default_manager, types.float64, vec)
    assert model.get_value_type() == vec and model.get_data_type() == vec, "the model does not carry its LLVM type"


PRIVATE = [
    Private("numba.core.cgutils.get_or_insert_function", ("simd_ir",), _check_get_or_insert_function),
    Private("numba.core.cgutils.alloca_once_value", ("amx", "simd_ir"), _check_alloca_once_value),
    Private("numba.core.cgutils.for_range", ("simd_ir",), _check_for_range),
    Private("numba.core.cgutils.raw_memcpy", ("normalize",), _check_raw_memcpy),
    Private("numba.core.caching._CacheLocator", ("__init__",), _check_cache_locator),
    Private("numba.core.caching._SourceFileBackedLocatorMixin", ("__init__",), _check_source_file_mixin),
    Private("numba.core.caching.CacheImpl._locator_classes", ("__init__",), _check_locator_classes),
    Private("numba.core.registry.cpu_target.target_context", ("amx",), _check_target_context),
    Private("numba.core.base.BaseContext.make_array", ("logmel", "normalize", "simd_ir"), _check_make_array),
    Private("numba.core.base.BaseContext.get_dummy_value", ("amx", "logmel", "normalize", "simd_ir"), _check_get_dummy_value),
    Private("numba.core.base.BaseContext.get_abi_sizeof", ("normalize",), _check_sizeof),
    Private("numba.core.base.BaseContext.get_data_type", ("normalize",), _check_sizeof),
    Private("numba.core.cpu.CPUContext.codegen", ("simd_ir",), _check_target_context),
    Private("numba.core.codegen.JITCPUCodegen._tm_features", ("simd_ir",), _check_tm_features),
    Private(SET_ADD_ATTRIBUTES, ("simd_ir",), _check_function_attributes),
    Private("numba.core.inline_closurecall.InlineWorker.inline_ir", ("inline_copy",), _check_inliner_copy),
    Private("numba.core.inline_closurecall.copy", ("inline_copy",), _check_inliner_copy),
    Private("numba.core.ir.Block", ("inline_copy",), _check_inliner_copy),
    Private("numba.core.caching.Cache", ("compile_locks",), _check_compile_locks),
    Private("numba.core.caching.IndexDataCacheFile.save", ("compile_locks",), _check_compile_locks),
    Private("numba.core.dispatcher.Dispatcher.compile", ("compile_locks",), _check_compile_locks),
    Private("numba.core.compiler_lock.global_compiler_lock", ("compile_locks",), _check_compile_locks),
    Private("numba.core.sigutils.normalize_signature", ("compile_locks",), _check_compile_locks),
    # logmel's 8-lane float64 vector type: a PrimitiveModel over an LLVM <8 x double>
    Private("numba.core.base.BaseContext.cast", ("logmel",), _check_cast),
    Private("numba.core.cgutils.unpack_tuple", ("logmel",), _check_unpack_tuple),
    Private("numba.extending.register_model", ("logmel",), _check_primitive_model),
    Private("numba.extending.models.PrimitiveModel", ("logmel",), _check_primitive_model),
]


@pytest.mark.parametrize("entry", PRIVATE, ids=lambda e: e.api)
def test_private_api_still_has_the_shape_the_kernels_rely_on(entry):
    try:
        entry.check()
    except Exception as e:  # an AttributeError or ImportError says as much as a failed assert
        pytest.fail(f"numba {numba.__version__} (llvmlite {importlib.import_module('llvmlite').__version__}): "
                    f"{entry.api}, used by {', '.join(f'kernels/{m}.py' for m in entry.modules)}, changed: "
                    f"{type(e).__name__}: {e}. The kernels use numba's private API; see pyproject.toml's numba "
                    f"bound before allowing this numba.")


# -- the scan --------------------------------------------------------------------------


def _public(dotted: str) -> bool:
    return dotted == "numba" or any(dotted == p or dotted.startswith(p + ".") for p in PUBLIC)


def _bindings(tree: ast.AST) -> dict[str, str]:
    """Local name -> the dotted numba path it was imported as (anywhere in the file)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "numba":
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "numba":
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _from_numba(obj) -> bool:
    name = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None) or type(obj).__module__
    return (name or "").split(".")[0] == "numba"


def _resolve(dotted: str, attrs: list[str]) -> str:
    """``dotted`` + as many of ``attrs`` as stay inside numba: an attribute is named up to
    the first one that is not numba's own (``CacheImpl._locator_classes``, a list, ends it)."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, p in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, p)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[:i + 1]))
    for a in attrs:
        if not _from_numba(obj):
            break
        dotted += "." + a
        obj = getattr(obj, a, None)
        if obj is None:
            break
    return dotted


def _chain(node: ast.AST) -> tuple[ast.AST, list[str]]:
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.insert(0, node.attr)
        node = node.value
    return node, attrs


def _context_name(attr: str) -> str:
    for cls in type(_cpu_context()).__mro__:
        if attr in cls.__dict__:
            return f"{cls.__module__}.{cls.__qualname__}.{attr}"
    return f"{CONTEXT_CLASSES}.{attr}"


def _used(source: str) -> set[str]:
    """The private names a kernel's source uses."""
    tree = ast.parse(source)
    bound = _bindings(tree)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in bound and isinstance(node.ctx, ast.Load):
            top = node
            while isinstance(parents.get(top), ast.Attribute):
                top = parents[top]
            dotted = _resolve(bound[node.id], _chain(top)[1])
            if not _public(dotted):
                used.add(dotted)
        # the target context a codegen function (or a helper of one) is handed, and the
        # private attributes of what its methods return (``context.codegen()._tm_features``)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "context":
            used.add(_context_name(node.attr))
            after = parents.get(parents.get(node))
            if isinstance(parents.get(node), ast.Call) and isinstance(after, ast.Attribute) \
                    and after.attr.startswith("_"):
                result = getattr(_cpu_context(), node.attr)()
                used.add(f"{type(result).__module__}.{type(result).__qualname__}.{after.attr}")
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "set.add" and node.args \
                and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "attributes":
            used.add(SET_ADD_ATTRIBUTES)
    return used


def _scan() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(KERNELS.glob("*.py")):
        for api in _used(path.read_text()):
            found.setdefault(api, set()).add(path.stem)
    return found


def test_the_table_is_complete():
    found = _scan()
    table = {e.api: set(e.modules) for e in PRIVATE}
    missing = {api: sorted(m) for api, m in found.items() if api not in table}
    stale = sorted(set(table) - set(found))
    moved = {api: (sorted(table[api]), sorted(found[api]))
             for api in set(table) & set(found) if table[api] != found[api]}
    assert not missing, f"kernels use private numba API not in PRIVATE (add it, with a check): {missing}"
    assert not stale, f"PRIVATE lists API no kernel uses any more (remove it): {stale}"
    assert not moved, f"PRIVATE names other kernel modules than use the API (table, found): {moved}"


def test_the_scan_sees_a_private_import():
    src = ("from numba.core import cgutils\nimport numba\nfrom numba.np import numpy_support as ns\n"
           "def f(context, builder):\n    cgutils.for_range(builder, 1)\n    numba.core.caching.CacheImpl\n"
           "    numba.njit(x)\n    ns.as_dtype\n    return context.get_dummy_value()\n")
    used = _used(src)
    assert used == {"numba.core.cgutils.for_range", "numba.core.caching.CacheImpl", "numba.np.numpy_support.as_dtype",
                    "numba.core.base.BaseContext.get_dummy_value"}, used
