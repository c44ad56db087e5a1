"""``autograder grade ASSIGNMENT``: grade a whole class in parallel, sandboxed, into the gradebook.

Run from the course root (or pass ``--course``). Grades every ``submitted/*/ASSIGNMENT/``,
writes the standard gradebook and ``autograded/`` as ``nbgrader autograde`` does, prints a
progress line and a summary, and writes a JSON and a CSV report listing every submission
with its status and reason. Exit status: 0 when every submission was graded, 1 when any
could not be, 2 when grading could not start (for example: no sandbox here and no
``--no-sandbox``, or another run grading the same course), 128+N when signal N stopped it.

Stopping and resuming: Ctrl-C (or SIGTERM) stops taking submissions and finishes the ones
being executed (a second Ctrl-C abandons those too); everything not finished is rolled back
and listed as "not graded". However a run ends, ``kill -9`` and power cuts included, the next
run grades every submission that is not fully graded (:mod:`autograder.grading.state`).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from autograder.grading.calibrate import CellLimits
from autograder.grading.report import Outcome, Progress, earlier_rows, summary, write_reports
from autograder.grading.sandbox import Limits, Worker, sandbox_problem
from autograder.grading.state import (
    CourseBusy,
    CourseLock,
    DatabaseLock,
    give_back,
    new_scratch,
    remove_stale_scratch,
)

# each cell's limit: 10 x the solution's time on this machine, at least 10 s (calibrate.py)
DEFAULT_CELL_LIMITS = CellLimits()
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``'512M'`` -> bytes (K, M, G, T are powers of 1024; a plain number is bytes)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 512M or 4G)")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


@dataclass
class GradeResult:
    outcomes: list[Outcome]
    elapsed: float
    report: Path | None
    exit_code: int
    stopped_by: int | None = None  # the signal that stopped the run, if one did
    cell_limits: str = ""  # how the per-cell limits were set


class GradeRefused(RuntimeError):
    """Grading cannot start; the message says why and what to do."""


def _make_app(course: Path, assignment: str, force: bool, log_file: Path):
    from nbgrader.apps.autogradeapp import AutogradeApp

    AutogradeApp.clear_instance()
    app = AutogradeApp()
    app.initialize([assignment] + (["--force"] if force else []))
    app.coursedir.assignment_id = assignment
    # nbgrader's own log goes to the log file; the terminal gets the progress and summary
    log = app.log
    for h in list(log.handlers):
        log.removeHandler(h)
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    return app


def grade(course: Path, assignment: str, *, workers: int | None = None,
          students: list[str] | None = None, limits: Limits | None = None,
          force: bool = False, sandbox: bool = True, report: Path | None = None,
          progress_stream=None, quiet: bool = False, wait: bool = False,
          calibrate: CellLimits | None = DEFAULT_CELL_LIMITS,
          scheduler: str | None = None) -> GradeResult:
    """Grade ``submitted/*/ASSIGNMENT`` of ``course``; see the module docstring."""
    # jsonschema (through nbformat) imports the optional rfc3987_syntax, which compiles a
    # grammar at import (1-3 s); only its "iri" format checker needs it, and nbformat's
    # schema has no such format: keep it out of the driver
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    course = course.resolve()
    limits = limits or Limits()
    if sandbox and scheduler is None:  # on a cluster, each Dask worker is asked instead
        problem = sandbox_problem()
        if problem:
            raise GradeRefused(
                f"cannot sandbox the submissions here: {problem}.\n"
                "Learner code would run unconfined, as this user, able to read the hidden "
                "tests and write the gradebook.\nRun as root on Linux (util-linux unshare, "
                "setpriv, prlimit), or pass --no-sandbox to grade without the sandbox anyway.")
    if not (course / "submitted").is_dir():
        raise GradeRefused(f"no submitted/ folder in {course}: run from the course root "
                           "or pass --course")
    n = max(1, workers or os.cpu_count() or 1)
    report = report or course / "grade-reports" / f"{assignment}.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    log_file = report.with_suffix(".log")
    # nbgrader shells out to alembic when it creates a gradebook
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    lessons = [assignment] if importlib.util.find_spec(
        f"autograder.lessons.l{assignment}") is not None else []

    lock = CourseLock(course)
    try:
        lock.acquire(assignment, wait=wait, on_wait=lambda who: print(
            f"autograder grade: waiting for {who} to finish...", file=sys.stderr, flush=True))
    except CourseBusy as exc:
        raise GradeRefused(str(exc)) from None
    try:
        return _grade_locked(course, assignment, n=n, students=students, limits=limits,
                             force=force, sandbox=sandbox, report=report, log_file=log_file,
                             lessons=lessons, progress_stream=progress_stream, quiet=quiet,
                             wait=wait, calibrate=calibrate, scheduler=scheduler)
    finally:
        give_back(course)  # run as root for the sandbox: the outputs are the instructor's
        lock.release()


class _Checkpoint:
    """Keeps the report on disk current while the run goes (so a killed run leaves one
    that says it did not finish and lists what was graded), at most every few seconds."""

    def __init__(self, report: Path, meta: dict, earlier: list[dict],
                 every: float = 5.0) -> None:
        self.report, self.meta, self.every = report, meta, every
        self.earlier = earlier
        self.last = 0.0
        self.outcomes: list[Outcome] = []

    def write(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last >= self.every:
            self.last = now
            write_reports(self.outcomes, self.report, self.meta, self.earlier)


def _grade_locked(course: Path, assignment: str, *, n: int, students, limits: Limits,
                  force: bool, sandbox: bool, report: Path, log_file: Path, lessons: list[str],
                  progress_stream, quiet: bool, wait: bool,
                  calibrate: CellLimits | None, scheduler: str | None) -> GradeResult:
    from nbgrader.converters.base import NbGraderException

    from autograder.grading.engine import ParallelAutograde

    t0 = time.monotonic()
    client = _dask_client(scheduler, sandbox) if scheduler else None
    remove_stale_scratch()  # of runs that were killed before they could clean up
    scratch = new_scratch()
    if client is not None:
        n = len(client.scheduler_info()["workers"])
        pool = []
    else:
        pool = [Worker(i, scratch, limits, sandbox=sandbox, course_root=course, lessons=lessons)
                for i in range(n)]
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    meta = {"assignment": assignment, "course": str(course), "workers": n,
            "scheduler": scheduler, "run": started,
            "sandbox": sandbox, "limits": {k: v for k, v in vars(limits).items()}}
    earlier = earlier_rows(report)  # the record only grows: other learners keep their rows
    checkpoint = _Checkpoint(report, {**meta, "finished": False, "note": (
        "this run has not finished (or was killed): the submissions it lists under "
        "this_run are those it graded so far; run `autograder grade` again")},
        earlier)
    cwd = os.getcwd()
    conv = None
    db_lock = None
    handlers: dict[int, object] = {}

    def on_signal(signum, frame) -> None:
        if conv is None:
            raise KeyboardInterrupt
        first = conv.stop_signal is None
        conv.request_stop(signum)
        print("\nautograder grade: " + (
            f"stopping ({signal.Signals(signum).name}): finishing the submissions being "
            "executed, starting no new ones; press Ctrl-C again to abandon them too"
            if first else "abandoning the submissions being executed (they are rolled back)"),
            file=sys.stderr, flush=True)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, on_signal)
    try:
        os.chdir(course)
        app = _make_app(course, assignment, force, log_file)
        db_lock = DatabaseLock(app.coursedir.db_url, app.coursedir.course_id)
        try:
            db_lock.acquire(wait=wait, on_wait=lambda who: print(
                f"autograder grade: waiting for {who} to finish...", file=sys.stderr,
                flush=True))
        except CourseBusy as exc:
            raise GradeRefused(str(exc)) from None
        _ensure_registered(course, assignment, app)
        progress = None

        def on_outcome(outcome: Outcome) -> None:
            outcome.run = started
            checkpoint.outcomes.append(outcome)
            if progress is not None:
                progress.update(outcome)
            checkpoint.write()

        dask_setup = None
        if client is not None:
            from autograder.grading.dask_grading import setup_of

            dask_setup = setup_of(limits, sandbox, course, lessons)
        conv = ParallelAutograde(coursedir=app.coursedir, parent=app, workers=pool,
                                 limits=limits, students=students, on_outcome=on_outcome,
                                 calibrate=calibrate, dask=client, dask_setup=dask_setup)
        conv.init_notebooks()
        if not quiet:
            progress = Progress(len(conv.assignments), progress_stream)
        checkpoint.write(force=True)
        conv.init_notebooks = lambda: None  # already done; start() would redo it
        try:
            conv.start()
        except NbGraderException as exc:
            raise GradeRefused(str(exc)) from exc
        outcomes = conv.outcomes
    finally:
        if db_lock is not None:
            db_lock.release()
        for sig, old in handlers.items():
            signal.signal(sig, old)
        os.chdir(cwd)
        for w in pool:
            w.stop()
        if client is not None:
            client.close()
        shutil.rmtree(scratch, ignore_errors=True)
    _fill_scores(course, assignment, outcomes, app)
    elapsed = time.monotonic() - t0
    stopped_by = conv.stop_signal
    meta.update({"elapsed_s": round(elapsed, 2), "finished": stopped_by is None,
                 "cell_limits": conv.calibration_note or "the configured timeout",
                 "cell_limits_measured": dict(conv.cell_limits.measured)
                 if conv.cell_limits else None})
    if stopped_by is not None:
        meta["stopped_by"] = signal.Signals(stopped_by).name
    for o in outcomes:
        o.run = o.run or started
    write_reports(outcomes, report, meta, earlier)
    if stopped_by is not None:
        code = 128 + stopped_by
    else:
        code = 1 if any(o.status == "failed" for o in outcomes) else 0
    return GradeResult(outcomes, elapsed, report, code, stopped_by, conv.calibration_note)


def _refused(address: str) -> str | None:
    """Why a TCP scheduler address certainly has no scheduler (nothing listens there), or
    None: reachable, or not a plain ``tcp://host:port`` to try."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if parts.scheme != "tcp" or not host or not port:
        return None
    try:
        socket.create_connection((host, port), timeout=5).close()
    except ConnectionRefusedError:
        return f"nothing listens at {host}:{port} (connection refused)"
    except OSError:
        return None  # slow or unresolvable: Dask's own timeout decides
    return None


def _dask_client(scheduler: str, sandbox: bool):
    """Connect to the cluster and make sure every worker can grade (else refuse)."""
    try:
        from distributed import Client
    except ImportError:
        raise GradeRefused("--scheduler needs Dask distributed (pip install distributed)") \
            from None
    from autograder.grading.dask_grading import probe

    kwargs = {"scheduler_file": scheduler} if os.path.isfile(scheduler) else \
        {"address": scheduler}
    refused = _refused(scheduler) if "address" in kwargs else None
    if refused:  # Dask would retry for the whole timeout; nothing is there to answer
        raise GradeRefused(f"cannot reach the Dask scheduler {scheduler}: {refused}")
    try:
        client = Client(timeout=15, **kwargs)
    except Exception as exc:
        raise GradeRefused(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
    try:
        workers = client.scheduler_info()["workers"]
        if not workers:
            raise GradeRefused(f"the Dask scheduler {scheduler} has no workers")
        problems = {addr: why for addr, why in client.run(probe, sandbox).items() if why}
    except GradeRefused:
        client.close()
        raise
    except Exception as exc:
        client.close()
        raise GradeRefused(f"could not ask the Dask workers: {exc}") from None
    if problems:
        client.close()
        lines = "\n".join(f"  {addr}: {why}" for addr, why in sorted(problems.items()))
        hint = ("\nRun the Dask workers as root on Linux with util-linux, or pass "
                "--no-sandbox to grade without the sandbox anyway." if sandbox else "")
        raise GradeRefused(f"{len(problems)} Dask worker(s) cannot grade:\n{lines}{hint}")
    return client


def _ensure_registered(course: Path, assignment: str, app) -> None:
    """Make sure the gradebook knows the assignment, its notebooks and its cells.

    nbgrader learns them when ``generate_assignment`` runs; a course whose release is
    committed (this one) can be released, fetched and submitted through the exchange without
    that ever happening on the instructor's machine, and nbgrader then refuses to grade ("No
    assignment with ID ... exists in the database"). Here nbgrader's own
    ``generate_assignment`` records it, writing its release copy to a scratch folder (the
    release the learners have is not touched).
    """
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(app.coursedir.db_url, app.coursedir.course_id) as gb:
        try:
            if gb.find_assignment(assignment).notebooks:
                return
        except MissingEntry:
            pass
    src = Path(app.coursedir.format_path(app.coursedir.source_directory, ".", assignment))
    if not any(src.glob("*.ipynb")):
        raise GradeRefused(f"the gradebook does not know {assignment!r} and there is no "
                           f"{src.relative_to(course) if src.is_relative_to(course) else src}/"
                           "*.ipynb to learn it from")
    from autograder.pipeline import nbgrader

    print(f"autograder grade: {assignment} is not in the gradebook yet; recording it from "
          f"{app.coursedir.source_directory}/{assignment} (nbgrader generate_assignment)",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="autograder-register-") as tmp:
        proc = nbgrader("generate_assignment", assignment, "--force",
                        f"--CourseDirectory.release_directory={tmp}", course=course,
                        check=False)
    if proc.returncode != 0:
        raise GradeRefused(f"could not record {assignment} in the gradebook: "
                           f"`nbgrader generate_assignment` failed:\n{proc.stderr[-2000:]}")


def _fill_scores(course: Path, assignment: str, outcomes: list[Outcome], app) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(app.coursedir.db_url, app.coursedir.course_id) as gb:
        for o in outcomes:
            if o.status in ("failed", "not graded"):
                continue
            try:
                sub = gb.find_submission(assignment, o.student)
            except MissingEntry:
                continue
            o.penalty = float(sub.late_submission_penalty or 0.0)
            o.score, o.max_score = max(0.0, float(sub.score) - o.penalty), float(sub.max_score)
            o.late_seconds = float(sub.total_seconds_late or 0.0)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("grade", help="grade all submissions of an assignment (parallel, sandboxed)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("assignment", help="assignment id, e.g. 01_leaves")
    p.add_argument("--course", default=".", help="course root (default: current folder)")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel workers (default: number of cores)")
    p.add_argument("--student", action="append", default=None, metavar="ID",
                   help="grade only this student (repeatable)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="per-cell timeout (default: nbgrader's configured Execute.timeout)")
    p.add_argument("--notebook-timeout", type=float, default=600.0, metavar="S",
                   help="whole-notebook timeout (default: 600)")
    p.add_argument("--memory", type=parse_size, default=Limits.memory, metavar="SIZE",
                   help="address space per process (default: 4G)")
    p.add_argument("--cpu", type=int, default=Limits.cpu, metavar="S",
                   help="CPU seconds per process (default: 600)")
    p.add_argument("--max-procs", type=int, default=Limits.nproc, metavar="N",
                   help="processes+threads per worker (default: 256)")
    p.add_argument("--max-file-size", type=parse_size, default=Limits.fsize, metavar="SIZE",
                   help="largest file learner code may write (default: 64M)")
    p.add_argument("--disk", type=parse_size, default=Limits.disk, metavar="SIZE",
                   help="private scratch space per submission (default: 256M)")
    p.add_argument("--max-output", type=parse_size, default=Limits.output, metavar="SIZE",
                   help="notebook output kept per submission (default: 8M)")
    p.add_argument("--force", "-f", action="store_true",
                   help="grade again what is already graded and unchanged")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run learner code unconfined, as this user (not recommended)")
    p.add_argument("--report", type=Path, default=None, metavar="PATH",
                   help="JSON report (a CSV is written beside it; default: "
                        "grade-reports/ASSIGNMENT.json)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line")
    p.add_argument("--cell-limit-factor", type=float, default=CellLimits.factor, metavar="X",
                   help="each cell's time limit is X times the solution's time for it, "
                        "measured at the start of the run (default: 10)")
    p.add_argument("--cell-limit-floor", type=float, default=CellLimits.floor, metavar="S",
                   help="no cell's limit is below S seconds (default: 10)")
    p.add_argument("--no-calibrate", action="store_true",
                   help="do not time the solution: every cell gets the configured timeout")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS|FILE",
                   help="execute the submissions on this Dask distributed cluster: a "
                        "scheduler address (tcp://HOST:PORT) or a scheduler file "
                        "(default: local workers)")
    p.add_argument("--wait", action="store_true",
                   help="if another run is grading this course, wait for it instead of "
                        "refusing")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    limits = Limits(cell_timeout=args.timeout, notebook_timeout=args.notebook_timeout,
                    memory=args.memory, cpu=args.cpu, nproc=args.max_procs,
                    fsize=args.max_file_size, disk=args.disk, output=args.max_output)
    if args.no_sandbox:
        print("autograder grade: --no-sandbox: learner code runs unconfined as this user.",
              file=sys.stderr)
    try:
        result = grade(Path(args.course), args.assignment, workers=args.workers,
                       students=args.student, limits=limits, force=args.force,
                       sandbox=not args.no_sandbox, report=args.report, quiet=args.quiet,
                       wait=args.wait, calibrate=None if args.no_calibrate else CellLimits(
                           factor=args.cell_limit_factor, floor=args.cell_limit_floor),
                       scheduler=args.scheduler)
    except GradeRefused as exc:
        print(f"autograder grade: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the first submission was taken: nothing was written
        print("\nautograder grade: stopped before grading started; nothing was graded.",
              file=sys.stderr)
        return 130
    print(summary(result.outcomes, result.elapsed))
    if result.cell_limits:
        print(result.cell_limits)
    print(f"report: {result.report} and {result.report.with_suffix('.csv')}")
    if result.stopped_by is not None:
        left = [o for o in result.outcomes if o.status == "not graded"]
        done = sum(o.status in ("graded", "problems") for o in result.outcomes)
        print(f"stopped by {signal.Signals(result.stopped_by).name}: {done} graded in this run, "
              f"{len(left)} not graded. Run `autograder grade {args.assignment}` again to grade "
              "them; nothing graded is graded twice.", file=sys.stderr)
    elif result.exit_code:
        n = sum(o.status == "failed" for o in result.outcomes)
        print(f"{n} submission(s) could not be graded: see the reasons above.", file=sys.stderr)
    return result.exit_code
