"""What makes a grading run safe to stop and resume: the ledger, the course lock, stale scratch.

**The ledger.** nbgrader itself takes "``autograded/STUDENT/ASSIGNMENT`` exists and is not
older than the submission" for "graded". That folder is written when a submission is
*sanitized*, long before it is executed and scored, so a run that dies in between leaves
submissions that a re-run skips although they were never scored. The driver therefore keeps
its own record, a table ``autograder_graded`` in the gradebook database itself (the same
database, SQLite or any other ``db_url``; nbgrader and its migrations ignore tables they do
not know), one row per submission:

* ``state = 'grading'`` is committed *before* anything of a submission is written or removed;
* ``state = 'graded'``, with the fingerprint of exactly the files that were graded, is
  committed only *after* every score of the submission is in the gradebook and its notebooks
  are in ``autograded/``;
* a rolled-back or failed submission loses its row after its ``autograded/`` folder is gone.

So a submission is skipped only when its row says ``graded`` for the files it has now: a run
killed at any instant leaves each submission either fully graded or visibly not graded, and
the next run grades everything that is not. A submission with no row at all was graded by
stock ``nbgrader autograde`` (or by an older version of this driver); it counts as graded only
if nbgrader's own rule says so *and* every one of its grade cells has a score.

**The lock.** One grading run per course at a time: ``.autograder-grade.lock`` in the course
root, held with ``flock`` (released by the kernel however the holder ends, ``kill -9``
included, so it is never stale).

**Scratch.** Each run's workers live in ``$TMPDIR/autograder-grade-*``; the driver's pid is
recorded there, and a later run removes the folders of runs that are no longer alive.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import pwd
import shutil
import signal
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

LOCK_NAME = ".autograder-grade.lock"
SCRATCH_PREFIX = "autograder-grade-"
_PID_FILE = "driver.pid"

_meta = sa.MetaData()
graded_table = sa.Table(
    "autograder_graded", _meta,
    sa.Column("assignment", sa.String(128), primary_key=True),
    sa.Column("student", sa.String(128), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),  # 'grading' | 'graded'
    sa.Column("fingerprint", sa.String(64), nullable=False),
    sa.Column("updated", sa.Float, nullable=False),  # time.time()
)


def fingerprint(folder: Path, leave_out: list[str] | tuple[str, ...] = ()) -> str:
    """SHA-256 over every regular file of a submission folder: names and contents.

    Symbolic links and special files are never graded (the driver leaves them out), so they
    count by name only. ``timestamp.txt`` is a file like the others: a resubmission that
    changes nothing but its time is graded again, as nbgrader would.
    """
    h = hashlib.sha256()
    skip = set(leave_out)
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in skip)
        for name in sorted(filenames):
            path = Path(dirpath, name)
            rel = str(path.relative_to(folder))
            h.update(rel.encode() + b"\0")
            if name in skip or path.is_symlink() or not path.is_file():
                h.update(b"-\0")
                continue
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            h.update(b"\0")
    return h.hexdigest()


class Ledger:
    """The ``autograder_graded`` table of one gradebook database."""

    def __init__(self, db_url: str) -> None:
        self.engine = sa.create_engine(db_url)
        _meta.create_all(self.engine, checkfirst=True)

    def get(self, assignment: str, student: str) -> tuple[str, str] | None:
        """``(state, fingerprint)`` or ``None`` when the driver never recorded it."""
        t = graded_table
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.c.state, t.c.fingerprint).where(
                t.c.assignment == assignment, t.c.student == student)).first()
        return None if row is None else (row[0], row[1])

    def _put(self, assignment: str, student: str, state: str, fp: str) -> None:
        t = graded_table
        with self.engine.begin() as conn:  # one transaction: delete + insert
            conn.execute(sa.delete(t).where(t.c.assignment == assignment,
                                            t.c.student == student))
            conn.execute(sa.insert(t).values(assignment=assignment, student=student,
                                             state=state, fingerprint=fp, updated=time.time()))

    def begin(self, assignment: str, student: str, fp: str) -> None:
        """Before anything of this submission is written: it is being graded, not graded."""
        self._put(assignment, student, "grading", fp)

    def done(self, assignment: str, student: str, fp: str) -> None:
        """After its scores and its ``autograded/`` notebooks are all written."""
        self._put(assignment, student, "graded", fp)

    def clear(self, assignment: str, student: str) -> None:
        t = graded_table
        with self.engine.begin() as conn:
            conn.execute(sa.delete(t).where(t.c.assignment == assignment,
                                            t.c.student == student))

    def in_progress(self, assignment: str) -> set[str]:
        """Students whose grading a run started and never finished or rolled back."""
        t = graded_table
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.student).where(
                t.c.assignment == assignment, t.c.state == "grading")).all()
        return {r[0] for r in rows}

    def close(self) -> None:
        self.engine.dispose()


def fully_scored(gb, assignment: str, student: str) -> bool:
    """Does the gradebook hold a score (or a pending manual grade) for every grade cell?"""
    from nbgrader.api import MissingEntry

    try:
        sub = gb.find_submission(assignment, student)
    except MissingEntry:
        return False
    for nb in sub.notebooks:
        for g in nb.grades:
            if g.auto_score is None and g.manual_score is None and not g.needs_manual_grade:
                return False
    return True


# ---------------------------------------------------------------------------- the lock
class CourseBusy(RuntimeError):
    """Another grading run holds the course."""


class CourseLock:
    """``flock`` on ``COURSE/.autograder-grade.lock``: one grading run per course."""

    def __init__(self, course: Path) -> None:
        self.path = course / LOCK_NAME
        self._fd: int | None = None

    def holder(self) -> str:
        try:
            info = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return "another grading run"
        return (f"`autograder grade {info.get('assignment', '?')}` (process {info.get('pid', '?')}"
                f", started {info.get('started', '?')})")

    def acquire(self, assignment: str, wait: bool = False, poll: float = 1.0,
                on_wait=None) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError:
            try:
                owner = pwd.getpwuid(self.path.stat().st_uid).pw_name
            except (OSError, KeyError):
                owner = "another user"
            raise CourseBusy(
                f"cannot open the course's lock file {self.path}: it belongs to {owner}. "
                "Run as that user, or remove the file if no grading run is going.") from None
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if not wait:
                    who = self.holder()
                    os.close(fd)
                    raise CourseBusy(
                        f"{who} is grading this course ({self.path.parent}); two runs would "
                        "grade the same submissions into one gradebook. Wait for it to finish "
                        "(or stop it with Ctrl-C), or pass --wait to start when it is done."
                    ) from None
                if not told and on_wait is not None:
                    on_wait(self.holder())
                    told = True
                time.sleep(poll)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "assignment": assignment,
                                 "started": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class DatabaseLock:
    """The same rule for a gradebook shared over the network, which graders on several
    machines (several course folders) may use: on PostgreSQL a session advisory lock, held
    by one connection for the whole run and released by the server when that connection
    ends, however its process ends. A SQLite gradebook is a file of one course folder, and
    :class:`CourseLock` already covers it."""

    def __init__(self, db_url: str, course_id: str) -> None:
        self.url = sa.engine.make_url(db_url)
        key = hashlib.sha256(f"autograder-grade:{course_id}".encode()).digest()
        self.key = int.from_bytes(key[:8], "big", signed=True)
        self._engine = None
        self._conn = None

    def acquire(self, wait: bool = False, poll: float = 1.0, on_wait=None) -> None:
        if self.url.get_backend_name() != "postgresql":
            return
        self._engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        self._conn = self._engine.connect()
        told = False
        while True:
            got = self._conn.execute(sa.text("select pg_try_advisory_lock(:k)"),
                                     {"k": self.key}).scalar()
            self._conn.commit()
            if got:
                return
            if not wait:
                self.release()
                raise CourseBusy(
                    f"another `autograder grade` is grading this course into the same "
                    f"gradebook ({self.url.render_as_string(hide_password=True)}); wait for it "
                    "to finish, or pass --wait to start when it is done.")
            if not told and on_wait is not None:
                on_wait("another grading run on the shared gradebook")
                told = True
            time.sleep(poll)

    def release(self) -> None:
        if self._conn is not None:
            self._conn.close()  # ends the session: the server drops the lock
            self._conn = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def give_back(course: Path) -> int:
    """Run as root (for the sandbox) in somebody's course folder: hand what grading wrote
    (``autograded/``, ``grade-reports/``, the lock file, the gradebook file) to the folder's
    owner, so they can go on with nbgrader as themselves. Returns how many paths changed."""
    if os.geteuid() != 0:
        return 0
    st = course.stat()
    if st.st_uid == 0:
        return 0
    uid, gid = st.st_uid, st.st_gid
    changed = 0

    def own(path: Path) -> None:
        nonlocal changed
        try:
            lst = path.lstat()
            if lst.st_uid == 0:
                os.chown(path, uid, gid, follow_symlinks=False)
                changed += 1
        except OSError:
            pass

    for name in (LOCK_NAME, "gradebook.db", "gradebook.db-journal", "gradebook.db-wal"):
        if (course / name).exists():
            own(course / name)
    for top in ("autograded", "grade-reports"):
        root = course / top
        if not root.is_dir() or root.is_symlink():
            continue
        own(root)
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                own(Path(dirpath, name))
    return changed


# ----------------------------------------------------------------------------- scratch
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def new_scratch() -> Path:
    """A scratch folder for this run's workers, marked with this process's pid."""
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    scratch.chmod(0o711)
    (scratch / _PID_FILE).write_text(str(os.getpid()))
    return scratch


def remove_stale_scratch(tmp: Path | None = None) -> list[Path]:
    """Remove the scratch folders of grading runs that died without cleaning up."""
    removed = []
    root = Path(tmp or tempfile.gettempdir())
    for folder in root.glob(SCRATCH_PREFIX + "*"):
        if not folder.is_dir() or folder.is_symlink():
            continue
        try:
            pid = int((folder / _PID_FILE).read_text().strip())
        except (OSError, ValueError):
            # a folder of an older driver (no pid file): stale once nobody touched it for a day
            try:
                if time.time() - folder.stat().st_mtime < 86400:
                    continue
            except OSError:
                continue
            pid = None
        if pid is not None and _alive(pid):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


# ----------------------------------------------------------------------- crash points
def crash_point(phase: str) -> None:
    """Die here as a crash would (SIGKILL to the whole run), when the tests ask for it.

    ``AUTOGRADER_CRASH_AT=PHASE:N`` kills the grading run's process group the N-th time it
    reaches PHASE (``sanitize``: a submission half sanitized into ``autograded/``;
    ``execute``: a submission handed to a worker; ``score``: a submission's scores written,
    not yet recorded as graded). Used by ``tests/test_grade_resume.py``; unset, this is a
    dictionary lookup.
    """
    spec = os.environ.get("AUTOGRADER_CRASH_AT")
    if not spec:
        return
    want, _, count = spec.partition(":")
    if want != phase:
        return
    _counts[phase] = _counts.get(phase, 0) + 1
    if _counts[phase] >= int(count or 1):
        os.killpg(os.getpgid(0), signal.SIGKILL)


_counts: dict[str, int] = {}
