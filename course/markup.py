"""Markup in the course's own messages: ``code`` and *emphasis*, never a backtick or an asterisk.

The course writes its messages (feedback, the doctor's findings, the misconceptions) with
Markdown-style code spans, ```0.weight```, and emphasis, ``*before*`` (``**存入**`` in the Chinese
messages), the way the notebooks' prose does. No reader should see those marks: :func:`plain` drops them for text output (a
terminal, nbgrader's Validate, ``repr``), and :func:`rich` turns them into ``<code>`` and
``<em>`` (``<strong>``) for HTML output, escaping everything else. Emphasis is one asterisk on each side of
words, touching them (``*both*``); an asterisk between numbers or names (``2*w``, ``w**2``) or
with spaces around it (``2 * station``) is arithmetic and stays.
"""

from __future__ import annotations

import html
import re

CODE_SPAN = re.compile(r"`([^`]+)`")
# (the words touching the marks may be Chinese: only ASCII letters and digits next to a mark
# make it arithmetic)
EMPHASIS = re.compile(r"(?<![A-Za-z0-9_*])(\*\*?)(?=[^\s*])([^*\n]+?)(?<=[^\s*])\1"
                      r"(?![A-Za-z0-9_*])")


def _outside_code(s: str, text, code) -> str:
    out, last = [], 0
    for m in CODE_SPAN.finditer(s):
        out.append(text(s[last:m.start()]))
        out.append(code(m.group(1)))
        last = m.end()
    out.append(text(s[last:]))
    return "".join(out)


def plain(s: str) -> str:
    """``s`` with every ```code``` span shown as its bare text, and *emphasis* as its words."""
    return _outside_code(s, lambda t: EMPHASIS.sub(r"\2", t), lambda c: c)


def rich(s: str) -> str:
    """``s`` as HTML: code spans as ``<code>``, emphasis as ``<em>``, the rest escaped."""

    def text(t: str) -> str:
        out, last = [], 0
        for m in EMPHASIS.finditer(t):
            out.append(html.escape(t[last:m.start()]))
            tag = "strong" if len(m.group(1)) == 2 else "em"
            out.append(f"<{tag}>{html.escape(m.group(2))}</{tag}>")
            last = m.end()
        out.append(html.escape(t[last:]))
        return "".join(out)

    return _outside_code(s, text, lambda c: f"<code>{html.escape(c)}</code>")
