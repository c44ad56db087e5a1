"""The catalogs of what the course's Python code says: collecting, merging, checking.

The Markdown of the notebooks is translated per cell (:mod:`autograder.translate`); the texts of
the feedback, the misconceptions, the explorers, the doctor and the figures are translated per
message, gettext's way (:mod:`course.i18n`). Babel extracts the messages from the modules of
``course`` and ``autograder``:

* the first argument of ``_()`` and ``N_()``;
* an ``Item``'s explanation (its second argument) and a ``Requirement``'s text (its first),
  which :mod:`autograder.questions` translates when it shows them.

Each module that has messages gets a catalog, ``course/locale/zh_CN/<module>.po`` (inside the
package: the sandboxed grader sees only the packages). :func:`update` merges what it finds in the code
into it the way ``msgmerge`` does (a message whose English changed a little is matched to its
old entry and marked fuzzy); :func:`problems` names every message that is untranslated, fuzzy,
lost a placeholder or a code span, or no longer exists in the code.
"""

from __future__ import annotations

import re
from pathlib import Path

from course.i18n import LANGUAGES, LOCALE_DIR

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("course", "autograder")
#: the instructors' tools speak English only: their modules are not collected
INSTRUCTORS = ("autograder/grading/", "autograder/analytics.py", "autograder/site.py",
               "autograder/translate.py", "autograder/messages.py", "autograder/release.py",
               "autograder/pipeline.py", "autograder/__main__.py")
#: Babel keyword specs: the function name -> which argument is the message
KEYWORDS = {"_": None, "N_": None, "Item": (2,), "Requirement": (1,)}
PLACEHOLDER = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)(?:[!:][^{}]*)?\}(?!\})")
CODE = re.compile(r"`[^`]+`")


def modules(root: Path | None = None) -> list[tuple[str, Path]]:
    """(dotted module name, path) of every module of the packages."""
    root = root or ROOT
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path.relative_to(root).as_posix().startswith(INSTRUCTORS):
                continue
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"] if rel.name == "__init__" else rel.parts
            out.append((".".join(parts), path))
    return out


def extract(path: Path) -> list[tuple[int, str]]:
    """(line, English) of every message of one module, in order, each once."""
    from babel.messages.extract import extract_from_file

    seen, out = set(), []
    for lineno, message, _comments, _context in extract_from_file(
            "python", str(path), keywords=KEYWORDS, comment_tags=("TRANSLATORS:",)):
        if isinstance(message, str) and message.strip() and message not in seen:
            seen.add(message)
            out.append((lineno, message))
    return out


def catalog_path(locale: str, module: str) -> Path:
    return LOCALE_DIR / locale / f"{module}.po"


HEADER = ("# The messages of one module of the leaf-tensors course, in one language.\n"
          "# Made by `autograder translate --update`; the translators' guide is\n"
          "# translations/zh_CN/README.md.")


def _new(locale: str):
    import datetime

    from babel.messages.catalog import Catalog

    start = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
    return Catalog(locale=locale, project="leaf-tensors-course", version="1", fuzzy=False,
                   header_comment=HEADER, creation_date=start, revision_date=start,
                   last_translator="the course's translators", language_team="zh_CN",
                   msgid_bugs_address="the course's issue tracker")


def _read(path: Path, locale: str):
    from babel.messages.pofile import read_po

    if not path.exists():
        return _new(locale)
    with path.open("rb") as f:
        return read_po(f, locale=locale)


def _write(catalog, path: Path) -> None:
    from babel.messages.pofile import write_po

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        write_po(f, catalog, width=100, include_lineno=False, omit_header=False,
                 ignore_obsolete=True, sort_output=False)


def update(tag: str, root: Path | None = None,
           only: list[str] | None = None) -> dict[str, dict[str, int]]:
    """Merge the messages of every module (or of the modules named in ``only``) into ``tag``'s
    catalogs (``msgmerge``); the counts of new, fuzzy and dropped entries per catalog."""
    root = root or ROOT
    locale = LANGUAGES[tag]
    counts = {}
    for module, path in modules(root):
        if only is not None and module not in only:
            continue
        found = extract(path)
        target = catalog_path(locale, module)
        if not found and not target.exists():
            continue
        template = _new(locale)
        rel = path.relative_to(root).as_posix()
        for lineno, message in found:
            template.add(message, locations=[(rel, lineno)])
        catalog = _read(target, locale)
        before = {m.id for m in catalog if m.id}
        catalog.update(template, update_header_comment=False)
        after = {m.id for m in catalog if m.id}
        fuzzy = sum(1 for m in catalog if m.id and m.fuzzy and m.previous_id)
        counts[module] = {"added": len(after - before), "fuzzy": fuzzy,
                          "dropped": len(before - after)}
        catalog.fuzzy = False
        if found:
            _write(catalog, target)
        else:
            target.unlink()
    return counts


def set_translations(tag: str, module: str, texts: dict[str, str],
                     root: Path | None = None) -> None:
    """Write translations (English -> text) into ``module``'s catalog and clear their fuzzy
    flags (for scripts and tests; translators use their PO editor)."""
    locale = LANGUAGES[tag]
    path = catalog_path(locale, module)
    catalog = _read(path, locale)
    for english, text in texts.items():
        message = catalog.get(english)
        if message is None:
            raise KeyError(f"{module}: no message {english[:60]!r}; run "
                           f"`autograder translate {tag} --update` first")
        message.string = text
        message.flags.discard("fuzzy")
        message.previous_id = []
    _write(catalog, path)


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


def problems(tag: str, root: Path | None = None, only: list[str] | None = None) -> list[str]:
    """Every message of the code (or of the modules in ``only``) that ``tag`` does not
    translate, or translates damaged."""
    root = root or ROOT
    locale = LANGUAGES[tag]
    found: list[str] = []
    seen: dict[str, dict[str, list[str]]] = {}   # English -> translation -> catalogs
    for module, path in modules(root):
        if only is not None and module not in only:
            continue
        messages = extract(path)
        target = catalog_path(locale, module)
        where = target.relative_to(root).as_posix() if target.is_relative_to(root) else str(target)
        have = {m.id: m for m in _read(target, locale) if m.id} if target.exists() else {}
        rel = path.relative_to(root).as_posix()
        for lineno, english in messages:
            name = f"{where}: {rel}:{lineno} {english[:60]!r}"
            m = have.get(english)
            if m is None or not m.string:
                found.append(f"{name} is not translated (run `autograder translate {tag} "
                             "--update`, then translate it)")
            elif m.fuzzy:
                found.append(f"{name} is fuzzy: review the translation, then remove the flag")
            else:
                if placeholders(english) != placeholders(m.string):
                    found.append(f"{name}: the translation's placeholders "
                                 f"{sorted(placeholders(m.string))} are not the English "
                                 f"{sorted(placeholders(english))}")
                lost = sorted(set(CODE.findall(english)) - set(CODE.findall(m.string)))
                if lost:
                    found.append(f"{name} lost code spans {lost}: code stays as it is")
        for english in sorted(set(have) - {e for _, e in messages}):
            found.append(f"{where}: {english[:60]!r} is no longer in {rel} "
                         f"(run `autograder translate {tag} --update`)")
        for english, m in have.items():
            if m.string and not m.fuzzy:
                seen.setdefault(english, {}).setdefault(m.string, []).append(where)
    for english, versions in seen.items():  # one table at run time: one translation each
        if len(versions) > 1:
            found.append(f"{english[:60]!r} is translated differently in "
                         + "; ".join(f"{', '.join(w)} ({t[:30]!r})" for t, w in versions.items())
                         + ": the course shows one of them everywhere, so make them one")
    return found
