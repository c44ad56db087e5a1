"""Where Run All stopped: a sign on the unanswered question, brought into view.

A lesson's answer cells end in ``raise NotImplementedError()`` until the learner answers, so
Run All stops at the first unanswered question, as nbgrader intends. JupyterLab and Notebook 7
leave the learner at the bottom of the notebook then, with the red error 40 cells above and out
of sight (JupyterLab's own issue #8714): a newcomer thinks nothing ran. The setup cell
(:func:`autograder.checker`) installs :func:`install`: an IPython handler for a
``NotImplementedError`` raised by a cell itself, which shows, above the usual traceback, one
line saying that Run All stopped here and what to do, and scrolls that cell into view (a
JavaScript output, which JupyterLab and Notebook 7 run for output the kernel just produced;
the sign stays readable where scripts do not run). The cell still ends in its error, so Run
All still stops there. Not when nbgrader executes a notebook (grading, Validate): its outputs
stay what they always are. Kernel side: no torch.
"""

from __future__ import annotations

import os

from course.i18n import _

#: scrolls the cell holding this output to the middle of the window, once the front end is
#: done moving to the end of the notebook
SCROLL = ("(function (el) { setTimeout(function () {"
          " var cell = el.closest('.jp-Cell') || el.closest('.cell') || el;"
          " cell.scrollIntoView({block: 'center'}); }, 400); })(element);")


def sign() -> dict[str, str]:
    """The sign's MIME bundle: HTML (with a role, so a screen reader announces it) and text."""
    text = _("Run All stopped here: this question is not answered yet. Answer it (replace each "
             "`...` and delete the `raise NotImplementedError()` line), run this cell, then go on "
             "with Run > Run Selected Cell and All Below.")
    from course.markup import plain, rich

    return {
        "text/html": ('<div class="autograder-run-all-stopped" role="status" '
                      'style="font-weight:bold;padding:0.3em 0.5em;border-left:4px solid '
                      'var(--jp-error-color1, #b3261e);color:var(--jp-content-font-color1, '
                      'inherit)">' + rich(text) + "</div>"),
        "text/plain": plain(text),
    }


def _handler(shell, etype, value, tb, tb_offset=None):
    """IPython calls this in place of showing the traceback (what it returns is not shown):
    the sign, then the traceback as always, which also makes the cell end in its error."""
    from IPython.display import display

    if _raised_by_the_cell(tb):
        display(sign(), raw=True)
        display({"application/javascript": SCROLL}, raw=True)
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)


def _raised_by_the_cell(tb) -> bool:
    """Whether the error was raised by the cell's own code (``raise NotImplementedError()`` in
    an answer cell), not from inside a function the cell called."""
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "<module>"


def install() -> bool:
    """Install the handler in the running IPython kernel; False where there is none, or when
    nbgrader runs the notebook."""
    if os.environ.get("NBGRADER_EXECUTION"):
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return False
    shell.set_custom_exc((NotImplementedError,), _handler)
    return True
