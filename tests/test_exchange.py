"""nbgrader's exchange, end to end, as real and separate Unix users.

An instructor and two learners, each a Unix user with a home of their own (created here with
``useradd -m``, removed with ``userdel -r`` afterwards), share one exchange folder. Every
command runs as the user who would type it, with that user's HOME:

* instructor: ``nbgrader release_assignment 01_leaves`` from a copy of this course whose
  release is committed (no ``generate_assignment`` first);
* learners: ``nbgrader fetch_assignment``, answers filled in, ``nbgrader submit`` (learner B
  twice: blank first, then half solved; the latest counts);
* instructor: ``nbgrader collect``, ``autograder grade``, ``generate_feedback``,
  ``release_feedback``;
* learners: ``nbgrader fetch_feedback``, each getting their own feedback only;
* instructor: ``nbgrader export``, whose scores must be what the answers earn (learner B's:
  what stock ``nbgrader autograde`` gives the same half-solved notebook in a scratch course).

Needs root (to create users and switch to them); skipped otherwise.
"""

from __future__ import annotations

import csv
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import (
    RELEASE,
    ROOT,
    answer_ids,
    make_course,
    notebook_path,
    solved_sources,
    submission,
    submit,
)

pytestmark = [pytest.mark.grading, pytest.mark.slow]

ASSIGNMENT = "01_leaves"
COURSE_ID = "leaf-tensors"
NOTEBOOK = notebook_path(ASSIGNMENT).name
BIN = str(Path(sys.executable).parent)
BAD_STDERR = ("not recognized", "Traceback")

if os.geteuid() != 0:
    pytest.skip("creating Unix users (useradd) and running commands as them needs root",
                allow_module_level=True)
for _tool in ("useradd", "userdel", "setpriv"):
    if shutil.which(_tool) is None:
        pytest.skip(f"{_tool} not found (shadow-utils / util-linux)", allow_module_level=True)


@dataclass
class User:
    name: str
    uid: int
    gid: int
    home: Path


def user_env(user: User | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A login-like environment: nothing of the test process's own leaks into it (no
    JUPYTER_* or XDG_* of root's), only what a user's shell would have, with the course's
    environment first on PATH, as after activating it."""
    env = {"PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
           "SHELL": "/bin/sh", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if user is None:
        home, name = os.path.expanduser("~root"), "root"
    else:
        home, name = str(user.home), user.name
    env.update({"HOME": home, "USER": name, "LOGNAME": name})
    env.update(extra or {})
    return env


def as_user(user: User | None, *cmd: str, cwd: Path, env: dict[str, str] | None = None,
            stdin: str | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run ``cmd`` as ``user`` (``None``: root), the way ``runuser``/``su -`` would.

    setpriv keeps root's capabilities until its own exec: the file it starts (and a script's
    interpreter) would be looked up with root's rights, so a folder the user cannot traverse
    would go unnoticed there and fail only in the processes it starts. The user's own shell
    execs the command instead, as when the user types it."""
    full = list(cmd) if user is None else [
        "setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--",
        "/bin/sh", "-c", 'exec "$@"', "sh", *cmd]
    return subprocess.run(full, cwd=cwd, env=user_env(user, env), input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """The command succeeded and printed nothing a user should worry about."""
    args = list(proc.args)
    if 'exec "$@"' in args:  # as_user's wrapper: show what the user typed
        args = args[args.index('exec "$@"') + 2:]
    what = " ".join(args)
    assert proc.returncode == 0, f"`{what}` exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    for bad in BAD_STDERR:
        assert bad not in proc.stderr, f"`{what}` printed {bad!r}:\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def users():
    """An instructor and two learners, each a real Unix user with a home of their own."""
    tag = uuid.uuid4().hex[:6]
    names = {"instructor": f"lt-instr-{tag}", "a": f"lt-learn-a-{tag}",
             "b": f"lt-learn-b-{tag}"}
    made: list[str] = []
    try:
        for name in names.values():
            subprocess.run(["useradd", "-m", "-U", "-s", "/bin/sh", name], check=True,
                           capture_output=True, text=True)
            made.append(name)
        out = {}
        for role, name in names.items():
            pw = pwd.getpwnam(name)
            out[role] = User(name, pw.pw_uid, pw.pw_gid, Path(pw.pw_dir))
        yield out
    finally:
        for name in made:
            # -r: the home and mail spool too; every process of theirs has ended by now
            subprocess.run(["userdel", "-r", name], capture_output=True, text=True)


def _untraversable_parents(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for p in paths:
        for folder in [p, *p.parents] if p.is_dir() else list(p.parents):
            if not folder.stat().st_mode & stat.S_IXOTH and folder not in found:
                found.append(folder)
    return found


@pytest.fixture(scope="module")
def course_python(users):
    """The learners' and the instructor's processes must run the course's Python.

    ``sys.executable`` is the repository's ``.venv``; the venv, or the interpreter it links
    to (pyenv under root's home here), or the clone itself (CI clones under root's home) may
    sit under a folder other users cannot traverse (``/root`` is 0700). On a real multi-user
    machine the course's environment is installed where every user can run it (e.g.
    /opt/leaf-tensors/.venv). Here, for the test's duration only, each such parent folder
    gets o+x (traverse, not list), and its mode is put back afterwards."""
    probe = [sys.executable, "-c", "import nbgrader, autograder"]
    learner = users["a"]
    if as_user(learner, *probe, cwd=Path("/")).returncode == 0:
        yield []
        return
    interpreter = Path(os.path.realpath(sys.executable))
    targets = [Path(sys.executable), interpreter, Path(sys.prefix), Path(sys.base_prefix),
               ROOT]
    changed = [(p, p.stat().st_mode) for p in _untraversable_parents(targets)]
    try:
        for path, mode in changed:
            path.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
        proc = as_user(learner, *probe, cwd=Path("/"))
        assert proc.returncode == 0, (
            f"uid {learner.uid} cannot run the course's Python even with o+x on "
            f"{[str(p) for p, _ in changed]}:\n{proc.stderr}")
        yield [p for p, _ in changed]
    finally:
        for path, mode in reversed(changed):
            path.chmod(stat.S_IMODE(mode))


@pytest.fixture(scope="module")
def exchange():
    """The shared exchange root, set up as an administrator would (root-owned).

    nbgrader's docs ask for an exchange every user can read and write (``chmod ugo+rw``;
    nbgrader itself creates a missing root 0777). The sticky bit is added on top, as on
    /tmp: without it any learner could rename or remove the course's folder at the root
    (only write access to the root is needed for that) and put a folder of their own in its
    place. nbgrader checks only the low nine bits, so it keeps the sticky bit."""
    base = Path(tempfile.mkdtemp(prefix="lt-exchange-"))
    try:
        base.chmod(0o755)
        root = base / "exchange"
        root.mkdir()
        root.chmod(0o1777)
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def expected_half(tmp_path_factory):
    """What the half-solved notebook earns, graded independently: stock ``nbgrader
    autograde`` (not this course's grader) on a plain scratch course with no exchange.

    Started in the background when the loop starts; the loop collects it at the end."""
    course = make_course(tmp_path_factory.mktemp("independent"))
    half = set(answer_ids(ASSIGNMENT)[: len(answer_ids(ASSIGNMENT)) // 2])
    submit(course, "half", ASSIGNMENT, submission(ASSIGNMENT, solve=half))
    env = user_env(None, {"NBGRADER_EXCHANGE": str(course / "exchange")})
    script = (f"nbgrader generate_assignment {ASSIGNMENT} --force && "
              f"nbgrader autograde {ASSIGNMENT} --force")
    proc = subprocess.Popen(["sh", "-c", script], cwd=course, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def result() -> tuple[float, float]:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"independent grading failed:\n{out}\n{err}"
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
            sub = gb.find_submission(ASSIGNMENT, "half")
            return float(sub.score), float(sub.max_score)

    try:
        yield half, result
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# A learner's editor, reduced to its effect: the answer cells' text replaced, the file saved
# (plain JSON, as nbformat 4 allows a cell's source to be one string).
FILL = r"""
import json, sys
path, answers = sys.argv[1], json.load(sys.stdin)
with open(path, encoding="utf-8") as f:
    nb = json.load(f)
for cell in nb["cells"]:
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    if gid in answers:
        cell["source"] = answers[gid]
with open(path, "w", encoding="utf-8") as f:
    json.dump(nb, f, indent=1, ensure_ascii=False)
    f.write("\n")
"""

LISTABLE = r"""
import os, sys
try:
    os.listdir(sys.argv[1])
except PermissionError:
    print("denied")
else:
    print("listed")
"""


def learner_config(user: User, exchange: Path) -> None:
    """What each learner is given: ~/.jupyter/nbgrader_config.py naming the exchange and
    the course (on a JupyterHub, /etc/jupyter/nbgrader_config.py does it for everyone)."""
    folder = user.home / ".jupyter"
    folder.mkdir()
    (folder / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n")
    for p in (folder, folder / "nbgrader_config.py"):
        os.chown(p, user.uid, user.gid)


AFTER_GRADING: dict = {}  # what test_the_exchange_loop saw right after grading


def both(fn, *calls: tuple) -> None:
    """``fn(*args)`` for each of ``calls`` at the same time; the first failure is raised."""
    with ThreadPoolExecutor(len(calls)) as pool:
        for future in [pool.submit(fn, *args) for args in calls]:
            future.result()


def owned_by_others(folder: Path, uid: int) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in [folder, *folder.rglob("*")]
                  if p.lstat().st_uid != uid)


def test_the_exchange_loop_as_separate_users(users, course_python, exchange, expected_half):
    instr, a, b = users["instructor"], users["a"], users["b"]
    half, independent = expected_half
    solved = solved_sources(ASSIGNMENT)
    env = {"NBGRADER_EXCHANGE": str(exchange)}  # the course's config reads it

    # the instructor's course folder: a copy of this course (config, source/, the committed
    # release/), in the instructor's home and owned by the instructor
    course = make_course(instr.home)
    shutil.copytree(RELEASE, course / "release",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    for p in [course, *course.rglob("*")]:
        os.chown(p, instr.uid, instr.gid, follow_symlinks=False)

    def instructor(*args: str) -> subprocess.CompletedProcess:
        return ok(as_user(instr, *args, cwd=course, env=env))

    # -- release: straight from the committed release/, no generate_assignment first
    instructor("nbgrader", "release_assignment", ASSIGNMENT)
    course_x = exchange / COURSE_ID
    assert (course_x / "outbound" / ASSIGNMENT / NOTEBOOK).is_file()
    assert stat.S_IMODE(exchange.stat().st_mode) == 0o1777  # nbgrader kept the sticky bit
    assert course_x.stat().st_uid == instr.uid
    # inbound: learners may drop submissions in but not list them (nbgrader's 2733)
    assert stat.S_IMODE((course_x / "inbound").stat().st_mode) == 0o2733

    # -- each learner fetches into their home, works, submits. The two learners work at
    # the same time (as a class does); each one's own steps are in order.
    def work(learner: User, answers: dict[str, str]) -> None:
        ok(as_user(learner, sys.executable, "-c", FILL, str(learner.home / ASSIGNMENT / NOTEBOOK),
                   cwd=learner.home, stdin=json.dumps(answers)))

    def session(learner: User, attempts: list[dict[str, str]]) -> None:
        learner_config(learner, exchange)
        ok(as_user(learner, "nbgrader", "fetch_assignment", ASSIGNMENT, "--course", COURSE_ID,
                   cwd=learner.home))
        fetched = learner.home / ASSIGNMENT / NOTEBOOK
        assert fetched.is_file() and fetched.stat().st_uid == learner.uid
        for answers in attempts:
            if answers:
                work(learner, answers)
            ok(as_user(learner, "nbgrader", "submit", ASSIGNMENT, "--course", COURSE_ID,
                       cwd=learner.home))

    both(session, (a, [solved]),
         # B: blank first (as fetched), then half solved: the latest counts
         (b, [{}, {gid: src for gid, src in solved.items() if gid in half}]))

    inbound = sorted(p.name for p in (course_x / "inbound").iterdir())
    assert [n.split("+")[0] for n in inbound].count(b.name) == 2, inbound
    assert [n.split("+")[0] for n in inbound].count(a.name) == 1, inbound
    for learner in (a, b):
        mine = [p for p in (course_x / "inbound").iterdir() if p.name.startswith(learner.name + "+")]
        assert all(p.stat().st_uid == learner.uid for p in mine)
        listing = as_user(learner, sys.executable, "-c", LISTABLE, str(course_x / "inbound"),
                          cwd=learner.home)
        assert listing.stdout.strip() == "denied", "a learner can list the others' submissions"

    # -- collect: the latest submission of each learner
    collected = instructor("nbgrader", "collect", ASSIGNMENT)
    assert "cheating attempt" not in collected.stderr  # each submission owned by its learner
    latest = {learner.name: max(n.split("+")[2] for n in inbound
                                if n.startswith(learner.name + "+")) for learner in (a, b)}
    for learner in (a, b):
        stamp = course / "submitted" / learner.name / ASSIGNMENT / "timestamp.txt"
        assert stamp.read_text().strip() == latest[learner.name]

    # -- grade. The sandbox needs root (namespaces, switching each kernel to an unprivileged
    # uid; see autograder.grading.sandbox.sandbox_problem), and learner code is untrusted:
    # unsandboxed, it would run as the instructor, able to read the hidden tests and rewrite
    # the gradebook. So an instructor with sudo grades as root on the course folder
    # (`sudo autograder grade 01_leaves`); only where the sandbox cannot run at all does the
    # instructor fall back to `--no-sandbox`, as themselves.
    from autograder.grading.sandbox import sandbox_problem

    as_root = sandbox_problem() is None
    if as_root:
        graded = ok(as_user(None, "autograder", "grade", ASSIGNMENT, "--quiet", cwd=course,
                            env=env))
    else:
        graded = instructor("autograder", "grade", ASSIGNMENT, "--quiet", "--no-sandbox")
    # the committed release was never generated here: the grader records the assignment
    assert "not in the gradebook yet" in graded.stderr, graded.stderr
    report = json.loads((course / "grade-reports" / f"{ASSIGNMENT}.json").read_text())
    assert report.get("finished") is True, report
    assert {r["student"]: r["status"] for r in report["submissions"]} == \
        {a.name: "graded", b.name: "graded"}, report
    # what the grading run left in the instructor's folder that the instructor does not own
    left_by_root = owned_by_others(course, instr.uid)
    AFTER_GRADING.update(as_root=as_root, not_the_instructors=left_by_root)

    # -- feedback, as the instructor again
    try:
        instructor("nbgrader", "generate_feedback", ASSIGNMENT)
        instructor("nbgrader", "release_feedback", ASSIGNMENT)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nnot owned by the instructor: {left_by_root}") from None
    feedback_x = course_x / "feedback"
    for learner in (a, b):
        listing = as_user(learner, sys.executable, "-c", LISTABLE, str(feedback_x),
                          cwd=learner.home)
        assert listing.stdout.strip() == "denied", "a learner can list everyone's feedback"

    # -- export, and the scores the answers earn
    instructor("nbgrader", "export")
    with open(course / "grade-reports" / "grades.csv") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f) if r["assignment"] == ASSIGNMENT}
    assert set(rows) == {a.name, b.name}, rows
    assert {r["status"] for r in rows.values()} == {"graded"}, rows
    score = {s: float(r["score"]) for s, r in rows.items()}
    max_score = {float(r["max_score"]) for r in rows.values()}
    half_score, half_max = independent()
    assert max_score == {half_max}, (max_score, half_max)
    assert score[a.name] == half_max  # everything solved: full marks
    assert score[b.name] == half_score  # the latest (half solved) counted, not the blank one
    assert half_max > half_score > 0

    # -- each learner fetches their own feedback, and only theirs
    both(lambda learner: ok(as_user(learner, "nbgrader", "fetch_feedback", ASSIGNMENT,
                                    "--course", COURSE_ID, cwd=learner.home)), (a,), (b,))
    for learner, other in ((a, b), (b, a)):
        got = sorted((learner.home / ASSIGNMENT / "feedback").rglob("*.html"))
        # one feedback, for the submission that was graded (B's blank one got none)
        assert len(got) == 1, got
        assert got[0].parent.name == latest[learner.name], got
        html = got[0].read_text()
        assert got[0].stat().st_uid == learner.uid
        own = f"(Score: {round(score[learner.name], 2)} / {round(half_max, 2)})"
        assert own in html, own
        if score[other.name] != score[learner.name]:
            other_score = f"(Score: {round(score[other.name], 2)} / {round(half_max, 2)})"
            assert other_score not in html
        assert other.name not in html
        assert not [p for p in learner.home.rglob("*") if other.name in p.name]


def test_grading_leaves_the_course_folder_to_its_instructor():
    """After `autograder grade`, the instructor can go on working in their course folder
    (regrade with stock `nbgrader autograde`, remove old results, grade again): nothing in
    it belongs to another user. Checked on what the loop above left."""
    if not AFTER_GRADING:
        pytest.skip("the exchange loop did not get as far as grading")
    left = AFTER_GRADING["not_the_instructors"]
    # run as root for its sandbox, `autograder grade` hands its lock file, autograded/,
    # grade-reports/ and the gradebook back to the folder's owner (state.give_back)
    assert not left
