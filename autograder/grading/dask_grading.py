"""Grading on a Dask distributed cluster: each submission's execution is a Dask task.

``autograder grade ASSIGNMENT --scheduler tcp://HOST:PORT`` (or ``--scheduler-file``)
keeps the driver exactly as it is (sanitizing and scoring with nbgrader, the only process
that writes the gradebook, so SQLite keeps working) and sends the *execution* of each
submission to the cluster. A task carries the sanitized notebooks and the submission's
files, never the gradebook or the hidden course folders; on the Dask worker it runs the
same grading core as a local worker thread (:func:`autograder.grading.core.execute`) in a
sandboxed worker process (:class:`autograder.grading.sandbox.Worker`: its own unprivileged
uid, no network, private scratch, the same limits), started once per Dask worker process
and kept for the next tasks. Nothing forks inside the (multi-threaded) Dask worker itself:
the sandboxed worker is a process of its own, and it forks the kernels.

Start the workers with one thread each (``dask worker ADDRESS --nthreads 1``); more
threads in one worker process wait for its one sandboxed worker in turn. The Dask
workers need this course's Python packages (the same ``requirements.txt``) and root for the
sandbox, as a local run does; a worker that cannot sandbox says so and the run refuses to
start. A Dask worker that dies mid-submission loses nothing: the scheduler runs the task
again on another worker, and after ``distributed.scheduler.allowed-failures`` deaths the
submission is reported failed with that reason.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from dataclasses import asdict
from pathlib import Path

import nbformat
from traitlets.config import Config

from autograder.grading import core
from autograder.grading.calibrate import CellLimits
from autograder.grading.sandbox import Limits, Worker, sandbox_problem
from autograder.grading.state import new_scratch, remove_stale_scratch

_lock = threading.Lock()
_workers: dict[str, Worker] = {}  # this Dask worker process's sandboxed worker, by set-up

# The parts of the course's nbgrader configuration that execution reads.
CONFIG_SECTIONS = ("Execute", "ExecutePreprocessor", "NotebookClient")


def portable_config(config) -> dict:
    """The execution settings of a traitlets config, as plain data for a task."""
    out: dict = {}
    for section in CONFIG_SECTIONS:
        values = {}
        for key, value in dict(config.get(section, {})).items():
            try:
                json.dumps(value)
            except TypeError:
                continue
            values[key] = value
        if values:
            out[section] = values
    return out


def _worker_for(setup: dict) -> Worker:
    key = json.dumps(setup, sort_keys=True)
    worker = _workers.get(key)
    if worker is None:
        for old in _workers.values():
            old.stop()
        _workers.clear()
        remove_stale_scratch()  # of an earlier Dask worker process that was killed
        # one uid per Dask worker process on a machine: the sandbox's uid is UID_BASE + index
        worker = Worker(os.getpid(), new_scratch(), Limits(**setup["limits"]),
                        sandbox=setup["sandbox"], course_root=Path(setup["course_root"]),
                        lessons=setup["lessons"])
        _workers[key] = worker
        atexit.register(worker.stop)
    return worker


def probe(sandbox: bool) -> str | None:
    """Run on every Dask worker before grading: why it cannot grade, or ``None``."""
    if sandbox:
        problem = sandbox_problem()
        if problem:
            return f"cannot sandbox the submissions there: {problem}"
    try:
        import torch  # noqa: F401  the course's packages must be there

        import autograder.oracle  # noqa: F401
    except ImportError as exc:
        return f"the course's packages are missing there ({exc})"
    return None


def execute_task(setup: dict, cell_limits: dict | None, config: dict,
                 items: list[dict]) -> dict:
    """A Dask task: execute one submission's notebooks; return them and what to report."""
    limits = Limits(**setup["limits"])
    cl = CellLimits(**cell_limits) if cell_limits else None
    core_items = [core.Item(it["name"], nbformat.reads(it["notebook"], as_version=4),
                            it["files"], it["folder"]) for it in items]
    with _lock:
        worker = _worker_for(setup)
        result = core.execute(worker, limits, cl, Config(config), core_items)
    try:
        from distributed import get_worker

        where = get_worker().address
    except Exception:
        where = ""
    return {"notebooks": {n: nbformat.writes(nb) for n, nb in result.notebooks.items()},
            "checks": result.checks, "notes": result.notes, "errors": result.errors,
            "seconds": result.seconds, "worker": where}


def payload(items: list[core.Item]) -> list[dict]:
    out = []
    for it in items:
        files = {rel: (p.read_bytes() if isinstance(p, Path) else p)
                 for rel, p in it.files.items()}
        out.append({"name": it.name, "notebook": nbformat.writes(it.notebook),
                    "files": files, "folder": it.folder})
    return out


def result_of(data: dict) -> core.Executed:
    return core.Executed(
        notebooks={n: nbformat.reads(text, as_version=4) for n, text in data["notebooks"].items()},
        checks=dict(data.get("checks") or {}),
        notes=list(data["notes"]), errors=list(data["errors"]), seconds=float(data["seconds"]))


def setup_of(limits: Limits, sandbox: bool, course_root: Path, lessons: list[str]) -> dict:
    return {"limits": asdict(limits), "sandbox": sandbox, "course_root": str(course_root),
            "lessons": list(lessons)}


def cell_limits_data(cl: CellLimits | None) -> dict | None:
    return None if cl is None else asdict(cl)
