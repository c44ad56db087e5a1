"""The course glossary: what each part of an autograd graph is called in each analogy.

One table, used by the drawings, the widgets and the tables, so a learner reads
the same words everywhere (see COURSE.md). A graph node has one *kind*:

``parameter``     a leaf tensor that requires grad (``.grad`` is stored here)
``constant``      a tensor that does not require grad (a leaf by convention)
``intermediate``  a non-leaf tensor: it came out of an operation (has a ``grad_fn``)
``function``      a backward function of torch's graph (``MulBackward0``, ``AccumulateGrad``)

and may carry *marks*: ``retained`` (``retain_grad()``), ``hooked`` (a tensor hook),
``gradient`` (a gradient value shown after ``backward()``); the ``BackwardStepper`` adds
``step`` (the order torch ran a backward function), ``running`` (the function of the
current step) and ``waiting`` (not run yet), and a dashed edge is ``untracked`` (an input
torch kept no record of, added from the recipe).

The tensor-kind words match ``course.facts.ROLES`` (the tensor tables), which a
test keeps in step.

The other keys (:data:`CONCEPTS`) are the words the lessons' prose uses for the rest of
autograd: the graph, where ``.grad`` is filed, what is saved for backward, the version
counter, ``detach()``, copies, ``no_grad()``, and a gradient that is missing, zero or
vanishing. ``tests/test_text.py`` fails on an analogy word in a notebook that this table
lacks, and on the drifted synonyms it replaced.

:data:`GLOSSARY_ZH` and :data:`MESSAGES_ZH` are the same two tables in the words of the
Simplified Chinese edition (zh-CN): the analogies in the source articles' own Chinese (快递分拣,
厨房料理), the technical words those of the official Chinese PyTorch docs and d2l-zh (叶子节点,
计算图, 梯度, 反向传播), API names kept in ASCII as in the English values. Every theme and key of
:data:`GLOSSARY_ZH` must match :data:`GLOSSARY`, and every theme, key and placeholder
(``{name}``, ``{output}``, ``{grad}``) of :data:`MESSAGES_ZH` must match :data:`MESSAGES`;
``translations/zh_CN/README.md`` (the translators' guide) takes its term table from them.
:func:`term`, :func:`short_role` and :func:`message` read the table of the current language
(``course.i18n.language()``) each time they are called.
"""

from __future__ import annotations

THEMES = ("technical", "logistics", "kitchen")
KINDS = ("parameter", "constant", "intermediate", "function")
MARKS = ("retained", "hooked", "gradient", "step", "running", "waiting", "untracked")
CONCEPTS = ("graph", "audit", "grad_store", "accumulate", "zero_grad", "saved", "version",
            "inplace", "data_edit", "detached", "copy", "no_grad", "post_hook", "none_grad",
            "zero", "vanishing", "optimizer")

GLOSSARY: dict[str, dict[str, str]] = {
    "technical": {
        "parameter": "leaf, requires grad",
        "constant": "leaf, no grad",
        "intermediate": "non-leaf",
        "function": "backward function (grad_fn)",
        "retained": "retain_grad()",
        "hooked": "tensor hook",
        "gradient": ".grad / gradient",
        "step": "#n: order backward ran it",
        "running": "backward function running now",
        "waiting": "not run yet",
        "untracked": "input torch kept no record of",
        "backward": "backward()",
        "output": "output",
        "graph": "computation graph",
        "audit": "autograd",
        "grad_store": ".grad attribute",
        "accumulate": "gradients accumulate in .grad",
        "zero_grad": "zero_grad() (sets .grad to None)",
        "saved": "saved for backward",
        "version": "version counter",
        "inplace": "in-place operation",
        "data_edit": "a write through .data",
        "detached": "detach()",
        "copy": "detach().clone()",
        "no_grad": "no_grad() / inference_mode()",
        "post_hook": "post-accumulate-grad hook",
        "none_grad": "grad is None",
        "zero": "a gradient of zero",
        "vanishing": "a vanishing gradient",
        "optimizer": "the optimizer (it updates the parameters)",
    },
    "logistics": {
        "parameter": "sorting centre",
        "constant": "ordinary parcel",
        "intermediate": "transit station",
        "function": "sorting rule (grad_fn)",
        "retained": "temporary monitor (retain_grad)",
        "hooked": "inspection probe (hook)",
        "gradient": "efficiency report (gradient)",
        "step": "#n: order the reports came back",
        "running": "rule tracing its report now",
        "waiting": "report not back yet",
        "untracked": "parcel handed over without a waybill",
        "backward": "trace reports back along the route",
        "output": "final delivery",
        "graph": "route",
        "audit": "the audit",
        "grad_store": "the desk (.grad)",
        "accumulate": "reports pile up on the desk",
        "zero_grad": "clearing the desk (zero_grad)",
        "saved": "photographed by the audit (saved for backward)",
        "version": "seal count (version counter)",
        "inplace": "repacking a parcel (in place)",
        "data_edit": "repacking behind the audit's back (.data)",
        "detached": "relabelled parcel with a new waybill (detach)",
        "copy": "brand-new parcel with a copied label (clone)",
        "no_grad": "monitoring switched off (no_grad)",
        "post_hook": "probe behind the desk (post-accumulate hook)",
        "none_grad": "no report on the desk (grad is None)",
        "zero": "a report that says 0",
        "vanishing": "a report that fades station by station",
        "optimizer": "the company, which retunes its sorting centres (optimizer)",
    },
    "kitchen": {
        "parameter": "market ingredient",
        "constant": "bottled sauce",
        "intermediate": "semi-finished dish",
        "function": "recipe step (grad_fn)",
        "retained": "cold-chain warehouse (retain_grad)",
        "hooked": "tasting spoon (hook)",
        "gradient": "origin record (gradient)",
        "step": "#n: order of the tracing",
        "running": "recipe step being traced now",
        "waiting": "not traced yet",
        "untracked": "added as is, no recipe record",
        "backward": "trace every ingredient back to its origin",
        "output": "finished dish",
        "graph": "recipe",
        "audit": "the taster",
        "grad_store": "the origin label (.grad)",
        "accumulate": "origin records pile up on the label",
        "zero_grad": "wiping the origin label (zero_grad)",
        "saved": "sampled by the taster (saved for backward)",
        "version": "batch number on the jar (version counter)",
        "inplace": "changing a sauce (in place)",
        "data_edit": "scratching the batch number off the jar (.data)",
        "detached": "vacuum-packed broth, no recipe history (detach)",
        "copy": "broth re-made from scratch (clone)",
        "no_grad": "cooking with the recipe notebook closed (no_grad)",
        "post_hook": "tasting spoon at the origin label (post-accumulate hook)",
        "none_grad": "an ingredient with no origin record (grad is None)",
        "zero": "an ingredient in zero quantity",
        "vanishing": "an ingredient diluted step by step",
        "optimizer": "the chef, who adjusts the ingredients batch by batch (optimizer)",
    },
}

# The role word printed under a tensor's name inside a drawn node: the glossary's own word,
# so that a node, the legend, the tensor table and the messages say the same thing.
SHORT_ROLE: dict[str, dict[str, str]] = {
    theme: {kind: GLOSSARY[theme][kind] for kind in ("parameter", "constant", "intermediate")}
    for theme in THEMES
}

# What the explorers say when torch refuses something, or a hook sees a gradient, in each
# theme's words ({name}: the tensor, {output}: the scenario's output, {grad}: the values).
MESSAGES: dict[str, dict[str, str]] = {
    "technical": {
        "no_backward": "Nothing to backpropagate: {output} does not require grad (no input "
                       "that requires grad reaches it through recorded operations).",
        "no_hook": "{name} does not require grad: torch computes no gradient for it, so a "
                   "tensor hook cannot be registered.",
        "no_retain": "{name} does not require grad: there is no gradient to retain.",
        "hook_saw": "tensor hook on {name} saw gradient {grad}",
    },
    "logistics": {
        "no_backward": "No report to trace back: no audited route reaches {output} (its "
                       "inputs are ordinary parcels, or its waybill history was cut).",
        "no_hook": "An inspection probe (hook) needs a route that is audited: {name} is an "
                   "ordinary parcel, nobody audits it.",
        "no_retain": "A temporary monitor (retain_grad) needs a route that is audited: {name} "
                     "is an ordinary parcel.",
        "hook_saw": "inspection probe (hook) on {name} saw the efficiency report (gradient) "
                    "{grad}",
    },
    "kitchen": {
        "no_backward": "Nothing to trace back: no recorded recipe step leads from a market "
                       "ingredient to {output} (only bottled sauce, or the recipe history "
                       "was cut).",
        "no_hook": "A tasting spoon (hook) needs a recipe step that is recorded: {name} is "
                   "bottled sauce, used as is.",
        "no_retain": "A cold-chain warehouse (retain_grad) needs a recipe step that is "
                     "recorded: {name} is bottled sauce, used as is.",
        "hook_saw": "tasting spoon (hook) on {name} tasted the origin record (gradient) {grad}",
    },
}

# The zh-CN edition's words: the same themes and keys as GLOSSARY. Node labels (the four kinds)
# are drawn inside graph nodes, so they stay short; full-width punctuation, API names in ASCII.
GLOSSARY_ZH: dict[str, dict[str, str]] = {
    "technical": {
        "parameter": "叶子张量，需要梯度",
        "constant": "叶子张量，无需梯度",
        "intermediate": "非叶子张量",
        "function": "反向函数（grad_fn）",
        "retained": "retain_grad()",
        "hooked": "张量钩子",
        "gradient": ".grad / 梯度",
        "step": "#n：反向传播执行的顺序",
        "running": "正在执行的反向函数",
        "waiting": "尚未执行",
        "untracked": "torch未记录的输入",
        "backward": "backward()",
        "output": "输出",
        "graph": "计算图",
        "audit": "自动微分（autograd）",
        "grad_store": ".grad属性",
        "accumulate": "梯度在.grad中累加",
        "zero_grad": "zero_grad()（把.grad设为None）",
        "saved": "为反向传播保存",
        "version": "版本计数器",
        "inplace": "原地操作",
        "data_edit": "通过.data写入",
        "detached": "detach()",
        "copy": "detach().clone()",
        "no_grad": "no_grad() / inference_mode()",
        "post_hook": "梯度累加后钩子",
        "none_grad": "grad is None",
        "zero": "为零的梯度",
        "vanishing": "梯度消失",
        "optimizer": "优化器（更新参数）",
    },
    "logistics": {
        "parameter": "分拣中心",
        "constant": "普通包裹",
        "intermediate": "临时中转站",
        "function": "分拣规则（grad_fn）",
        "retained": "临时监控（retain_grad）",
        "hooked": "质检探头（hook）",
        "gradient": "效率报告（梯度）",
        "step": "#n：报告送回的顺序",
        "running": "正在回溯报告的规则",
        "waiting": "报告尚未送回",
        "untracked": "无运单交接的包裹",
        "backward": "沿路线反向追踪效率报告",
        "output": "送达收件人",
        "graph": "运输路线",
        "audit": "物流审计",
        "grad_store": "归档台（.grad）",
        "accumulate": "报告在归档台上越堆越多",
        "zero_grad": "清空归档台（zero_grad）",
        "saved": "审计拍照留存（为反向传播保存）",
        "version": "封签计数（版本计数器）",
        "inplace": "重新打包（原地操作）",
        "data_edit": "背着审计重新打包（.data）",
        "detached": "重新贴标、换了新运单的包裹（detach）",
        "copy": "照抄标签的全新包裹（clone）",
        "no_grad": "关闭中转站监控（no_grad）",
        "post_hook": "归档台后的质检探头（累加后钩子）",
        "none_grad": "归档台上没有报告（grad is None）",
        "zero": "写着0的报告",
        "vanishing": "逐站衰减的报告",
        "optimizer": "调整分拣中心设置的公司（优化器）",
    },
    "kitchen": {
        "parameter": "市场采购的食材",
        "constant": "瓶装酱料",
        "intermediate": "半成品",
        "function": "菜谱步骤（grad_fn）",
        "retained": "冷链仓库（retain_grad）",
        "hooked": "试味勺（hook）",
        "gradient": "溯源记录（梯度）",
        "step": "#n：溯源的顺序",
        "running": "正在溯源的菜谱步骤",
        "waiting": "尚未溯源",
        "untracked": "直接加入，无菜谱记录",
        "backward": "把每样食材溯源到原产地",
        "output": "成品菜",
        "graph": "菜谱",
        "audit": "试味员",
        "grad_store": "产地标签（.grad）",
        "accumulate": "溯源记录在产地标签上越积越多",
        "zero_grad": "擦掉产地标签（zero_grad）",
        "saved": "试味员留样（为反向传播保存）",
        "version": "瓶上的批号（版本计数器）",
        "inplace": "改动酱料（原地操作）",
        "data_edit": "刮掉瓶上的批号（.data）",
        "detached": "真空包装的高汤，无菜谱历史（detach）",
        "copy": "从头重新调制的高汤（clone）",
        "no_grad": "合上菜谱本做菜（no_grad）",
        "post_hook": "产地标签旁的试味勺（累加后钩子）",
        "none_grad": "没有溯源记录的食材（grad is None）",
        "zero": "用量为零的食材",
        "vanishing": "一步步被稀释的食材",
        "optimizer": "一批接一批调整食材的厨师（优化器）",
    },
}

# The explorers' messages in the zh-CN edition: the same themes, keys and placeholders as MESSAGES.
MESSAGES_ZH: dict[str, dict[str, str]] = {
    "technical": {
        "no_backward": "无法反向传播：{output}不需要梯度（没有需要梯度的输入经由记录下来的运算"
                       "到达它）。",
        "no_hook": "{name}不需要梯度：torch不会为它计算梯度，所以无法注册张量钩子。",
        "no_retain": "{name}不需要梯度：没有可保留的梯度。",
        "hook_saw": "{name}上的张量钩子看到了梯度：{grad}",
    },
    "logistics": {
        "no_backward": "没有报告可回溯：没有一条受审计的路线通往{output}（它的输入都是普通包裹，"
                       "或者它的运单历史已被切断）。",
        "no_hook": "质检探头（hook）只能装在受审计的路线上：{name}是普通包裹，没有人审计它。",
        "no_retain": "临时监控（retain_grad）只能装在受审计的路线上：{name}是普通包裹。",
        "hook_saw": "{name}上的质检探头（hook）看到了效率报告（梯度）：{grad}",
    },
    "kitchen": {
        "no_backward": "无从溯源：没有一条记录在案的菜谱步骤从市场采购的食材通往{output}"
                       "（只有瓶装酱料，或者菜谱历史已被切断）。",
        "no_hook": "试味勺（hook）只能放在记录在案的菜谱步骤上：{name}是瓶装酱料，开封即用。",
        "no_retain": "冷链仓库（retain_grad）只能为记录在案的菜谱步骤而建：{name}是瓶装酱料，"
                     "开封即用。",
        "hook_saw": "{name}上的试味勺（hook）尝到了溯源记录（梯度）：{grad}",
    },
}

SHORT_ROLE_ZH: dict[str, dict[str, str]] = {
    theme: {kind: GLOSSARY_ZH[theme][kind] for kind in ("parameter", "constant", "intermediate")}
    for theme in THEMES
}

# How a theme is named where a learner picks one (the explorers' theme menu): the value stays
# the theme's id (``"kitchen"``, what the lessons tell you to pick), the label is in the words of
# the current language; the zh-CN labels name the source articles' analogies.
THEME_NAMES: dict[str, str] = {theme: theme for theme in THEMES}
THEME_NAMES_ZH: dict[str, str] = {
    "technical": "技术术语（technical）",
    "logistics": "快递分拣（logistics）",
    "kitchen": "厨房料理（kitchen）",
}


# Colours per theme; shapes and line styles are shared, so a kind looks alike in every theme.
_PALETTES = {
    "technical": {"parameter": "#b7e4c7", "constant": "#e9ecef", "intermediate": "#cfe2ff",
                  "function": "#ffffff", "edge": "#6c757d"},
    "logistics": {"parameter": "#ffd8a8", "constant": "#e9ecef", "intermediate": "#d0ebff",
                  "function": "#fff9db", "edge": "#868e96"},
    "kitchen": {"parameter": "#d3f9d8", "constant": "#f1f3f5", "intermediate": "#ffe8cc",
                "function": "#fff0f6", "edge": "#868e96"},
}

_SHAPES = {
    "parameter": {"boxstyle": "round,pad=0.05,rounding_size=0.08", "linestyle": "-",
                  "linewidth": 1.6, "edgecolor": "#2b8a3e"},
    "constant": {"boxstyle": "square,pad=0.05", "linestyle": "--", "linewidth": 1.0,
                 "edgecolor": "#868e96"},
    "intermediate": {"boxstyle": "round4,pad=0.05,rounding_size=0.1", "linestyle": "-",
                     "linewidth": 1.0, "edgecolor": "#1c7ed6"},
    "function": {"boxstyle": "sawtooth,pad=0.05,tooth_size=0.04", "linestyle": "-",
                 "linewidth": 0.7, "edgecolor": "#495057"},
}

MARK_STYLE = {
    "retained": {"color": "#f59f00", "linewidth": 3.2},   # thick amber outline
    "hooked": {"color": "#ae3ec9", "marker": "v"},         # a probe marker on the box corner
    "gradient": {"color": "#c92a2a"},                      # gradient text on nodes and edges
}


def check_theme(theme: str) -> str:
    """Return ``theme`` if it is one of :data:`THEMES`, else raise a readable ``ValueError``."""
    if theme not in THEMES:
        from course.i18n import _

        raise ValueError(_("theme must be one of {themes}, not {theme}", themes=list(THEMES),
                           theme=repr(theme)))
    return theme


def _chinese() -> bool:
    from course.i18n import is_chinese

    return is_chinese()


def glossary() -> dict[str, dict[str, str]]:
    """:data:`GLOSSARY`, or :data:`GLOSSARY_ZH` while the course speaks Chinese (read at call
    time: ``course.set_language("zh-CN")`` switches every word the drawings and widgets use)."""
    return GLOSSARY_ZH if _chinese() else GLOSSARY


def term(theme: str, key: str) -> str:
    """The word for ``key`` (a kind, a mark, ``'backward'`` or ``'output'``) in ``theme``, in
    the current language."""
    return glossary()[check_theme(theme)][key]


def short_role(theme: str, kind: str) -> str:
    """The role word printed under a tensor's name in a drawn node, in the current language."""
    return (SHORT_ROLE_ZH if _chinese() else SHORT_ROLE)[check_theme(theme)][kind]


def theme_name(theme: str) -> str:
    """What a theme menu shows for ``theme`` in the current language (its value stays ``theme``)."""
    return (THEME_NAMES_ZH if _chinese() else THEME_NAMES)[check_theme(theme)]


def theme_options() -> list[tuple[str, str]]:
    """``(label, theme)`` for a theme menu (ipywidgets ``options``), in :data:`THEMES`' order."""
    return [(theme_name(t), t) for t in THEMES]


def message(theme: str, key: str, **names) -> str:
    """An explorer message of :data:`MESSAGES` (:data:`MESSAGES_ZH` in Chinese) in ``theme``,
    with ``names`` filled in."""
    table = MESSAGES_ZH if _chinese() else MESSAGES
    return table[check_theme(theme)][key].format(**names)


def node_style(kind: str, theme: str = "technical") -> dict:
    """Matplotlib box style of a node kind in a theme: boxstyle, colours, line style and width."""
    style = dict(_SHAPES[kind])
    style["facecolor"] = _PALETTES[check_theme(theme)][kind]
    return style


def edge_color(theme: str) -> str:
    """Colour of the graph's arrows in ``theme``."""
    return _PALETTES[check_theme(theme)]["edge"]
