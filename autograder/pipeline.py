"""Run the stock nbgrader pipeline on a course folder, and read its gradebook.

Instructor tooling and the test suite both go through here, so they run nbgrader
exactly the way an instructor does: as the ``nbgrader`` command, with the
environment's ``bin/`` first on ``PATH`` (nbgrader shells out to ``alembic`` when
it creates a gradebook; without it the first run leaves a broken ``gradebook.db``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nbgrader_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.update(extra or {})
    return env


class NbgraderError(RuntimeError):
    """An nbgrader command failed; the message carries its output."""


def nbgrader(*args: str, course: Path, check: bool = True,
             timeout: float | None = 1800) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in ``course`` (its nbgrader_config.py applies)."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.run(cmd, cwd=course, env=nbgrader_env(), capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise NbgraderError(
            f"`nbgrader {' '.join(args)}` exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def assignments(course: Path = ROOT) -> list[str]:
    """Assignment ids: the folders of ``source/`` that hold a notebook, in order."""
    src = course / "source"
    return sorted(p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def generate_release(assignment: str, course: Path = ROOT) -> Path:
    """``nbgrader generate_assignment`` into ``release/ASSIGNMENT`` (overwriting it)."""
    nbgrader("generate_assignment", assignment, "--force", course=course)
    return course / "release" / assignment


@dataclass
class Score:
    student: str
    score: float
    max_score: float
    per_cell: dict[str, float]


def read_scores(course: Path, assignment: str) -> dict[str, Score]:
    """Scores per student from the course's real gradebook."""
    from nbgrader.api import Gradebook

    db = f"sqlite:///{course / 'gradebook.db'}"
    out: dict[str, Score] = {}
    with Gradebook(db) as gb:
        for sub in gb.assignment_submissions(assignment):
            per_cell: dict[str, float] = {}
            for nb in sub.notebooks:
                for g in nb.grades:
                    per_cell[g.name] = g.score
            out[sub.student_id] = Score(sub.student_id, sub.score, sub.max_score, per_cell)
    return out
