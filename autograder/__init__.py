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

from autograder import client as _client
from autograder.client import OracleUnavailable, ask
from autograder.encoding import AnswerEncodingError

__all__ = [
    "checker", "check", "grade", "verify", "Checker", "Feedback", "format_verdict", "warm_up",
]

OK, WRONG, TODO = "\u2713", "\u2717", "\u2026"


def format_verdict(verdict: dict, title: str | None = None) -> str:
    """Feedback text for a verdict (as returned by the oracle)."""
    findings = verdict.get("findings", [])
    right = sum(1 for f in findings if f["ok"])
    name = title or verdict.get("question", "")
    if verdict.get("score", 0) >= 1 - 1e-9 and verdict.get("answered", True):
        head = f"{OK} {name}: all right ({right}/{len(findings)})."
    elif not verdict.get("answered", True) and right == 0:
        head = f"{TODO} {name}: not answered yet."
    else:
        head = f"{WRONG} {name}: {right}/{len(findings)} right, keep going."
    lines = [head]
    for f in findings:
        lines.append(f"  {OK if f['ok'] else WRONG} {f['text']}")
    return "\n".join(lines)


def _verdict(lesson: str, qid: str, answer, part: str | None, variant: str) -> dict:
    try:
        return ask(lesson, qid, answer, part=part, variant=variant)
    except AnswerEncodingError as exc:
        return {"question": qid, "score": 0.0, "answered": False,
                "findings": [{"ok": False, "text": f"Your answer could not be read: {exc}."}]}


class Feedback:
    """What a visible check shows: the verdict, rendered as text (and HTML in Jupyter).

    ``score`` (0 to 1), ``passed`` and ``findings`` are there for code that wants them.
    """

    def __init__(self, verdict: dict, label: str):
        self.verdict = verdict
        self.label = label

    @property
    def score(self) -> float:
        return float(self.verdict.get("score", 0.0))

    @property
    def passed(self) -> bool:
        return self.score >= 1 - 1e-9 and bool(self.verdict.get("answered", True))

    @property
    def findings(self) -> list[dict]:
        return list(self.verdict.get("findings", []))

    def __repr__(self) -> str:
        return format_verdict(self.verdict, self.label)

    def _repr_html_(self) -> str:
        import html

        colour = "#1a7f37" if self.passed else "#b35900"
        lines = format_verdict(self.verdict, self.label).splitlines()
        head = f'<div style="font-weight:bold;color:{colour}">{html.escape(lines[0])}</div>'
        rows = "".join(
            f'<li style="color:{"#1a7f37" if ln.strip().startswith(OK) else "#b3261e"}">'
            f"{html.escape(ln.strip()[2:])}</li>"
            for ln in lines[1:]
        )
        return (f'<div class="autograder-feedback">{head}'
                f'<ul style="list-style:none;padding-left:1em;margin:0.2em 0">{rows}</ul></div>')


def check(lesson: str, qid: str, answer, part: str | None = None) -> Feedback:
    """Visible check for learners: specific feedback, never an exception for a wrong answer."""
    label = qid if part is None else f"{qid} ({part})"
    try:
        verdict = _verdict(lesson, qid, answer, part, "visible")
    except OracleUnavailable as exc:
        verdict = {"question": qid, "score": 0.0, "answered": False,
                   "findings": [{"ok": False, "text": f"could not check {qid}: {exc}"}]}
    return Feedback(verdict, label)


def _require(lesson: str, qid: str, answer, part: str | None, variant: str) -> None:
    __tracebackhide__ = True  # IPython shows the learner the feedback, not our frames
    verdict = _verdict(lesson, qid, answer, part, variant)
    if not (verdict.get("score", 0) >= 1 - 1e-9 and verdict.get("answered", True)):
        label = qid if part is None else f"{qid} ({part})"
        raise AssertionError("\n" + format_verdict(verdict, label))


def grade(lesson: str, qid: str, answer, part: str | None = None) -> None:
    """For graded test cells: raise AssertionError with the feedback unless fully right."""
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
    """A visible-check function bound to one assignment; also warms up the oracle."""
    warm_up(lesson)
    return Checker(lesson)
