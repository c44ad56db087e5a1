"""The structured verdict: what one check of one answer found, item by item.

A verdict travels unchanged from the oracle (:mod:`autograder.questions` builds it) to every
display: the visible check's text and HTML, the graded cell's output and its one-line error,
nbgrader's Validate and the generated feedback (:mod:`autograder.feedback` renders it), and the
class report, which reads it back from the graded cells' outputs (:data:`MIME_TYPE`).

The score is never stored apart from the findings: it is the share of findings that are right,
for the whole question or for one part (:meth:`Verdict.for_part`). The pass rule lives here,
once (:attr:`Verdict.passed`). This module imports neither torch nor IPython.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The MIME type under which a graded cell keeps its verdict in the notebook's outputs.
MIME_TYPE = "application/vnd.leaf-course.verdict+json"

RIGHT, WRONG, TODO = "right", "wrong", "todo"


@dataclass
class Finding:
    """One line of feedback about one item (a blank, a requirement, a test case).

    ``status`` is ``right``, ``wrong`` or ``todo`` (not answered yet). ``text`` says what torch
    did and why, with code between backticks. ``misconception`` is set only when the learner's
    answer carries that misconception's signature. ``part`` is the graded part it belongs to
    (``None``: every part, e.g. "your function raised").
    """

    status: str
    text: str
    item: str | None = None
    misconception: str | None = None
    part: str | None = None

    def __post_init__(self) -> None:
        if self.status not in (RIGHT, WRONG, TODO):
            raise ValueError(f"a finding's status is right, wrong or todo, not {self.status!r}")
        if self.status != WRONG:
            self.misconception = None  # a misconception is named for a wrong answer only

    @property
    def ok(self) -> bool:
        return self.status == RIGHT

    def to_json(self) -> dict:
        return {"status": self.status, "ok": self.ok, "text": self.text, "item": self.item,
                "misconception": self.misconception, "part": self.part}

    @classmethod
    def from_json(cls, data: dict) -> Finding:
        status = data.get("status") or (RIGHT if data.get("ok") else WRONG)
        return cls(status, data.get("text", ""), data.get("item"), data.get("misconception"),
                   data.get("part"))


def right(text: str, **kw) -> Finding:
    return Finding(RIGHT, text, **kw)


def wrong(text: str, misconception: str | None = None, **kw) -> Finding:
    return Finding(WRONG, text, misconception=misconception, **kw)


def todo(text: str, **kw) -> Finding:
    return Finding(TODO, text, **kw)


@dataclass
class Verdict:
    """All findings of one check of one answer (or of one part of it)."""

    question: str
    findings: list[Finding] = field(default_factory=list)
    part: str | None = None
    #: the question's parts, so a part's view can be taken from a whole-question verdict
    parts: list[str] = field(default_factory=list)
    variant: str = "visible"
    title: str = ""

    # -- the one scoring rule
    @property
    def right(self) -> int:
        return sum(1 for f in self.findings if f.status == RIGHT)

    @property
    def total(self) -> int:
        return len(self.findings)

    @property
    def score(self) -> float:
        """The share of findings that are right (0 with no findings)."""
        return self.right / self.total if self.total else 0.0

    @property
    def answered(self) -> bool:
        """Whether the learner answered anything that could be checked."""
        return any(f.status != TODO for f in self.findings)

    @property
    def complete(self) -> bool:
        """Whether every item was answered."""
        return bool(self.findings) and all(f.status != TODO for f in self.findings)

    @property
    def passed(self) -> bool:
        """Every item answered and right: what a graded cell demands."""
        return bool(self.findings) and all(f.status == RIGHT for f in self.findings)

    @property
    def misconceptions(self) -> list[str]:
        seen: list[str] = []
        for f in self.findings:
            if f.misconception and f.misconception not in seen:
                seen.append(f.misconception)
        return seen

    def for_part(self, part: str | None) -> Verdict:
        """This verdict seen from one graded part: its findings and those of every part."""
        if part is None:
            return self
        if self.parts and part not in self.parts:
            return Verdict(self.question, [wrong(f"Question {self.question} has no part {part!r}.")],
                           part=part, parts=self.parts, variant=self.variant, title=self.title)
        mine = [f for f in self.findings if f.part in (part, None)]
        if not mine:
            mine = [todo("Nothing of this part could be checked.", part=part)]
        return Verdict(self.question, mine, part=part, parts=self.parts, variant=self.variant,
                       title=self.title)

    # -- data
    def to_json(self) -> dict:
        return {"question": self.question, "part": self.part, "parts": list(self.parts),
                "variant": self.variant, "title": self.title, "score": self.score, "passed": self.passed,
                "answered": self.answered,
                "findings": [f.to_json() for f in self.findings]}

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        return cls(data.get("question", "?"),
                   [Finding.from_json(f) for f in data.get("findings", [])],
                   part=data.get("part"), parts=list(data.get("parts") or []),
                   variant=data.get("variant", "visible"), title=data.get("title", ""))

    @classmethod
    def problem(cls, question: str, text: str, answered: bool = True) -> Verdict:
        """An answer that could not be checked at all (not read, timed out, the checker broke),
        or, with ``answered=False``, was not given yet."""
        return cls(question, [Finding(WRONG if answered else TODO, text)])

    @classmethod
    def merge(cls, question: str, verdicts: list[Verdict]) -> Verdict:
        """One verdict from the verdicts of several parts (or several runs) of a question."""
        out = cls(question)
        for v in verdicts:
            out.findings.extend(v.findings)
        return out
