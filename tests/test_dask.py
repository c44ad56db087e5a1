"""Grading on a real Dask cluster that the test starts on 127.0.0.1.

``autograder grade --scheduler`` sends the execution of each submission to the cluster's
workers (the driver keeps sanitizing, scoring and the gradebook). On a class of real
``01_leaves`` submissions, the scores must be identical to the local grader's (which the
pipeline tests compare with stock nbgrader's on every assignment), and a worker killed
mid-run must lose nothing: its submission runs again on the other worker.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import answer_ids, make_course, submission, submit
from servers import DaskCluster

from autograder.grading.sandbox import sandbox_problem
from autograder.pipeline import nbgrader, nbgrader_env, read_scores

pytest.importorskip("distributed")
pytestmark = [pytest.mark.grading, pytest.mark.slow]

ASSIGNMENT = "01_leaves"
SANDBOX_ARGS = [] if sandbox_problem() is None else ["--no-sandbox"]
PROGRESS = re.compile(r"^\[[#-]+\] \d+/\d+ done")


def grade_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "autograder", "grade", ASSIGNMENT, *args, *SANDBOX_ARGS]


def scores(course: Path) -> dict:
    return {s: (v.score, v.per_cell) for s, v in read_scores(course, ASSIGNMENT).items()}


def statuses(course: Path) -> dict[str, str]:
    rep = json.loads((course / "grade-reports" / f"{ASSIGNMENT}.json").read_text())
    return {r["student"]: r["status"] for r in rep["submissions"]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = DaskCluster(tmp_path_factory.mktemp("dask"), workers=2)
    try:
        yield c.start(env=nbgrader_env())
    finally:
        c.stop()


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A class of six, graded by the local grader: the reference scores."""
    course = make_course(tmp_path_factory.mktemp("local"))
    nbgrader("generate_assignment", ASSIGNMENT, "--force", course=course)
    ids = answer_ids(ASSIGNMENT)
    half = len(ids) // 2
    for student, solve in {"full": None, "blank": set(), "first": set(ids[:half]),
                           "second": set(ids[half:]), "odd": set(ids[1::2]),
                           "one": set(ids[:1])}.items():
        submit(course, student, ASSIGNMENT, submission(ASSIGNMENT, solve=solve))
    template = course.parent / "template"
    shutil.copytree(course, template)
    proc = subprocess.run(grade_cmd("--workers", "2"), cwd=course, env=nbgrader_env(),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return template, scores(course)


def test_scores_on_the_cluster_are_the_local_graders(cluster, local, tmp_path):
    template, truth = local
    course = tmp_path / "course"
    shutil.copytree(template, course)
    proc = subprocess.run(grade_cmd("--scheduler", cluster.address), cwd=course,
                          env=nbgrader_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert scores(course) == truth
    assert set(statuses(course).values()) == {"graded"}
    rep = json.loads((course / "grade-reports" / f"{ASSIGNMENT}.json").read_text())
    assert rep["scheduler"] == cluster.address and rep["workers"] == 2


def test_a_worker_killed_mid_run_loses_nothing(cluster, local, tmp_path):
    template, truth = local
    course = tmp_path / "course"
    shutil.copytree(template, course)
    proc = subprocess.Popen(grade_cmd("--scheduler", cluster.address), cwd=course,
                            env=nbgrader_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines = []
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        if PROGRESS.match(line):  # one done: both workers are busy with the next ones
            cluster.kill_worker(0)
            break
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out + "".join(lines) + err
    assert scores(course) == truth
    assert set(statuses(course).values()) == {"graded"}, out


def test_no_scheduler_refuses_plainly(tmp_path, local):
    template, _ = local
    course = tmp_path / "course"
    shutil.copytree(template, course)
    proc = subprocess.run(grade_cmd("--scheduler", "tcp://127.0.0.1:9"), cwd=course,
                          env=nbgrader_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot reach the Dask scheduler" in proc.stderr and "Traceback" not in proc.stderr
    assert "nothing listens at 127.0.0.1:9" in proc.stderr  # said at once, not after retries


def test_a_worker_that_cannot_sandbox_says_so(tmp_path):
    """What the driver asks every Dask worker before grading: an unprivileged worker
    process (no namespaces, no uid switch) answers why it cannot grade."""
    if sandbox_problem() is not None:
        pytest.skip("no sandbox here at all: the local refusal is tested elsewhere")
    code = "from autograder.grading.dask_grading import probe; print(probe(True))"
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd="/", env=dict(nbgrader_env(), HOME=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("cannot sandbox the submissions there"), proc.stdout
    root = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert root.stdout.strip() == "None", root.stdout + root.stderr
