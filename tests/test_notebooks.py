"""Static checks of the source notebooks and of the committed release.

(The source notebooks are *executed* by nbval, collected from ``source/``; see the
README. The release is executed by the grading-pipeline tests.)
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from helpers import (
    RELEASE,
    ROOT,
    SOURCE,
    assignments,
    is_answer,
    is_graded_test,
    make_course,
    meta,
    notebook_path,
    read,
)

from autograder.questions import Predict, WriteCode
from autograder.release import check_release, leaks

ASSIGNMENTS = assignments()
CHECK_CALLS = {"grade", "verify"}


def test_there_are_assignments():
    assert "01_leaves" in ASSIGNMENTS


def test_nbgrader_accepts_the_config_without_the_environment_on_path(tmp_path):
    """The README runs `.venv/bin/jupyter lab` without activating the environment. nbgrader
    must not warn about the course's configuration, and the first gradebook must be made
    whole (nbgrader runs `alembic`, found through the config's PATH), not left broken."""
    course = make_course(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    env["PATH"] = "/usr/bin:/bin"
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "db", "assignment", "list"],
                          cwd=course, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not recognized" not in proc.stderr and "alembic" not in proc.stderr, proc.stderr
    with sqlite3.connect(course / "gradebook.db") as db:
        assert db.execute("select version_num from alembic_version").fetchone()


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_source_is_stored_without_outputs(assignment):
    nb = read(notebook_path(assignment))
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has outputs"
            assert cell.execution_count is None, f"cell {i} has an execution count"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_notebook_name_matches_assignment(assignment):
    assert notebook_path(assignment).stem == assignment


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_outline(assignment):
    """Title, setup cell marked 'run this', a summary, exercises (STYLE.md's outline)."""
    nb = read(notebook_path(assignment))
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "run this, don't change it" in text
    assert "## Summary" in text and "## Exercises" in text
    setup = [c for c in nb.cells if meta(c).get("grade_id") == "setup"]
    assert len(setup) == 1 and meta(setup[0]).get("locked")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_grade_ids_are_unique_and_readable(assignment):
    nb = read(notebook_path(assignment))
    ids = [meta(c)["grade_id"] for c in nb.cells if meta(c)]
    assert len(ids) == len(set(ids))
    for gid in ids:
        assert gid.replace("_", "").isalnum() and not gid.startswith("cell-"), gid


def _graded_cells(assignment):
    nb = read(notebook_path(assignment))
    return [c for c in nb.cells if is_graded_test(c)]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_at_least_eight_questions_of_three_kinds(assignment):
    lesson = importlib.import_module(f"autograder.lessons.l{assignment}").lesson
    assert len(lesson.questions) >= 8
    kinds = {Predict if isinstance(q, Predict) else WriteCode for q in lesson.questions.values()
             if isinstance(q, Predict | WriteCode)}
    assert kinds == {Predict, WriteCode}
    titles = " ".join(q.title.lower() for q in lesson.questions.values())
    assert "find the bug" in titles


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_graded_cell_ends_in_a_check_that_can_fail(assignment):
    """No bare trailing expression: nbgrader gives full marks to a cell that shows ``False``."""
    for cell in _graded_cells(assignment):
        tree = ast.parse(cell.source)
        last = tree.body[-1]
        ok = isinstance(last, ast.Assert) or (
            isinstance(last, ast.Expr)
            and isinstance(last.value, ast.Call)
            and isinstance(last.value.func, ast.Name)
            and last.value.func.id in CHECK_CALLS
        )
        assert ok, f"{meta(cell)['grade_id']} ends in {ast.dump(last)[:80]}"
        assert ast.get_docstring(tree), f"{meta(cell)['grade_id']} has no docstring"
        assert meta(cell)["points"] > 0
        # a hidden block is optional; where there is one it must test something hidden
        # (tests/test_checks.py::test_hidden_tests_check_more_than_the_visible_check)
        if "### BEGIN HIDDEN TESTS" in cell.source:
            hidden = cell.source.split("### BEGIN HIDDEN TESTS", 1)[1]
            assert "verify(" in hidden, f"{meta(cell)['grade_id']}: a hidden block without verify"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_graded_cells_name_real_questions_and_cover_every_part(assignment):
    lesson = importlib.import_module(f"autograder.lessons.l{assignment}").lesson
    covered = set()
    for cell in _graded_cells(assignment):
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in CHECK_CALLS:
                lesson_id, qid = node.args[0].value, node.args[1].value
                assert lesson_id == assignment
                question = lesson[qid]
                part = next((k.value.value for k in node.keywords if k.arg == "part"), None)
                assert part is None or part in question.parts()
                covered.update([(qid, p) for p in ([part] if part else question.parts())])
    for qid, question in lesson.questions.items():
        for part in question.parts():
            assert (qid, part) in covered, f"{qid} part {part} is never graded"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_answer_cell_has_a_visible_check_then_a_graded_cell(assignment):
    nb = read(notebook_path(assignment))
    cells = nb.cells
    for i, cell in enumerate(cells):
        if not is_answer(cell):
            continue
        after = cells[i + 1 : i + 4]
        assert any("check(" in c.source and not is_graded_test(c) for c in after), (
            f"{meta(cell)['grade_id']}: no visible check right after it"
        )
        assert any(is_graded_test(c) for c in after), f"{meta(cell)['grade_id']}: no graded cell"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_predict_scenarios_are_shown_verbatim(assignment):
    """A predict question grades the very code the learner reads in the notebook."""
    lesson = importlib.import_module(f"autograder.lessons.l{assignment}").lesson
    text = "\n".join(c.source for c in read(notebook_path(assignment)).cells)
    for qid, q in lesson.questions.items():
        if isinstance(q, Predict):
            assert q.code.strip() in text, f"{qid}'s scenario is not shown in the notebook"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_has_no_solutions_hidden_tests_or_outputs(assignment):
    path = notebook_path(assignment, ROOT / "release")
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert leaks(nb) == []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == []


@pytest.mark.grading
def test_release_is_what_nbgrader_generates_from_source_now():
    problems = check_release(ROOT)
    assert problems == [], "\n".join(problems) + "\nrun `autograder release` and commit"


LANGUAGE_INFO_KEYS = {"name", "version", "mimetype", "file_extension", "codemirror_mode",
                      "pygments_lexer", "nbconvert_exporter"}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_language_info_is_complete(assignment):
    """What the kernel reports, stored in full: JupyterLab marks a notebook modified on opening
    when its kernel's language_info differs from the stored one."""
    for where in (SOURCE, RELEASE):
        info = read(notebook_path(assignment, where)).metadata.get("language_info", {})
        assert LANGUAGE_INFO_KEYS <= set(info), (where.name, sorted(info))
        assert info["name"] == "python" and info["version"].count(".") == 2


# What a lesson's code uses -> the page of PyTorch's reference that documents it.
TORCH_APIS = {
    r"\.is_leaf\b": "torch.Tensor.is_leaf",
    r"requires_grad=True|\.requires_grad\b": "torch.Tensor.requires_grad",
    r"\.backward\(": "torch.Tensor.backward",
    r"\.grad\b(?!_)": "torch.Tensor.grad",
    r"\.retain_grad\(": "torch.Tensor.retain_grad",
    r"\.retains_grad\b": "torch.Tensor.retains_grad",
    r"\.register_hook\(": "torch.Tensor.register_hook",
    r"register_post_accumulate_grad_hook\(": "torch.Tensor.register_post_accumulate_grad_hook",
    r"register_full_backward_hook\(": "torch.nn.Module.register_full_backward_hook",
    r"\.detach\(": "torch.Tensor.detach",
    r"\.detach_\(": "torch.Tensor.detach_",
    r"\.requires_grad_\(": "torch.Tensor.requires_grad_",
    r"no_grad\(": "torch.no_grad",
    r"enable_grad\(": "torch.enable_grad",
    r"inference_mode\(": "torch.inference_mode",
    r"set_grad_enabled\(": "torch.set_grad_enabled",
    r"autograd\.grad\(": "torch.autograd.grad",
    r"\.zero_grad\(": "torch.optim.Optimizer.zero_grad",
    r"detect_anomaly": "torch.autograd.detect_anomaly",
    r"clip_grad_norm_\(": "torch.nn.utils.clip_grad_norm_",
    r"kaiming_normal_\(": "torch.nn.init.kaiming_normal_",
}
DOCS = "https://docs.pytorch.org/docs/stable/"


def _documented(name: str) -> bool:
    """Whether ``torch.Tensor.is_leaf`` (say) names a real object of this torch."""
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("root", ["", "zh-CN"])
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_each_api_a_lesson_uses_links_to_pytorchs_documentation(root, assignment):
    """Every autograd API a lesson's code uses is linked, in both editions, to the page of
    PyTorch's reference that documents it (and every lesson to the autograd mechanics note);
    every linked name is a real object of this torch, its page named as PyTorch's docs name
    their pages."""
    import re

    path = ROOT / root / "source" / assignment / f"{assignment}.ipynb"
    nb = read(path)
    code = "\n".join(c.source for c in nb.cells
                     if c.cell_type == "code" and "BEGIN HIDDEN" not in c.source)
    used = {name for pattern, name in TORCH_APIS.items() if re.search(pattern, code)}
    assert len(used) >= 5, used
    (docs,) = [c.source for c in nb.cells if c.get("id") == "pytorch-docs"]
    linked = dict(re.findall(r"\[`([\w.]+)`\]\((\S+?)\)", docs))
    assert used <= set(linked), used - set(linked)
    assert f"]({DOCS}notes/autograd.html)" in docs
    for name, url in linked.items():
        assert _documented(name), name
        page = url.removeprefix(DOCS)
        assert page in (f"generated/{name}.html", f"generated/{name.rpartition('.')[0]}.html#{name}",
                        f"nn.init.html#{name}"), (name, url)
