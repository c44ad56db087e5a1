"""A graded cell's points come from the grader's own checker, never from the learner's kernel.

nbgrader scores a graded test cell by its outputs: full marks unless it shows an error. The
learner's kernel runs the cell, so anything in it (a replaced module, an import hook, an
IPython input or AST transformer, a custom exception handler) can make a cell "pass" without
its check ever having been asked. So the driver does not take the kernel's word for it:

* each graded cell of this course says, in its locked source, which checks it makes
  (``grade("01_leaves", "q3", answer, part="none")``, ``verify(..., variant="hidden")``):
  :func:`expected_checks` reads them from the gradebook's copy of the cell (nbgrader's
  ``OverwriteCells`` has restored it), never from the learner's;
* the submission's checker (:class:`autograder.oracle.Service`, forked by the grading worker
  next to the kernel, out of the kernel's reach) records every verdict it gives, and the
  worker hands the driver the record of each cell's own run (:mod:`autograder.grading.execute`);
* :class:`VerifyChecks`, right before nbgrader's ``SaveAutoGrades``, keeps nbgrader's rule
  and adds one: a graded cell whose every expected check is in that record, asked with one
  answer, and passed, keeps what nbgrader gives it; any other is given an error output (the
  first of the cell's outputs, with the checker's own headline or what was missing), so it
  scores 0, and the instructor is told which question and why.

So the points of a graded cell are at most what the clean checker's verdict on that cell's
own request gives. Honest work keeps exactly stock nbgrader's score: its checks are there and
agree with what the cell showed. Nothing the kernel prints or stores counts, and a verdict
cannot be replayed from another notebook or run: the record exists only in the worker, for
the cell that was executing. Cells that call no checker (a hand-made assignment's plain
``assert``) are left to nbgrader's rule. The verified record of each graded cell is kept in
the autograded notebook's cell metadata (``metadata.autograder``), written by the driver
alone, for the class report.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

#: Where the driver keeps a graded cell's verified record in the autograded notebook.
METADATA_KEY = "autograder"
#: The error a graded cell gets when its check could not be verified.
ENAME = "NotVerified"


@dataclass(frozen=True)
class Expected:
    """One check a graded cell makes: ``grade(lesson, question, ..., part=)`` or
    ``verify(lesson, question, ..., part=, variant=)``."""

    lesson: str
    question: str
    part: str | None
    variant: str


def expected_checks(source: str) -> list[Expected]:
    """The checks a graded cell's source makes, in order (literal arguments only)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out: list[Expected] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else None)
        if name not in ("grade", "verify") or len(node.args) < 2:
            continue
        lesson, question = node.args[0], node.args[1]
        if not (isinstance(lesson, ast.Constant) and isinstance(question, ast.Constant)):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        part = keywords.get("part")
        variant = keywords.get("variant")
        if len(node.args) > 3:
            part = node.args[3]
        if name == "verify" and len(node.args) > 4:
            variant = node.args[4]
        part_value = part.value if isinstance(part, ast.Constant) else None
        default = "visible" if name == "grade" else "hidden"
        variant_value = variant.value if isinstance(variant, ast.Constant) else default
        out.append(Expected(str(lesson.value), str(question.value), part_value,
                            str(variant_value)))
    return sorted(set(out), key=out.index)


def label(question: str, part: str | None) -> str:
    """``Q7, graded part "monitor"`` (for the instructor's report)."""
    name = f"Q{question[1:]}" if question[:1] == "q" and question[1:].isdigit() else question
    return name if part is None else f'{name}, graded part "{part}"'


@dataclass
class Verification:
    """What the grader's checker recorded for one graded cell, judged."""

    ok: bool
    reason: str = ""  # why not, in the instructor's words
    learner_line: str = ""  # the one line the learner's feedback shows when not ok
    verdicts: list[dict] = field(default_factory=list)  # the checker's verdict per check

    def metadata(self) -> dict:
        return {"verified": self.ok, "reason": self.reason, "verdicts": self.verdicts}


def judge(expected: list[Expected], record: dict | None) -> Verification:
    """Whether every check the cell makes is in its record, asked once, and passed."""
    from autograder.feedback import headline
    from autograder.verdict import Verdict
    from course.i18n import using

    if record is None:
        return Verification(False, "the cell was not run by a grading worker with a checker",
                            "this cell's check could not be verified by the grader")
    if record.get("error"):
        why = record["error"]
        return Verification(False, why, f"this cell's check could not be verified ({why})")
    records = record.get("records") or []
    verdicts: list[dict] = []
    for check in expected:
        mine = [r for r in records if r.get("lesson") == check.lesson
                and r.get("question") == check.question
                and (r.get("variant") or "visible") == check.variant]
        what = label(check.question, check.part) + (
            "" if check.variant == "visible" else f" ({check.variant} tests)")
        if not mine:
            return Verification(
                False, f"{what}: no check reached the grader's checker while its cell ran "
                       "(the cell's code was replaced or its check intercepted)",
                f"the grader's checker was never asked about {what}", verdicts)
        answers = {r.get("answer") for r in mine}
        if len(answers) > 1:
            return Verification(
                False, f"{what}: checked with {len(answers)} different answers while the cell "
                       "ran", f"{what} was checked with {len(answers)} different answers",
                verdicts)
        data = mine[-1].get("verdict") or {}
        try:
            verdict = Verdict.from_json(data).for_part(check.part)
        except (TypeError, ValueError, AttributeError):
            return Verification(False, f"{what}: the checker's verdict could not be read",
                                f"{what}: the checker's verdict could not be read", verdicts)
        verdicts.append(verdict.to_json())
        if not verdict.passed:
            with using(mine[-1].get("language")):
                line = headline(verdict)
            return Verification(False, f"{what}: the grader's checker says {line!r}", line,
                                verdicts)
    return Verification(True, verdicts=verdicts)


def _is_graded_test(cell: NotebookNode) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def nbgrader_gives_points(cell: NotebookNode) -> bool:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error" or (
                output.get("output_type") == "stream" and output.get("name") == "stderr"):
            return False
    return True


class VerifyChecks(NbGraderPreprocessor):
    """Before ``SaveAutoGrades``: a graded cell whose checks the grader's checker did not
    verify gets an error output, first among its outputs, so nbgrader scores it 0.

    ``records``: grade id -> what the worker sent back for that cell (see the module
    docstring); ``on_unverified(grade_id, reason)`` is told about each cell that nbgrader
    would have given points to and that lost them here.
    """

    def __init__(self, records: dict[str, dict], on_unverified=None, **kw) -> None:
        super().__init__(**kw)
        self.records = records
        self.on_unverified = on_unverified or (lambda gid, reason: None)
        self.results: dict[str, Verification] = {}

    def preprocess_cell(self, cell, resources, index):
        meta = cell.get("metadata", {})
        meta.pop(METADATA_KEY, None)  # only ever what the driver writes below
        if not _is_graded_test(cell):
            return cell, resources
        expected = expected_checks(cell.source)
        if not expected:
            return cell, resources  # a plain assert: nbgrader's rule alone
        gid = meta["nbgrader"]["grade_id"]
        result = judge(expected, self.records.get(gid))
        self.results[gid] = result
        overruled = not result.ok and nbgrader_gives_points(cell)
        # "overruled": the cell showed a pass that its checker's record does not back
        cell.metadata[METADATA_KEY] = dict(result.metadata(), overruled=overruled)
        if overruled:
            cell.outputs.insert(0, NotebookNode(
                output_type="error", ename=ENAME, evalue=result.learner_line,
                traceback=[f"\x1b[0;31m{ENAME}\x1b[0m: {result.learner_line}"]))
            self.on_unverified(gid, result.reason)
        return cell, resources
