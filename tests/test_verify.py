"""The rule a graded cell's points follow under ``autograder grade`` (autograder/grading/verify.py):
what nbgrader's rule gives it, and only if the grader's checker recorded every check the cell
makes, asked once, and passed. No process is started here; the red team (test_forgery.py)
proves it on real runs."""

from __future__ import annotations

import nbformat
from nbformat import NotebookNode

from autograder.grading import core
from autograder.grading.engine import solution_unverified
from autograder.grading.verify import (
    ENAME,
    METADATA_KEY,
    Expected,
    VerifyChecks,
    expected_checks,
    judge,
)

GRADED = '''"""Q3 (2 points)."""
from autograder import grade, verify
grade("01_leaves", "q3", q3_answer, part="none")
### BEGIN HIDDEN TESTS
verify("01_leaves", "q3", q3_answer, part="none")
### END HIDDEN TESTS
'''


def _verdict(passed: bool, part: str = "none") -> dict:
    status = "right" if passed else "wrong"
    return {"question": "q3", "parts": ["values", "none"], "findings": [
        {"status": status, "text": "`x.grad`: ...", "part": part},
        {"status": "right", "text": "`y.grad`: ...", "part": "values"}]}


def _record(variant="visible", passed=True, answer="a1", question="q3"):
    return {"lesson": "01_leaves", "question": question, "part": None, "variant": variant,
            "answer": answer, "status": "answered", "verdict": _verdict(passed)}


def test_the_checks_a_graded_cell_makes_are_read_from_its_source():
    assert expected_checks(GRADED) == [Expected("01_leaves", "q3", "none", "visible"),
                                       Expected("01_leaves", "q3", "none", "hidden")]
    assert expected_checks('import autograder\nautograder.grade("04_hooks", "q7", f)') == \
        [Expected("04_hooks", "q7", None, "visible")]
    assert expected_checks("assert square(3) == 9") == []  # a plain assert: nbgrader's rule


def test_a_cell_passes_only_with_every_check_recorded_once_and_passed():
    expected = expected_checks(GRADED)
    ok = judge(expected, {"records": [_record(), _record("hidden")]})
    assert ok.ok and len(ok.verdicts) == 2
    missing = judge(expected, {"records": [_record()]})
    assert not missing.ok and "hidden tests" in missing.reason
    assert "never asked" in missing.learner_line
    failed = judge(expected, {"records": [_record(passed=False), _record("hidden")]})
    assert not failed.ok
    assert failed.learner_line.startswith("\u2717 Q3 (none)")  # the checker's own headline
    # the part's view: a wrong finding of another part does not cost this one
    mixed = {"question": "q3", "parts": ["values", "none"], "findings": [
        {"status": "right", "text": "a", "part": "none"},
        {"status": "wrong", "text": "b", "part": "values"}]}
    other = judge(expected, {"records": [dict(_record(), verdict=mixed), _record("hidden")]})
    assert other.ok
    many = judge(expected, {"records": [_record(), _record(answer="a2"), _record("hidden")]})
    assert not many.ok and "2 different answers" in many.reason
    assert not judge(expected, {"error": "the grader's checker is gone"}).ok
    assert not judge(expected, None).ok


def _notebook(outputs: list, meta_extra: dict | None = None) -> NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(GRADED)
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "q3_none",
                                 "points": 2, "locked": True, "schema_version": 3}
    cell.metadata.update(meta_extra or {})
    cell.outputs = outputs
    nb.cells.append(cell)
    return nb


def _run(nb, records):
    told = []
    pp = VerifyChecks(records, lambda gid, why: told.append((gid, why)))
    nb, _ = pp.preprocess(nb, {})
    return nb.cells[0], told


def test_an_unverified_pass_gets_an_error_first_and_the_instructor_is_told():
    shown = nbformat.v4.new_output("execute_result", data={"text/plain": "2.0"})  # "partial"
    cell, told = _run(_notebook([shown]), {"q3_none": {"records": []}})
    assert cell.outputs[0].output_type == "error" and cell.outputs[0].ename == ENAME
    assert cell.metadata[METADATA_KEY]["overruled"] is True
    assert told and told[0][0] == "q3_none"


def test_honest_cells_are_left_as_nbgrader_scored_them():
    passed = nbformat.v4.new_output("display_data", data={"text/plain": "\u2713 Q3 (none)"})
    records = {"q3_none": {"records": [_record(), _record("hidden")]}}
    cell, told = _run(_notebook([passed]), records)
    assert [o.output_type for o in cell.outputs] == ["display_data"] and not told
    failing = nbformat.v4.new_output("error", ename="NotYetRight", evalue="x", traceback=["x"])
    cell, told = _run(_notebook([failing]), {"q3_none": {"records": [_record(passed=False)]}})
    assert len(cell.outputs) == 1 and not told  # already 0: nothing added
    assert cell.metadata[METADATA_KEY] == {"verified": False, "overruled": False,
                                           "reason": cell.metadata[METADATA_KEY]["reason"],
                                           "verdicts": cell.metadata[METADATA_KEY]["verdicts"]}


def test_a_submitted_verified_record_is_never_kept():
    forged = {METADATA_KEY: {"verified": True, "verdicts": [_verdict(True)]}}
    cell, _ = _run(_notebook([], forged), {"q3_none": {"records": []}})
    assert cell.metadata[METADATA_KEY]["verified"] is False


def test_a_solution_the_checker_does_not_confirm_stops_the_run():
    nb = _notebook([])  # the solution's cell passed in its kernel
    executed = core.Executed(notebooks={"a.ipynb": nb}, checks={"a.ipynb": {
        "q3_none": {"error": "no grader's checker was started"}}})
    unverified, overruled = solution_unverified(executed)
    assert unverified and overruled == unverified
    fine = core.Executed(notebooks={"a.ipynb": nb}, checks={"a.ipynb": {
        "q3_none": {"records": [_record(), _record("hidden")]}}})
    assert solution_unverified(fine) == ([], [])
