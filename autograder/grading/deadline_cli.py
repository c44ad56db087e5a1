"""``autograder extend`` and ``autograder export``: extensions, and grades for an LMS.

    autograder extend ASSIGNMENT STUDENT 2d [--reason TEXT]   grant (or change) an extension
    autograder extend ASSIGNMENT STUDENT --revoke             take it back
    autograder extend --list [ASSIGNMENT]                     who has one
    autograder export --lms canvas|moodle [--roster roster.csv] [ASSIGNMENT ...]

Run from the course root (or pass ``--course``). ``extend`` writes the course's extensions file
(``LatePolicy.extensions_file``), re-applies the late policy to the learner's submission if it is
already graded (no re-run needed), and leaves the learner's extension where their notebook finds
it on a shared server (``EXCHANGE/COURSE/extensions/``). ``export`` writes a gradebook CSV that
Canvas or Moodle imports, late penalties applied, manual grades kept, submissions that could not
be graded left blank and listed with their reasons (docs/deadlines.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from autograder.deadlines import (
    Policy,
    course_config,
    format_duration,
    parse_duration,
    read_extensions,
    write_extensions,
)


class CommandError(RuntimeError):
    pass


def _course(path: str) -> tuple[Path, object, Policy, str]:
    root = Path(path).resolve()
    if not (root / "nbgrader_config.py").is_file():
        raise CommandError(f"no nbgrader_config.py in {root}: run from the course root or pass "
                           "--course")
    config, _ = course_config(root)
    policy = Policy.from_config(config, Path(config.get("CourseDirectory", {}).get("root",
                                                                                    root)))
    db_url = config.get("CourseDirectory", {}).get("db_url") or \
        f"sqlite:///{root / 'gradebook.db'}"
    return root, config, policy, db_url


def _when(value: dt.datetime | None) -> str:
    return "no due date" if value is None else value.strftime("%Y-%m-%d %H:%M %Z")


def _publish(policy: Policy, assignment: str, student: str, extension: str | None) -> str:
    """Leave (or remove) the learner's copy of their extension in the exchange."""
    path = policy.published(assignment, student)
    if path is None or not path.parent.parent.parent.is_dir():
        return ""
    try:
        if extension is None:
            path.unlink(missing_ok=True)
            return f"; removed from {path}"
        for folder in (path.parent.parent, path.parent):
            folder.mkdir(exist_ok=True)
            folder.chmod(0o711)  # each learner reads their own file by name; nobody lists
        path.write_text(extension + "\n")
        path.chmod(0o644)
        return f"; the learner finds it in {path}"
    except OSError as exc:
        return f"; could not leave it in the exchange ({exc.strerror})"


def extend(args: argparse.Namespace) -> int:
    root, _config, policy, db_url = _course(args.course)
    path = policy.extensions_path()
    if path is None:
        raise CommandError("the course keeps no extensions: set c.LatePolicy.extensions_file "
                           "in nbgrader_config.py")
    rows = read_extensions(path)
    if args.list:
        mine = sorted((k, r) for k, r in rows.items()
                      if not args.assignment or k[0] == args.assignment)
        for (assignment, student), row in mine:
            print(f"{assignment}  {student}  {row['extension']}  {row.get('reason', '')}".rstrip())
        if not mine:
            print("no extensions")
        return 0
    if not (args.assignment and args.student):
        raise CommandError("name the assignment and the student (or use --list)")
    key = (args.assignment, args.student)
    before = policy.due_date(args.assignment)
    if before is None:
        print(f"note: {args.assignment} has no due date in LatePolicy.due: the extension counts "
              "once it has one", file=sys.stderr)
    if args.revoke:
        if rows.pop(key, None) is None:
            print(f"{args.student} has no extension on {args.assignment}")
            return 0
        text = None
    else:
        if args.duration is None:
            raise CommandError("give the extension's length (2d, 36h, 1w) or --revoke")
        seconds = parse_duration(args.duration)
        text = args.duration
        rows[key] = {"assignment": args.assignment, "student": args.student,
                     "extension": args.duration, "reason": args.reason or "",
                     "granted": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")}
    write_extensions(path, rows)
    where = _publish(policy, args.assignment, args.student, text)
    due = policy.due_date(args.assignment)
    if text is None:
        said = f"{args.student}: extension on {args.assignment} revoked: due {_when(due)}"
    else:
        new_due = None if due is None else due + dt.timedelta(seconds=seconds)
        said = (f"{args.student}: {args.assignment} extended by {format_duration(seconds)}: due "
                f"{_when(new_due)} (everyone else: {_when(due)})")
    print(said + where)
    from autograder.grading.late import reapply

    try:
        result = reapply(db_url, policy, args.assignment, args.student)
    except Exception as exc:  # no gradebook yet, or nbgrader does not know the assignment
        result = None
        print(f"the gradebook was not updated ({type(exc).__name__}: {exc}); the next grading "
              "run applies it", file=sys.stderr)
    if result is not None:
        late = result["late"]
        print(f"graded submission re-scored: {format_duration(late) + ' late' if late else 'on time'}"
              f", late penalty {result['penalty']:g}")
    return 0


def export(args: argparse.Namespace) -> int:
    from nbgrader.api import Gradebook

    from autograder.grading.export import RosterError, lms_export, read_roster

    root, _config, policy, db_url = _course(args.course)
    roster_path = Path(args.roster) if args.roster else root / "roster.csv"
    try:
        roster = read_roster(roster_path, args.lms)
    except RosterError as exc:
        raise CommandError(str(exc)) from None
    out = Path(args.out) if args.out else root / "grade-reports" / f"{args.lms}.csv"
    with Gradebook(db_url) as gb:
        known = [a.name for a in gb.assignments]
        wrong = [a for a in args.assignments if a not in known]
        if wrong:
            raise CommandError(f"the gradebook has no assignment {', '.join(wrong)} (it has: "
                               f"{', '.join(known) or 'none'})")
        result = lms_export(gb, root, policy, args.lms, roster, out, args.assignments or None)
    print(f"{args.lms}: {result.rows} learner(s) in {result.path}"
          + (f"; statuses, lateness and reasons in {result.notes}" if result.notes else ""))
    for s in result.not_graded:
        print(f"  not graded (left blank): {s.student} {s.assignment}: {s.reason}")
    if result.unmapped:
        print(f"{len(result.unmapped)} learner(s) of the gradebook are not in {roster_path} and "
              f"were left out: {', '.join(result.unmapped)}", file=sys.stderr)
        return 1
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("extend", help="grant, change or revoke a learner's extension",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("assignment", nargs="?")
    p.add_argument("student", nargs="?")
    p.add_argument("duration", nargs="?", help="e.g. 2d, 36h, 1w (added to the due date)")
    p.add_argument("--reason", default="", help="kept in the extensions file")
    p.add_argument("--revoke", action="store_true", help="take the extension back")
    p.add_argument("--list", action="store_true", help="list the extensions")
    p.add_argument("--course", default=".", help="course root (default: current folder)")
    p.set_defaults(func=_guarded(extend))
    e = sub.add_parser("export", help="grades as Canvas or Moodle import them",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    e.add_argument("--lms", choices=("canvas", "moodle"), required=True)
    e.add_argument("--roster", default=None,
                   help="CSV: student_id (the nbgrader id) and the LMS's columns "
                        "(default: roster.csv in the course root)")
    e.add_argument("--out", default=None, help="default: grade-reports/LMS.csv")
    e.add_argument("--course", default=".", help="course root (default: current folder)")
    e.set_defaults(func=_guarded(export))


def _guarded(command):
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (CommandError, ValueError) as exc:
            print(f"autograder {args.command}: {exc}", file=sys.stderr)
            return 2
    return run

