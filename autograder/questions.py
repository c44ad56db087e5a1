"""Questions, verdicts and the helpers lessons use to grade against live torch.

A lesson module (``autograder/lessons/lNN_topic.py``) creates a :class:`Lesson` and
registers its questions on it. Every question computes its expected answer by
running its scenario with real torch *when it is checked*, inside the oracle
process (:mod:`autograder.oracle`), never from a typed-in constant.

Three kinds of question:

* :class:`Predict` -- the learner predicts facts (``is_leaf``, ``.grad`` values,
  "does a warning appear?"). The question's ``scenario()`` returns the real facts
  as a dict; each :class:`Item` says which misconception a wrong answer reveals.
* :class:`WriteCode` and find-the-bug questions -- the learner writes (or fixes) a
  function; the oracle runs *its source* in a clean namespace and the question's
  ``grade_code()`` inspects the result with :mod:`autograder.torchfacts`.

Parts: a question may split its items or checks into named parts, each graded by
its own nbgrader test cell, which gives partial credit per part.
"""

from __future__ import annotations

import math
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from autograder.encoding import ExceptionName, LearnerFunction, TensorValue
from autograder.misconceptions import diagnose_error
from autograder.verdict import RIGHT, TODO, WRONG, Finding, Verdict, right, todo, wrong
from course.i18n import _

__all__ = [
    "RIGHT", "TODO", "WRONG", "Finding", "Verdict", "right", "todo", "wrong",
    "Item", "Predict", "WriteCode", "Requirement", "score", "Lesson", "CodeRun",
    "LearnerCodeError", "run_learner", "define_learner", "learner_namespace", "values_equal",
    "show", "warns", "untouched_stub", "raised_finding", "plain", "exception_answer", "says_raises",
]

# --------------------------------------------------------------------------- verdicts
# The verdict lives in autograder.verdict (no torch there: the kernel reads it too).


# --------------------------------------------------------------------------- comparing


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def values_equal(given: Any, expected: Any, tol: float = 1e-5) -> bool:
    """Compare a learner's value with torch's: exact for bools/None/strings, ``tol`` for floats."""
    if isinstance(given, TensorValue):
        given = given.values
    if isinstance(expected, bool) or expected is None or isinstance(given, bool):
        return type(given) is type(expected) and given == expected
    if isinstance(expected, ExceptionName) or isinstance(given, ExceptionName):
        return isinstance(given, str) and isinstance(expected, str) and given == expected
    if _is_number(expected):
        return _is_number(given) and math.isclose(given, expected, rel_tol=tol, abs_tol=tol)
    if isinstance(expected, list | tuple):
        return (
            isinstance(given, list | tuple)
            and len(given) == len(expected)
            and all(values_equal(g, e, tol) for g, e in zip(given, expected, strict=True))
        )
    return given == expected


def show(value: Any) -> str:
    """Render a value the way a learner would type it."""
    if value is Ellipsis:
        return "..."
    if isinstance(value, TensorValue):
        return f"tensor({value.values!r})"
    if isinstance(value, ExceptionName):
        return str(value)
    return repr(value)


def plain(given: Any) -> Any:
    """A predicted value as plain data (a tensor answer as its values)."""
    return given.values if isinstance(given, TensorValue) else given


def exception_answer(err: BaseException | None) -> ExceptionName | None:
    """The answer a learner gives for "which exception?": the class name, or None."""
    return None if err is None else ExceptionName(type(err).__name__)


def says_raises(given: Any) -> bool | None:
    """Whether an answer to "which exception?" says that something raised (None: unreadable)."""
    if given is None or given is False:
        return False
    if given is True or (isinstance(given, str) and given):
        return True
    return None


# --------------------------------------------------------------------------- questions


@dataclass
class Item:
    """One blank of a predict-the-output question.

    ``why`` explains the true behaviour (shown when the learner is wrong);
    ``myth`` names the misconception a wrong answer most likely comes from, or a
    callable ``(given, expected) -> key`` choosing it from the wrong answer.

    ``single``: the blank is a list that a probe (a hook) filled, answered as the list itself,
    the value the question's own code leaves in it (``[[0.5, 0.5]]`` after one call); a list
    filled exactly once may also be answered by its one entry (``[0.5, 0.5]``).
    """

    key: str
    why: str
    myth: str | Callable[[Any, Any], str | None] | None = None
    part: str = "main"
    tol: float = 1e-5
    single: bool = False

    def myth_for(self, given: Any, expected: Any) -> str | None:
        if callable(self.myth):
            return self.myth(given, expected)
        return self.myth


class Question:
    """Base class: a question has an id, a title and one or more graded parts."""

    qid: str = ""
    title: str = ""
    lesson: str = ""

    def parts(self) -> list[str]:
        return ["main"]

    def grade(self, answer: Any, part: str | None = None, variant: str = "visible") -> Verdict:
        raise NotImplementedError


class Predict(Question):
    """Predict-the-output: ``scenario()`` returns the live facts, keyed like ``items``.

    The answer is a dict with the same keys (or, for a one-item question, the bare
    value). A part scores the fraction of its items that are right.
    """

    items: list[Item] = []
    #: The scenario exactly as the notebook shows it; ``scenario()`` runs this text.
    code: str = ""

    def facts(self, ns: dict[str, Any]) -> dict[str, Any]:
        """Read the answers off the namespace in which ``code`` ran (use torchfacts)."""
        raise NotImplementedError

    def scenario(self) -> dict[str, Any]:
        """Run ``code`` with live torch and return the facts, keyed like ``items``."""
        import torch

        torch.manual_seed(0)
        ns = learner_namespace()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(self.code, f"<scenario {self.lesson}/{self.qid}>", "exec"), ns)  # noqa: S102
        return self.facts(ns)

    def parts(self) -> list[str]:
        seen: list[str] = []
        for item in self.items:
            if item.part not in seen:
                seen.append(item.part)
        return seen

    def grade(self, answer: Any, part: str | None = None, variant: str = "visible") -> Verdict:
        items = [i for i in self.items if part is None or i.part == part]
        if not items:
            raise KeyError(f"question {self.qid} has no part {part!r}")
        if len(self.items) == 1 and not isinstance(answer, dict):
            answer = {self.items[0].key: answer}
        if not isinstance(answer, dict):
            return Verdict.problem(
                self.qid,
                _("Expected a dict with the keys {keys}, got {answer}.",
                  keys=[i.key for i in self.items], answer=show(answer)),
            )
        facts = self.scenario()
        return Verdict(self.qid, [self.judge(item, answer, facts[item.key]) for item in items])

    def judge(self, item: Item, answer: dict, expected: Any) -> Finding:
        """The finding for one blank: right, wrong (and why, and which belief), or not answered."""
        key, p = item.key, item.part
        if key not in answer:
            return todo(_("`{key}`: missing from your answer.", key=key), item=key, part=p)
        given = answer[key]
        if given is Ellipsis:
            return todo(_("`{key}`: not answered yet (still `...`).", key=key), item=key, part=p)
        if values_equal(given, expected, item.tol) or (
                item.single and isinstance(expected, list) and len(expected) == 1
                and values_equal(given, expected[0], item.tol)):
            return right(_("`{key}`: {given}, right.", key=key, given=show(given)), item=key,
                         part=p)
        if isinstance(expected, bool) and not isinstance(given, bool):
            return wrong(_("`{key}`: answer with True or False, not {given}.", key=key,
                           given=show(given)), item=key, part=p)
        return wrong(_("`{key}`: you said {given}; torch says {expected}. {why}", key=key,
                       given=show(given), expected=show(expected), why=_(item.why)),
                     item.myth_for(given, expected), item=key, part=p)


class LearnerCodeError(Exception):
    """The learner's function raised; ``summary`` is a short, readable traceback."""

    def __init__(self, summary: str, exc_type: str):
        super().__init__(summary)
        self.summary = summary
        self.exc_type = exc_type


@dataclass
class CodeRun:
    """What happened when the learner's function ran: its result and its warnings."""

    result: Any
    warnings: list[str]


def learner_namespace() -> dict[str, Any]:
    """The globals a learner's function sees in the oracle: torch, nn, F and math."""
    import torch

    return {
        "__name__": "learner",
        "__builtins__": __builtins__,
        "torch": torch,
        "nn": torch.nn,
        "F": torch.nn.functional,
        "math": math,
    }


def define_learner(fn: LearnerFunction, extra: dict[str, Any] | None = None):
    """The learner's function, defined from its source under :mod:`autograder.restricted`:
    it computes with torch exactly as in the learner's kernel, and cannot reach the checker.
    ``extra``: more names its code may use (its own definitions take precedence).

    Raises :class:`LearnerCodeError` for a syntax error, code the restrictions refuse, or a
    failing definition.
    """
    from autograder import restricted

    try:
        code = restricted.compile_function(fn.source, f"<your function {fn.name}>")
        namespace = restricted.namespace()
        for key, value in (extra or {}).items():  # never the guards or the builtins
            if not key.startswith("_"):
                namespace.setdefault(key, value)
        exec(code, namespace)  # noqa: S102 -- running the learner's code is the point
        return namespace[fn.name]
    except restricted.RefusedCode as exc:
        raise LearnerCodeError(str(exc), "RefusedCode") from None
    except Exception as exc:  # a syntax error, a failing decorator, a misnamed function
        raise LearnerCodeError(_short_tb(exc, fn.source), type(exc).__name__) from None


def warns(action: Callable[[], Any]) -> bool:
    """Whether ``action()`` emits a UserWarning (for "does this read warn?" facts)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
    return any(issubclass(w.category, UserWarning) for w in caught)


def run_learner(fn: LearnerFunction, *args: Any, **kwargs: Any) -> CodeRun:
    """Define the learner's function from its source in a fresh namespace and call it.

    Runs inside a forked oracle child, so whatever the code does to torch dies with
    that child. Raises :class:`LearnerCodeError` with a short traceback if it fails.
    """
    func = define_learner(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = func(*args, **kwargs)
        except NameError as exc:
            raise LearnerCodeError(
                _("{error}. The checker runs your function on its own, with only torch, nn, "
                  "F and math available: define or import everything it needs inside it.",
                  error=exc),
                "NameError",
            ) from None
        except Exception as exc:
            raise LearnerCodeError(_short_tb(exc, fn.source), type(exc).__name__) from None
    return CodeRun(result, [f"{w.category.__name__}: {w.message}" for w in caught])


def _short_tb(exc: BaseException, source: str | None = None) -> str:
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<your function")
    ]
    where = _where(frames[-1].lineno, source) if frames and frames[-1].lineno else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _where(line: int, source: str | None) -> str:
    """`` (line 5 of your function: `loss.backward()`)``: counted as the cell shows it (the
    ``def`` line is line 1), with the line itself, so nobody has to count."""
    from autograder.restricted import source_line

    code = source_line(source, line)
    if code:
        return _(" (line {line} of your function: `{code}`)", line=line, code=code)
    return _(" (line {line} of your function)", line=line)


@dataclass
class Requirement:
    """One checked property of a learner's code: a name, a part, and a test.

    ``test(run)`` returns a bool, ``(ok, detail)`` or ``(ok, detail, misconception)``: the
    detail says what torch found about what the code made ("your glaze has grad_fn
    AddBackward0: it was made from flour"), the misconception is named from that evidence.
    ``myth`` is the misconception a failure reveals whatever the code did (use it only when
    every way to fail means that belief), or a callable ``(run) -> key | None``.
    """

    text: str
    test: Callable[[Any], bool | tuple]
    myth: str | Callable[[Any], str | None] | None = None
    part: str = "main"

    def myth_for(self, run: Any) -> str | None:
        return self.myth(run) if callable(self.myth) else self.myth

    def judge(self, run: Any) -> Finding:
        try:
            outcome = self.test(run)
        except Exception as exc:  # the result had the wrong shape for this test
            outcome = (False, _("this could not be checked ({error}).",
                                error=type(exc).__name__ + ": " + str(exc)))
        if not isinstance(outcome, tuple):
            outcome = (bool(outcome), "")
        ok, detail = bool(outcome[0]), outcome[1] if len(outcome) > 1 else ""
        if ok:
            return right(_("{requirement}: yes.", requirement=_(self.text)), part=self.part)
        myth = outcome[2] if len(outcome) > 2 else self.myth_for(run)
        detail = detail.strip()
        if detail and detail[-1] not in ".?!)\u3002\uff1f\uff01\uff09":  # 。？！） end too
            detail += _(".")
        if not detail:
            return wrong(_("{requirement}: no.", requirement=_(self.text)), myth, part=self.part)
        return wrong(_("{requirement}: no. {detail}", requirement=_(self.text),
                       detail=detail[0].upper() + detail[1:]), myth, part=self.part)


def raised_finding(exc: LearnerCodeError,
                   on_error: Callable[[LearnerCodeError], str | None] | None = None,
                   part: str | None = None) -> Finding:
    """A learner function that raised: what it raised, and the belief its error reveals (the
    question's own ``on_error`` first, then the course's table of error signatures)."""
    myth = (on_error(exc) if on_error else None) or diagnose_error(exc.exc_type, exc.summary)
    return wrong(_("Your function raised {error}", error=exc.summary), myth, part=part)


def score(qid: str, requirements: Iterable[Requirement], run: Callable[[], Any] | None = None,
          part: str | None = None,
          on_error: Callable[[LearnerCodeError], str | None] | None = None) -> Verdict:
    """The one scoring helper: call ``run()`` (which runs the learner's code) and judge each
    requirement (of ``part``) on its result.

    A :class:`LearnerCodeError` gives one wrong finding per part, saying what was raised and,
    when the error carries a misconception's signature, naming it. ``run=None`` judges the
    requirements on ``None`` (their tests close over what was measured).
    """
    reqs = [r for r in requirements if part is None or r.part == part]
    if not reqs:
        raise KeyError(f"question {qid} has no part {part!r}")
    try:
        result = run() if run is not None else None
    except LearnerCodeError as exc:
        parts = list(dict.fromkeys(r.part for r in reqs))
        return Verdict(qid, [raised_finding(exc, on_error, p) for p in parts])
    return Verdict(qid, [r.judge(result) for r in reqs])


_NOT_IMPLEMENTED = {"NotImplementedError", "NotImplemented"}


def untouched_stub(fn: LearnerFunction, starter: str | None = None) -> bool:
    """Whether ``fn`` is still what the learner was given: nbgrader's ``raise
    NotImplementedError()`` stub, or (for find-the-bug questions) the ``starter`` program."""
    import ast

    try:
        tree = ast.parse(fn.source)
    except SyntaxError:
        return False
    if starter is not None:
        try:
            if ast.dump(tree) == ast.dump(ast.parse(starter)):
                return True
        except SyntaxError:
            pass
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if len(defs) != 1:
        return False
    body = [n for n in defs[0].body
            if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
            and not isinstance(n, ast.Pass)]
    if not body:
        return True
    for node in body:
        if not isinstance(node, ast.Raise) or node.exc is None:
            return False
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if getattr(exc, "id", None) not in _NOT_IMPLEMENTED:
            return False
    return True


class WriteCode(Question):
    """Write-code or find-the-bug: the answer is a function, graded by behaviour.

    Subclasses set ``function_name`` (and, for find-the-bug, ``starter``: the program as the
    notebook gives it) and implement ``grade_code(fn, part, variant)``, usually with
    :meth:`run_and_require`. An untouched answer is "not answered yet", never a misconception.
    """

    function_name: str = ""
    part_names: list[str] = ["main"]
    starter: str | None = None

    def parts(self) -> list[str]:
        return list(self.part_names)

    def grade(self, answer: Any, part: str | None = None, variant: str = "visible") -> Verdict:
        name = f"`{self.function_name}`"
        if answer is Ellipsis or answer is None:
            return Verdict.problem(self.qid, _("Define the function {name} first.", name=name),
                                   answered=False)
        if not isinstance(answer, LearnerFunction):
            return Verdict.problem(self.qid, _("Pass the function {name} itself (no parentheses).",
                                               name=name))
        if untouched_stub(answer, self.starter):
            what = (_("Not answered yet: {name} is still the program as the notebook gives it: "
                      "find the bug and fix it.", name=name)
                    if self.starter and "NotImplementedError" not in answer.source else
                    _("Not answered yet: {name} still raises `NotImplementedError()`: replace "
                      "that line with your code.", name=name))
            return Verdict(self.qid, [todo(what, part=p)
                                      for p in self.parts() if part is None or p == part])
        return self.grade_code(answer, part, variant)

    def grade_code(self, fn: LearnerFunction, part: str | None, variant: str) -> Verdict:
        raise NotImplementedError

    def run_and_require(
        self,
        fn: LearnerFunction,
        requirements: Iterable[Requirement],
        part: str | None,
        args: tuple = (),
        on_error: Callable[[LearnerCodeError], str | None] | None = None,
    ) -> Verdict:
        """Run ``fn(*args)`` and judge the ``requirements`` (of ``part``) on what it did."""
        return score(self.qid, requirements, lambda: run_learner(fn, *args), part, on_error)


# --------------------------------------------------------------------------- lessons


class Lesson:
    """The questions of one assignment, looked up by id.

    ``preload``: modules its checks import that are slow to import (``torch._dynamo``, which the
    first optimizer of a process imports: 1.5-3 s, 70 MB); the checker imports them once, before
    it forks a check, instead of in every check (:func:`autograder.oracle.prepare`)."""

    def __init__(self, assignment: str, title: str, preload: tuple[str, ...] = ()):
        self.assignment = assignment
        self.title = title
        self.preload = tuple(preload)
        self.questions: dict[str, Question] = {}

    def register(self, cls: type[Question]) -> type[Question]:
        """Class decorator: instantiate and register a question class."""
        q = cls()
        if not q.qid:
            raise ValueError(f"{cls.__name__} has no qid")
        if q.qid in self.questions:
            raise ValueError(f"duplicate question id {q.qid} in {self.assignment}")
        q.lesson = self.assignment
        self.questions[q.qid] = q
        return cls

    def __getitem__(self, qid: str) -> Question:
        try:
            return self.questions[qid]
        except KeyError:
            raise KeyError(f"{self.assignment} has no question {qid!r}") from None
