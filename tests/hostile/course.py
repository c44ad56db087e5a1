"""A tiny hand-made nbgrader course (assignment ``ps1``) built in a temp folder.

``ps1`` has three graded questions: two in plain Python (one with hidden tests that a
learner who only satisfies the visible test fails) and one that imports torch.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.pipeline import nbgrader

CONFIG = '''\
import os
c = get_config()  # noqa: F821
HERE = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.root = HERE
c.CourseDirectory.course_id = "handmade"
c.Exchange.root = os.path.join(HERE, "exchange")
os.makedirs(c.Exchange.root, exist_ok=True)
c.Execute.timeout = 10
c.ExecutePreprocessor.timeout = 10
'''


def _meta(grade_id: str, *, grade=False, solution=False, locked=False, points=0) -> dict:
    m = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
         "solution": solution, "task": False}
    if grade:
        m["points"] = points
    return {"nbgrader": m}


def _cell(source: str, **meta) -> nbformat.NotebookNode:
    cell = new_code_cell(source)
    cell.metadata.update(_meta(**meta))
    return cell


def source_notebook() -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3",
                              "language": "python"}
    nb.cells = [
        new_markdown_cell("# ps1: a hand-made assignment"),
        _cell("import math", grade_id="setup", locked=True),
        new_markdown_cell("Q1 (2 points): write `square(x)`."),
        _cell("def square(x):\n    ### BEGIN SOLUTION\n    return x * x\n    ### END SOLUTION",
              grade_id="q1_answer", solution=True),
        _cell('"""Q1 tests."""\nassert square(3) == 9\n### BEGIN HIDDEN TESTS\n'
              "assert square(-4) == 16\n### END HIDDEN TESTS",
              grade_id="q1_test", grade=True, locked=True, points=2),
        new_markdown_cell("Q2 (3 points): write `add(a, b)`."),
        _cell("def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION",
              grade_id="q2_answer", solution=True),
        _cell('"""Q2 tests."""\nassert add(1, 2) == 3\n### BEGIN HIDDEN TESTS\n'
              "assert add(-1, 1) == 0\n### END HIDDEN TESTS",
              grade_id="q2_test", grade=True, locked=True, points=3),
        new_markdown_cell("Q3 (2 points): return a leaf tensor that requires grad."),
        _cell("import torch\n\ndef make_leaf():\n    ### BEGIN SOLUTION\n"
              "    return torch.ones(3, requires_grad=True)\n    ### END SOLUTION",
              grade_id="q3_answer", solution=True),
        _cell('"""Q3 tests."""\nt = make_leaf()\nassert t.is_leaf and t.requires_grad\n'
              "### BEGIN HIDDEN TESTS\nassert t.grad is None\n### END HIDDEN TESTS",
              grade_id="q3_test", grade=True, locked=True, points=2),
    ]
    return nb


POINTS = {"q1_test": 2.0, "q2_test": 3.0, "q3_test": 2.0}

SOLVED = {
    "q1_answer": "def square(x):\n    return x * x",
    "q2_answer": "def add(a, b):\n    return a + b",
    "q3_answer": "import torch\n\ndef make_leaf():\n    return torch.ones(3, requires_grad=True)",
}
WRONG = {
    "q1_answer": "def square(x):\n    return x + x",
    "q2_answer": "def add(a, b):\n    return a - b",
    "q3_answer": "import torch\n\ndef make_leaf():\n    return torch.ones(3) * 2",
}
# satisfies the visible test of Q1 only: the hidden test must catch it
VISIBLE_ONLY = {"q1_answer": "def square(x):\n    return 9 if x == 3 else 0"}


def make_course(tmp: Path) -> Path:
    course = tmp / "course"
    (course / "source" / "ps1").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG)
    nbformat.write(source_notebook(), str(course / "source" / "ps1" / "ps1.ipynb"))
    nbgrader("generate_assignment", "ps1", "--force", course=course)
    return course


def release(course: Path) -> nbformat.NotebookNode:
    return nbformat.read(str(course / "release" / "ps1" / "ps1.ipynb"), as_version=4)


def answered(course: Path, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The release notebook with the given answer cells replaced."""
    nb = copy.deepcopy(release(course))
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    return nb


def submit(course: Path, student: str, nb: nbformat.NotebookNode | None = None, *,
           raw: str | None = None, name: str = "ps1.ipynb", assignment: str = "ps1") -> Path:
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if raw is not None:
        path.write_text(raw)
    elif nb is not None:
        nbformat.write(nb, str(path))
    return folder


def copy_course(course: Path, dest: Path) -> Path:
    shutil.copytree(course, dest, symlinks=True)
    cfg = dest / "nbgrader_config.py"
    cfg.write_text(cfg.read_text())
    return dest
