"""Checks for the course's exercises, graded against live torch.

In a notebook (the setup cell)::

    from autograder import checker
    check = checker("01_leaves")      # starts the oracle in the background

    check("q1", q1_answer)            # visible check: prints feedback, never raises

In a locked nbgrader test cell::

    from autograder import grade, verify
    grade("01_leaves", "q1", q1_answer)                      # raises AssertionError unless right
    verify("01_leaves", "q1", q1_answer, variant="hidden")   # hidden tests

Expected answers are computed by the oracle process (:mod:`autograder.oracle`)
from a torch the learner's kernel cannot patch; answers travel to it as data
(functions as source code). Importing this package does not import torch.
"""

from __future__ import annotations

import sys
import types

from autograder import client as _client
from autograder import feedback as _feedback
from autograder import verdict as _verdict_module
from autograder.client import OracleUnavailable, ask
from autograder.encoding import AnswerEncodingError
from autograder.verdict import MIME_TYPE, Verdict
from course.i18n import _

__all__ = [
    "checker", "check", "grade", "verify", "Checker", "Feedback", "NotYetRight", "format_verdict",
    "warm_up", "MIME_TYPE",
]


def format_verdict(verdict: dict | Verdict, title: str | None = None) -> str:
    """Feedback text for a verdict (a :class:`Verdict` or its JSON data)."""
    if isinstance(verdict, dict):
        verdict = Verdict.from_json(verdict)
    return _feedback.text(verdict)


def _verdict(lesson: str, qid: str, answer, part: str | None, variant: str) -> Verdict:
    """The verdict of ``part`` (or of the whole question): the oracle grades the whole question
    once per answer and variant, so a visible check and the graded cells of its parts share one
    request, answered from the kernel's verdict memory after the first."""
    try:
        data = ask(lesson, qid, answer, part=None, variant=variant)
    except AnswerEncodingError as exc:
        data = Verdict.problem(qid, _("Your answer could not be read: {error}.",
                                      error=exc)).to_json()
    except OracleUnavailable as exc:
        data = Verdict.problem(qid, _("Could not check {qid}: {error}.", qid=qid,
                                      error=exc)).to_json()
    return Verdict.from_json(data).for_part(part)


class Feedback:
    """What a check shows: its verdict, rendered as text and HTML, and kept as data.

    ``score`` (0 to 1), ``passed``, ``findings`` and ``verdict`` are there for code that wants
    them.
    """

    def __init__(self, verdict: Verdict, full: bool = True):
        self.verdict = verdict
        self.full = full

    @property
    def score(self) -> float:
        return self.verdict.score

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @property
    def findings(self) -> list:
        return list(self.verdict.findings)

    def __repr__(self) -> str:
        return _feedback.text(self.verdict)

    def _repr_html_(self) -> str:
        return _feedback.html(self.verdict)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return _feedback.bundle(self.verdict, self.full)


def check(lesson: str, qid: str, answer, part: str | None = None) -> Feedback:
    """Visible check for learners: specific feedback, never an exception for a wrong answer."""
    return Feedback(_verdict(lesson, qid, answer, part, "visible"))


class NotYetRight(AssertionError):
    """A graded cell's answer is not fully right. IPython shows one line for it (no traceback:
    the verdict itself is displayed just above), and nbgrader scores the cell 0."""

    def __init__(self, verdict: Verdict, shown: bool):
        self.verdict = verdict
        line = _feedback.headline(verdict)
        super().__init__(line if shown else "\n" + _feedback.text(verdict))

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31m{_feedback.headline(self.verdict)}\x1b[0m"]


def _show(verdict: Verdict) -> bool:
    """Display the verdict (in full when it fails) if running in IPython; whether it was."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return False
    if get_ipython() is None:
        return False
    display(Feedback(verdict, full=not verdict.passed))
    return True


def _require(lesson: str, qid: str, answer, part: str | None, variant: str) -> None:
    __tracebackhide__ = True
    verdict = _verdict(lesson, qid, answer, part, variant)
    shown = _show(verdict)
    if not verdict.passed:
        raise NotYetRight(verdict, shown)


def grade(lesson: str, qid: str, answer, part: str | None = None) -> None:
    """For graded test cells: show the verdict; raise :class:`NotYetRight` unless fully right."""
    __tracebackhide__ = True
    _require(lesson, qid, answer, part, "visible")


def verify(lesson: str, qid: str, answer, part: str | None = None, variant: str = "hidden") -> None:
    """For hidden tests: like :func:`grade`, with the question's hidden variant."""
    __tracebackhide__ = True
    _require(lesson, qid, answer, part, variant)


def warm_up(*lessons: str) -> None:
    """Start the oracle in the background (the notebook's setup cell calls this)."""
    try:
        # through the module: importing the submodule autograder.oracle (the grading
        # worker preloads it) rebinds the package attribute ``oracle`` to that module
        _client.oracle().start(preload=list(lessons))
    except OSError:
        pass  # reported by the first check instead


class Checker:
    """``check = checker("01_leaves")``; then ``check("q1", answer)`` in the notebook."""

    def __init__(self, lesson: str):
        self.lesson = lesson

    def __call__(self, qid: str, answer, part: str | None = None) -> Feedback:
        return check(self.lesson, qid, answer, part)

    def __repr__(self) -> str:
        return f"<checker for {self.lesson}>"


def checker(lesson: str) -> Checker:
    """A visible-check function bound to one assignment; also warms up the oracle, and says
    when the assignment is due (if the course sets a due date). The lesson's kernel also
    returns the memory of large tensors it frees to the system from here on
    (:func:`autograder.client.return_freed_buffers`), and shows where Run All stopped
    (:mod:`autograder.runall`)."""
    _client.return_freed_buffers()
    from autograder import runall

    runall.install()
    warm_up(lesson)
    _say_when_due(lesson)
    return Checker(lesson)


def _say_when_due(lesson: str) -> None:
    """Print the assignment's due date for this learner (with their extension) and the time
    left, from the course's late policy (:mod:`autograder.deadlines`). Not when nbgrader runs
    the notebook (grading, Validate): its outputs stay what they always are."""
    import os

    if os.environ.get("NBGRADER_EXECUTION"):
        return
    try:
        import datetime as dt

        from autograder.deadlines import course_policy, describe, learner_id

        policy = course_policy()
        line = describe(policy, lesson, learner_id(), dt.datetime.now(dt.timezone.utc)) \
            if policy is not None else ""
    except Exception:  # a course without deadlines, or a config that cannot be read
        return
    if line:
        print(line)


# --------------------------------------------------------------------------- sealing
class _Sealed(types.ModuleType):
    """A module whose functions cannot be rebound from the learner's cells.

    Graded cells run in the learner's kernel, after the learner's own code; ``autograder.grade =
    lambda *a: None`` in an answer cell would otherwise make every graded cell pass. Rebinding a
    sealed name raises ``AttributeError``. (Code bent on cheating can still reach the objects
    behind these names; the grader's scores rest on the oracle, which runs outside the kernel.)
    """

    def __setattr__(self, name, value):
        if name in self.__dict__.get("_sealed_names", ()):
            raise AttributeError(f"{self.__name__}.{name} cannot be replaced: the graded cells "
                                 "use the course's own")
        super().__setattr__(name, value)

    def __delattr__(self, name):
        if name in self.__dict__.get("_sealed_names", ()):
            raise AttributeError(f"{self.__name__}.{name} cannot be removed")
        super().__delattr__(name)


def _seal(module: types.ModuleType) -> None:
    names = {n for n in vars(module) if not (n.startswith("__") and n.endswith("__"))}
    module._sealed_names = frozenset(names | {"_sealed_names"})
    module.__class__ = _Sealed


for _module in (_client, _feedback, _verdict_module, sys.modules[__name__]):
    _seal(_module)
del _module
