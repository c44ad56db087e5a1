"""What the course's Python code says is Chinese in the Chinese edition, and cannot drift.

The Markdown is checked by ``test_translation.py``; this file checks the messages of the code
(feedback, misconceptions, explorers, the doctor, the figures): every message has a current
Chinese translation that keeps its placeholders and code; every message can be read off the code (no
f-string where a message belongs); a change to an English message fails the check, naming it,
until it is revised; and the language is set where it should be. That the Chinese verdicts grade
exactly like the English ones and read Chinese is proven on every request the lessons' tests
grade (``helpers.assert_chinese_twin``).
"""

from __future__ import annotations

import ast
import shutil

import pytest

from autograder import messages
from course import i18n

ZH = "zh-CN"


def test_every_message_of_the_code_has_a_current_chinese_translation():
    found = messages.problems(ZH)
    assert found == [], "\n".join(found)


def _message_args(tree: ast.AST):
    """(call name, argument node) of every place a message is written."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        name = node.func.id
        spec = messages.KEYWORDS.get(name, False)
        if spec is False:
            continue
        index = 0 if spec is None else spec[0] - 1
        if len(node.args) > index:
            yield name, node.args[index]


def test_every_message_is_a_literal_the_extractor_can_read():
    """A string built on the spot (an f-string, ``+``, ``%``, ``.format``) where a message
    belongs cannot be translated: the extractor skips it and the Chinese learner reads English.
    ``_(variable)`` is fine: it shows a message marked where it was written (``N_``, ``Item``)."""
    bad = []
    for _module, path in messages.modules():
        for name, arg in _message_args(ast.parse(path.read_text(), str(path))):
            # a string built on the spot: an f-string, "..." + ..., "..." % ..., .format(...)
            built = isinstance(arg, (ast.JoinedStr, ast.BinOp)) or (
                isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute)
                and arg.func.attr in ("format", "join"))
            if name == "N_" and not isinstance(arg, ast.Constant):
                built = True   # N_ marks a literal, or it marks nothing
            if built:
                bad.append(f"{path.relative_to(messages.ROOT)}:{arg.lineno} {name}(...)"
                           f" {ast.unparse(arg)[:60]}")
    assert bad == [], "\n".join(bad)


def test_placeholders_and_code_spans_are_checked():
    assert messages.placeholders("{n} of {total!r} right, {{literal}}") == {"n", "total"}
    english, chinese = "`x.grad` is {value}", "x 的梯度是 {value}"
    assert set(messages.CODE.findall(english)) - set(messages.CODE.findall(chinese))


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A copy of the packages and their catalogs, to change an English message in."""
    for package in messages.PACKAGES:
        shutil.copytree(messages.ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(messages, "LOCALE_DIR", tmp_path / "course" / "locale")
    return tmp_path


def test_a_changed_english_message_fails_by_name_until_revised(scratch):
    path = scratch / "autograder" / "feedback.py"
    english = "This looks like a common belief: {name}."
    changed = "This looks like a widespread belief: {name}."
    path.write_text(path.read_text().replace(english, changed))
    assert any(changed[:40] in p and "not translated" in p
               for p in messages.problems(ZH, scratch, only=["autograder.feedback"]))
    counts = messages.update(ZH, scratch, only=["autograder.feedback"])["autograder.feedback"]
    assert counts["fuzzy"] == 1, counts     # matched to the old entry, kept for the translator
    found = messages.problems(ZH, scratch, only=["autograder.feedback"])
    assert len(found) == 1 and "fuzzy" in found[0] and changed[:40] in found[0], found
    messages.set_translations(ZH, "autograder.feedback", {changed: "这看起来是一个普遍的误区：{name}。"},
                              scratch)
    assert messages.problems(ZH, scratch, only=["autograder.feedback"]) == []


def test_a_lost_placeholder_or_code_span_is_named(scratch):
    messages.set_translations(ZH, "autograder.questions", {
        "Your function raised {error}": "你的函数抛出了错误",
        "`{key}`: missing from your answer.": "你的答案里缺少这一项。",
    }, scratch)
    found = "\n".join(messages.problems(ZH, scratch, only=["autograder.questions"]))
    assert "placeholders" in found and "'Your function raised {error}'" in found
    assert "lost code spans ['`{key}`']" in found


def test_translate_check_covers_the_messages_of_the_code(scratch, monkeypatch):
    """``autograder translate zh-CN --check`` names the code's messages too."""
    from autograder.translate import _cmd

    path = scratch / "autograder" / "questions.py"
    path.write_text(path.read_text().replace("Define the function {name} first.",
                                             "Write the function {name} first."))
    course = str(messages.ROOT)
    monkeypatch.setattr(messages, "ROOT", scratch)

    class Args:
        edition, assignments, update, check = ZH, [], False, True

    Args.course = course
    assert _cmd(Args()) == 1


def test_the_language_is_checked_and_scoped():
    with pytest.raises(ValueError, match="zh-CN"):
        i18n.set_language("fr")
    assert i18n.language() == "en"
    with i18n.using(ZH):
        assert i18n.language() == ZH
        assert i18n._("all right") != "all right"
        assert i18n._("{right} of {n} right", right=2, n=4).count("2") == 1
    assert i18n.language() == "en" and i18n._("all right") == "all right"


def test_the_request_carries_the_language_and_the_oracle_answers_in_it(monkeypatch):
    from autograder import client, oracle

    sent = []
    monkeypatch.setattr(client.oracle(), "ask", lambda request, timeout: sent.append(request))
    client.ask("01_leaves", "q6", 1.0)
    with i18n.using(ZH):
        client.ask("01_leaves", "q6", 1.0)
    assert "language" not in sent[0] and sent[1]["language"] == ZH
    verdict = oracle.evaluate({"lesson": "01_leaves", "question": "q99", "language": ZH})
    assert verdict["findings"][0]["text"].startswith("没有这道题")
    assert oracle.evaluate({"lesson": "01_leaves", "question": "q99"})["findings"][0][
        "text"].startswith("Unknown question")


def test_chinese_figures_fall_back_to_a_cjk_font_with_real_glyphs():
    """After ``set_language("zh-CN")`` a plain matplotlib title in Chinese draws real glyphs:
    two different characters draw differently (a missing glyph draws the same box)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def ink(text):
        fig = plt.figure(figsize=(1, 1), dpi=50)
        fig.text(0.5, 0.5, text, fontsize=30, ha="center", va="center")
        fig.canvas.draw()
        pixels = np.asarray(fig.canvas.buffer_rgba())[..., 0].copy()
        plt.close(fig)
        return pixels

    try:
        i18n.set_language(ZH)
        assert i18n.CJK_FONT in matplotlib.rcParams["font.family"]
        first, second = ink("梯"), ink("层")
        assert (first < 128).sum() > 40 and (second < 128).sum() > 40
        assert (first != second).sum() > 40
    finally:
        i18n.set_language("en")
    assert i18n.CJK_FONT not in matplotlib.rcParams["font.family"]


def test_no_message_shows_a_markup_character_to_its_reader():
    """Every message of the code, English and Chinese, as the learner reads it (course.markup:
    text and HTML): no backtick, no asterisks of emphasis or bold left."""
    import glob
    import re

    import polib

    from course.markup import EMPHASIS, plain, rich

    left = []
    for path in sorted(glob.glob(str(messages.ROOT / "course/locale/zh_CN/*.po"))):
        for entry in polib.pofile(path):
            for text in (entry.msgid, entry.msgstr):
                shown = plain(text)
                html = re.sub(r"<code>.*?</code>", "", rich(text))
                if "`" in shown or EMPHASIS.search(shown) or "`" in html \
                        or EMPHASIS.search(html):
                    left.append(f"{path.rsplit('/', 1)[-1]}:{entry.linenum}: {text[:70]}")
    assert not left, "\n".join(left)


def test_emphasis_is_rendered_and_arithmetic_is_not():
    from course.markup import plain, rich

    assert rich("a hook *returns* a `tensor`") == "a hook <em>returns</em> a <code>tensor</code>"
    assert plain("the *saved* `w`") == "the saved w"
    assert rich("不会被**存入**.grad") == "不会被<strong>存入</strong>.grad"
    for arithmetic in ("2 * station", "3*w**2", "1/(2*sqrt(h))", "`a*b*c`", "(w + 1)**3 = 1.1**3",
                       "sum(w ** 2)"):
        assert "<em>" not in rich(arithmetic) and "*" in plain(arithmetic)
