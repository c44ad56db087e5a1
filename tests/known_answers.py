"""A class with planted answers, and what its report must say, worked out from the answers.

A planted wrong answer is one line appended to a solved answer cell (a True/False predict item
set to the wrong value), with what it implies: the graded cells it makes fail and the
misconception its item names. From a class (``learner -> (answer cells solved, plants)``) the
functions below compute every number the report must show, without the report or the grader.
Used by ``test_report.py`` (SQLite) and ``test_postgres.py`` (PostgreSQL).
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import ROOT, answer_ids, planted, read, submit

from autograder.analytics import question_label
from autograder.misconceptions import MISCONCEPTIONS

ASSIGNMENT = "01_leaves"
ALL = answer_ids(ASSIGNMENT)
HALF = set(ALL[: len(ALL) // 2])  # the first half of the answer cells (q1 ... q5)


@dataclass(frozen=True)
class Plant:
    """One wrong answer: the line appended to a solved answer cell, the graded cells it makes
    fail, the misconception its item names and the question (part) that reveals it."""

    answer: str
    line: str
    fails: frozenset[str]
    myth: str
    row: str


WATER = Plant("q1_answer", 'q1_is_leaf["water"] = False', frozenset({"q1_tricky"}),
              "leaf_means_trainable", "Q1 (tricky)")
SALT = Plant("q1_answer", 'q1_is_leaf["salt"] = False', frozenset({"q1_tricky"}),
             "no_grad_inputs_make_nonleaf", "Q1 (tricky)")
FLOUR_RECIPE = Plant("q2_answer", 'q2_flags["flour.grad_fn is None"] = False',
                     frozenset({"q2_flags"}), "grad_fn_on_leaf", "Q2")
MEAT_RECIPE = Plant("q2_answer", 'q2_flags["meat.grad_fn is None"] = False',
                    frozenset({"q2_flags"}), "grad_fn_on_leaf", "Q2")
PARCEL_WARNS = Plant("q4_answer", 'q4_warns["parcel.grad"] = True', frozenset({"q4_warnings"}),
                     "leaf_means_trainable", "Q4")
STATION_SILENT = Plant("q4_answer", 'q4_warns["station.grad"] = False',
                       frozenset({"q4_warnings"}), "nonleaf_grad_silent", "Q4")


def submit_class(course: Path, klass: dict) -> None:
    """Submit ``learner -> (answer cells solved or None for all, plants)`` into ``course``."""
    for student, (solve, plants) in klass.items():
        extra: dict[str, list[str]] = {}
        for p in plants:
            extra.setdefault(p.answer, []).append(p.line)
        submit(course, student, ASSIGNMENT, planted(ASSIGNMENT, solve, extra))


# ------------------------------------------------------------------- what the plants imply
def grade_cells() -> dict[str, float]:
    """grade id -> points, from the instructor's notebook (the cells that are graded)."""
    nb = read(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    out = {}
    for cell in nb.cells:
        m = cell.get("metadata", {}).get("nbgrader", {})
        if m.get("grade") and not m.get("solution"):
            out[m["grade_id"]] = float(m["points"])
    return out


POINTS = grade_cells()


def question_of(grade_id: str) -> str:
    return grade_id.split("_")[0]  # q1_tricky -> q1


def expected_cells(solve: set[str] | None, plants: list[Plant]) -> dict[str, float]:
    fails = set().union(*(p.fails for p in plants)) if plants else set()
    return {g: (0.0 if g in fails or (solve is not None and f"{question_of(g)}_answer"
                                       not in solve) else pts)
            for g, pts in POINTS.items()}


def expected_rows(klass: dict) -> dict[str, dict]:
    """label -> the statistics a question (or part) row must show, from the plants."""
    cells = {s: expected_cells(solve, plants) for s, (solve, plants) in klass.items()}
    groups: dict[str, list[str]] = {}
    for g in POINTS:
        groups.setdefault(question_of(g), []).append(g)
    rows = {}

    def row(label, gids, question):
        top = sum(POINTS[g] for g in gids)
        vals = [sum(cells[s][g] for g in gids) for s in klass]
        rest = [sum(cells[s].values()) - v for s, v in zip(klass, vals, strict=True)]
        try:
            disc = statistics.correlation(vals, rest)
        except statistics.StatisticsError:
            disc = None
        unanswered = sum(1 for solve, _ in klass.values()
                         if solve is not None and f"{question}_answer" not in solve)
        myths: dict[str, int] = {}
        for _, plants in klass.values():
            for key in {p.myth for p in plants if p.fails & set(gids)}:
                myths[key] = myths.get(key, 0) + 1
        rows[label] = dict(max=top, mean=sum(vals) / len(vals), median=statistics.median(vals),
                           zero=sum(v == 0 for v in vals), full=sum(v == top for v in vals),
                           partial=sum(0 < v < top for v in vals), disc=disc,
                           not_answered=unanswered, myths=myths)

    for q, gids in groups.items():
        label = question_label(q)
        row(label, gids, q)
        if len(gids) > 1:
            for g in gids:
                row(f"{label} ({g.split('_', 1)[1]})", [g], q)
    return rows


def expected_myths(klass: dict) -> dict[str, tuple[set[str], dict[str, set[str]]]]:
    """misconception -> (the learners holding it, question row -> learners)."""
    out: dict[str, tuple[set[str], dict[str, set[str]]]] = {}
    for student, (_, plants) in klass.items():
        for p in plants:
            who, rows = out.setdefault(p.myth, (set(), {}))
            who.add(student)
            rows.setdefault(p.row, set()).add(student)
    return out


def percent(solve, plants) -> float:
    return 100 * sum(expected_cells(solve, plants).values()) / sum(POINTS.values())


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def built(out: Path) -> dict:
    folder = out / ASSIGNMENT
    return {"html": (folder / "index.html").read_text(encoding="utf-8"),
            **{name: read_csv(folder / f"{name}.csv")
               for name in ("questions", "misconceptions", "learners", "attention")}}


def by(rows: list[dict], key: str) -> dict[str, dict]:
    return {r[key]: r for r in rows}


def check_rows(rows: dict[str, dict], klass: dict) -> None:
    want = expected_rows(klass)
    assert set(rows) == set(want)
    for label, w in want.items():
        r = rows[label]
        got = (float(r["max_points"]), int(r["learners"]), float(r["mean"]), float(r["median"]),
               int(r["zero"]), int(r["partial"]), int(r["full"]), int(r["not_answered"]))
        assert got == pytest.approx((w["max"], len(klass), w["mean"], w["median"], w["zero"],
                                     w["partial"], w["full"], w["not_answered"]), abs=1e-4), label
        if w["disc"] is None:
            assert r["discrimination"] == "", label
        else:
            assert float(r["discrimination"]) == pytest.approx(w["disc"], abs=1e-3), label
        myths = dict(x.split(":") for x in r["misconceptions"].split()) if r["misconceptions"] \
            else {}
        assert {k: int(v) for k, v in myths.items()} == w["myths"], label


def check_myths(rows: list[dict], klass: dict, n: int) -> None:
    want = expected_myths(klass)
    assert [r["key"] for r in rows] == sorted(
        want, key=lambda k: (-len(want[k][0]), MISCONCEPTIONS[k].name))  # ranked by learners
    for r in rows:
        who, where = want[r["key"]]
        assert int(r["learners"]) == len(who)
        assert set(r["learner_ids"].split()) == who
        assert float(r["share"]) == pytest.approx(len(who) / n, abs=1e-4)
        assert dict(x.rsplit(":", 1) for x in r["questions"].split()) == \
            {row.replace(" ", ""): str(len(s)) for row, s in where.items()}
        cat = MISCONCEPTIONS[r["key"]]
        assert (r["name"], r["truth"], r["lesson"]) == (cat.name, cat.truth, cat.lesson)
        assert r["section"] == cat.section
