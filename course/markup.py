"""Code spans in the course's own messages: ``name`` in backticks becomes code, never a backtick.

The course writes its messages (feedback, the doctor's findings) with Markdown-style code spans,
```0.weight```, the way the notebooks' prose does. No reader should see those backticks:
:func:`plain` drops them for text output (a terminal, nbgrader's Validate, ``repr``), and
:func:`rich` turns them into ``<code>`` for HTML output, escaping everything else.
"""

from __future__ import annotations

import html
import re

CODE_SPAN = re.compile(r"`([^`]+)`")


def plain(s: str) -> str:
    """``s`` with every ```code``` span shown as its bare text."""
    return CODE_SPAN.sub(r"\1", s)


def rich(s: str) -> str:
    """``s`` as HTML: code spans as ``<code>``, the rest escaped."""
    out, last = [], 0
    for m in CODE_SPAN.finditer(s):
        out.append(html.escape(s[last:m.start()]))
        out.append(f"<code>{html.escape(m.group(1))}</code>")
        last = m.end()
    out.append(html.escape(s[last:]))
    return "".join(out)
