"""Speed-ups for grading kernels that change nothing a notebook shows.

Profiling a grading worker (py-spy over the worker and its kernels, a class of full,
partial, blank and wrong submissions of ``01_leaves``) showed that about half of a
kernel's time went into *formatting tracebacks*: a half-answered notebook raises in
dozens of cells, and IPython 9 formats every exception twice (once to show it, once more,
identically, for its history store ``history_manager.exceptions``), and each formatting
calls :func:`inspect.getmodule` for every frame, which rescans all of ``sys.modules``
(over two thousand modules once torch is imported) whenever the frame's file belongs to
no module -- as every notebook cell's file does.

:func:`install` patches exactly these spots, in the worker before it forks kernels:

* the second formatting of the same exception, with the same traceback object, offset,
  context, mode and colours, right after the first, returns a copy of the first result
  (``AutoFormattedTB.structured_traceback``; the attribute it sets is set as well);
* ``inspect.getmodule`` remembers that a file belongs to no module until ``sys.modules``
  changes size, for objects (frames, code objects, tracebacks) for which the standard
  function would then return ``None`` anyway;
* stack_data's highlighting of each frame's code uses one lexer class, made (and its
  grammar compiled) once in the worker, instead of defining a new class per frame.

All return what the unpatched functions return, so the executed notebook, its outputs,
tracebacks and scores are unchanged (``tests/test_speedups.py`` compares them with
unpatched IPython; ``tests/test_grading_pipeline.py`` compares every output of graded
notebooks with stock nbgrader's). Where the libraries do not look as
expected (another IPython or Python version), the patch is skipped and only speed is lost.
"""

from __future__ import annotations

import functools
import inspect
import sys


def _memo_tracebacks() -> bool:
    try:
        from IPython.core.ultratb import AutoFormattedTB
    except ImportError:
        return False
    real = AutoFormattedTB.structured_traceback
    if getattr(real, "_autograder_memo", False):
        return True
    last: list = []  # [key objects, key values, result] of the latest call

    @functools.wraps(real)
    def structured_traceback(self, etype, evalue, etb=None, tb_offset=None, context=5):
        if etype is None or isinstance(etb, tuple):
            return real(self, etype, evalue, etb, tb_offset, context)
        objects = (self, etype, evalue, etb)
        values = (self.tb_offset if tb_offset is None else tb_offset, context,
                  getattr(self, "mode", None), getattr(self, "_theme_name", None))
        if last and all(a is b for a, b in zip(last[0], objects, strict=True)) and last[1] == values:
            self.tb = etb
            return list(last[2])
        result = real(self, etype, evalue, etb, tb_offset, context)
        last[:] = [objects, values, list(result)]
        return result

    structured_traceback._autograder_memo = True
    AutoFormattedTB.structured_traceback = structured_traceback
    return True


def _fast_getmodule() -> bool:
    real = inspect.getmodule
    if getattr(real, "_autograder_fast", False):
        return True
    if not all(hasattr(inspect, name) for name in ("modulesbyfile", "getabsfile")):
        return False
    misses: dict[str, int] = {}  # absolute file -> len(sys.modules) when it matched nothing

    @functools.wraps(real)
    def getmodule(object, _filename=None):  # noqa: A002 -- the stdlib's parameter name
        # Only objects that the standard function looks up by file and, failing that,
        # answers None for: no __module__, no __name__ (frames, code objects, tracebacks)
        if (inspect.ismodule(object) or hasattr(object, "__module__")
                or hasattr(object, "__name__")):
            return real(object, _filename)
        try:
            file = inspect.getabsfile(object, _filename)
        except (TypeError, FileNotFoundError):
            return real(object, _filename)
        if file in inspect.modulesbyfile:
            return real(object, _filename)
        if misses.get(file) == len(sys.modules):
            return None
        module = real(object, _filename)
        if module is None:
            misses[file] = len(sys.modules)
        return module

    getmodule._autograder_fast = True
    inspect.getmodule = getmodule
    return True


def _one_lexer_class() -> bool:
    """stack_data highlights each frame's code with a lexer class it defines anew per call,
    so pygments compiles the whole Python grammar again for every frame shown. The same
    class, defined once, gives the same tokens."""
    try:
        from stack_data import core, utils
    except ImportError:
        return False
    real = getattr(utils, "_pygmented_with_ranges", None)
    if getattr(real, "_autograder_once", False):
        return True
    if real is None or getattr(core, "_pygmented_with_ranges", None) is not real:
        return False

    @functools.cache
    def lexer_class():
        from pygments.lexers import get_lexer_by_name

        class MyLexer(type(get_lexer_by_name("python3"))):
            def __init__(self, ranges, **options):
                super().__init__(**options)
                self.ranges = ranges

            def get_tokens(self, text):
                length = 0
                for ttype, value in super().get_tokens(text):
                    if any(start <= length < end for start, end in self.ranges):
                        ttype = ttype.ExecutingNode
                    length += len(value)
                    yield ttype, value

        return MyLexer

    @functools.wraps(real)
    def _pygmented_with_ranges(formatter, code, ranges):
        import pygments

        lexer = lexer_class()(ranges, stripnl=False)
        try:
            highlighted = pygments.highlight(code, lexer, formatter)
        except Exception:
            highlighted = code  # as stack_data: code without highlighting, not a crash
        return highlighted.splitlines()

    _pygmented_with_ranges._autograder_once = True
    utils._pygmented_with_ranges = core._pygmented_with_ranges = _pygmented_with_ranges
    lexer_class()((), stripnl=False)  # compile the grammar now, in the worker, not per kernel
    return True


def install() -> list[str]:
    """Apply the speed-ups that fit the installed libraries; return their names."""
    applied = []
    if _memo_tracebacks():
        applied.append("traceback formatted once")
    if _fast_getmodule():
        applied.append("inspect.getmodule misses remembered")
    if _one_lexer_class():
        applied.append("one lexer class for highlighted frames")
    return applied
