"""The language of everything the course's Python code says: English, or Simplified Chinese.

The English text in the code is the source; a Chinese edition's texts live in gettext PO
catalogs inside the package, one per module (``course/locale/zh_CN/autograder.lessons.l01_leaves.po``),
keyed by the English text itself, as gettext does::

    from course.i18n import _, N_

    _("Your function raised {error}", error=summary)   # translated now, then formatted
    title = N_("Leaf or not?")                          # marked only; translated where shown

Rules for the English strings (the translators' guide repeats them):

* placeholders are named (``{error}``), filled by :func:`_`; never build a sentence out of
  translated fragments, never put an f-string inside ``_()``;
* code stays between backticks, and a translation keeps every code span as it is;
* a string marked with :func:`N_` is passed through :func:`_` where it is shown (the questions'
  titles, items' explanations and requirements are translated by :mod:`autograder.questions`).

The language is one setting of the process: the Chinese notebooks' setup cell calls
``course.set_language("zh-CN")``, and the oracle evaluates each request in the language the
request names. ``COURSE_LANGUAGE`` sets the default of a process that sets none.
``autograder translate zh-CN --update`` extracts the strings with Babel and merges them into the
catalogs; the test suite fails on a string without a current translation.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

#: BCP 47 tag (as in folder names) -> gettext locale of its catalogs
LANGUAGES = {"en": "en", "zh-CN": "zh_CN"}
SOURCE_LANGUAGE = "en"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"

_current: list[str] = []


def _check(language: str) -> str:
    if language not in LANGUAGES:
        raise ValueError(f"the course speaks {', '.join(map(repr, LANGUAGES))}, not {language!r}")
    return language


def language() -> str:
    """The current language's tag: ``"en"`` or ``"zh-CN"``."""
    if _current:
        return _current[-1]
    return _check(os.environ.get("COURSE_LANGUAGE") or SOURCE_LANGUAGE)


#: the CJK font figures fall back to for the glyphs DejaVu Sans lacks (Debian fonts-wqy-microhei)
CJK_FONT = "WenQuanYi Micro Hei"


def set_language(language: str) -> None:
    """Make ``language`` the process's language (the Chinese notebooks' setup cell calls this).

    For Chinese, matplotlib's figures fall back to a CJK font for the characters DejaVu Sans
    lacks, so a title written in Chinese in a notebook's cell shows its glyphs, not boxes.
    """
    _current[:] = [_check(language)]
    _figure_fonts(language)


def _figure_fonts(language: str) -> None:
    import sys

    if "matplotlib" not in sys.modules and language == SOURCE_LANGUAGE:
        return  # nothing to undo, and English should not pay for importing matplotlib
    try:
        import matplotlib
    except ImportError:
        return
    # matplotlib falls back glyph by glyph along font.family (a generic family such as
    # "sans-serif" stands for its first installed font): DejaVu Sans first, the CJK font next
    families = [f for f in matplotlib.rcParams["font.family"] if f != CJK_FONT]
    if language == "zh-CN":
        from course.draw import cjk_font

        cjk_font()  # found (added if installed after matplotlib listed its fonts), or a clear error
        families.append(CJK_FONT)
    matplotlib.rcParams["font.family"] = families


@contextlib.contextmanager
def using(language: str | None):
    """Speak ``language`` inside the block (``None``: keep the current one)."""
    if language is None:
        yield
        return
    _current.append(_check(language))
    try:
        yield
    finally:
        _current.pop()


@functools.cache
def catalog(language: str) -> dict[str, str]:
    """English -> translation, from every catalog of ``language`` (fuzzy and empty entries are
    left out: their English is shown instead, and the test suite names them)."""
    if language == SOURCE_LANGUAGE:
        return {}
    import polib

    table: dict[str, str] = {}
    for path in sorted((LOCALE_DIR / LANGUAGES[_check(language)]).glob("*.po")):
        for entry in polib.pofile(str(path)):
            if entry.msgstr and not entry.fuzzy and not entry.obsolete:
                table[entry.msgid] = entry.msgstr
    return table


def translate(message: str, language: str | None = None) -> str:
    """``message`` in ``language`` (the current one by default), untranslated if unknown."""
    lang = language or globals()["language"]()
    if lang == SOURCE_LANGUAGE or not message:
        return message
    return catalog(lang).get(message, message)


def _(message: str, /, **values) -> str:
    """``message`` in the current language, with its ``{placeholders}`` filled from ``values``."""
    text = translate(message)
    return text.format(**values) if values else text


def N_(message: str, /) -> str:
    """Mark ``message`` for translation where it is shown; returns it unchanged."""
    return message


def is_chinese() -> bool:
    return language() == "zh-CN"
