"""Every display of a verdict, from the one structured :class:`~autograder.verdict.Verdict`.

* :func:`text` -- plain text (terminals, nbgrader's Validate, ``text/plain``);
* :func:`html` -- the notebook's rendering, code shown as code;
* :func:`headline` -- the one line a failing graded cell shows as its error;
* :func:`bundle` -- the MIME bundle a check displays: text, HTML and the verdict itself
  (:data:`~autograder.verdict.MIME_TYPE`), which graders keep in ``autograded/`` notebooks.

Each line carries a mark as well as a colour: a right item is marked with a tick, a wrong one
with a cross, one not answered yet with an ellipsis. The misconception a wrong answer reveals
is named under it, with where the course teaches the correction.
"""

from __future__ import annotations

import html as _html

from autograder.verdict import MIME_TYPE, RIGHT, TODO, WRONG, Verdict
from course.i18n import N_, _
from course.markup import plain, rich

MARK = {RIGHT: "\u2713", WRONG: "\u2717", TODO: "\u2026"}
COLOUR = {RIGHT: "#1a7f37", WRONG: "#b3261e", TODO: "#6e5600"}
WORD = {RIGHT: N_("right"), WRONG: N_("wrong"), TODO: N_("not answered yet")}


def label(verdict: Verdict) -> str:
    """``Q3 (none)``, the way the notebook numbers its questions."""
    qid = verdict.question
    name = _("Q{number}", number=qid[1:]) if qid[:1] == "q" and qid[1:].isdigit() else qid
    return name if verdict.part is None else _("{question} ({part})", question=name,
                                               part=verdict.part)


def summary(verdict: Verdict) -> str:
    """``all 4 right`` / ``2 of 4 right, 1 not answered yet`` / ``not answered yet``."""
    n, ok = verdict.total, verdict.right
    todo_n = sum(1 for f in verdict.findings if f.status == TODO)
    if verdict.passed:
        return _("all right") if n == 1 else _("all {n} right", n=n)
    if not verdict.answered:
        return _("not answered yet")
    if n == 1:
        return _("not right yet")
    if todo_n:
        return _("{right} of {n} right, {todo} not answered yet", right=ok, n=n, todo=todo_n)
    return _("{right} of {n} right", right=ok, n=n)


def headline(verdict: Verdict) -> str:
    """The verdict in one line: ``✗ Q3 (none): 1 of 2 right``."""
    state = RIGHT if verdict.passed else (TODO if not verdict.answered else WRONG)
    return _("{mark} {question}: {summary}", mark=MARK[state], question=label(verdict),
             summary=summary(verdict))


def _misconception(key: str) -> tuple[str, str]:
    """(name, where it is taught) of a misconception key."""
    from autograder.misconceptions import MISCONCEPTIONS

    m = MISCONCEPTIONS.get(key)
    if m is None:
        return key, ""
    if getattr(m, "section", ""):
        where = _("lesson {number}, \u201c{section}\u201d", number=m.lesson[:2],
                  section=_(m.section))
    else:
        where = _("lesson {number}", number=m.lesson[:2])
    return _(m.name), where


def _belief(name: str, where: str) -> str:
    """The line under a wrong item naming the belief it reveals (``name`` and ``where``
    already rendered as text or HTML)."""
    if where:
        return _("This looks like a common belief: {name} (see {where}).", name=name,
                 where=where)
    return _("This looks like a common belief: {name}.", name=name)


def _distinct(verdict: Verdict) -> list:
    """The findings to show: one line for findings that say the same (a crash reported once per
    part, in a view of the whole question)."""
    seen, out = set(), []
    for f in verdict.findings:
        key = (f.status, f.text, f.misconception)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _first_naming(findings: list) -> set[int]:
    """The positions of the findings whose belief is named under them: the first finding of
    each belief (three wrong items from one belief name it once)."""
    named, out = set(), set()
    for i, f in enumerate(findings):
        if f.misconception and f.misconception not in named:
            named.add(f.misconception)
            out.add(i)
    return out


def text(verdict: Verdict) -> str:
    """Plain-text feedback: the headline, then one marked line per finding, each belief named
    once, under the first finding that shows it."""
    lines = [headline(verdict)]
    findings = _distinct(verdict)
    naming = _first_naming(findings)
    for i, f in enumerate(findings):
        lines.append(f"  {MARK[f.status]} {plain(f.text)}")
        if i in naming:
            name, where = _misconception(f.misconception)
            lines.append("      " + _belief(plain(name), plain(where)))
    return "\n".join(lines)


def html(verdict: Verdict) -> str:
    state = RIGHT if verdict.passed else (TODO if not verdict.answered else WRONG)
    head = (f'<div style="font-weight:bold;color:{COLOUR[state]}">'
            f"{_html.escape(headline(verdict))}</div>")
    rows = []
    findings = _distinct(verdict)
    naming = _first_naming(findings)
    for i, f in enumerate(findings):
        myth = ""
        if i in naming:
            name, where = _misconception(f.misconception)
            myth = ('<div style="color:#444;font-style:italic;margin-left:1.4em">'
                    f"{_belief(rich(name), rich(where))}</div>")
        rows.append(
            f'<li style="margin:0.15em 0"><span style="color:{COLOUR[f.status]};'
            f'font-weight:bold" title="{_(WORD[f.status])}">{MARK[f.status]}</span> '
            f"{rich(f.text)}{myth}</li>")
    return (f'<div class="autograder-feedback">{head}'
            f'<ul style="list-style:none;padding-left:1em;margin:0.2em 0">{"".join(rows)}</ul>'
            "</div>")


def bundle(verdict: Verdict, full: bool = True) -> dict:
    """The MIME bundle of a check's output; ``full=False`` shows only the headline."""
    data = verdict.to_json()
    if full:
        return {"text/plain": text(verdict), "text/html": html(verdict), MIME_TYPE: data}
    state = RIGHT if verdict.passed else WRONG
    return {"text/plain": headline(verdict),
            "text/html": (f'<div class="autograder-feedback" style="color:{COLOUR[state]}">'
                          f"{_html.escape(headline(verdict))}</div>"),
            MIME_TYPE: data}
