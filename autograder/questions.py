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
from dataclasses import dataclass, field
from typing import Any

from autograder.encoding import ExceptionName, LearnerFunction, TensorValue
from autograder.misconceptions import MISCONCEPTIONS

# --------------------------------------------------------------------------- verdicts


@dataclass
class Finding:
    """One line of feedback: an item that is right or wrong, and why."""

    ok: bool
    text: str
    item: str | None = None
    misconception: str | None = None
    part: str | None = None

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "text": self.text,
            "item": self.item,
            "misconception": self.misconception,
            "part": self.part,
        }


@dataclass
class Verdict:
    """The result of checking one answer: a score in [0, 1] and the findings behind it."""

    question: str
    score: float
    findings: list[Finding] = field(default_factory=list)
    answered: bool = True

    @property
    def passed(self) -> bool:
        return self.answered and self.score >= 1.0 - 1e-9

    def to_json(self) -> dict:
        return {
            "question": self.question,
            "score": self.score,
            "answered": self.answered,
            "findings": [f.to_json() for f in self.findings],
        }

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        return cls(
            question=data["question"],
            score=float(data["score"]),
            answered=bool(data.get("answered", True)),
            findings=[Finding(**f) for f in data.get("findings", [])],
        )

    @classmethod
    def problem(cls, question: str, text: str, answered: bool = False) -> Verdict:
        """A verdict for an answer that could not be checked at all."""
        return cls(question=question, score=0.0, answered=answered,
                   findings=[Finding(False, text)])


def myth_text(key: str | None) -> str:
    """The learner-facing name and correction of a named misconception."""
    if not key:
        return ""
    return MISCONCEPTIONS[key].name


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


# --------------------------------------------------------------------------- questions


@dataclass
class Item:
    """One blank of a predict-the-output question.

    ``why`` explains the true behaviour (shown when the learner is wrong);
    ``myth`` names the misconception a wrong answer most likely comes from, or a
    callable ``(given, expected) -> key`` choosing it from the wrong answer.
    """

    key: str
    why: str
    myth: str | Callable[[Any, Any], str | None] | None = None
    part: str = "main"
    tol: float = 1e-5

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
        facts = self.scenario()
        items = [i for i in self.items if part is None or i.part == part]
        if not items:
            raise KeyError(f"question {self.qid} has no part {part!r}")
        single = len(self.items) == 1
        if single and not isinstance(answer, dict):
            answer = {self.items[0].key: answer}
        if not isinstance(answer, dict):
            return Verdict.problem(
                self.qid,
                f"Expected a dict with the keys {[i.key for i in self.items]}, got {show(answer)}.",
            )
        findings: list[Finding] = []
        right = 0
        answered = True
        for item in items:
            expected = facts[item.key]
            if item.key not in answer:
                findings.append(Finding(False, f"`{item.key}`: missing from your answer.", item.key,
                                        part=item.part))
                answered = False
                continue
            given = answer[item.key]
            if given is Ellipsis:
                findings.append(Finding(False, f"`{item.key}`: not answered yet (still `...`).",
                                        item.key, part=item.part))
                answered = False
                continue
            if values_equal(given, expected, item.tol):
                right += 1
                findings.append(Finding(True, f"`{item.key}`: {show(given)} -- right.", item.key,
                                        part=item.part))
                continue
            if isinstance(expected, bool) and not isinstance(given, bool):
                text = f"`{item.key}`: answer with True or False, not {show(given)}."
                findings.append(Finding(False, text, item.key, part=item.part))
                continue
            myth = item.myth_for(given, expected)
            text = f"`{item.key}`: not quite -- you said {show(given)}, torch says {show(expected)}. {item.why}"
            if myth:
                text += f" [Misconception: {myth_text(myth)}.]"
            findings.append(Finding(False, text, item.key, misconception=myth, part=item.part))
        return Verdict(self.qid, right / len(items), findings, answered=answered)


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


def define_learner(fn: LearnerFunction):
    """The learner's function, defined from its source in a fresh :func:`learner_namespace`.

    Raises :class:`LearnerCodeError` for a syntax error or a failing definition.
    """
    namespace = learner_namespace()
    try:
        code = compile(fn.source, f"<your function {fn.name}>", "exec")
        exec(code, namespace)  # noqa: S102 -- running the learner's code is the point
        return namespace[fn.name]
    except Exception as exc:  # a syntax error, a failing decorator, a misnamed function
        raise LearnerCodeError(_short_tb(exc), type(exc).__name__) from None


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
                f"{exc}. The checker runs your function on its own, with only torch, nn, F "
                "and math available: define or import everything it needs inside it.",
                "NameError",
            ) from None
        except Exception as exc:
            raise LearnerCodeError(_short_tb(exc), type(exc).__name__) from None
    return CodeRun(result, [f"{w.category.__name__}: {w.message}" for w in caught])


def _short_tb(exc: BaseException) -> str:
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<your function")
    ]
    where = f" (line {frames[-1].lineno - 1} of your function)" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


@dataclass
class Requirement:
    """One checked property of a learner's code: a name, a part, and a test.

    ``test(run)`` returns a bool or ``(ok, detail)``. ``myth`` names the misconception a
    failure reveals, or is a callable ``(run) -> key`` choosing it from what the run did.
    """

    text: str
    test: Callable[[Any], bool | tuple[bool, str]]
    myth: str | Callable[[Any], str | None] | None = None
    part: str = "main"

    def myth_for(self, run: Any) -> str | None:
        return self.myth(run) if callable(self.myth) else self.myth


def _for_part(qid: str, requirements: Iterable[Requirement], part: str | None) -> list:
    reqs = [r for r in requirements if part is None or r.part == part]
    if not reqs:
        raise KeyError(f"question {qid} has no part {part!r}")
    return reqs


def score_requirements(qid: str, run: Any, requirements: Iterable[Requirement],
                       part: str | None = None) -> Verdict:
    """Score the fraction of ``requirements`` (of ``part``) that a finished ``run`` meets."""
    reqs = _for_part(qid, requirements, part)
    findings = []
    right = 0
    for req in reqs:
        try:
            outcome = req.test(run)
        except Exception as exc:  # the result had the wrong shape for this test
            outcome = (False, f"could not be checked ({type(exc).__name__}: {exc})")
        ok, detail = outcome if isinstance(outcome, tuple) else (bool(outcome), "")
        if ok:
            right += 1
            findings.append(Finding(True, f"{req.text} -- yes.", part=req.part))
        else:
            myth = req.myth_for(run)
            text = f"{req.text} -- no{': ' + detail if detail else '.'}"
            if myth:
                text += f" [Misconception: {myth_text(myth)}.]"
            findings.append(Finding(False, text, misconception=myth, part=req.part))
    return Verdict(qid, right / len(reqs), findings)


def raised_finding(exc: LearnerCodeError,
                   on_error: Callable[[LearnerCodeError], str | None] | None = None) -> Finding:
    """Feedback for a learner function that raised, naming a misconception where ``on_error``
    recognises the error."""
    myth = on_error(exc) if on_error else None
    text = f"Your function raised {exc.summary}"
    if myth:
        text += f" [Misconception: {myth_text(myth)}.]"
    return Finding(False, text, misconception=myth)


def score_run(qid: str, run_fn: Callable[[], Any], requirements: Iterable[Requirement],
              part: str | None = None,
              on_error: Callable[[LearnerCodeError], str | None] | None = None) -> Verdict:
    """Call ``run_fn()`` (which runs the learner's code) and score its result.

    A :class:`LearnerCodeError` scores 0 with a finding that says what was raised.
    """
    reqs = _for_part(qid, requirements, part)
    try:
        run = run_fn()
    except LearnerCodeError as exc:
        return Verdict(qid, 0.0, [raised_finding(exc, on_error)])
    return score_requirements(qid, run, reqs)


class WriteCode(Question):
    """Write-code or find-the-bug: the answer is a function, graded by behaviour.

    Subclasses set ``function_name`` and implement ``grade_code(fn, part, variant)``,
    usually with :meth:`run_and_require`.
    """

    function_name: str = ""
    part_names: list[str] = ["main"]

    def parts(self) -> list[str]:
        return list(self.part_names)

    def grade(self, answer: Any, part: str | None = None, variant: str = "visible") -> Verdict:
        if answer is Ellipsis or answer is None:
            return Verdict.problem(self.qid, f"Define the function `{self.function_name}` first.")
        if not isinstance(answer, LearnerFunction):
            return Verdict.problem(
                self.qid, f"Pass the function `{self.function_name}` itself (no parentheses)."
            )
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
        """Run ``fn(*args)`` and score the fraction of ``requirements`` (of ``part``) it meets."""
        return score_run(self.qid, lambda: run_learner(fn, *args), requirements, part, on_error)


# --------------------------------------------------------------------------- lessons


class Lesson:
    """The questions of one assignment, looked up by id."""

    def __init__(self, assignment: str, title: str):
        self.assignment = assignment
        self.title = title
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
