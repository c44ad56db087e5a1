"""nbgrader's Validate button, with a summary first: the score a hand-in now would get, each
question right, not yet or not answered, and whether it would be late.

nbgrader's Validate runs the notebook and lists every graded cell that fails, each with its
source and its error, and nothing else. :class:`CourseValidator` is nbgrader's own ``Validator``
(same run, same failures) that puts one more entry first: a summary built from the verdicts the
graded cells displayed (:data:`autograder.verdict.MIME_TYPE`) and the course's late policy
(:mod:`autograder.deadlines`). nbgrader's Validate extension renders an entry's error as HTML,
so the summary is HTML; a short style hides the "following cell failed" label above it. The
failing cells that follow show their question's first line instead of the whole grader source.

:func:`install` puts it in place in the Jupyter server: the course's ``nbgrader_config.py``
calls it, and nbgrader's Validate handler loads that file each time the button is pressed.
``nbgrader validate`` on the command line is unchanged.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from pathlib import Path

from nbgrader.validator import Validator

from autograder.verdict import MIME_TYPE, Verdict
from course.i18n import LANGUAGES, _, using

STYLE = ("<style>#validation-message > div:nth-child(1), #validation-message > div:nth-child(2)"
         "{display:none}.autograder-validate-summary{white-space:normal;"
         "font-family:var(--jp-ui-font-family);font-size:var(--jp-ui-font-size1)}"
         ".autograder-validate-summary ul{list-style:none;padding-left:0.5em;margin:0.3em 0}"
         "</style>")
MARKS = {"right": "\u2713", "wrong": "\u2717", "todo": "\u2026"}


def _graded(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) \
        and not meta.get("solution")


def _question_line(cell) -> str:
    """A graded cell as the learner knows it: the first line of its docstring."""
    first = (cell.get("source", "").strip().splitlines() or [""])[0]
    return first.strip('"').strip() or cell["metadata"]["nbgrader"].get("grade_id", "")


_POINTS = re.compile(r"\s*[(（]\s*\d+(\.\d+)?\s*(points?|分)\s*[)）].*$")


def _question_name(cell) -> str:
    """A graded cell's name as its docstring gives it, in the notebook's language, without its
    points: ``Q5, hygiene`` (``第5题，无副作用`` in the Chinese edition)."""
    return _POINTS.sub("", _question_line(cell)).strip()


def summary(nb, notebook_path: Path, now: dt.datetime | None = None) -> str:
    """The summary entry's HTML for an executed notebook."""
    from autograder.feedback import label
    from autograder.feedback import summary as said

    rows, earned, total = [], 0.0, 0.0
    counts = {"right": 0, "wrong": 0, "todo": 0}
    for cell in nb.cells:
        if not _graded(cell):
            continue
        points = float(cell["metadata"]["nbgrader"].get("points", 0) or 0)
        total += points
        failed = any(o.get("output_type") == "error" or (
            o.get("output_type") == "stream" and o.get("name") == "stderr")
            for o in cell.get("outputs", []))
        verdicts = [o["data"][MIME_TYPE] for o in cell.get("outputs", [])
                    if isinstance(o.get("data"), dict) and MIME_TYPE in o["data"]]
        verdict = Verdict.from_json(verdicts[-1]) if verdicts else None
        state = "right" if not failed else (
            "todo" if verdict is not None and not verdict.answered else "wrong")
        counts[state] += 1
        if state == "right":
            earned += points
        name = _question_name(cell) or (label(verdict) if verdict is not None else "")
        detail = said(verdict) if verdict is not None else (
            _("passes") if state == "right" else _("does not pass"))
        got = _("{points} of {total}", points=format(points if state == "right" else 0, "g"),
                total=format(points, "g"))
        rows.append(f"<li>{MARKS[state]} {html.escape(name)}: {html.escape(detail)} "
                    f"({html.escape(got)})</li>")
    head = _("If you handed in now: {earned} of {total} points. {right} graded cells pass, "
             "{wrong} do not yet, {todo} are not answered yet.",
             earned=format(earned, "g"), total=format(total, "g"), right=counts["right"],
             wrong=counts["wrong"], todo=counts["todo"])
    late = deadline_line(notebook_path, now)
    parts = [f"<p><b>{html.escape(head)}</b></p>"]
    if late:
        parts.append(f"<p>{html.escape(late)}</p>")
    parts.append(f"<ul>{''.join(rows)}</ul>")
    if counts["wrong"] or counts["todo"]:
        follow = _("The cells that do not pass yet follow.")
        parts.append(f"<p>{html.escape(follow)}</p>")
    return STYLE + f'<div class="autograder-validate-summary">{"".join(parts)}</div>'


def deadline_line(notebook_path: Path, now: dt.datetime | None = None) -> str:
    """``Due ...: handing in now would be on time`` (empty when the course sets no due date
    for this assignment)."""
    from autograder.deadlines import course_policy, describe, learner_id

    policy = course_policy(notebook_path.parent)
    if policy is None:
        return ""
    return describe(policy, notebook_path.parent.name, learner_id(),
                    now or dt.datetime.now(dt.timezone.utc), hand_in=True)


class CourseValidator(Validator):
    """nbgrader's ``Validator`` that puts the course's summary first (module docstring)."""

    def _preprocess(self, nb):
        nb = super()._preprocess(nb)
        self._executed = nb
        return nb

    def validate(self, filename: str):
        self._executed = None
        results = super().validate(filename)
        nb = self._executed
        if nb is None or "type_changed" in results or "changed" in results:
            return results
        edition = nb.get("metadata", {}).get("leaf_course", {}).get("edition")
        with using(edition if edition in LANGUAGES else None):
            entry = {"source": "", "error": summary(nb, Path(filename).resolve()),
                     "raw_error": ""}
        failed = results.get("failed", [])
        sources = {c.source.strip(): c for c in nb.cells if _graded(c)}
        for item in failed:  # the question, not three lines of grader source
            cell = sources.get(item.get("source", ""))
            if cell is not None:
                item["source"] = _question_line(cell)
        results["failed"] = [entry, *failed]
        return results


def install() -> None:
    """Make nbgrader's Validate handler use :class:`CourseValidator` (idempotent)."""
    try:
        from nbgrader.server_extensions.validate_assignment import handlers
    except ImportError:  # not in a Jupyter server with nbgrader's extension
        return
    handlers.Validator = CourseValidator
