"""The driver: nbgrader's own ``Autograde`` converter, split so notebooks execute in workers.

Stock ``nbgrader autograde`` handles one submission at a time: *sanitize* (clear outputs,
de-duplicate cell ids, restore the kernelspec, overwrite locked cells and hidden tests from
the gradebook, validate metadata), *execute*, then *score* (``IgnorePattern``,
``LimitOutput``, ``SaveAutoGrades``, late penalties, validate) and write ``autograded/``.
:class:`ParallelAutograde` is a subclass of that converter and runs exactly those
preprocessors, from the same configuration, in the same order, in this process (the only
one that touches the gradebook). Only *execute* is different: it is handed to a pool of
worker threads, each driving one sandboxed worker (:mod:`autograder.grading.sandbox`)
with nbgrader's ``Execute`` (:mod:`autograder.grading.execute`), and its result is
replayed into the scoring step when it comes back.

Per submission, nothing can stop the run: every failure becomes an
:class:`~autograder.grading.report.Outcome` with its reason, and nbgrader's own warnings
(a changed checksum, a duplicated or missing cell, an unknown notebook) become reasons too.
Two repairs are added before nbgrader's ``OverwriteCells``, because without them one
edited notebook aborts a stock run or corrupts its grading:

* ``DropEmptyNbgraderMetadata``: ``DeduplicateIds`` leaves the extra copies of a duplicated
  cell with empty nbgrader metadata, which nbgrader's validator then rejects as "an old
  version of the nbgrader metadata format" and stock nbgrader stops the whole run;
* ``RestoreCellFlags``: a learner who flips ``grade``/``solution``/``points`` of a graded
  cell makes ``OverwriteCells`` raise "Inconsistent checksums"; the flags are put back
  from the gradebook first.

And ``OverwriteCells.add_missing_cells`` is switched on (nbgrader's own repair for deleted
graded cells, issues #1083/#1682).
"""

from __future__ import annotations

import glob
import json
import logging
import os
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.converters import Autograde
from nbgrader.converters.base import BaseConverter, NbGraderException
from nbgrader.preprocessors import (
    ClearHiddenTests,
    DeduplicateIds,
    Execute,
    NbGraderPreprocessor,
    OverwriteCells,
    SaveAutoGrades,
)
from nbgrader.utils import rmtree
from traitlets.config import Config
from traitlets.utils.importstring import import_item

from autograder.grading import core
from autograder.grading.calibrate import CellLimits, measure
from autograder.grading.report import Outcome
from autograder.grading.sandbox import Limits, Worker
from autograder.grading.state import Ledger, crash_point, fingerprint, fully_scored
from autograder.grading.verify import VerifyChecks

MAX_NOTEBOOK_BYTES = 50 << 20  # a bigger submitted notebook is not read at all
MAX_EXTRA_FILE_BYTES = 50 << 20  # a bigger extra file is not copied to autograded/


# ------------------------------------------------------------------------------ speed
class _SchemaCheckedOnce:
    """Stands for the ``jsonschema`` module inside nbgrader's cell-metadata validator.

    ``CheckCellMetadata`` (run twice per notebook) validates every cell's nbgrader metadata
    with ``jsonschema.validate``, which first checks the *schema itself* against the JSON
    Schema meta-schema on every call: about 0.15 s per notebook in the driver, the one
    process every submission goes through. This does what ``jsonschema.validate`` does
    (same validator class, same ``best_match`` error) but checks each schema once.
    """

    def __init__(self, real) -> None:
        self._real = real
        self._validators: dict[str, object] = {}

    def __getattr__(self, name):
        return getattr(self._real, name)

    def validate(self, instance, schema, cls=None, *args, **kwargs):
        if cls is not None or args or kwargs:
            return self._real.validate(instance, schema, cls, *args, **kwargs)
        key = json.dumps(schema, sort_keys=True)
        validator = self._validators.get(key)
        if validator is None:
            cls = self._real.validators.validator_for(schema)
            cls.check_schema(schema)
            validator = self._validators[key] = cls(schema)
        error = self._real.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            raise error


def _check_metadata_schema_once() -> None:
    from nbgrader.nbgraderformat import common

    if not isinstance(common.jsonschema, _SchemaCheckedOnce):
        common.jsonschema = _SchemaCheckedOnce(common.jsonschema)


class _OneEnginePerDatabase:
    """Stands for SQLAlchemy's ``create_engine`` inside ``nbgrader.api``.

    nbgrader opens a new ``Gradebook``, and so a new SQLAlchemy engine, for every step of
    every notebook (about a dozen per submission), and SQLAlchemy keeps its compiled-SQL
    cache and its dialect set-up per engine: every query was compiled again each time.
    The driver grades the whole class in one process, so it keeps one engine per database
    URL instead. ``Gradebook.close()`` still disposes of the engine's connections (it opens
    new ones when next used); the statements sent to the database are the same.
    """

    def __init__(self, real) -> None:
        self._real = real
        self._engines: dict[tuple, object] = {}
        self._lock = threading.Lock()

    def __call__(self, url, *args, **kwargs):
        try:
            key = (str(url), args, tuple(sorted(kwargs.items())))
            hash(key)
        except TypeError:
            return self._real(url, *args, **kwargs)
        with self._lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = self._engines[key] = self._real(url, *args, **kwargs)
            return engine


def _reuse_gradebook_engines() -> None:
    from nbgrader import api

    if not isinstance(api.create_engine, _OneEnginePerDatabase):
        api.create_engine = _OneEnginePerDatabase(api.create_engine)


# ------------------------------------------------------------------------- calibration
def calibration_cache(root: Path, assignment: str) -> Path:
    return root / "grade-reports" / ".calibration" / f"{assignment}.json"


def calibration_key(src: Path, notebooks: list[str], assignment: str, where: str) -> str:
    """What the solution's cell times depend on: its notebooks, the lesson's checks, this
    machine (or cluster), the Python and torch that run them."""
    import hashlib
    import importlib.util
    import platform

    h = hashlib.sha256()
    for name in sorted(notebooks):
        h.update((src / f"{name}.ipynb").read_bytes())
    spec = importlib.util.find_spec(f"autograder.lessons.l{assignment}")
    if spec is not None and spec.origin and os.path.exists(spec.origin):
        h.update(Path(spec.origin).read_bytes())
    try:
        from importlib.metadata import version

        torch_version = version("torch")
    except Exception:
        torch_version = "?"
    h.update(f"{platform.node()}|{where}|{platform.python_version()}|{torch_version}|"
             f"{os.cpu_count()}".encode())
    return h.hexdigest()


def read_calibration(path: Path, key: str) -> dict[str, float] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    measured = data.get("measured")
    if not isinstance(measured, dict):
        return None
    return {str(k): float(v) for k, v in measured.items() if isinstance(v, int | float)}


def write_calibration(path: Path, key: str, measured: dict[str, float]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "measured": measured,
                                   "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                  indent=1))
        os.replace(tmp, path)
    except OSError:
        pass  # only the next run's time is lost


def solution_unverified(result: core.Executed) -> tuple[list[str], list[str]]:
    """The solution's graded cells whose checks the grader's checker did not pass, and among
    them those that passed in the kernel all the same (the checker, not the solution, fails)."""
    from autograder.grading.verify import expected_checks, judge, nbgrader_gives_points

    out, overruled = [], []
    for name, nb in result.notebooks.items():
        records = result.checks.get(name, {})
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
                continue
            expected = expected_checks(cell.source)
            if expected:
                verdict = judge(expected, records.get(meta["grade_id"]))
                if not verdict.ok:
                    out.append(f"{name} {meta['grade_id']}: {verdict.reason}")
                    if nbgrader_gives_points(cell):
                        overruled.append(out[-1])
    return out, overruled


# ----------------------------------------------------------------------------- repairs
class DropEmptyNbgraderMetadata(NbGraderPreprocessor):
    """Remove the empty ``nbgrader`` metadata ``DeduplicateIds`` leaves on duplicate cells."""

    def preprocess_cell(self, cell, resources, index):
        if cell.get("metadata", {}).get("nbgrader", None) == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


class RestoreCellFlags(NbGraderPreprocessor):
    """Put ``grade``/``solution``/``points`` of known cells back to what the gradebook says."""

    def preprocess(self, nb, resources):
        db_url = resources["nbgrader"]["db_url"]
        with Gradebook(db_url) as gb:
            notebook = gb.find_notebook(resources["nbgrader"]["notebook"],
                                        resources["nbgrader"]["assignment"])
            self._grade = {c.name: c.max_score for c in notebook.grade_cells}
            self._solution = {c.name for c in notebook.solution_cells}
            self._task = {c.name for c in notebook.task_cells}
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        meta = cell.get("metadata", {}).get("nbgrader")
        if not meta or "grade_id" not in meta:
            return cell, resources
        gid = meta["grade_id"]
        if gid not in self._grade and gid not in self._solution and gid not in self._task:
            return cell, resources
        want = {"grade": gid in self._grade, "solution": gid in self._solution}
        if gid in self._task:
            want["task"] = True
        for key, value in want.items():
            if bool(meta.get(key, False)) != value:
                self.log.warning("Attribute '%s' for cell %s has changed! (should be: %s, got: %s)",
                                 key, gid, value, meta.get(key))
                meta[key] = value
        if gid in self._grade:
            points = float(self._grade[gid])
            try:
                got = float(meta.get("points"))
            except (TypeError, ValueError):
                got = None
            if got != points:
                self.log.warning("Attribute 'points' for cell %s has changed! (should be: %s, "
                                 "got: %s)", gid, points, meta.get("points"))
                meta["points"] = points
        return cell, resources


class ReportEditedCells(NbGraderPreprocessor):
    """Say which locked cells the learner edited (``OverwriteCells`` restores them).

    ``OverwriteCells`` warns about a changed checksum for every cell with hidden tests
    (the submitted copy never has them), so that warning alone cannot tell an edit; this
    compares the submitted source with what the release version of the cell is.
    """

    def preprocess(self, nb, resources):
        with Gradebook(resources["nbgrader"]["db_url"]) as gb:
            notebook = gb.find_notebook(resources["nbgrader"]["notebook"],
                                        resources["nbgrader"]["assignment"])
            self._locked = {c.name: (c.source, c.cell_type) for c in notebook.source_cells
                            if c.locked}
        self._hidden = ClearHiddenTests(parent=self.parent)
        return super().preprocess(nb, resources)

    @staticmethod
    def _norm(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip().splitlines())

    def preprocess_cell(self, cell, resources, index):
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid not in self._locked:
            return cell, resources
        source, cell_type = self._locked[gid]
        release = NotebookNode(cell_type=cell_type, source=source, metadata={})
        self._hidden._remove_hidden_test_region(release)
        if self._norm(cell.source) != self._norm(release.source):
            self.log.warning("Locked cell %s was edited in the submission", gid)
        return cell, resources


class Replay(NbGraderPreprocessor):
    """Stands where ``Execute`` stood: hands on the notebook a worker executed."""

    def __init__(self, executed, **kw) -> None:
        super().__init__(**kw)
        self.executed = executed

    def preprocess(self, nb, resources):
        return self.executed, resources


def unverified_note(notebook: str, lost: list[tuple[str, str]]) -> str:
    """One reason for the graded cells of a notebook that lost their points to verification:
    ``01_leaves.ipynb: 13 graded cells scored 0, their checks could not be verified: Q1,
    graded part "basics": no check of it reached ...; ...`` (the same explanation once)."""
    by_reason: dict[str, list[str]] = {}
    for _gid, reason in lost:
        what, _sep, why = reason.partition(": ")
        by_reason.setdefault(why, []).append(what)
    parts = [f"{'; '.join(whats)}: {why}" if len(whats) > 1 else f"{whats[0]}: {why}"
             for why, whats in by_reason.items()]
    n = len(lost)
    head = "1 graded cell scored 0" if n == 1 else f"{n} graded cells scored 0"
    return f"{notebook}: {head}, its check could not be verified: " + " | ".join(parts) \
        if n == 1 else f"{notebook}: {head}, their checks could not be verified: " + \
        " | ".join(parts)


# ------------------------------------------------------------------- warnings -> reasons
_REASONS = [
    (re.compile(r"Locked cell (\S+) was edited"),
     "locked cell {0} was edited: restored from the gradebook"),
    (re.compile(r"Attribute '(\w+)' for cell (\S+) has changed"),
     "cell {1}: {0} was changed, restored from the gradebook"),
    (re.compile(r"Cell with id '(.+)' exists multiple times"),
     "cell {0} is duplicated: the last copy is graded, the others run as ordinary cells"),
    (re.compile(r"Missing grade cell (\S+) encountered"),
     "graded cell {0} was deleted: restored from the gradebook"),
    (re.compile(r"Cell '(.+)' does not exist in the database"),
     "cell with unknown grade_id {0!r} is treated as an ordinary cell"),
    (re.compile(r"No submitted file: (.*)"), "notebook {0} is missing: scored 0"),
    (re.compile(r"Skipping unknown notebook: (.*)"), "unknown notebook {0} was not graded"),
]
# a changed checksum is what every cell with hidden tests shows (see ReportEditedCells)
_IGNORED = re.compile(r"seconds late|Removing existing|Updating existing|Removing failed"
                      r"|Attribute 'checksum'|No notebooks found")


def reason_from_log(message: str) -> str | None:
    if _IGNORED.search(message):
        return None
    for pattern, text in _REASONS:
        m = pattern.search(message)
        if m:
            groups = [os.path.basename(g) if "/" in g else g for g in m.groups()]
            return text.format(*groups)
    first = message.strip().splitlines()[0] if message.strip() else ""
    return f"nbgrader: {first[:200]}" if first else None


class _Capture(logging.Handler):
    """Collects warnings that this thread logs while one submission is processed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            try:
                self.messages.append(record.getMessage())
            except Exception:
                self.messages.append(str(record.msg))


# ------------------------------------------------------------------------- screening
def screen_submission(folder: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """Look at a submission folder without following links.

    Returns (names to leave out of the copy, problems to report, bad notebooks -> why).
    """
    leave_out: list[str] = []
    problems: list[str] = []
    bad: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = path.relative_to(folder)
            st = path.lstat()
            if path.is_symlink():
                target = os.readlink(path)
                problems.append(f"symbolic link {rel} -> {target} ignored")
                leave_out.append(name)
                if name.endswith(".ipynb"):
                    bad[name] = f"{rel} is a symbolic link (to {target})"
            elif name in filenames and not path.is_file():
                problems.append(f"special file {rel} ignored")
                leave_out.append(name)
            elif name in filenames and st.st_size > MAX_EXTRA_FILE_BYTES \
                    and not name.endswith(".ipynb"):
                problems.append(f"file {rel} ({st.st_size >> 20} MiB) is too big and was not "
                                "copied")
                leave_out.append(name)
    for path in sorted(folder.glob("*.ipynb")):
        if path.name in bad:
            continue
        size = path.lstat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            bad[path.name] = f"{path.name} is {size >> 20} MiB, over the {MAX_NOTEBOOK_BYTES >> 20}" \
                             " MiB limit"
            continue
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (ValueError, UnicodeDecodeError) as exc:
            bad[path.name] = f"{path.name} is not valid JSON ({exc})"
            continue
        if not isinstance(data, dict) or not isinstance(data.get("cells", []), list):
            bad[path.name] = f"{path.name} is not a notebook"
            continue
        major = data.get("nbformat")
        if major != 4:
            if isinstance(major, int) and major < 4:
                problems.append(f"{path.name} is nbformat {major}; upgraded to 4 to grade it")
            else:
                bad[path.name] = f"{path.name} has nbformat {major!r}, not 4"
    return leave_out, problems, bad


# ----------------------------------------------------------------------------- jobs
@dataclass
class Job:
    student: str
    assignment: str
    submitted: list[str]  # submitted notebook paths being graded
    sanitized: list[str]  # their sanitized copies in autograded/
    outcome: Outcome
    t0: float
    fingerprint: str = ""  # of the submitted files being graded (see state.Ledger)
    abandoned: bool = False  # its worker was killed by a second Ctrl-C: roll it back
    executed: dict[str, nbformat.NotebookNode] = field(default_factory=dict)
    # sanitized path -> graded cell's grade id -> the submission's checker's record of it
    checks: dict[str, dict[str, dict]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    busy: float = 0.0  # seconds spent preparing, executing and scoring (not waiting)


class ParallelAutograde(Autograde):
    """``nbgrader autograde`` with execution in parallel workers; one outcome per submission."""

    def __init__(self, *, workers: list[Worker], limits: Limits, students: list[str] | None,
                 on_outcome=None, calibrate: CellLimits | None = None, dask=None,
                 dask_setup: dict | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        # a distributed.Client: execution goes to its cluster instead of local workers
        self.dask = dask
        self.dask_setup = dask_setup or {}
        self._futures: dict[int, object] = {}
        # per-cell limits from the solution's own times (None: the configured timeout only)
        self.calibration = calibrate
        self.cell_limits: CellLimits | None = None
        self.calibration_note = ""
        self.solution_unverified: list[str] = []
        self.refusal = ""  # why grading must not go on (set by the calibration)
        self.workers = workers
        self.limits = limits
        self.only_students = set(students) if students else None
        self.on_outcome = on_outcome or (lambda outcome: None)
        self.outcomes: list[Outcome] = []
        self.problem_folders: dict[str, str] = {}  # submission folder -> why it has no notebook
        self._replay = None
        self._checks: dict[str, dict] | None = None  # of the notebook being scored
        self._on_unverified = None
        self.verifications: dict = {}  # of the notebook last scored: grade id -> Verification
        self._add_missing = True
        self.ledger: Ledger | None = None
        self._fingerprint = ""
        self._resumed = False
        # set by request_stop() (a signal handler): stop taking submissions; abandon also
        # kills the workers and rolls back what they were executing
        self.stop_signal: int | None = None
        self.abandon = False
        self._abandoned = False
        _check_metadata_schema_once()
        _reuse_gradebook_engines()
        c = Config()
        c.OverwriteCells.add_missing_cells = True
        self.update_config(c)

    # -- preprocessors
    def _sanitize_list(self) -> list:
        out = []
        for pp in self.sanitize_preprocessors:
            if isinstance(pp, str):  # the configuration may name them
                pp = import_item(pp)
            if pp is OverwriteCells or (isinstance(pp, type) and issubclass(pp, OverwriteCells)):
                out.append(RestoreCellFlags)
                out.append(ReportEditedCells)
                out.append(OverwriteCells(parent=self.exporter,
                                          add_missing_cells=self._add_missing))
                continue
            out.append(pp)
            if pp is DeduplicateIds:
                out.append(DropEmptyNbgraderMetadata)
        return out

    def _init_preprocessors(self) -> None:
        self.exporter._preprocessors = []
        if self._sanitizing:
            preprocessors = self._sanitize_list()
        else:
            preprocessors = []
            for pp in self.autograde_preprocessors:
                if isinstance(pp, str):  # the configuration may name them
                    pp = import_item(pp)
                if isinstance(pp, type) and issubclass(pp, Execute):
                    preprocessors.append(Replay(self._replay, parent=self.exporter))
                    continue
                if self._checks is not None and (pp is SaveAutoGrades or (
                        isinstance(pp, type) and issubclass(pp, SaveAutoGrades))):
                    verify = VerifyChecks(self._checks, self._on_unverified,
                                          parent=self.exporter)
                    self.verifications = verify.results
                    preprocessors.append(verify)
                preprocessors.append(pp)
        for pp in preprocessors:
            self.exporter.register_preprocessor(pp)

    # -- which submissions
    def init_notebooks(self) -> None:
        self.assignments = {}
        self.notebooks = []
        pattern = self._format_source(self.coursedir.assignment_id, self.coursedir.student_id)
        for folder in sorted(glob.glob(pattern)):
            student = Path(folder).parent.name
            if self.only_students is not None and student not in self.only_students:
                continue
            found = glob.glob(os.path.join(folder, self.coursedir.notebook_id + ".ipynb"))
            self.assignments[folder] = found

    def _ids(self, folder: str) -> dict[str, str]:
        regexp = self._format_source("(?P<assignment_id>.*)", "(?P<student_id>.*)", escape=True)
        m = re.match(regexp, folder)
        if m is None:
            raise RuntimeError(f"could not parse the submission folder {folder}")
        return m.groupdict()

    def _known_notebooks(self, assignment: str) -> list[str]:
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                return [n.name for n in gb.find_assignment(assignment).notebooks]
            except MissingEntry:
                return []

    # -- stopping
    def request_stop(self, signum: int) -> None:
        """First call: finish what the workers are executing, start nothing new. Second
        call: abandon that too (its submissions are rolled back, visibly not graded)."""
        if self.stop_signal is None:
            self.stop_signal = signum
        else:
            self.abandon = True

    # -- graded or not (see autograder.grading.state)
    def _nbgrader_state(self, assignment: str, student: str, dest: str) -> str:
        """No ledger row (graded by stock nbgrader, or by an older driver): ``'changed'``
        when the submission is newer than ``autograded/`` (nbgrader's rule), else
        ``'graded'`` when every grade cell has a score, else ``'half'``."""
        src = self._format_source(assignment, student)
        new = self.coursedir.get_existing_timestamp(src)
        old = self.coursedir.get_existing_timestamp(dest)
        if new is not None and old is not None and new > old:
            return "changed"
        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            return "graded" if fully_scored(gb, assignment, student) else "half"

    def _graded_state(self, assignment: str, student: str, notebooks: list[str],
                      fp: str) -> str:
        """``'graded'`` (skip it: graded for exactly these files), ``'half'`` (an earlier run
        stopped part-way through it), or ``'new'`` (never graded, or changed since)."""
        assert self.ledger is not None
        dest = os.path.normpath(self._format_dest(assignment, student))
        row = self.ledger.get(assignment, student)
        complete = os.path.isdir(dest) and all(
            os.path.isfile(os.path.join(dest, os.path.basename(nb))) for nb in notebooks)
        if row is not None:
            if row[0] == "grading":
                return "half"
            return "graded" if complete and row[1] == fp else "new"
        if not os.path.exists(dest):
            return "new"
        if not complete:
            return "half"
        state = self._nbgrader_state(assignment, student, dest)
        return "new" if state == "changed" else state

    def init_destination(self, assignment_id: str, student_id: str) -> bool:
        """Skip only what is fully graded for the files it has now; else start it afresh.

        Replaces nbgrader's rule ("``autograded/`` exists and is not older"), which takes a
        submission that a killed run had only sanitized for graded.
        """
        if self.coursedir.student_id_exclude and \
                student_id in self.coursedir.student_id_exclude.split(","):
            return False
        assert self.ledger is not None
        state = self._graded_state(assignment_id, student_id, self.notebooks, self._fingerprint)
        if state == "graded" and not self.force:
            return False
        self._resumed = state == "half"
        # recorded as being graded *before* anything is removed or written
        self.ledger.begin(assignment_id, student_id, self._fingerprint)
        dest = os.path.normpath(self._format_dest(assignment_id, student_id))
        if os.path.exists(dest):
            rmtree(dest)
        return True

    def _graded_already(self, folder: str) -> bool:
        """Would this submission be skipped? (For those a stopped run never reached.)"""
        if self.force:
            return False
        try:
            gd = self._ids(folder)
            fp = fingerprint(Path(folder), screen_submission(Path(folder))[0])
            return self._graded_state(gd["assignment_id"], gd["student_id"],
                                      self.assignments[folder], fp) == "graded"
        except Exception:
            return False

    def _roll_back(self, job: Job, why: str) -> None:
        """Leave a submission visibly not graded: nothing in autograded/, no ledger row."""
        self._handle_failure(job.assignment, job.student, job.submitted)
        try:  # the student's folder too, if this submission was all it held
            os.rmdir(os.path.dirname(os.path.normpath(
                self._format_dest(job.assignment, job.student))))
        except OSError:
            pass
        assert self.ledger is not None
        self.ledger.clear(job.assignment, job.student)
        job.outcome.status = "not graded"
        job.outcome.reasons = [f"{why}; re-run `autograder grade` to grade it"]

    # -- phase 1: sanitize (driver)
    def _handle_failure(self, assignment: str, student: str, notebooks: list[str],
                        whole: bool = True) -> None:
        """Like stock nbgrader: remove what was written, so that a re-run tries again."""
        dest = os.path.normpath(self._format_dest(assignment, student))
        if whole and self.coursedir.notebook_id == "*":
            if os.path.exists(dest):
                rmtree(dest)
            return
        for notebook in notebooks:
            path = os.path.join(dest, os.path.basename(notebook))
            if os.path.exists(path):
                os.remove(path)

    def _prepare(self, folder: str, outcome: Outcome, known: list[str]) -> Job | None:
        gd = self._ids(folder)
        student, assignment = gd["student_id"], gd["assignment_id"]
        for part in (Path(folder), Path(folder).parent):
            if part.is_symlink():
                outcome.fail(f"{part.relative_to(self.coursedir.root)} is a symbolic link: "
                             "not graded")
                return None
        leave_out, problems, bad = screen_submission(Path(folder))
        for p in problems:
            outcome.note(p)
        notebooks = []
        for path in sorted(self.assignments[folder]):
            name = os.path.basename(path)
            if name in bad:
                outcome.note(f"{bad[name]}: not graded")
            else:
                notebooks.append(path)
        names = {os.path.splitext(os.path.basename(p))[0] for p in notebooks}
        missing = [k for k in known if k not in names
                   and not os.path.lexists(os.path.join(folder, k + ".ipynb"))]
        unknown = sorted(n for n in names if n not in known)
        if missing and unknown:
            outcome.note(f"expected {', '.join(m + '.ipynb' for m in missing)} but found "
                         f"{', '.join(u + '.ipynb' for u in unknown)} (renamed?)")
        self.notebooks = [p for p in notebooks
                          if os.path.splitext(os.path.basename(p))[0] in known]
        assert self.ledger is not None
        self._fingerprint = fingerprint(Path(folder), leave_out)
        if not self.notebooks:
            expected = f" (expected {', '.join(k + '.ipynb' for k in known)})" if known else ""
            if not self.assignments[folder]:
                # no notebook at all: stock nbgrader records nothing for it, nor do we
                outcome.fail(f"no gradable notebook in the submission: no .ipynb file{expected}")
                return None
            outcome.fail(f"no gradable notebook in the submission{expected}")
            self.ledger.begin(assignment, student, self._fingerprint)
            self._zero_missing(assignment, student)
            self.ledger.clear(assignment, student)
            return None
        if not self.init_destination(assignment, student):
            outcome.status = "skipped"
            outcome.reasons.append("already graded and unchanged since (use --force)")
            return None
        if self._resumed:
            outcome.reasons.append("an earlier grading run stopped part-way through this "
                                   "submission: graded again from the start")
        self.run_pre_convert_hook()
        saved_ignore = list(self.coursedir.ignore)
        self.coursedir.ignore = saved_ignore + [glob.escape(n) for n in leave_out]
        try:
            self.init_assignment(assignment, student)
        finally:
            self.coursedir.ignore = saved_ignore
        sanitized = []
        for path in self.notebooks:
            self._sanitize_one(path, outcome)
            sanitized.append(os.path.join(self._format_dest(assignment, student),
                                          os.path.basename(path)))
            crash_point("sanitize")
        return Job(student, assignment, list(self.notebooks), sanitized, outcome, 0.0,
                   fingerprint=self._fingerprint)

    def _sanitize_one(self, path: str, outcome: Outcome) -> None:
        self._sanitizing = True
        self._add_missing = True
        self._init_preprocessors()
        try:
            BaseConverter.convert_single_notebook(self, path)
        except (KeyError, ValueError) as exc:
            # nbgrader's add_missing_cells fails when the cell before a deleted graded
            # cell is not itself a graded or answer cell; grade without restoring it
            self._add_missing = False
            self._init_preprocessors()
            BaseConverter.convert_single_notebook(self, path)
            outcome.note(f"a deleted graded cell could not be restored ({exc!r}): it scores 0")
        finally:
            self._add_missing = True

    def _zero_missing(self, assignment: str, student: str) -> None:
        """Record the submission in the gradebook as stock nbgrader does (a notebook it could
        not use: the submission exists, with no score); leave nothing in ``autograded/``."""
        try:
            super().init_assignment(assignment, student)
        except Exception:
            pass  # nbgrader's "No notebooks found"
        self._handle_failure(assignment, student, [])
        try:  # the student's folder too, if this submission was all it held
            os.rmdir(os.path.dirname(os.path.normpath(self._format_dest(assignment, student))))
        except OSError:
            pass

    # -- phase 2: score (driver)
    def _score(self, job: Job) -> None:
        outcome = job.outcome
        for note in job.notes:
            outcome.note(note)
        self.notebooks = job.submitted
        graded_any = False
        for sub_path, path in zip(job.submitted, job.sanitized, strict=True):
            executed = job.executed.get(path)
            if executed is None:
                self._handle_failure(job.assignment, job.student, [sub_path], whole=False)
                continue
            self._replay = executed
            self._checks = job.checks.get(path, {})
            name = os.path.basename(path)
            lost: list[tuple[str, str]] = []
            self._on_unverified = lambda gid, reason, lost=lost: lost.append((gid, reason))
            self._sanitizing = False
            self._init_preprocessors()
            try:
                BaseConverter.convert_single_notebook(self, path)
                graded_any = True
                if lost:
                    outcome.note(unverified_note(name, lost))
            except Exception as exc:
                outcome.note(f"{name}: scoring failed: {exc!r}")
                self._handle_failure(job.assignment, job.student, [sub_path], whole=False)
            finally:
                self._sanitizing = True
                self._replay = None
                self._checks = None
                self._on_unverified = None
        for err in job.errors:
            outcome.note(err)
        if not graded_any:
            outcome.fail("; ".join(job.errors) or "no notebook could be executed")
            self._handle_failure(job.assignment, job.student, job.submitted)
            assert self.ledger is not None
            self.ledger.clear(job.assignment, job.student)
            return
        self.set_permissions(job.assignment, job.student)
        self.run_post_convert_hook()
        crash_point("score")
        assert self.ledger is not None  # scores and autograded/ written: now it is graded
        self.ledger.done(job.assignment, job.student, job.fingerprint)

    # -- the pipeline
    def _worker_loop(self, worker: Worker, jobs: queue.Queue, results: queue.Queue) -> None:
        while True:
            job = jobs.get()
            if job is None:
                return
            if self.abandon:
                job.abandoned = True
                results.put(job)
                continue
            try:
                self._execute(worker, job)
            except Exception as exc:  # never lose a job
                job.errors.append(f"execution failed: {exc!r}")
            results.put(job)

    def _ensure_worker(self, worker: Worker) -> None:
        core.ensure_worker(worker, self.limits)

    def _items(self, job: Job) -> list[core.Item]:
        items = []
        for path in job.sanitized:
            dest = Path(path).parent
            items.append(core.Item(os.path.basename(path), nbformat.read(path, as_version=4),
                                   core.folder_files(dest), str(dest)))
        return items

    def _execute(self, worker: Worker, job: Job) -> None:
        result = core.execute(worker, self.limits, self.cell_limits, self.config,
                              self._items(job), stop=lambda: self.abandon, log=self.log)
        self._absorb(job, result)

    def _absorb(self, job: Job, result: core.Executed) -> None:
        """What a worker (local or on Dask) sent back, into the job."""
        by_name = {os.path.basename(p): p for p in job.sanitized}
        for name, nb in result.notebooks.items():
            job.executed[by_name[name]] = nb
            job.checks[by_name[name]] = result.checks.get(name, {})
        job.notes.extend(result.notes)
        job.errors.extend(result.errors)
        job.busy += result.seconds
        if result.abandoned:
            job.abandoned = True

    def _calibrate(self, known: list[str]) -> None:
        """Each cell's time in the solution, measured by running the assignment's source
        notebooks once as a submission, on this machine (or this cluster); remembered in
        ``grade-reports/.calibration/`` until the source or the lesson's checks change."""
        assert self.calibration is not None
        assignment = self.coursedir.assignment_id
        src = Path(self.coursedir.format_path(self.coursedir.source_directory, ".", assignment))
        cache = calibration_cache(Path(self.coursedir.root), assignment)
        key = calibration_key(src, known, assignment,
                              "dask " + str(self.dask.scheduler.address) if self.dask else "local")
        t0 = time.monotonic()
        measured = read_calibration(cache, key)
        if measured is not None:
            how = "measured earlier for this source, reused"
        else:
            items = [core.Item(f"{name}.ipynb", nbformat.read(src / f"{name}.ipynb",
                                                              as_version=4),
                               core.folder_files(src), str(src)) for name in known]
            try:
                result = self.run_calibration(items)
                problems = result.errors + result.notes
                if problems or len(result.notebooks) != len(items):
                    raise RuntimeError("; ".join(problems) or "not executed")
            except Exception as exc:
                self.calibration_note = (f"the solution could not be timed ({exc}); every cell "
                                         f"has the configured limit")
                self.log.warning("calibration failed: %s", exc)
                return
            measured = {}
            for nb in result.notebooks.values():
                measured.update(measure(nb))
            self.solution_unverified, overruled = solution_unverified(result)
            if overruled:
                self.refusal = (
                    "the solution's own graded cells pass in its kernel but the grader's "
                    "checker does not confirm them, so every learner's honest work would lose "
                    "these points too; nothing was graded. Is the course installed as the "
                    "worker imports it (`autograder`, `course`)? " + "; ".join(overruled))
                return
            if not self.solution_unverified:  # a solution that does not verify is re-run
                write_calibration(cache, key, measured)
            how = f"{time.monotonic() - t0:.1f} s to measure"
        self.cell_limits = CellLimits(measured, self.calibration.factor, self.calibration.floor,
                                      None)
        slowest = max(measured.values(), default=0.0)
        self.calibration_note = (
            f"cell limits from the solution's times on this machine ({how}; slowest cell "
            f"{slowest:.2f} s): {self.calibration.factor:g} x each cell's time, at least "
            f"{self.calibration.floor:g} s")
        if self.solution_unverified:
            self.calibration_note += (
                "\nWARNING: the solution's own graded cells do not all pass the grader's "
                "checker, so honest work would lose their points too: "
                + "; ".join(self.solution_unverified))
            self.log.warning("solution does not verify: %s", self.solution_unverified)

    def run_calibration(self, items: list[core.Item]) -> core.Executed:
        """Execute the solution on the first local worker, or as a task on the cluster."""
        if self.dask is None:
            return core.execute(self.workers[0], self.limits, None, self.config, items,
                                log=self.log)
        from autograder.grading import dask_grading as dg

        fut = self.dask.submit(dg.execute_task, self.dask_setup, None,
                               dg.portable_config(self.config), dg.payload(items), pure=False)
        return dg.result_of(fut.result(timeout=self.limits.notebook_timeout + 120))

    # -- execution on a Dask cluster
    def _submit_dask(self, job: Job, results: queue.Queue) -> None:
        from autograder.grading import dask_grading as dg

        fut = self.dask.submit(dg.execute_task, self.dask_setup,
                               dg.cell_limits_data(self.cell_limits),
                               dg.portable_config(self.config), dg.payload(self._items(job)),
                               pure=False, key=f"grade-{job.student}-{id(job):x}")
        self._futures[id(job)] = fut

        def done(f, job=job) -> None:  # in the client's thread: only hand it over
            results.put((job, f))

        fut.add_done_callback(done)

    def _dask_result(self, job: Job, fut) -> Job:
        self._futures.pop(id(job), None)
        from autograder.grading import dask_grading as dg

        if fut.cancelled() or job.abandoned:
            job.abandoned = True
            return job
        try:
            self._absorb(job, dg.result_of(fut.result()))
        except Exception as exc:
            name = type(exc).__name__
            if name == "KilledWorker":
                job.errors.append("the Dask workers that ran it died while executing it, "
                                  f"each time it was tried ({exc})")
            else:
                job.errors.append(f"execution on the Dask cluster failed: {name}: {exc}")
        return job

    def _kill_workers(self, in_flight: dict[int, Job]) -> None:
        """Second Ctrl-C: what the workers are executing is abandoned and rolled back."""
        self._abandoned = True
        for job in in_flight.values():
            job.abandoned = True
        for fut in list(self._futures.values()):
            fut.cancel()
        for w in self.workers:
            proc = w.proc
            if proc is not None and proc.poll() is None:
                proc.kill()

    def convert_notebooks(self) -> None:
        jobs: queue.Queue = queue.Queue()
        results: queue.Queue = queue.Queue()
        threads = [] if self.dask is not None else [
            threading.Thread(target=self._worker_loop, args=(w, jobs, results), daemon=True,
                             name=f"grade-worker-{w.index}") for w in self.workers]
        for t in threads:
            t.start()
        known = self._known_notebooks(self.coursedir.assignment_id)  # opens the gradebook
        self.ledger = Ledger(self.coursedir.db_url)
        calibrated = self.calibration is None
        # prepare only a little ahead of the workers: a stopped run leaves few half-done
        # submissions to roll back, and the driver scores while the workers execute
        slots = sum(self.dask.nthreads().values()) if self.dask is not None \
            else len(self.workers)
        max_ahead = max(1, slots) + 1
        in_flight: dict[int, Job] = {}

        def finish(outcome: Outcome, t0: float, busy: float = 0.0) -> None:
            outcome.seconds = busy + time.monotonic() - t0
            self.outcomes.append(outcome)
            self.on_outcome(outcome)

        def score(job: Job) -> None:
            t0 = time.monotonic()
            capture = _Capture()
            self.log.addHandler(capture)
            try:
                self._score(job)
            except Exception as exc:
                job.outcome.fail(f"scoring failed: {exc!r}")
                self._handle_failure(job.assignment, job.student, job.submitted)
                assert self.ledger is not None
                self.ledger.clear(job.assignment, job.student)
            finally:
                self.log.removeHandler(capture)
            for msg in capture.messages:
                reason = reason_from_log(msg)
                if reason:
                    job.outcome.note(reason)
            finish(job.outcome, t0, job.busy)

        def handle(job: Job) -> None:
            in_flight.pop(id(job), None)
            if job.abandoned:
                t0 = time.monotonic()
                self._roll_back(job, "the run was stopped while this submission was being "
                                "executed")
                finish(job.outcome, t0, job.busy)
            else:
                score(job)

        def take(block: bool) -> Job | None:
            while True:
                if self.abandon and not self._abandoned:
                    self._kill_workers(in_flight)
                try:
                    got = results.get(timeout=0.2) if block else results.get_nowait()
                except queue.Empty:
                    if not block:
                        return None
                    continue
                return self._dask_result(*got) if isinstance(got, tuple) else got

        folders = sorted(self.assignments)
        started = 0
        try:
            for folder in folders:
                if self.stop_signal is not None:
                    break
                started += 1
                t0 = time.monotonic()
                student = Path(folder).parent.name
                outcome = Outcome(student, notebooks=[os.path.basename(p) for p in
                                                      self.assignments[folder]])
                capture = _Capture()
                self.log.addHandler(capture)
                job = None
                try:
                    job = self._prepare(folder, outcome, known)
                except Exception as exc:
                    outcome.fail(f"could not be prepared: {type(exc).__name__}: {exc}")
                    try:
                        gd = self._ids(folder)
                        self._handle_failure(gd["assignment_id"], gd["student_id"],
                                             self.assignments[folder])
                        self.ledger.clear(gd["assignment_id"], gd["student_id"])
                    except Exception:
                        pass
                finally:
                    self.log.removeHandler(capture)
                for msg in capture.messages:
                    reason = reason_from_log(msg)
                    if reason and outcome.status != "skipped":
                        outcome.note(reason) if outcome.status != "failed" \
                            else outcome.reasons.append(reason)
                if job is None:
                    finish(outcome, t0)
                    continue
                job.t0 = t0
                job.busy = time.monotonic() - t0
                if not in_flight and not any(w.alive() for w in self.workers):
                    for w in self.workers:  # first job: they import torch meanwhile
                        w.start()
                if not calibrated:  # first job: time the solution (not when all is skipped)
                    calibrated = True
                    self._calibrate(known)
                    if self.refusal:  # grading now would take honest work's points
                        self._roll_back(job, "grading was refused")
                        raise NbGraderException(self.refusal)
                in_flight[id(job)] = job
                if self.dask is not None:
                    self._submit_dask(job, results)
                else:
                    jobs.put(job)
                while in_flight:  # score what has come back; wait when far enough ahead
                    done = take(block=len(in_flight) >= max_ahead)
                    if done is None:
                        break
                    handle(done)
            if self.stop_signal is not None:
                # queued but not taken by a worker: roll back, it was never executed
                while True:
                    try:
                        job = jobs.get_nowait()
                    except queue.Empty:
                        break
                    if job is None:
                        continue
                    in_flight.pop(id(job), None)
                    t0 = time.monotonic()
                    self._roll_back(job, "the run was stopped before this submission was "
                                    "executed")
                    finish(job.outcome, t0, job.busy)
            while in_flight:
                done = take(block=True)
                if done is not None:
                    handle(done)
        finally:
            for _ in threads:
                jobs.put(None)
        for folder in folders[started:]:
            outcome = Outcome(Path(folder).parent.name, status="not graded",
                              notebooks=[os.path.basename(p) for p in self.assignments[folder]])
            if self._graded_already(folder):  # by an earlier run: untouched by this one
                outcome.status = "skipped"
                outcome.reasons.append("already graded and unchanged since (use --force)")
            else:
                outcome.reasons.append("the run was stopped before this submission; re-run "
                                       "`autograder grade` to grade it")
            self.outcomes.append(outcome)
        self.ledger.close()
