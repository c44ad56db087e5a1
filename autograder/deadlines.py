"""Deadlines, extensions and the late policy: what a hand-in at a given time costs.

The course's ``nbgrader_config.py`` says it once, in the ``LatePolicy`` section::

    c.LatePolicy.timezone = "Europe/Berlin"          # the zone due dates are written in
    c.LatePolicy.due = {"01_leaves": "2027-02-01 23:59"}
    c.LatePolicy.grace = "15m"                       # no penalty within this
    c.LatePolicy.per = "day"                         # "hour" or "day"
    c.LatePolicy.penalty = 0.10                      # share of the score per started hour/day
    c.LatePolicy.cap = 0.50                          # at most this share
    c.LatePolicy.zero_after = "7d"                   # later than this scores 0
    c.LatePolicy.extensions_file = "extensions.csv"  # per learner, `autograder extend` edits it

Everything here is plain computation on those values: the grader applies them through
nbgrader's own late-submission plugin (:mod:`autograder.grading.late`), the learner's kernel and
nbgrader's Validate button read them to say when an assignment is due and what a hand-in now
would cost. No torch, no nbgrader import.

Rules: lateness is counted from the due date plus the learner's extension. Within the grace
period, nothing. After it, ``penalty`` per *started* ``per`` (hour or day) counted from the due
date (so 1 minute past a 15-minute grace is one day late, not zero), at most ``cap``; later than
``zero_after``, the whole score. A policy with no due date for an assignment never penalises it.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from course.i18n import N_, _

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])", re.I)
EXTENSION_COLUMNS = ["assignment", "student", "extension", "reason", "granted"]


def parse_duration(text: str | int | float | None) -> float:
    """Seconds in ``"15m"``, ``"2h"``, ``"1d12h"``, ``"1w"`` (a plain number is seconds; empty
    is 0). Raises ``ValueError`` for anything else."""
    if text is None or text == "":
        return 0.0
    if isinstance(text, int | float):
        return float(text)
    s = str(text).strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(?:\.\d+)?", s):
        return float(s)
    total, pos = 0.0, 0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2).lower()]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f"not a duration: {text!r} (write it like 15m, 2h, 3d or 1w)")
    return total


#: the units of a duration, as the learner's language writes them
UNITS = [(N_("{n} d"), 86400), (N_("{n} h"), 3600), (N_("{n} min"), 60), (N_("{n} s"), 1)]


def format_duration(seconds: float) -> str:
    """``3 h 10 min``, ``2 d 4 h``, ``45 s`` (the two largest units, in the current
    language)."""
    seconds = max(0, int(round(seconds)))
    parts = []
    for unit, size in UNITS:
        if seconds >= size or (size == 1 and not parts):
            n, seconds = divmod(seconds, size)
            parts.append(_(unit, n=n))
    return " ".join(parts[:2])


def _zone(name: str):
    from zoneinfo import ZoneInfo

    return dt.timezone.utc if name.upper() in ("UTC", "Z", "") else ZoneInfo(name)


def parse_time(text: str, zone: str = "UTC") -> dt.datetime:
    """An aware datetime from ``2027-02-01 23:59`` (in ``zone``) or an ISO 8601 time with its
    own offset."""
    value = dt.datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=_zone(zone))
    return value


@dataclass
class Lateness:
    """What a hand-in at one time costs."""

    due: dt.datetime | None  # with the extension
    extension: float = 0.0  # seconds
    seconds_late: float = 0.0
    share: float = 0.0  # of the score taken (0..1)
    in_grace: bool = False

    @property
    def late(self) -> bool:
        return self.seconds_late > 0


@dataclass
class Policy:
    """The course's late policy (see the module docstring)."""

    due: dict[str, str] = field(default_factory=dict)
    timezone: str = "UTC"
    grace: float = 0.0
    per: str = "day"
    penalty: float = 0.0
    cap: float = 1.0
    zero_after: float | None = None
    extensions_file: str = ""
    root: Path | None = None  # the course root (relative paths are read from there)
    exchange: str = ""  # nbgrader's exchange, where a learner finds their own extension
    course_id: str = ""

    @classmethod
    def from_config(cls, config, root: Path | None = None) -> Policy:
        """The ``LatePolicy`` section of a traitlets config (missing values: no deadline)."""
        section = config.get("LatePolicy", {}) if config is not None else {}
        zero = section.get("zero_after", "")
        per = str(section.get("per", "day"))
        if per not in ("hour", "day"):
            raise ValueError(f"LatePolicy.per is {per!r}: write 'hour' or 'day'")
        course = config.get("CourseDirectory", {}) if config is not None else {}
        exchange = config.get("Exchange", {}) if config is not None else {}
        return cls(due={str(k): str(v) for k, v in dict(section.get("due", {}) or {}).items()},
                   timezone=str(section.get("timezone", "UTC") or "UTC"),
                   grace=parse_duration(section.get("grace", 0)), per=per,
                   penalty=float(section.get("penalty", 0.0) or 0.0),
                   cap=float(section.get("cap", 1.0) if section.get("cap") is not None else 1.0),
                   zero_after=parse_duration(zero) if zero not in ("", None) else None,
                   extensions_file=str(section.get("extensions_file", "") or ""), root=root,
                   exchange=str(exchange.get("root", "") or ""),
                   course_id=str(course.get("course_id", "") or ""))

    # -- due dates and extensions
    def due_date(self, assignment: str) -> dt.datetime | None:
        text = self.due.get(assignment)
        return None if not text else parse_time(text, self.timezone)

    def extensions_path(self) -> Path | None:
        if not self.extensions_file:
            return None
        path = Path(os.path.expanduser(self.extensions_file))
        return path if path.is_absolute() or self.root is None else self.root / path

    def extensions(self) -> dict[tuple[str, str], dict]:
        """(assignment, student) -> its row of the extensions file (empty if none)."""
        path = self.extensions_path()
        return read_extensions(path) if path is not None else {}

    def extension(self, assignment: str, student: str) -> float:
        """Seconds of ``student``'s extension on ``assignment``: from the extensions file, or,
        where that file is not readable (a learner on a shared server), from the learner's
        own copy in the exchange (:meth:`published`)."""
        path = self.extensions_path()
        try:
            readable = path is not None and os.access(path, os.R_OK)
        except OSError:
            readable = False
        if readable:
            row = self.extensions().get((assignment, student))
            return parse_duration(row["extension"]) if row else 0.0
        published = self.published(assignment, student)
        try:
            return parse_duration(published.read_text().strip()) if published else 0.0
        except (OSError, ValueError):
            return 0.0

    def published(self, assignment: str, student: str) -> Path | None:
        """Where ``autograder extend`` leaves a learner's extension for them to read:
        ``EXCHANGE/COURSE/extensions/ASSIGNMENT/STUDENT`` (a folder nobody can list)."""
        if not (self.exchange and self.course_id):
            return None
        return Path(self.exchange) / self.course_id / "extensions" / assignment / student

    # -- the rule
    def share(self, seconds_late: float) -> tuple[float, bool]:
        """(share of the score taken, whether within the grace period) for ``seconds_late``."""
        if seconds_late <= 0:
            return 0.0, False
        if self.zero_after is not None and seconds_late > self.zero_after:
            return 1.0, False
        if seconds_late <= self.grace:
            return 0.0, True
        unit = 3600.0 if self.per == "hour" else 86400.0
        started = math.ceil(seconds_late / unit)
        return min(self.cap, self.penalty * started, 1.0), False

    def lateness(self, assignment: str, student: str | None,
                 when: dt.datetime) -> Lateness:
        """What handing ``assignment`` in at ``when`` costs ``student``."""
        due = self.due_date(assignment)
        if due is None:
            return Lateness(None)
        ext = self.extension(assignment, student) if student else 0.0
        due = due + dt.timedelta(seconds=ext)
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        late = max(0.0, (when - due).total_seconds())
        share, grace = self.share(late)
        return Lateness(due, ext, late, share, grace)


def describe(policy, assignment: str, student: str, now: dt.datetime,
             hand_in: bool = False) -> str:
    """One sentence for a learner: when ``assignment`` is due for them and what a hand-in now
    costs (empty when it has no due date)."""
    lateness = policy.lateness(assignment, student, now)
    if lateness.due is None:
        return ""
    when = lateness.due.astimezone(_zone(policy.timezone)).strftime("%Y-%m-%d %H:%M %Z")
    due = _("Due {when}", when=when) if not lateness.extension else _(
        "Due {when}, with your extension of {extension}", when=when,
        extension=format_duration(lateness.extension))
    if not lateness.late:
        left = format_duration((lateness.due - now).total_seconds())
        return _("{due}: {left} left.", due=due, left=left) if not hand_in else _(
            "{due}: handing in now would be on time ({left} left).", due=due, left=left)
    late = format_duration(lateness.seconds_late)
    if lateness.in_grace:
        return _("{due}: handing in now would be {late} late, within the grace period: no "
                 "penalty.", due=due, late=late)
    if lateness.share >= 1:
        return _("{due}: handing in now would be {late} late: it would score 0.", due=due,
                 late=late)
    share = format(lateness.share, ".0%")
    return _("{due}: handing in now would be {late} late and lose {share} of its score.",
             due=due, late=late, share=share)


def read_extensions(path: Path) -> dict[tuple[str, str], dict]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        return {}
    out = {}
    for row in rows:
        if row.get("assignment") and row.get("student") and row.get("extension"):
            out[(row["assignment"], row["student"])] = row
    return out


def write_extensions(path: Path, rows: dict[tuple[str, str], dict]) -> None:
    """Rewrite the extensions file, sorted, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, EXTENSION_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for key in sorted(rows):
            writer.writerow(rows[key])
    os.replace(tmp, path)


def learner_id() -> str:
    """Who is working in this kernel: the JupyterHub user, else the local user."""
    user = os.environ.get("JUPYTERHUB_USER") or os.environ.get("NB_USER")
    if user:
        return user
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return ""


def _nearest_config(start: Path) -> Path | None:
    for folder in [start, *start.parents]:
        if (folder / "nbgrader_config.py").is_file():
            return folder
    return None


def course_config(start: Path | None = None):
    """The nbgrader configuration of the course this process works in (a traitlets
    ``Config``) and the folder of the course's own ``nbgrader_config.py`` (or ``None``):
    Jupyter's config path (``/etc/jupyter`` on a hub...), then the nearest
    ``nbgrader_config.py`` in this folder or above it (a notebook in ``release/01_leaves``
    finds the course's), which wins. Reading a config file runs it, as nbgrader does."""
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    config = Config()
    folders = [Path(p) for p in reversed(jupyter_config_path())]  # lowest priority first
    nearest = _nearest_config((start or Path.cwd()).resolve())
    if nearest is not None:
        folders.append(nearest)
    for folder in folders:
        path = folder / "nbgrader_config.py"
        if not path.is_file():
            continue
        try:
            config.merge(PyFileConfigLoader(path.name, str(folder)).load_config())
        except Exception:
            continue
    return config, nearest


def course_policy(start: Path | None = None) -> Policy | None:
    """The late policy of the course this process works in (see :func:`course_config`), or
    ``None`` when no configuration sets one or it cannot be read."""
    config, nearest = course_config(start)
    if "LatePolicy" not in config:
        return None
    root = Path(config.get("CourseDirectory", {}).get("root", nearest or Path.cwd()))
    try:
        return Policy.from_config(config, root)
    except (ValueError, TypeError):
        return None
