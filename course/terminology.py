"""One Chinese word for each idea of the course, in everything the Chinese edition shows.

:data:`TERMS_ZH` holds, for each concept that the lessons, the feedback, the explorers and the
site name again and again, the one term the Chinese edition uses and the variants it replaced
(``tests/test_translation.py`` reads every learner-visible Chinese text for them: the lessons'
catalogs, the code's catalogs, the Chinese README, the site's own words). The analogy words
and the names of graph parts are in :data:`course.themes.GLOSSARY_ZH`; both tables give the site's
search its dictionary (:func:`search_words`), so that 叶子张量 is found as one word as well as
叶子 and 张量.

A variant quoted from a source article (inside “…”) is the article's word, not the course's,
and is allowed there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    """``english``: the idea; ``zh``: its one Chinese term (a regular expression where a
    number varies); ``avoid``: regular expressions of the variants that must not appear."""

    english: str
    zh: str
    avoid: tuple[str, ...] = ()
    #: words for the site's search dictionary (default: ``zh`` itself)
    words: tuple[str, ...] = ()

    def search_words(self) -> tuple[str, ...]:
        return self.words or (self.zh,)


TERMS_ZH: tuple[Term, ...] = (
    Term("Question N (a heading, a part name)", "第N题", (r"问题\s*\d+",)),
    Term("explorer (an interactive picture)", "探索器", ("交互图示", "交互图", "探查器")),
    Term("Run All (JupyterLab's Run menu: Run All Cells)", "运行所有单元格",
         ("运行全部单元格", "全部运行")),
    Term("leaf tensor", "叶子张量", ("叶张量",)),
    Term("non-leaf tensor", "非叶子张量", ("非叶张量",)),
    Term("leaf (a graph node)", "叶子节点", ("叶结点",)),
    Term("gradient", "梯度"),
    Term("hook", "钩子", ("挂钩", "钩函数")),
    Term("computation graph", "计算图", ("运算图",)),
    Term("backward pass", "反向传播", ("后向传播", "逆向传播")),
    Term("the gradient doctor", "梯度流医生", ("梯度医生",)),
    Term("version counter", "版本计数器", ("版本计数值",)),
    Term("in-place operation", "原地操作", ("就地操作", "原位操作")),
    Term("vanishing gradient", "梯度消失"),
    Term("exploding gradient", "梯度爆炸"),
    Term("optimizer", "优化器"),
    Term("visible check", "可见检查"),
    Term("hidden tests", "隐藏测试"),
    Term("misconception", "误区", ("错误观念",)),
)

_QUOTED = re.compile(r"“[^”]*”")


def unquoted(text: str) -> str:
    """``text`` without what it quotes from a source article (“…”)."""
    return _QUOTED.sub("“”", text)


def variants_in(text: str) -> list[tuple[str, str]]:
    """(variant found, the term to use) for every avoided variant in ``text`` outside
    quotations."""
    text = unquoted(text)
    found = []
    for term in TERMS_ZH:
        if term.avoid:  # the longest variant first: 交互图示 is one variant, not two
            either = "|".join(sorted(term.avoid, key=len, reverse=True))
            found += [(m.group(0), term.zh) for m in re.finditer(either, text)]
    return found


_CJK_RUN = re.compile(r"[\u4e00-\u9fff]{2,}")


def search_words() -> list[str]:
    """The words the Chinese site's search keeps whole (one per line in a jieba user
    dictionary): every term above, and every run of Chinese characters in the glossary's
    entries (叶子张量 in "叶子张量，需要梯度")."""
    from course.themes import GLOSSARY_ZH

    words: list[str] = []
    for term in TERMS_ZH:
        words += term.search_words()
    for table in GLOSSARY_ZH.values():
        for entry in table.values():
            words += _CJK_RUN.findall(entry)
    # a glossary entry's runs of two to six characters: the longer ones are phrases
    return sorted(dict.fromkeys(w for w in words if _CJK_RUN.fullmatch(w) and len(w) <= 6))
