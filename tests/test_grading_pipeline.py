"""Every assignment through the real nbgrader pipeline, scores read from the real gradebook.

For each assignment, in a scratch copy of the course: ``nbgrader generate_assignment``,
then submissions built from the release notebook (solved, untouched, half solved,
and two that tamper with torch or the checks), ``nbgrader autograde``, and the
scores read back with ``nbgrader.api.Gradebook``. The same submissions are graded by
``autograder grade`` (in a copy of the course made before) and must get stock nbgrader's
scores and outputs; the Chinese edition's are graded by ``autograder grade`` only, and must
get the same scores. The runs go three at a time (see ``_Gradings``).
"""

from __future__ import annotations

import html as html_lib
import re
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor

import nbformat
import pytest
from helpers import (
    RELEASE,
    ROOT,
    answer_ids,
    assignments,
    english_sentences,
    executed_outputs,
    make_course,
    meta,
    notebook_path,
    planted,
    read,
    submission,
    submit,
)

from autograder.grading.sandbox import sandbox_problem
from autograder.misconceptions import MISCONCEPTIONS
from autograder.pipeline import nbgrader, nbgrader_env, read_scores
from autograder.verdict import MIME_TYPE
from course.i18n import translate

ZH = ROOT / "zh-CN"
CJK = re.compile(r"[\u4e00-\u9fff]")
# as in test_grade_cli.py: where no sandbox can be set up, grade with the explicit opt-out
SANDBOX_ARGS = [] if sandbox_problem() is None else ["--no-sandbox"]

pytestmark = [pytest.mark.grading, pytest.mark.slow]

TAMPER_TORCH = """\
import torch
# Make every tensor claim to be a leaf, every .grad a fixed value: the checks must not care.
torch.Tensor.is_leaf = property(lambda self: True)
torch.Tensor.grad = property(lambda self: torch.ones(3))
"""

TAMPER_CHECKS = """\
import autograder, autograder.client
# Replace the check functions, and what they call, with ones that always pass; each line is
# tried on its own, as a learner would keep going after an error.
for tamper in ["autograder.grade = lambda *args, **kwargs: None",
               "autograder.verify = lambda *args, **kwargs: None",
               "autograder._require = lambda *args, **kwargs: None",
               "autograder.client.ask = lambda *args, **kwargs: {'question': 'q', "
               "'findings': [{'status': 'right', 'text': 'ok'}]}"]:
    try:
        exec(tamper)
    except AttributeError:
        pass
grade = check = verify = lambda *args, **kwargs: None
"""


def _with_cell_after_setup(nb: nbformat.NotebookNode, source: str) -> nbformat.NotebookNode:
    idx = next(i for i, c in enumerate(nb.cells)
               if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup")
    nb.cells.insert(idx + 1, nbformat.v4.new_code_cell(source))
    for cell in nb.cells:  # a learner's inserted cell has an id; keep ids unique
        cell.setdefault("id", f"x{id(cell)}")
    return nb


def _submit_all(course, assignment, release=RELEASE):
    """The five submissions of every assignment: solved, untouched, half solved, tampering."""
    ids = answer_ids(assignment)
    half = set(ids[: len(ids) // 2])
    submit(course, "full", assignment, submission(assignment, release=release))
    submit(course, "blank", assignment, submission(assignment, solve=set(), release=release))
    submit(course, "partial", assignment, submission(assignment, solve=half, release=release))
    submit(course, "tamper_torch", assignment, _with_cell_after_setup(
        submission(assignment, solve=set(), release=release), TAMPER_TORCH))
    submit(course, "tamper_checks", assignment, _with_cell_after_setup(
        submission(assignment, solve=set(), release=release), TAMPER_CHECKS))


#: a Chinese learner's wrong answer: water predicted not to be a leaf ("leaf means trainable")
WRONG_IN_CHINESE = ("01_leaves", 'q1_is_leaf["water"] = False', "q1_tricky",
                    "leaf_means_trainable")


def _grade(course, assignment: str, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "autograder", "grade", assignment, "--force", "--quiet",
               *args, *SANDBOX_ARGS]
    return subprocess.run(command, cwd=course, env=nbgrader_env(), capture_output=True,
                          text=True, timeout=1200)


class _Gradings:
    """Every grading this module checks, from its first test on, three at a time (their
    kernels often wait, so two cores keep busier than with two). For each assignment:

    * stock ``nbgrader autograde`` of the five English submissions;
    * ``autograder grade`` of the same course, copied before (the fast grader, compared
      with stock here);
    * ``autograder grade`` of the Chinese edition (the same answers in zh-CN/; proven equal
      through the fast grader rather than a second stock run).

    A test waits for the runs it reads, and gets their error if one failed."""

    def __init__(self, tmp_path_factory):
        self._tmp = tmp_path_factory
        self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="grading")
        self.runs: dict[str, dict[str, Future]] = {}
        for a in assignments():
            prepared = self._pool.submit(self._prepare, a)
            self.runs[a] = {
                "prepared": prepared,
                "chinese": self._pool.submit(self._chinese, a),
                "stock": self._pool.submit(self._stock, a, prepared),
                "fast": self._pool.submit(self._fast, a, prepared),
            }

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _prepare(self, assignment):
        course = make_course(self._tmp.mktemp(assignment))
        nbgrader("generate_assignment", assignment, "--force", course=course)
        _submit_all(course, assignment)
        copy = self._tmp.mktemp(f"{assignment}-fast") / "course"
        shutil.copytree(course, copy)
        return course, copy

    def _stock(self, assignment, prepared):
        course, _ = prepared.result()
        proc = nbgrader("autograde", assignment, "--force", course=course)
        return course, read_scores(course, assignment), proc

    def _fast(self, assignment, prepared):
        _, copy = prepared.result()
        # two workers (the calibration of cell limits is tested in test_grade_cli.py)
        proc = _grade(copy, assignment, "--workers", "2", "--no-calibrate")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return copy, read_scores(copy, assignment), proc

    def _chinese(self, assignment):
        course = make_course(self._tmp.mktemp(f"{assignment}-zh"), ZH / "source")
        nbgrader("generate_assignment", assignment, "--force", course=course)
        _submit_all(course, assignment, ZH / "release")
        if assignment == WRONG_IN_CHINESE[0]:
            submit(course, "wrong", assignment, planted(
                assignment, extra={"q1_answer": [WRONG_IN_CHINESE[1]]}, release=ZH / "release"))
        proc = _grade(course, assignment, "--workers", "1", "--no-calibrate")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return course, read_scores(course, assignment), proc


@pytest.fixture(scope="module")
def gradings(tmp_path_factory):
    runs = _Gradings(tmp_path_factory)
    yield runs
    runs.close()


@pytest.fixture(scope="module", params=assignments())
def graded(request, gradings):
    """Stock nbgrader's grading of the five English submissions."""
    course, scores, proc = gradings.runs[request.param]["stock"].result()
    return request.param, course, scores, proc


@pytest.fixture(scope="module")
def graded_zh(graded, gradings):
    """The Chinese edition's grading of the same answers, by the fast grader."""
    course, scores, proc = gradings.runs[graded[0]]["chinese"].result()
    return graded[0], course, scores, proc


@pytest.fixture(scope="module")
def graded_fast(graded, gradings):
    """The fast grader's grading of the same English submissions (a copy of the course)."""
    course, scores, proc = gradings.runs[graded[0]]["fast"].result()
    return graded[0], course, scores, proc


def test_the_chinese_edition_earns_the_same_scores_cell_by_cell(graded, graded_zh):
    """Same answers, same scores: solved full, untouched 0, half between, tampering 0."""
    _, _, english, _ = graded
    _, _, chinese, proc = graded_zh
    table = {s: (v.score, v.max_score, v.per_cell) for s, v in english.items()}
    assert {s: (v.score, v.max_score, v.per_cell) for s, v in chinese.items()
            if s != "wrong"} == table, proc.stdout[-3000:]


def test_a_wrong_answer_in_a_chinese_notebook_gets_chinese_feedback_naming_the_belief(graded_zh):
    """A Chinese learner predicts water is not a leaf. The graded cell of that part scores 0,
    every other cell full marks, and the feedback, in the autograded notebook and in
    nbgrader's generated feedback page, is Chinese and names the belief in Chinese, with the
    Chinese lesson's section heading to read."""
    assignment, course, scores, _ = graded_zh
    lesson, _line, cell_id, belief = WRONG_IN_CHINESE
    if assignment != lesson:
        pytest.skip(f"the Chinese learner's wrong answer is planted in {lesson}")
    s, full = scores["wrong"], scores["full"].per_cell
    assert s.per_cell[cell_id] == 0 < full[cell_id], s.per_cell
    assert {c: v for c, v in s.per_cell.items() if c != cell_id} == \
        {c: v for c, v in full.items() if c != cell_id}
    name = translate(MISCONCEPTIONS[belief].name, "zh-CN")
    section = translate(MISCONCEPTIONS[belief].section, "zh-CN")
    assert CJK.search(name) and CJK.search(section), "the belief has no Chinese name yet"
    nb = read(course / "autograded" / "wrong" / assignment / f"{assignment}.ipynb")
    cell = next(c for c in nb.cells if meta(c).get("grade_id") == cell_id)
    page = "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)
    assert name in page and section in page, page
    words = html_lib.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<code>.*?</code>", " ", page)))
    assert english_sentences(words) == [], words
    nbgrader("generate_feedback", assignment, "--student", "wrong", "--force", course=course)
    feedback = next((course / "feedback" / "wrong" / assignment).glob("*.html")).read_text()
    assert name in html_lib.unescape(feedback)


def test_solution_scores_full_marks(graded):
    assignment, _, scores, proc = graded
    s = scores["full"]
    assert s.max_score > 0
    assert s.score == s.max_score, (s.per_cell, proc.stdout[-3000:], proc.stderr[-3000:])


def test_untouched_release_scores_zero(graded):
    _, _, scores, _ = graded
    assert scores["blank"].score == 0, scores["blank"].per_cell


def test_half_solved_scores_strictly_between(graded):
    _, _, scores, _ = graded
    s = scores["partial"]
    assert 0 < s.score < s.max_score, s.per_cell


def test_tampering_with_torch_earns_nothing(graded):
    _, _, scores, _ = graded
    assert scores["tamper_torch"].score == 0, scores["tamper_torch"].per_cell


def test_replacing_the_checks_earns_nothing(graded):
    _, _, scores, _ = graded
    assert scores["tamper_checks"].score == 0, scores["tamper_checks"].per_cell


def test_feedback_is_generated_and_shows_hidden_tests(graded):
    assignment, course, _, _ = graded
    nbgrader("generate_feedback", assignment, "--student", "partial", "--force", course=course)
    html = next((course / "feedback" / "partial" / assignment).glob("*.html")).read_text()
    assert "BEGIN HIDDEN TESTS" in html or "verify(" in html
    assert "common belief" in html or "not answered yet" in html
    # learners' own cells may show tracebacks through torch; none runs through the checks
    assert "autograder/__init__.py" not in html and "autograder/client.py" not in html


_PATH = re.compile(r"(?:^|[\s'\"(])/(?:[\w.+-]+/)+[\w.+-]+")


def test_graded_cells_show_their_verdict_and_fail_in_one_line(graded):
    """A failing graded cell shows the verdict (kept as data for the class report) and one short
    error line: no traceback of the course's internals, no path of the grading machine."""
    assignment, course, _, _ = graded
    for student in ("partial", "blank"):
        path = course / "autograded" / student / assignment / notebook_path(assignment).name
        nb = nbformat.read(str(path), as_version=4)
        graded_cells = [c for c in nb.cells if c.cell_type == "code"
                        and c.metadata.get("nbgrader", {}).get("grade")
                        and not c.metadata.get("nbgrader", {}).get("solution")]
        failing = 0
        for cell in graded_cells:
            gid = cell.metadata["nbgrader"]["grade_id"]
            kinds = [o.output_type for o in cell.outputs]
            assert any(MIME_TYPE in o.get("data", {}) for o in cell.outputs), (student, gid)
            for o in cell.outputs:
                if o.output_type != "error":
                    continue
                failing += 1
                shown = "\n".join(o.traceback)
                assert len(o.traceback) == 1 and len(shown) < 300, (student, gid, shown)
                assert "autograder" not in shown and not _PATH.search(shown), (student, gid, shown)
            assert "stream" not in kinds or all(o.get("name") != "stderr" for o in cell.outputs)
        assert failing > 0, student


WARNING_NOTEBOOK_CELLS = [
    ("setup", False, "import torch\nimport warnings\n"),
    ("warns", True, '''"""A correct answer whose cell makes torch warn on stderr."""
x = torch.tensor([1.0, 2.0], requires_grad=True)
y = x * 2
y.sum().backward()
warnings.simplefilter("always")
assert y.grad is None   # reading a non-leaf's .grad: torch emits a UserWarning
'''),
]


def test_torch_warnings_do_not_zero_a_correct_answer(tmp_path):
    """nbgrader scores any stderr as a failure; the course config drops warning lines."""
    course = make_course(tmp_path)
    folder = course / "source" / "99_warning"
    folder.mkdir()
    nb = nbformat.v4.new_notebook()
    for gid, graded, src in WARNING_NOTEBOOK_CELLS:
        cell = nbformat.v4.new_code_cell(src)
        cell.metadata["nbgrader"] = {"grade": graded, "grade_id": gid, "locked": True,
                                     "points": 1 if graded else 0, "schema_version": 3,
                                     "solution": False, "task": False}
        nb.cells.append(cell)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, str(folder / "99_warning.ipynb"))
    nbgrader("generate_assignment", "99_warning", "--force", course=course)
    released = nbformat.read(str(course / "release" / "99_warning" / "99_warning.ipynb"), 4)
    for student in ("alice", "bob"):
        path = course / "submitted" / student / "99_warning" / "99_warning.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(released, str(path))
    nbgrader("autograde", "99_warning", "--student", "alice", "--force", course=course)
    # Without the course's IgnorePattern the same answer scores 0: the warning is real.
    nbgrader("autograde", "99_warning", "--student", "bob", "--force",
             "--IgnorePattern.enabled=False", course=course)
    scores = read_scores(course, "99_warning")
    assert scores["alice"].score == 1
    assert scores["bob"].score == 0


def test_autograder_grade_gives_stock_scores(graded, graded_fast):
    """``autograder grade`` (two workers, sandboxed) grades the same submissions: identical
    per-cell scores in the gradebook, and every cell of every autograded notebook shows
    what it showed under stock nbgrader (outputs, tracebacks, execution counts)."""
    assignment, course, stock, _ = graded
    _, copy, ours, proc = graded_fast
    name = notebook_path(assignment).name
    assert {s: (v.score, v.per_cell) for s, v in ours.items()} == \
        {s: (v.score, v.per_cell) for s, v in stock.items()}, proc.stdout[-3000:]
    for student in stock:
        cells = executed_outputs(course / "autograded" / student / assignment / name)
        again = executed_outputs(copy / "autograded" / student / assignment / name)
        differ = [(a, b) for a, b in zip(cells, again, strict=True) if a != b]
        assert not differ, f"{student}: {differ[0][0]}\n!=\n{differ[0][1]}"
