"""Run a learner's function so that it computes with torch and cannot reach the checker.

A write-code answer is a function the oracle runs in the same (forked) process that then
judges what it made. Plain ``exec`` would let that function rewrite the judge itself: import
``os`` and write a verdict into the oracle's pipe, patch ``autograder.verdict`` through
``sys.modules``, walk a frame's ``f_back`` up to the judge's locals. So the learner's source is
compiled with RestrictedPython (Zope's sandbox compiler, on PyPI), whose transformer refuses
``exec``/``eval``, frame and generator internals and names that start with ``_``, and turns
every attribute read, attribute or item write, import and class definition into a call of a
guard defined here:

* **reads** (``_getattr_``, and the ``getattr``/``hasattr`` builtins): no double-underscore
  attributes (``__init__`` and ``__name__`` aside), no frame/traceback/code internals, no
  ``str.format`` (it reads attributes by name), no file or foreign-memory doors
  (``tofile``, ``ctypes``, ``from_file``, ``save``/``load``, ``compile``...), and no module
  object other than the few an answer may use (:data:`ALLOWED_MODULES`): ``torch.os``,
  ``torch.serialization``, ``torch._C`` and their like are refused;
* **writes** (``_write_``, ``setattr``/``delattr``): not on modules, classes, functions or
  descriptors (``torch.Tensor.is_leaf = ...`` is refused), only on objects;
* **imports**: only :data:`ALLOWED_MODULES`, and ``from M import x`` only when ``x`` is not a
  module outside them;
* **classes**: not subclasses of ``torch.Tensor``; special methods only from a short list
  (no ``__eq__`` or ``__torch_function__`` that could answer a judge's question falsely);
* **the builtins** are a safe set: no ``open``, ``exec``, ``eval``, ``compile``, ``globals``,
  ``vars``, ``input``, ``breakpoint``; ``type`` only with one argument.

Every function the learner's code defines (methods and lambdas too) is wrapped: called from
the judge's code (directly, or as a hook torch runs), it must not return with inference mode,
a torch-function or dispatch mode or saved-tensor hooks left on, which would change how torch
computes the judge's own answers (:class:`RefusedCode`). The switches lessons teach, such as
``torch.set_grad_enabled``, are left as the code leaves them: some questions judge that.

Inside the function the code behaves exactly as in the learner's kernel; a refused
operation raises :class:`RefusedCode` (an ``AttributeError`` or ``ImportError`` where Python
would raise one, so ``hasattr`` and ``try``/``except`` keep working) with a sentence saying
what an answer may use.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import math
import operator
import threading
import types
from typing import Any

from RestrictedPython import compile_restricted_exec
from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence
from RestrictedPython.PrintCollector import PrintCollector
from RestrictedPython.transformer import (
    INSPECT_ATTRIBUTES,
    RestrictingNodeTransformer,
    copy_locations,
)

from course.i18n import N_, _

#: The modules an answer may import or reach through attributes.
ALLOWED_MODULES = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.utils",
    "torch.autograd", "torch.autograd.functional", "torch.optim", "torch.optim.lr_scheduler",
    "torch.linalg", "torch.special", "torch.fft",
    "math", "cmath", "random", "copy", "itertools", "functools", "collections",
})

#: Attribute names no answer needs and that open a door out: files, foreign memory,
#: compilers, code loaders, attribute readers by name.
BLOCKED_ATTRIBUTES = frozenset({
    "tofile", "dump", "ctypes", "from_file", "fromfile", "save", "load", "load_library",
    "load_inline", "compile", "export", "attrgetter", "methodcaller",
})

#: Special names an answer may read (``super().__init__()``, ``type(x).__name__``, a dict's
#: ``__setitem__`` in a lambda): none of them reaches a namespace or bypasses the write guard.
READABLE_DUNDERS = frozenset({
    "__init__", "__name__", "__qualname__", "__doc__", "__module__", "__class__",
    "__getitem__", "__setitem__", "__delitem__", "__contains__", "__len__", "__iter__",
    "__next__", "__call__", "__enter__", "__exit__",
})

#: Special methods a learner's class may define.
DEFINABLE_DUNDERS = frozenset({
    "__init__", "__call__", "__repr__", "__str__", "__len__", "__iter__", "__next__",
    "__getitem__", "__enter__", "__exit__",
})

_WHAT_ANSWERS_USE = N_("the checker runs your function with torch's computations, `nn`, `F` "
                       "and `math` (and the modules {modules})")


def _sep() -> str:
    return _(", ")


def _allowed_list() -> str:
    extra = sorted(m for m in ALLOWED_MODULES if not m.startswith("torch"))
    return ", ".join(f"`{m}`" for m in extra)


class RefusedCode(Exception):
    """The learner's code asked for something a checked answer may not use (``what``: that,
    in the learner's language)."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(_("{what}: {rule}", what=what,
                           rule=_(_WHAT_ANSWERS_USE, modules=_allowed_list())))


class RefusedAttribute(RefusedCode, AttributeError):
    pass


class RefusedImport(RefusedCode, ImportError):
    pass


# ------------------------------------------------------------------------- compile time
def _private_name(name: str) -> bool:
    """``_helper`` or ``_x``: a learner's private name, not one of the guards' (``_getattr_``,
    ``_print``, ``_tmp0``, ``__metaclass__``...)."""
    return (name.startswith("_") and not name.startswith("__") and not name.endswith("_")
            and name != "_print" and not name.startswith("_tmp") and name != "_")


class _Transformer(RestrictingNodeTransformer):
    """RestrictedPython's transformer, with what torch code needs and a guard on every
    function the learner defines."""

    def check_name(self, node, name, allow_magic_methods=False):  # noqa: D102
        if (allow_magic_methods and name in DEFINABLE_DUNDERS
                and getattr(node, "col_offset", 0) != 0):
            return
        if name is not None and _private_name(name):
            return  # a learner's own `_helper`: only the guards' names are reserved
        super().check_name(node, name, allow_magic_methods=False)

    def _check_attribute(self, node, name: str) -> bool:
        """Refuse at compile time what the run-time guard would refuse anyway."""
        if name in INSPECT_ATTRIBUTES or name in BLOCKED_ATTRIBUTES or (
                name.startswith("__") and name not in READABLE_DUNDERS):
            self.error(node, f'"{name}" is an attribute a checked answer may not use')
            return False
        return True

    def visit_Attribute(self, node):  # noqa: D102
        # Single-underscore attributes are torch's own (t._version, grad_fn._saved_self) and
        # the run-time guard vets their values; the base class refuses every name that
        # starts with "_", so it sees a placeholder and the real name is put back after.
        name = node.attr
        if not self._check_attribute(node, name):
            return node
        if not name.startswith("_"):
            return super().visit_Attribute(node)
        node.attr = "placeholder"
        new = super().visit_Attribute(node)
        if isinstance(new, ast.Call):  # a read: _getattr_(value, "placeholder")
            new.args[1].value = name
        else:  # a write or del: _write_(value).placeholder
            new.attr = name
        return new

    def visit_Nonlocal(self, node):  # noqa: D102 -- rebinding the learner's own closures
        return self.node_contents_visit(node)

    def visit_AugAssign(self, node):  # noqa: D102
        # `p.grad += g`, `x[0] *= 2`: in place, as in the learner's kernel, on an object the
        # write guard allows; `n += 1` becomes `n = _inplacevar_('+=', n, 1)`, in place too
        if isinstance(node.target, ast.Attribute | ast.Subscript):
            target = node.target
            if isinstance(target, ast.Attribute) and not self._check_attribute(
                    node, target.attr):
                return node
            node.value = self.visit(node.value)
            if isinstance(target, ast.Subscript):
                target.slice = self.visit(target.slice)
            target.value = self.visit(target.value)
            guarded = ast.Call(func=ast.Name("_write_", ast.Load()), args=[target.value],
                               keywords=[])
            copy_locations(guarded, target.value)
            target.value = guarded
            return node
        return super().visit_AugAssign(node)

    def _guarded(self, node):
        guard = ast.Name("_guard_", ast.Load())
        copy_locations(guard, node)
        node.decorator_list.append(guard)
        return node

    def visit_FunctionDef(self, node):  # noqa: D102
        return self._guarded(super().visit_FunctionDef(node))

    def visit_Lambda(self, node):  # noqa: D102
        node = super().visit_Lambda(node)
        call = ast.Call(func=ast.Name("_guard_", ast.Load()), args=[node], keywords=[])
        copy_locations(call.func, node)
        copy_locations(call, node)
        return call


def compile_function(source: str, filename: str) -> types.CodeType:
    """The restricted code object of a learner's source (``exec`` it in :func:`namespace`).

    A syntax error raises :class:`SyntaxError` exactly as ``compile`` does; anything the
    restrictions refuse raises :class:`RefusedCode` naming it."""
    compile(source, filename, "exec")  # a learner's syntax error, as Python reports it
    result = compile_restricted_exec(source, filename, policy=_Transformer)
    if result.errors:
        raise RefusedCode(_explain(result.errors[0], source))
    return result.code


def _explain(error: str, source: str = "") -> str:
    """RestrictedPython's message as the learner's line: ``line 3 of your function
    (`return y.__dict__`) is not run ...``, counted as the cell shows it (``def`` is line 1)."""
    line, _sep, text = error.partition(": ")
    line = line.replace("Line ", "").strip()
    if not line.isdigit():
        return error
    n = int(line)
    code = source_line(source, n)
    if code:
        return _("line {line} of your function (`{code}`) is not run by the checker ({reason})",
                 line=n, code=code, reason=text.rstrip("."))
    return _("line {line} of your function is not run by the checker ({reason})",
             line=max(1, n), reason=text.rstrip("."))


def source_line(source: str | None, n: int) -> str:
    """Line ``n`` of a learner's source (``def`` is line 1, as the cell shows it), stripped
    and safe to quote in a code span; ``""`` if there is no such line."""
    lines = (source or "").splitlines()
    return lines[n - 1].strip().replace("`", "'") if 0 < n <= len(lines) else ""


# --------------------------------------------------------------------------- run time
def _module_allowed(value: Any) -> bool:
    return getattr(value, "__name__", None) in ALLOWED_MODULES


def _refuse_name(name: str) -> None:
    if type(name) is not str:
        raise TypeError("attribute name must be a string")
    if name in INSPECT_ATTRIBUTES or name in BLOCKED_ATTRIBUTES:
        raise RefusedAttribute(_("the attribute `.{name}`", name=name))
    if name.startswith("__") and name not in READABLE_DUNDERS:
        raise RefusedAttribute(_("the attribute `.{name}`", name=name))


_MISSING = object()


def guarded_getattr(obj: Any, name: str, default: Any = _MISSING) -> Any:
    """``getattr`` for learner code (see the module docstring)."""
    _refuse_name(name)
    if name in ("format", "format_map") and (isinstance(obj, str) or (
            isinstance(obj, type) and issubclass(obj, str))):
        raise RefusedAttribute(_("`str.format` (use an f-string)"))
    value = getattr(obj, name) if default is _MISSING else getattr(obj, name, default)
    if isinstance(value, types.ModuleType) and not _module_allowed(value):
        raise RefusedAttribute(_("the module `{name}`", name=value.__name__))
    return value


def guarded_hasattr(obj: Any, name: str) -> bool:
    try:
        guarded_getattr(obj, name)
    except AttributeError:
        return False
    return True


_READ_ONLY = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
              types.MethodType, types.CodeType, types.FrameType, types.TracebackType,
              types.MappingProxyType, types.WrapperDescriptorType,
              types.MethodDescriptorType, types.GetSetDescriptorType,
              types.MemberDescriptorType, types.MethodWrapperType, property, staticmethod,
              classmethod)


class _Writes:
    """What ``_write_`` gives: the object, through which only harmless writes pass.

    Refused: any write to a module, a class, a function or a descriptor
    (``torch.Tensor.is_leaf = ...``), a special attribute (``x.__class__ = ...``), and an
    attribute that would hide a method of the object's class (``t.tolist = lambda: ...`` on a
    tensor the judge reads, ``model.forward = ...``). Allowed: new attributes, and those a class
    lets you set (``p.grad``, ``p.data``, ``w.requires_grad``, ``self.fc``), items of lists,
    dicts and tensors.
    """

    __slots__ = ("_target",)

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)

    def _check(self, name: str | None) -> Any:
        target = object.__getattribute__(self, "_target")
        if isinstance(target, _READ_ONLY):
            label = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) \
                or type(target).__name__
            raise RefusedAttribute(_("changing `{name}` itself", name=label))
        if name is not None:
            _refuse_name(name)
            if name.startswith("__"):
                raise RefusedAttribute(_("setting `.{name}`", name=name))
            found = inspect.getattr_static(type(target), name, None)
            if found is not None and callable(found) and not hasattr(type(found), "__set__"):
                raise RefusedAttribute(_("replacing the method `{name}` of a `{type}`",
                                         name=name, type=type(target).__name__))
        return target

    def __getattr__(self, name: str) -> Any:  # the read of `x.a += 1`
        return guarded_getattr(object.__getattribute__(self, "_target"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._check(name), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._check(name), name)

    def __getitem__(self, key: Any) -> Any:  # the read of `x[i] += 1`
        return object.__getattribute__(self, "_target")[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._check(None)[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._check(None)[key]


def guarded_write(obj: Any) -> Any:
    """The target of an attribute or item write, seen through :class:`_Writes`."""
    return _Writes(obj)


def guarded_setattr(obj: Any, name: str, value: Any) -> None:
    setattr(guarded_write(obj), name, value)


def guarded_delattr(obj: Any, name: str) -> None:
    delattr(guarded_write(obj), name)


def guarded_import(name: str, globals=None, locals=None, fromlist=(), level=0):
    """``import`` in learner code. torch's C code imports through the same hook (the
    current frame's ``__import__``) and passes a *list* as ``fromlist``, which an ``import``
    statement never does (``None`` or a tuple): those imports are torch's own and return to
    it, not to the learner's code."""
    if type(fromlist) is list:
        return __import__(name, globals, locals, fromlist, level)
    if level:
        raise RefusedImport(_("a relative import"))
    if name not in ALLOWED_MODULES:
        raise RefusedImport(_("`import {name}`", name=name))
    module = __import__(name, globals, locals, fromlist, 0)
    for item in fromlist or ():
        _refuse_name(item)
        value = getattr(module, item, None)
        if isinstance(value, types.ModuleType) and not _module_allowed(value):
            raise RefusedImport(_("`from {module} import {name}`", module=name, name=item))
    return module


def guarded_type(*args):
    if len(args) != 1:
        raise RefusedCode(_("`type()` with more than one argument (define a class instead)"))
    return type(args[0])


def guarded_class(name: str, bases: tuple, namespace: dict, **kwargs):
    """Every ``class`` statement of learner code goes through here (RestrictedPython makes it
    the metaclass)."""
    import torch

    for base in bases:
        if isinstance(base, type) and issubclass(base, torch.Tensor):
            raise RefusedCode(_("a subclass of `torch.Tensor`"))
    meta = type
    for base in bases:
        candidate = type(base)
        if issubclass(candidate, meta):
            meta = candidate
    return meta(name, bases, namespace, **kwargs)


_INPLACE = {op: getattr(operator, "i" + name) for op, name in {
    "+=": "add", "-=": "sub", "*=": "mul", "/=": "truediv", "%=": "mod", "**=": "pow",
    "<<=": "lshift", ">>=": "rshift", "|=": "or", "^=": "xor", "&=": "and",
    "//=": "floordiv", "@=": "matmul"}.items()}


def inplace_var(op: str, target: Any, value: Any) -> Any:
    return _INPLACE[op](target, value)


# ----------------------------------------------------------------- torch's modes
_depth = threading.local()


def _modes() -> tuple:
    """What a function could leave switched on, with no way for the judge to switch it off:
    inference mode, torch-function and dispatch modes, saved-tensor hooks."""
    import torch

    c = torch._C
    return (torch.is_inference_mode_enabled(), c._len_torch_function_stack(),
            c._len_torch_dispatch_stack(),
            c._autograd._top_saved_tensors_default_hooks(True) is not None)


def guard_function(fn):
    """Wrap a function the learner defined: a call from outside learner code (the judge's, or
    torch running a hook for it) must not return with a mode left on that changes how torch
    computes for the judge (see :func:`_modes`). Torch's switches a lesson teaches
    (``set_grad_enabled``, the default dtype...) are left as the code leaves them: judging
    "grad mode was left off" is part of some questions."""
    if not callable(fn):
        return fn

    import functools

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if getattr(_depth, "n", 0):
            return fn(*args, **kwargs)
        before = _modes()
        _depth.n = 1
        try:
            return fn(*args, **kwargs)
        finally:
            _depth.n = 0
            after = _modes()
            if after != before:
                modes = [_("inference mode"), _("a torch function mode"),
                         _("a torch dispatch mode"), _("saved-tensor hooks")]
                names = [w for w, a, b in zip(modes, before, after, strict=True) if a != b]
                raise RefusedCode(_("leaving {modes} switched on after it returned",
                                    modes=_sep().join(names)))

    return call


# ------------------------------------------------------------------------ the namespace
_SAFE_BUILTINS = [
    "None", "False", "True", "Ellipsis", "NotImplemented", "abs", "all", "any", "bin", "bool",
    "bytes", "callable", "chr", "complex", "dict", "divmod", "enumerate", "filter", "float",
    "format", "frozenset", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter",
    "len", "list", "map", "max", "min", "next", "object", "oct", "ord", "pow", "property",
    "range", "repr", "reversed", "round", "set", "slice", "sorted", "staticmethod",
    "classmethod", "str", "sum", "super", "tuple", "zip", "__build_class__",
]
_EXCEPTIONS = [name for name, value in vars(builtins).items()
               if isinstance(value, type) and issubclass(value, BaseException)]


def _builtins() -> dict:
    out = {name: getattr(builtins, name) for name in _SAFE_BUILTINS + _EXCEPTIONS}
    out.update({"getattr": guarded_getattr, "hasattr": guarded_hasattr,
                "setattr": guarded_setattr, "delattr": guarded_delattr,
                "__import__": guarded_import, "type": guarded_type})
    return out


def namespace() -> dict[str, Any]:
    """Globals for a learner's function: ``torch``, ``nn``, ``F``, ``math`` and the guards."""
    import torch

    return {
        "__name__": "learner",
        "__builtins__": _builtins(),
        "torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math,
        "_getattr_": guarded_getattr, "_write_": guarded_write,
        "_getitem_": operator.getitem, "_getiter_": iter, "_apply_": _apply,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_inplacevar_": inplace_var, "_print_": PrintCollector,
        "__metaclass__": guarded_class, "_guard_": guard_function,
    }


def _apply(fn, *args, **kwargs):
    return fn(*args, **kwargs)
