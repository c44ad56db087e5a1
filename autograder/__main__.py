"""``autograder`` / ``python -m autograder``: instructor commands for this course.

    autograder release [ASSIGNMENT ...]   regenerate release/ from source/ with nbgrader
    autograder release --check            exit 1 if release/ is stale (what CI checks)
    autograder grade ASSIGNMENT           grade all submissions: parallel, sandboxed (docs/grading.md)
    autograder report ASSIGNMENT | --all  class report: questions, misconceptions, who needs
                                          attention (HTML + CSV; docs/report.md)
    autograder extend ASSIGNMENT STUDENT 2d   grant a learner an extension (docs/deadlines.md)
    autograder export --lms canvas|moodle grades as Canvas or Moodle import them
    autograder site [--out DIR]           the course as an offline static site (docs/site.md)
    autograder translate zh-CN [--update | --check]
                                          build zh-CN/source/ from source/ and the PO catalogs in
                                          translations/zh_CN/ (translations/zh_CN/README.md);
                                          then `autograder release --course zh-CN`
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _cmd_release(args: argparse.Namespace) -> int:
    from autograder import release

    course = Path(args.course).resolve()
    names = args.assignments or None
    # the folders as the instructor names them: release/ here, zh-CN/release/ for --course zh-CN
    where = "" if course == Path.cwd().resolve() else f"{args.course.rstrip('/')}/"
    if args.check:
        problems = release.check_release(course, names)
        for p in problems:
            print(where + p)
        if problems:
            print(f"{where}release/ is stale: run `autograder release"
                  f"{'' if not where else ' --course ' + args.course}` and commit the result.")
            return 1
        print(f"{where}release/ matches what nbgrader generates from {where}source/.")
        return 0
    for name in release.regenerate(course, names):
        print(f"regenerated {where}release/{name}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autograder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="regenerate or check release/ from source/")
    rel.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    rel.add_argument("--check", action="store_true", help="only report whether release/ is stale")
    rel.add_argument("--course", default=".", help="course root (default: current folder)")
    rel.set_defaults(func=_cmd_release)
    from autograder.grading import cli as grading_cli  # cheap: heavy imports happen in grade()

    grading_cli.add_parser(sub)
    from autograder.grading import deadline_cli  # cheap: nbgrader loads in the commands

    deadline_cli.add_parsers(sub)
    from autograder import analytics  # cheap: nbgrader and matplotlib load in report()

    analytics.add_parser(sub)
    from autograder import site  # cheap: Sphinx and Jupyter Book load in build()

    site.add_parser(sub)
    from autograder import translate  # cheap: polib; nbformat loads when a build runs

    translate.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # jsonschema (through nbformat) imports the optional rfc3987_syntax, which compiles a
    # grammar at import (seconds, more on a busy machine); only its "iri" format checker needs
    # it, and nbformat's schema has no such format (`autograder grade` did this already)
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
