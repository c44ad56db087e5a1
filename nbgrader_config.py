"""nbgrader configuration: the repository root is the nbgrader course root.

Everything is relative to this file, so a clean clone works wherever it lies.
"""

import os
import sys

c = get_config()  # noqa: F821 -- injected by traitlets when nbgrader loads this file

HERE = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.root = HERE
c.CourseDirectory.course_id = "leaf-tensors"
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"

# nbgrader runs `alembic` as a command when it creates a gradebook. Started as
# `.venv/bin/jupyter lab` (the README's quick start) or `.venv/bin/nbgrader` without
# activating the environment, its bin/ is not on PATH: the first gradebook would be left
# broken and the Formgrader would hang on "Loading". Every process that reads this file
# runs the environment's Python, so put its bin/ first.
_BIN = os.path.dirname(sys.executable)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")

# The gradebook: gradebook.db in the course root, unless NBGRADER_DB_URL names another
# database, e.g. a PostgreSQL server shared by several instructors and graders:
#   NBGRADER_DB_URL=postgresql+psycopg://USER:PASSWORD@HOST:5432/DBNAME
if os.environ.get("NBGRADER_DB_URL"):
    c.CourseDirectory.db_url = os.environ["NBGRADER_DB_URL"]

# The assignments are the folders of source/ (nbgrader 0.9 has no list of them in its
# configuration). `nbgrader generate_assignment` records one in the gradebook; so does
# `autograder grade` when it finds an assignment the gradebook does not know yet.

# The formgrader and the assignment list need an exchange folder that exists.
# A course served to many users sets NBGRADER_EXCHANGE to a shared folder instead.
EXCHANGE = os.environ.get("NBGRADER_EXCHANGE", os.path.join(HERE, "exchange"))
os.makedirs(EXCHANGE, exist_ok=True)
c.Exchange.root = EXCHANGE

# Timeouts suited to torch: a kernel start plus `import torch` can take several
# seconds on a cold laptop, and the first check starts the oracle process (which
# imports torch once more). No exercise needs more than a second of compute.
c.Execute.timeout = 120
c.Execute.startup_timeout = 120
c.ExecutePreprocessor.timeout = 120

# Student versions keep the answer template above the solution region; the stub
# below it tells the learner where to write.
c.ClearSolutions.code_stub = {
    "python": "# YOUR CODE HERE\nraise NotImplementedError()",
}

# nbgrader scores a graded test cell 0 when it writes anything to stderr. The
# checks never touch learner tensors in the kernel, so torch warnings should not
# arise there; if one does (a learner cell's warning surfacing late), it must not
# zero a correct answer.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"[A-Za-z]*Warning: "

# Deadlines and late penalties (docs/deadlines.md), applied by stock `nbgrader autograde` and
# `autograder grade` alike: nbgrader's own autograde steps, with its late-penalty step
# (which knows only "none" or "zero") replaced by the course's policy below. Due dates are in
# `timezone`; an assignment without one is never late. `autograder extend ASSIGNMENT STUDENT
# 2d` grants an extension (kept in `extensions_file`, which git ignores) and re-applies the
# policy to a submission already graded.
c.LatePolicy.timezone = "UTC"
c.LatePolicy.due = {}  # e.g. {"01_leaves": "2027-02-01 23:59"}
c.LatePolicy.grace = "15m"  # no penalty within this
c.LatePolicy.per = "day"  # "hour" or "day"
c.LatePolicy.penalty = 0.10  # share of the score taken per started day (or hour) late
c.LatePolicy.cap = 0.50  # the most a late hand-in loses
c.LatePolicy.zero_after = "7d"  # later than this: 0
c.LatePolicy.extensions_file = "extensions.csv"
c.Autograde.autograde_preprocessors = [
    "nbgrader.preprocessors.Execute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "autograder.grading.late.ApplyLatePolicy",  # instead of nbgrader's AssignLatePenalties
    "nbgrader.preprocessors.CheckCellMetadata",
]

# `nbgrader export` tells "not graded" from 0: nbgrader's columns plus each submission's
# status and reason, a submission that could not be graded left blank (never 0.0), written to
# grade-reports/grades.csv (ignored by git: learners' grades are never committed).
c.ExportApp.plugin_class = "autograder.grading.export.StatusCsvExportPlugin"

# nbgrader's Validate button shows a summary first: the score a hand-in now would get, each
# question right / not yet / not answered, and whether it would be late (autograder/validate.py).
# nbgrader's Validate handler loads this file when the button is pressed; other processes that
# read it are left alone.
if "nbgrader.server_extensions.validate_assignment.handlers" in sys.modules:
    from autograder.validate import install

    install()

# Keep huge learner outputs out of the gradebook and the feedback.
c.LimitOutput.max_lines = 1000
c.LimitOutput.max_traceback = 100
