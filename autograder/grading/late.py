"""Late penalties through nbgrader's own machinery, and extensions an instructor grants.

nbgrader's ``AssignLatePenalties`` preprocessor offers no policy beyond "none" or "zero", and
reads the due date and extension from the gradebook, where this course keeps neither: the
course's ``nbgrader_config.py`` holds the policy and the due dates (``LatePolicy``, see
:mod:`autograder.deadlines`) and ``autograder extend`` keeps the extensions in a file.
:class:`ApplyLatePolicy` stands in its place in ``Autograde.autograde_preprocessors`` (the
course's configuration lists nbgrader's default steps with this one swapped in), so stock
``nbgrader autograde`` and ``autograder grade`` apply the same policy:

* it writes the assignment's due date and the learner's extension into the gradebook (the
  Formgrader and ``nbgrader export`` then show them);
* it computes the lateness of the submission's timestamp against due date + extension, and
  sets each notebook's ``late_submission_penalty`` to the policy's share of its score, or
  clears it when the submission is not (or no longer) late (nbgrader issue #723).

:func:`reapply` does the same for a submission already graded, without running it again:
``autograder extend`` calls it when it grants or revokes an extension.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import AssignLatePenalties

from autograder.deadlines import Policy, format_duration


def _utc_naive(value: dt.datetime) -> dt.datetime:
    """nbgrader's gradebook keeps naive UTC times."""
    return value.astimezone(dt.timezone.utc).replace(tzinfo=None)


def _aware(value: dt.datetime | None) -> dt.datetime | None:
    return None if value is None else value.replace(tzinfo=dt.timezone.utc)


def apply(gb: Gradebook, policy: Policy, assignment: str, student: str, log=None) -> dict:
    """Bring one submission's due date, extension and late penalties in the gradebook in line
    with the policy; return what was decided (``{"late", "share", "penalty", "due"}``)."""
    due = policy.due_date(assignment)
    record = gb.find_assignment(assignment)
    if due is not None:
        record.duedate = _utc_naive(due)
    submission = gb.find_submission(assignment, student)
    extension = policy.extension(assignment, student)
    submission.extension = dt.timedelta(seconds=extension) if extension else None
    gb.db.commit()
    due_utc = _aware(submission.duedate)
    when = _aware(submission.timestamp)
    late = 0.0 if due_utc is None or when is None else max(0.0, (when - due_utc).total_seconds())
    share, grace = policy.share(late)
    share = round(share, 6)
    total = 0.0
    for notebook in submission.notebooks:
        penalty = round(min(notebook.score, notebook.score * share), 6) if share > 0 else None
        notebook.late_submission_penalty = penalty
        total += penalty or 0.0
    gb.db.commit()
    if late and log is not None:  # the run's summary shows lateness in its own column
        log.info("%s is %s late (%s): penalty %.4g", submission, format_duration(late),
                    "within the grace period" if grace else f"{share:.0%} of the score", total)
    return {"late": late, "share": share, "penalty": total, "grace": grace,
            "due": due_utc, "extension": extension}


class ApplyLatePolicy(AssignLatePenalties):
    """``AssignLatePenalties`` with the course's late policy (see the module docstring)."""

    def preprocess(self, nb, resources):
        self.notebook_id = resources["nbgrader"]["notebook"]
        self.assignment_id = resources["nbgrader"]["assignment"]
        self.student_id = resources["nbgrader"]["student"]
        self.db_url = resources["nbgrader"]["db_url"]
        root = getattr(getattr(self.parent, "coursedir", None), "root", None)
        policy = Policy.from_config(self.config, Path(root) if root else None)
        with Gradebook(self.db_url) as gb:
            apply(gb, policy, self.assignment_id, self.student_id, self.log)
        return nb, resources


def reapply(db_url: str, policy: Policy, assignment: str, student: str) -> dict | None:
    """Re-apply the policy to a submission already in the gradebook (``None`` if there is no
    such submission): an extension granted or revoked after grading takes effect at once."""
    with Gradebook(db_url) as gb:
        try:
            gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        return apply(gb, policy, assignment, student)
