"""The grading core: execute one submission's notebooks in one sandboxed worker.

The one piece of worker logic, used by both places that execute submissions: the driver's
own threads (one per local worker, :mod:`autograder.grading.engine`) and a task on a Dask
worker (:mod:`autograder.grading.dask_grading`). Input: the sanitized notebooks and the
files of the submission; output: the executed notebooks, and what to tell the instructor.
The gradebook is never touched here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from autograder.grading.calibrate import CellLimits
from autograder.grading.execute import WorkerExecute
from autograder.grading.sandbox import Limits, Worker
from autograder.grading.state import crash_point


@dataclass
class Item:
    """One notebook to execute: its name, content, the files beside it, and its folder."""

    name: str
    notebook: NotebookNode
    files: dict[str, Path | bytes]  # path relative to the notebook's folder -> file or bytes
    folder: str  # the kernel's notebook path metadata (where the driver keeps it)


@dataclass
class Executed:
    notebooks: dict[str, NotebookNode] = field(default_factory=dict)  # name -> executed
    # name -> graded cell's grade id -> what the submission's checker recorded while it ran
    checks: dict[str, dict[str, dict]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # graded, but worth a look
    errors: list[str] = field(default_factory=list)  # a notebook that could not be executed
    seconds: float = 0.0
    abandoned: bool = False  # stopped before it was done: roll the submission back


def ensure_worker(worker: Worker, limits: Limits) -> None:
    """Start the worker if it is not running (it died, or was stopped) and wait for it."""
    if not worker.alive():
        worker.stop()
        worker.start()
    worker.wait_ready(limits.startup_timeout)


def execute(worker: Worker, limits: Limits, cell_limits: CellLimits | None, config,
            items: list[Item], stop=lambda: False, log=None) -> Executed:
    """Execute ``items`` one after the other in ``worker``; never raises for a submission."""
    out = Executed()
    for item in items:
        name = item.name
        if stop():  # a second Ctrl-C: no worker is started again
            out.abandoned = True
            return out
        try:
            ensure_worker(worker, limits)
        except Exception as exc:
            out.errors.append(f"{name}: the grading worker could not start: {exc}")
            continue
        t0 = time.monotonic()
        worker.stage_job(item.files)
        crash_point("execute")
        kwargs = {"config": config} if config is not None else {}
        if log is not None:
            kwargs["log"] = log
        ep = WorkerExecute(worker, limits, cell_limits, **kwargs)
        try:
            executed, _ = ep.preprocess(item.notebook, {"metadata": {"path": item.folder}})
            out.notebooks[name] = executed
            out.checks[name] = ep.checks
            for index in ep.timed_out:
                limit, why = ep.limit_of.get(index, (ep.timeout, "the configured timeout"))
                out.notes.append(f"{name}: {describe_cell(executed, index)} ran longer than its "
                                 f"limit of {limit:g} s ({why}) and was interrupted")
            if ep.stopped:
                out.notes.append(f"{name}: {ep.stopped}; the cells after it score 0")
            if ep.output_dropped:
                out.notes.append(f"{name}: output over {limits.output >> 20} MiB was dropped")
        except Exception as exc:
            out.errors.append(f"{name}: could not be executed: {type(exc).__name__}: {exc}")
        finally:
            try:
                worker.finish()
            except Exception:
                worker.stop()  # restarted for the next submission
            out.seconds += time.monotonic() - t0
    return out


def describe_cell(nb: NotebookNode, index: int) -> str:
    """A cell as the instructor finds it: ``Q7, graded part "monitor"`` (a graded cell), ``the
    answer cell q7_answer``, or ``cell 61 (after Q6, graded part "main")``."""
    from autograder.grading.verify import expected_checks, label

    def graded(cell) -> str | None:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code" or not meta.get("grade_id"):
            return None
        if meta.get("grade") and not meta.get("solution"):
            checks = expected_checks(cell.get("source", ""))
            if checks:
                return label(checks[0].question, checks[0].part)
            return f"graded cell {meta['grade_id']}"
        if meta.get("solution"):
            return f"the answer cell {meta['grade_id']}"
        return None

    cells = nb.cells
    if 0 <= index < len(cells):
        here = graded(cells[index])
        if here:
            return here
        for before in range(index - 1, -1, -1):
            name = graded(cells[before])
            if name:
                return f"cell {index} (after {name})"
    return f"cell {index}"


def folder_files(folder: Path) -> dict[str, Path]:
    """The regular files of a folder (no links), relative to it."""
    return {str(p.relative_to(folder)): p for p in folder.rglob("*")
            if p.is_file() and not p.is_symlink() and ".ipynb_checkpoints" not in p.parts}
