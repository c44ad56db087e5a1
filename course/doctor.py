"""The gradient-flow doctor: where did my gradient go? (lesson 07_gradient_clinic).

``diagnose(model, loss)`` looks at every parameter of ``model`` and says, in plain words and
with the course's analogies, whether its gradient is missing, zero, vanishing or exploding, and
why, pointing to the lesson that covers each finding::

    report = diagnose(model, loss)                       # or: step=lambda: loss_fn(model(x), y)
    report                                               # findings + per-parameter table
    report.ok                                            # True when there is nothing to look at
    report.plot()                                        # gradient norm per layer (log scale)

It replaces the naive check that the parcel-sorting and kitchen articles teach
(``if param.grad is None: print("no gradient")``), which misses zero gradients (a branch multiplied by 0, a dead ReLU) and, since torch 2.0's
``zero_grad(set_to_none=True)``, raises false alarms right after ``optimizer.zero_grad()``.

What it does, and what it does not touch:

* **Which parameters the loss reaches** comes from walking ``loss.grad_fn`` and its
  ``next_functions`` down to the ``AccumulateGrad`` nodes, the way ``backward()`` goes.
* **The gradients** come from ``torch.autograd.grad(loss, params, allow_unused=True,
  retain_graph=True)``, which returns them without writing any ``.grad``; the graph is kept, so
  you can still call ``loss.backward()`` afterwards. Tensor hooks and module backward hooks you
  registered do run during that call; post-accumulate-grad hooks
  (``register_post_accumulate_grad_hook``) do not, because no ``.grad`` is written: pass a
  ``step`` that calls ``backward()`` to have them run. If ``backward()`` already freed the graph, the gradients are read from
  ``.grad`` instead (the report says so in ``notes``).
* **The existing ``.grad``** is compared with the fresh gradient. ``k`` times the fresh gradient
  means ``backward()`` ran ``k`` times without ``zero_grad()``: a ``stale_grad`` finding. Other
  values are an earlier step's gradient, harmless if ``zero_grad()`` runs before this loss's
  ``backward()``, so they only get a note; with ``step`` (a whole training step) the doctor sees
  whether the step's ``backward()`` added onto them, and that is a finding.
* **Why a parameter is unreachable** (never used, or cut by ``detach()`` / ``no_grad()`` / a
  non-differentiable operation) needs the forward pass itself: pass ``step``, a callable that
  runs the forward and returns the loss. The doctor runs it once under a
  ``torch.overrides.TorchFunctionMode`` that follows every tensor operation (which parameters
  each value came from, where a cut happened, under which module and source line). ``step`` may
  also be a whole training step (``zero_grad``, forward, ``backward``, ``optimizer.step()``, then
  ``return loss``): the doctor then reads the gradients that step's ``backward()`` produced with
  parameter hooks, and checks whether they were added onto a leftover ``.grad``. The doctor
  calls ``step`` exactly once; whatever ``step`` does to ``.grad`` and to the parameters is
  ``step``'s doing.

The report speaks the course's language (:mod:`course.i18n`): its findings, notes, table and
figure are messages of the catalog ``course/locale/zh_CN/course.doctor.po`` in Chinese; the
statuses, lesson ids and parameter names stay as they are (they are code).

``course.doctor`` imports torch; matplotlib is imported only by :meth:`Report.plot`.
"""

from __future__ import annotations

import html
import math
import os
import re
import sys
from dataclasses import dataclass, field

import torch

from course.facts import ljust, width, wrap
from course.i18n import N_, _, is_chinese, translate
from course.markup import plain, rich

__all__ = ["diagnose", "Report", "Finding", "ParamRow", "LESSONS", "STATUSES"]

THEMES = ("logistics", "kitchen", "technical")

# status -> the lesson that covers it
LESSONS: dict[str, str] = {
    "ok": "07_gradient_clinic",
    "frozen": "03_detach",
    "unreachable": "07_gradient_clinic",
    "unused": "07_gradient_clinic",
    "detached": "03_detach",
    "no_grad": "05_no_grad",
    "cut": "07_gradient_clinic",
    "none": "07_gradient_clinic",
    "nonfinite": "07_gradient_clinic",
    "zero": "07_gradient_clinic",
    "vanishing": "07_gradient_clinic",
    "exploding": "07_gradient_clinic",
    "stale_grad": "02_retain_grad",
    "frozen_in_optimizer": "03_detach",
    "not_in_optimizer": "07_gradient_clinic",
    "no_history": "05_no_grad",
    "inplace": "06_inplace",
}
STATUSES = tuple(LESSONS)

# Statuses of the per-parameter table that are not problems.
_HEALTHY = ("ok", "frozen")

# For each status: a plain technical sentence, then one sentence per analogy. A status whose
# technical sentence depends on what was found has one per case (``variant``).
# Fields: {name} {norm} {thr} {where} {op} {params} {error} {seen} {k}.
_TEXT: dict[str, dict[str, str | dict[str, str]]] = {
    "unreachable": {
        "technical": N_(
            "`{name}` requires grad, but no path leads from the loss back to it, so it "
            "gets no gradient and the optimizer never moves it. Either it took no part in the "
            "forward pass, or its path was cut by detach(), no_grad() or a non-differentiable "
            "operation. Pass step=lambda: <your loss> instead of the loss and the doctor watches "
            "the forward pass to tell which."),
        "logistics": N_(
            "No route from the final delivery leads back to this sorting centre, so it "
            "never gets its efficiency report."),
        "kitchen": N_(
            "Tracing the finished dish back never reaches this market ingredient, so it "
            "never gets an origin record."),
    },
    "unused": {
        "technical": {
            "unused": N_(
                "`{name}` requires grad but took no part in the forward pass, so backward() "
                "never reaches it: its .grad stays None and the optimizer never moves it. Use "
                "it in forward(), or remove it (or freeze it with requires_grad_(False)) if it "
                "is not meant to train."),
            "discarded": N_(
                "`{name}` requires grad but was used in the forward pass only for a result "
                "that never reached the loss (computed, then discarded), so backward() never "
                "reaches it: its .grad stays None and the optimizer never moves it. Use it in "
                "forward(), or remove it (or freeze it with requires_grad_(False)) if it is not "
                "meant to train."),
        },
        "logistics": N_(
            "A sorting centre that no parcel of this delivery went through: it can "
            "never get an efficiency report."),
        "kitchen": N_(
            "An ingredient bought at the market but never put into this dish: there is "
            "nothing to trace back to it."),
    },
    "detached": {
        "technical": N_(
            "`{name}` was used in the forward pass, but the value coming out of it went "
            "through {op} at {where} before reaching the loss. detach() returns the same values "
            "with the history cut: the value arrives, the gradient cannot go back, so `{name}` "
            "gets none. Remove the detach(), or detach only what must not train."),
        "logistics": N_(
            "The parcel was relabelled with a new waybill at {where}: it still reached "
            "the customer, but the route history was cut, so the efficiency report never makes "
            "it back to this sorting centre."),
        "kitchen": N_(
            "The broth was vacuum-packed at {where}: the dish still tastes of it, but the "
            "recipe history is gone, so nobody can trace the taste back to this ingredient."),
    },
    "no_grad": {
        "technical": N_(
            "`{name}` was used inside torch.no_grad() (or inference_mode) at {where}: "
            "autograd recorded nothing there, so the result reaches the loss without a history "
            "and `{name}` gets no gradient. Compute this part outside the no_grad() block."),
        "logistics": N_(
            "The station's monitoring was switched off while these parcels passed "
            "({where}), so no route back to this sorting centre was recorded."),
        "kitchen": N_(
            "This step was cooked with the recipe notebook closed ({where}), so the dish "
            "cannot be traced back to this ingredient."),
    },
    "cut": {
        "technical": N_(
            "`{name}`'s value reached the loss only through {op} at {where}, an "
            "operation without a gradient (argmax, a comparison, a cast to an integer type such "
            "as .long(), .item(), .numpy()), so `{name}` gets no gradient. Use a differentiable "
            "formulation (a soft mask, softmax instead of argmax) for the part that should "
            "train."),
        "logistics": N_(
            "At {where} the parcel's contents were copied by hand onto a new form with "
            "no sorting rule on it, so the efficiency report stops there."),
        "kitchen": N_(
            "At {where} the dish was re-made from a description, with no recipe step "
            "linking it back to this ingredient."),
    },
    "none": {
        "technical": {
            "grad_attr": N_(
                "The loss does reach `{name}`, but no gradient arrived: backward() has not "
                "stored a gradient in .grad (was zero_grad() called after backward(), or "
                "backward() never run on this loss?)."),
            "backward_fn": N_(
                "The loss does reach `{name}`, but no gradient arrived: a backward function on "
                "the path sent no gradient for it (a custom autograd.Function whose backward "
                "returns None, for instance)."),
        },
        "logistics": N_(
            "The route to this sorting centre exists, but its efficiency report is not "
            "on the desk."),
        "kitchen": N_(
            "The recipe does lead back to this ingredient, but its origin record is "
            "missing."),
    },
    "nonfinite": {
        "technical": N_(
            "The gradient of `{name}` contains NaN or inf. Look for a log or sqrt of 0, "
            "a division by a tiny number, or an overflow; anomaly mode "
            "(torch.autograd.set_detect_anomaly(True)) names the operation."),
        "logistics": N_("The efficiency report for this sorting centre came back unreadable."),
        "kitchen": N_("The origin record of this ingredient came back smudged and unreadable."),
    },
    "zero": {
        "technical": {
            "zero": N_(
                "The loss reaches `{name}`, but its gradient is exactly zero everywhere "
                "(|grad| <= {thr:g}): every path back multiplies it by 0. Typical causes: a "
                "branch multiplied by 0, a dead ReLU whose inputs are all negative, a mask that "
                "is always off, a step function such as round(), floor() or sign(), recorded "
                "with slope 0. A check that only tests `grad is None` misses this."),
            "seen": N_(
                "The loss reaches `{name}`, but its gradient is exactly zero everywhere "
                "(|grad| <= {thr:g}): every path back multiplies it by 0. Typical causes: a "
                "branch multiplied by 0, a dead ReLU whose inputs are all negative, a mask that "
                "is always off, a step function such as round(), floor() or sign(), recorded "
                "with slope 0. A check that only tests `grad is None` misses this. Seen during "
                "the forward pass: {seen}."),
        },
        "logistics": N_(
            "The route exists, but every report that reaches this sorting centre says "
            "0: nothing it does changes the delivery, as if the road behind it were closed."),
        "kitchen": N_(
            "The ingredient is in the recipe, but in zero quantity: no tasting can tell "
            "anything about it."),
    },
    "vanishing": {
        "technical": N_(
            "The gradient of `{name}` has norm {norm:.2g}, below vanishing={thr:g}: "
            "training will barely move it. Typical causes: a deep stack of saturating "
            "activations (sigmoid, tanh), a residual skip path cut by detach(), very small "
            "weights. ReLU-like activations, intact skip connections and normalisation layers "
            "help."),
        "logistics": N_(
            "Its efficiency report does arrive, but after passing through so many "
            "stations that it has faded to almost nothing."),
        "kitchen": N_(
            "The trace back does reach this ingredient, but diluted through so many "
            "steps that its taste is almost gone."),
    },
    "exploding": {
        "technical": N_(
            "The gradient of `{name}` has norm {norm:.2g}, above exploding={thr:g}: "
            "one optimizer step would throw it far away. Typical causes: large weights in a "
            "deep stack, no normalisation, a large learning rate. Fix the initialisation, or "
            "clip with torch.nn.utils.clip_grad_norm_."),
        "logistics": N_(
            "Every station amplified the report it passed on, so it reaches this "
            "sorting centre absurdly large."),
        "kitchen": N_(
            "Every step doubled the seasoning, so the trace reaches this ingredient "
            "wildly overstated."),
    },
    "stale_grad": {
        "technical": {
            "step": N_(
                "`{name}.grad` holds this step's gradient added onto the one that was already "
                "there before the step: the step ran backward() without zero_grad() first. "
                "backward() adds into .grad, it does not overwrite it: call "
                "optimizer.zero_grad() (or model.zero_grad()) once per step, before "
                "backward(). If you accumulate gradients over micro-batches on purpose, ignore "
                "this."),
            "times": N_(
                "`{name}.grad` holds {k} times this loss's gradient: backward() ran {k} times "
                "without zero_grad() in between, and each run added its gradient onto the "
                "last. backward() adds into .grad, it does not overwrite it: call "
                "optimizer.zero_grad() (or model.zero_grad()) once per step, before "
                "backward(). If you accumulate gradients over micro-batches on purpose, ignore "
                "this."),
        },
        "logistics": N_(
            "Last round's efficiency report is still on this sorting centre's desk, "
            "and the new one is added to it."),
        "kitchen": N_(
            "Yesterday's origin record is still on this ingredient's origin label, and "
            "today's is added to it: origin records pile up on the label until someone wipes "
            "it."),
    },
    "frozen_in_optimizer": {
        "technical": {
            "none": N_(
                "`{name}` has requires_grad=False but is still in the optimizer's param "
                "groups. optimizer.step() skips it while its .grad is None. Build the "
                "optimizer from the trainable parameters only: "
                "[p for p in model.parameters() if p.requires_grad]."),
            "grad": N_(
                "`{name}` has requires_grad=False but is still in the optimizer's param "
                "groups. optimizer.step() skips it while its .grad is None, but its .grad is "
                "NOT None (left from before it was frozen), so every optimizer.step() still "
                "moves it. Build the optimizer from the trainable parameters only: "
                "[p for p in model.parameters() if p.requires_grad]."),
        },
        "logistics": N_(
            "A sorting centre taken off the audit list is still on the upgrade crew's "
            "schedule."),
        "kitchen": N_("Bottled sauce (never traced) is still on the marinating list."),
    },
    "not_in_optimizer": {
        "technical": {
            "none": N_(
                "`{name}` requires grad, but the optimizer you passed does not hold it, so "
                "optimizer.step() never changes it (was the optimizer built before this "
                "parameter was added?). If another optimizer trains it, ignore this."),
            "grad": N_(
                "`{name}` requires grad and gets a gradient, but the optimizer you passed does "
                "not hold it, so optimizer.step() never changes it (was the optimizer built "
                "before this parameter was added?). If another optimizer trains it, ignore "
                "this."),
        },
        "logistics": N_(
            "This sorting centre gets its efficiency reports, but the upgrade crew "
            "never visits it."),
        "kitchen": N_(
            "This ingredient's origin is recorded, but nobody ever adjusts how much of "
            "it goes in."),
    },
    "no_history": {
        "technical": N_(
            "The loss has no grad_fn and does not require grad: it was computed under "
            "torch.no_grad() / inference_mode, from detached tensors, or from Python numbers "
            "(.item()). backward() would raise, and no parameter can get a gradient."),
        "logistics": N_(
            "The final delivery carries no waybill at all: there is no route to trace "
            "reports back along."),
        "kitchen": N_("The finished dish came with no recipe: nothing can be traced back."),
    },
    "inplace": {
        "technical": N_(
            "Computing the gradients raised: '{error}'. A tensor that backward needs was "
            "changed in place after the forward pass saved it (an in-place op such as relu_(), "
            "x += ..., or optimizer.step() run before this loss's backward). Gradients were "
            "read from .grad instead."),
        "logistics": N_(
            "A parcel the audit still had to inspect was repacked before the audit "
            "got to it."),
        "kitchen": N_("The sauce was changed after the taster had already noted its recipe."),
    },
}

_PARTIAL_DETACH = {
    "technical": N_(
        "{op} at {where} cuts a path that carries gradient to {params}. The value "
        "still reaches the loss, but no gradient comes back along this route, so these "
        "parameters get only what other routes bring. This is how `x + identity.detach()` in a "
        "residual block removes the skip path's gradient (and a deep stack then vanishes). If "
        "the cut is on purpose (a target, a GAN's fake.detach()), ignore this."),
    "logistics": N_(
        "Parcels were relabelled with a new waybill at {where}: they still arrive, "
        "but the efficiency reports that should travel back along this route stop there."),
    "kitchen": N_(
        "The broth was vacuum-packed at {where}: the dish still tastes of it, but that "
        "part of the recipe history is gone."),
}


@dataclass
class Finding:
    """One thing the doctor found.

    ``param`` is the parameter's name in ``model.named_parameters()`` (``None`` for a finding
    about the whole graph); ``status`` is one of :data:`STATUSES`; ``detail`` explains it in plain
    words; ``lesson`` is the id of the lesson that covers it (``"03_detach"``).
    """

    param: str | None
    status: str
    detail: str
    lesson: str

    def __str__(self) -> str:
        who = self.param if self.param is not None else _("(graph)")
        return plain(_("[{status}] {who}: {detail} ({lesson})", status=self.status, who=who,
                       detail=self.detail, lesson=_lesson(self.lesson)))


@dataclass
class ParamRow:
    """One row of :attr:`Report.per_parameter`.

    ``reachable``: the loss's graph has an ``AccumulateGrad`` node for it. ``grad_norm``: L2 norm
    of the gradient the doctor measured (``None`` when there is none). ``zero_fraction``: share of
    entries with ``|grad| <= zero_tol``. ``grad_attr``: what ``.grad`` held (``"None"``,
    ``"zeros"``, ``"this loss"``, ``"earlier"`` (an earlier step's gradient, not yet added to),
    ``"stale"`` (accumulated: a finding), or ``"read"`` when the gradients were taken from it). ``in_optimizer``: ``None`` when no optimizer was given. ``status``: ``"ok"``,
    ``"frozen"`` (requires_grad=False) or a problem status.
    """

    name: str
    shape: tuple[int, ...]
    requires_grad: bool
    reachable: bool
    grad_norm: float | None
    zero_fraction: float | None
    grad_attr: str
    in_optimizer: bool | None
    status: str


@dataclass
class Report:
    """What :func:`diagnose` found. Shows as text (``repr``) and as HTML in Jupyter."""

    findings: list[Finding]
    per_parameter: list[ParamRow]
    thresholds: dict[str, float]
    gradient_source: str
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """``True`` when the doctor found nothing to look at."""
        return not self.findings

    def status(self, name: str) -> str:
        """The gradient status of parameter ``name`` in the per-parameter table."""
        for row in self.per_parameter:
            if row.name == name:
                return row.status
        raise KeyError(_("no parameter named {name!r}", name=name))

    def findings_for(self, name: str | None) -> list[Finding]:
        """The findings about parameter ``name`` (``None``: the findings about the whole graph)."""
        return [f for f in self.findings if f.param == name]

    def layers(self) -> list[tuple[str, float | None, str]]:
        """``(layer, gradient norm, worst status)`` per module that owns trainable parameters,
        in ``named_parameters()`` order. The norm is taken over all the layer's parameters."""
        groups: dict[str, list[ParamRow]] = {}
        for row in self.per_parameter:
            if row.requires_grad:
                groups.setdefault(row.name.rpartition(".")[0] or N_("(model)"), []).append(row)
        out = []
        for layer, rows in groups.items():
            norms = [r.grad_norm for r in rows if r.grad_norm is not None]
            norm = math.sqrt(sum(n * n for n in norms)) if norms else None
            worst = min((r.status for r in rows), key=_SEVERITY_ORDER.index)
            out.append((layer, norm, worst))
        return out

    def __repr__(self) -> str:
        n = sum(r.requires_grad for r in self.per_parameter)
        head = plain(_("Gradient-flow doctor: {findings} finding(s), {params} trainable "
                       "parameter(s); gradients from {source}", findings=len(self.findings),
                       params=n, source=self.gradient_source))
        lines = [head, "=" * min(width(head), 100)]
        if self.ok:
            lines.append(_("No problems found: every trainable parameter gets a healthy "
                           "gradient."))
        note_label = _("note:")
        note_label += "" if width(note_label[-1]) == 2 else " "  # none after a full-width colon
        for group in _grouped(self.findings):
            f = group[0]
            lines += wrap(plain(_("! [{status}] {who}  -> {lesson}", status=f.status,
                                  who=_who(group), lesson=_lesson(f.lesson))), 100,
                          subsequent_indent="  ", break_on_hyphens=False)
            lines += wrap(plain(f.detail), 96, initial_indent="    ", subsequent_indent="    ")
        for note in self.notes:
            lines += wrap(plain(note), 96, initial_indent=note_label,
                          subsequent_indent=" " * width(note_label))
        lines.append("")
        lines += _text_table(self.per_parameter)
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        n = sum(r.requires_grad for r in self.per_parameter)
        parts = ["<div>" + _("<b>Gradient-flow doctor</b>: {findings} finding(s), {params} "
                             "trainable parameter(s); gradients from {source}",
                             findings=len(self.findings), params=n,
                             source=rich(self.gradient_source))]
        if self.ok:
            parts.append("<p>" + esc(_("No problems found: every trainable parameter gets a "
                                       "healthy gradient.")) + "</p>")
        else:
            parts.append("<ul>")
            for group in _grouped(self.findings):
                f = group[0]
                parts.append(f"<li><b>[{esc(f.status)}]</b> <code>{esc(_who(group))}</code> "
                             f"&rarr; {rich(_lesson(f.lesson))}<br>{rich(f.detail)}</li>")
            parts.append("</ul>")
        for note in self.notes:
            parts.append(f"<p><i>{esc(_('note:'))}</i> {rich(note)}</p>")
        head = "".join(f"<th>{esc(_(c))}</th>" for c in _COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(v)}</td>" for v in _cells(r)) + "</tr>"
            for r in self.per_parameter)
        parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>")
        return "\n".join(parts)

    def plot(self, ax=None):
        """Bar chart of the gradient norm of each layer, on a log scale, with the vanishing and
        exploding thresholds as dashed lines. One bar per layer (:meth:`layers`: each module
        that owns trainable parameters), numbered 1..N in the model's order as a learner
        counts them; a layer without a gradient, or with a zero one, is a hatched bar at the
        bottom labelled ``None`` / ``0``. A bar's colour is what its own norm says
        (:func:`bar_status`). The legend names every colour drawn.

        Returns the ``Figure``. Without ``ax`` it is a figure outside pyplot: nothing to close,
        shown once in a notebook, saved with ``fig.savefig(...)``. Never calls ``plt.show()``.
        """
        from matplotlib.patches import Patch

        from course.draw import COLUMN_WIDTH, FONT

        layers = self.layers()
        if ax is None:  # the notebook column's width, like every drawing of the course
            fig = _figure_class()(figsize=(COLUMN_WIDTH, 4.6), layout="constrained")
            ax = fig.subplots()
        else:
            fig = ax.figure
        vanishing, exploding = self.thresholds["vanishing"], self.thresholds["exploding"]
        positive = [n for _, n, _ in layers if n]
        floor = 10 ** math.floor(math.log10(min(positive + [vanishing]))) / 10
        heights = [n if n else floor for _, n, _ in layers]
        shown = [bar_status(n, s, self.thresholds) for _, n, s in layers]
        colors = [_COLOURS.get(s, _OTHER_COLOUR) for s in shown]
        numbers = range(1, len(layers) + 1)
        bars = ax.bar(numbers, heights, color=colors, edgecolor="#343a40", linewidth=0.6)
        drawn: dict[str, list[str]] = {}   # colour -> the statuses drawn in it
        missing = False
        for bar, (_layer, n, _worst), status in zip(bars, layers, shown, strict=True):
            if not n:
                missing = True
                bar.set_hatch("//")
                bar.set_facecolor("white")
                ax.annotate("None" if n is None else "0", (bar.get_x() + bar.get_width() / 2,
                            floor), xytext=(0, 3), textcoords="offset points",
                            ha="center", va="bottom", fontsize=FONT - 1)
            else:
                statuses = drawn.setdefault(_COLOURS.get(status, _OTHER_COLOUR), [])
                if status not in statuses:
                    statuses.append(status)
        ax.set_yscale("log")
        ax.axhline(vanishing, color="#1c7ed6", linestyle="--", linewidth=1,
                   label=_("vanishing threshold ({vanishing:g})", vanishing=vanishing))
        ax.axhline(exploding, color="#e03131", linestyle="--", linewidth=1,
                   label=_("exploding threshold ({exploding:g})", exploding=exploding))
        names = [name for name, _n, _s in layers]
        if len(layers) <= 10 and not all(name.isdigit() for name in names):
            ticks = [f"{k}\n{_(name) if name == '(model)' else name}"
                     for k, name in zip(numbers, names, strict=True)]
        else:  # Sequential indices (0, 2, 4 ...) would contradict the 1..N count
            ticks = [str(k) for k in numbers]
        every = max(1, math.ceil(len(layers) / 30))  # body-size numbers that do not collide
        ax.set_xticks(list(numbers), [t if (k - 1) % every == 0 else ""
                                      for k, t in zip(numbers, ticks, strict=True)],
                      fontsize=FONT)
        ax.tick_params(axis="y", labelsize=FONT)
        ax.set_xlim(0.4, len(layers) + 0.6)
        ax.set_xlabel(_("layer (modules with trainable parameters, 1 = first in the model)"),
                      fontsize=FONT)
        ax.set_ylabel(_("gradient norm (log scale)"), fontsize=FONT)
        ax.set_title(_("Gradient norm per layer"), fontsize=FONT + 1)
        handles = [Patch(facecolor=colour, edgecolor="#343a40", linewidth=0.6,
                         label=_("bar: {statuses}", statuses=" / ".join(
                             _status_word(s) for s in statuses)))
                   for colour, statuses in drawn.items()]
        if missing:
            handles.append(Patch(facecolor="white", edgecolor="#343a40", hatch="//",
                                 linewidth=0.6, label=_("bar: no gradient (None) or zero (0)")))
        lines, _labels = ax.get_legend_handles_labels()
        ax.legend(handles=handles + lines, fontsize=FONT, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, frameon=False)
        return fig


_OTHER_COLOUR = "#868e96"


def bar_status(norm: float | None, status: str, thresholds: dict) -> str:
    """The status a layer's bar shows: what its own norm says (``ok``, ``vanishing``,
    ``exploding``, ``nonfinite``), or, for a bar with no gradient or a zero one, why
    (the layer's own status: ``detached``, ``zero`` ...). A layer whose worst parameter is
    ``zero`` while another of its parameters gets a healthy gradient is a healthy bar; its
    finding says the rest."""
    if not norm:
        return status
    if not math.isfinite(norm):
        return "nonfinite"
    if norm < thresholds["vanishing"]:
        return "vanishing"
    if norm > thresholds["exploding"]:
        return "exploding"
    return "ok"


# The plot's legend names the statuses drawn in each colour (the status ids are code).
_STATUS_WORDS = {
    "ok": N_("healthy (`ok`)"), "frozen": N_("`frozen`"), "unreachable": N_("`unreachable`"),
    "unused": N_("`unused`"), "detached": N_("`detached`"), "no_grad": N_("`no_grad`"),
    "cut": N_("`cut`"), "none": N_("`none`"), "nonfinite": N_("not finite"),
    "zero": N_("`zero`"), "vanishing": N_("`vanishing`"), "exploding": N_("`exploding`"),
    "stale_grad": N_("stale .grad"), "frozen_in_optimizer": N_("`frozen_in_optimizer`"),
    "not_in_optimizer": N_("`not_in_optimizer`"), "no_history": N_("`no_history`"),
    "inplace": N_("`inplace`"),
}


def _status_word(status: str) -> str:
    return plain(_(_STATUS_WORDS[status])) if status in _STATUS_WORDS else status


# Most severe first; layers() reports the worst status of a layer's parameters.
_SEVERITY_ORDER = [
    "nonfinite", "exploding", "no_history", "inplace", "detached", "no_grad", "cut",
    "unreachable", "unused", "none", "zero", "vanishing", "stale_grad", "frozen_in_optimizer",
    "not_in_optimizer", "ok", "frozen",
]
_COLOURS = {"ok": "#2f9e44", "exploding": "#e03131", "nonfinite": "#e03131",
            "vanishing": "#74c0fc", "zero": "#adb5bd"}
_COLUMNS = (N_("parameter"), N_("shape"), "requires_grad", N_("reachable"), N_("grad norm"),
            N_("zero %"), ".grad", N_("in optimizer"), N_("status"))
# What ``.grad`` held (:attr:`ParamRow.grad_attr`), as the table shows it.
_GRAD_ATTR_WORDS = {"zeros": N_("zeros"), "values": N_("values"), "this loss": N_("this loss"),
                    "earlier": N_("earlier"), "stale": N_("stale"), "read": N_("read")}


def _grouped(findings: list[Finding]) -> list[list[Finding]]:
    """Findings that say the same thing about several parameters (the weight and the bias of one
    layer), grouped so that the report explains it once."""
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        text = f.detail if f.param is None else f.detail.replace(f"`{f.param}`", "`*`")
        if f.status in ("vanishing", "exploding"):  # their norms differ: the table shows them
            text = re.sub(r"\d[\d.]*(e[-+]?\d+)?", "#", text)
        groups.setdefault((f.status, f.lesson, f.param is None, text), []).append(f)
    return list(groups.values())


def _who(group: list[Finding]) -> str:
    if group[0].param is None:
        return _("(graph)")
    names = [f.param for f in group]
    if len(names) == 1:
        return names[0]
    return _("{names} (explained for the first; the same holds for each)",
             names=_separator().join(names))


def _separator() -> str:
    """Between the items of a list: ``, `` (in Chinese, the enumeration comma)."""
    return "\u3001" if is_chinese() else ", "


def _lesson(lesson: str) -> str:
    """``lesson `07_gradient_clinic``` (in Chinese: 第07课), with the id as code."""
    number, _sep, slug = lesson.partition("_")
    return _("lesson `{number}_{slug}`", number=number, slug=slug)


def _cells(r: ParamRow) -> list[str]:
    grad_attr = _GRAD_ATTR_WORDS.get(r.grad_attr)
    return [
        r.name, "x".join(map(str, r.shape)) or _("scalar"), str(r.requires_grad),
        str(r.reachable), "-" if r.grad_norm is None else f"{r.grad_norm:.3g}",
        "-" if r.zero_fraction is None else f"{100 * r.zero_fraction:.0f}",
        _(grad_attr) if grad_attr else r.grad_attr,
        "-" if r.in_optimizer is None else str(r.in_optimizer), r.status,
    ]


def _text_table(rows: list[ParamRow]) -> list[str]:
    table = [[_(c) for c in _COLUMNS]] + [_cells(r) for r in rows]
    widths = [max(width(row[i]) for row in table) for i in range(len(_COLUMNS))]
    return ["  ".join(ljust(c, w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in table]


_FIGURE_CLASS = None


def _figure_class():
    """A matplotlib ``Figure`` that shows itself as PNG in Jupyter (built on first use, so that
    importing this module does not import matplotlib): rendered at 2x and shown at 1x, like
    the course's graph drawings (``course.draw``), so it is crisp on high-density displays."""
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        from matplotlib.figure import Figure

        from course.draw import _figure_png

        class GradientFlowFigure(Figure):
            """The doctor's plot: a plain ``Figure`` that renders itself as PNG in Jupyter."""

            def _repr_png_(self):
                return _figure_png(self)

        _FIGURE_CLASS = GradientFlowFigure
    from course.draw import register_png_printer

    register_png_printer(_FIGURE_CLASS)  # the inline backend formats every Figure itself
    return _FIGURE_CLASS


# --------------------------------------------------------------------------------------------
# Watching the forward pass
# --------------------------------------------------------------------------------------------

_TORCH_DIR = os.path.dirname(torch.__file__)
_THIS_FILE = os.path.abspath(__file__)
_VIEW_GETTERS = {"T", "mT", "H", "mH", "real", "imag"}
_TO_PYTHON = {"item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__"}
_MUL = {"mul", "mul_", "__mul__", "__rmul__", "multiply"}
_RELU = {"relu", "relu_"}
_BACKWARD = {"backward", "grad"}


@dataclass
class _Cut:
    """A place in the forward pass where a value carrying gradient lost its history."""

    reason: str          # "detach", "data", "no_grad" or "nondiff"
    op: str              # "detach()", ".data", "linear (under no_grad)", "argmax()"
    where: tuple | None  # ("model.py", 42, "forward"), see _place()
    module: str          # qualified name of the innermost module running, or ""
    params: frozenset    # ids of the parameters the input came from


def _func_name(func) -> str:
    name = getattr(func, "__name__", "") or ""
    if name in ("__get__", "__set__", "__delete__"):
        owner = getattr(getattr(func, "__self__", None), "__name__", "?")
        return f"{owner}.{name}"
    return name


def _tensors(obj, out: list) -> list:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _tensors(item, out)
    elif isinstance(obj, dict):
        for item in obj.values():
            _tensors(item, out)
    return out


def _user_location() -> tuple[str, int, str] | None:
    """``(file.py, line, function)`` of the innermost frame outside torch and this module;
    code typed in a notebook cell is named as Jupyter's tracebacks name it (``Cell In[7]``),
    not by the temporary file IPython compiled it to."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_TORCH_DIR + os.sep) and path != _THIS_FILE:
            return (_cell_name(frame.f_code.co_filename) or os.path.basename(path),
                    frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


def _cell_name(filename: str) -> str | None:
    """``"Cell In[7]"`` when ``filename`` is the code of a cell the running IPython compiled
    (its ``format_code_name``, what its own tracebacks print), else None."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    name = getattr(getattr(shell, "compile", None), "format_code_name", lambda _f: None)(filename)
    return " ".join(name) if name else None


def _place(site: tuple[str, int, str] | None, modules: list[str] = (), times: int = 1) -> str:
    """Where in the user's code: ``model.py:42 in forward``, then how many times and in which
    modules (``model.py:42 in forward, 3 times (module `0.a`, `1.a`, ...)``)."""
    if site is None:
        return "?"
    names = sorted(set(n for n in modules if n), key=list(modules).index)
    shown = _separator().join(f"`{n}`" for n in names[:3])
    if len(names) > 3:
        shown = _("{modules}, ...", modules=shown)
    file, line, function = site
    location = f"{file}, line {line}" if file.startswith("Cell ") else f"{file}:{line}"
    fields = {"location": location, "function": function, "count": times,
              "modules": shown}
    if times > 1:
        if names:
            return _("{location} in {function}, {count} times (module {modules})", **fields)
        return _("{location} in {function}, {count} times", **fields)
    if names:
        return _("{location} in {function} (module {modules})", **fields)
    return _("{location} in {function}", **fields)


class _ForwardWatcher(torch.overrides.TorchFunctionMode):
    """Follows every tensor operation of one forward pass: which parameters each value came
    from (its *taint*), which parameters were used and where a value carrying gradient lost its
    history (:class:`_Cut`). Stops watching at the first ``backward()``."""

    def __init__(self, model: torch.nn.Module, param_ids: set[int]):
        super().__init__()
        self.param_ids = param_ids
        self.used: set[int] = set()
        self.cuts: list[_Cut] = []
        self.zero_makers: list[tuple] = []  # ("relu" or "mul", user's line, module)
        self.errors: list[str] = []
        # id(tensor) -> (tensor, parameter ids, cut indices); the tensor is kept so that its id
        # cannot be reused while we watch.
        self.taint: dict[int, tuple[torch.Tensor, frozenset, frozenset]] = {}
        self.stopped = False
        self.loss_cuts: frozenset = frozenset()  # indices of the cuts whose value reached the loss
        self._modules: list[str] = []
        self._handles = []
        for name, module in model.named_modules():
            self._handles.append(module.register_forward_pre_hook(self._enter(name)))
            self._handles.append(module.register_forward_hook(self._leave, always_call=True))

    def _enter(self, name):
        def hook(module, args):
            self._modules.append(name)
        return hook

    def _leave(self, module, args, output):
        if self._modules:
            self._modules.pop()

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def taint_of(self, t) -> tuple[frozenset, frozenset]:
        entry = self.taint.get(id(t))
        if entry is None or entry[0] is not t:
            return frozenset(), frozenset()
        return entry[1], entry[2]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.stopped:
            name = _func_name(func)
            if name in _BACKWARD:
                self.stopped = True
            else:
                try:
                    self._record(name, args, kwargs, out)
                except Exception as exc:  # the doctor must never break the user's forward
                    self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
        return out

    def _record(self, name, args, kwargs, out) -> None:
        if name.endswith(("__set__", "__delete__")):
            return
        if name.endswith("__get__") and name.split(".")[0] not in _VIEW_GETTERS | {"data"}:
            return  # .grad, .shape, .requires_grad, ...: reading an attribute is not a use
        inputs = _tensors(args, _tensors(kwargs, []))
        params, cuts, carries = set(), set(), False
        for t in inputs:
            if id(t) in self.param_ids:
                params.add(id(t))
                self.used.add(id(t))
            p, c = self.taint_of(t)
            params |= p
            cuts |= c
            carries = carries or t.requires_grad
        outputs = _tensors(out, [])
        if not outputs and name not in _TO_PYTHON:
            return
        if carries and params and not any(o.requires_grad for o in outputs):
            if name in ("detach", "detach_"):
                reason, op = "detach", f"{name}()"
            elif name == "data.__get__":
                reason, op = "data", ".data"
            elif not torch.is_grad_enabled():
                reason, op = "no_grad", f"{name} (inside no_grad)"
            else:
                reason, op = "nondiff", f"{name}()"
            self.cuts.append(_Cut(reason, op, _user_location(),
                                  self._modules[-1] if self._modules else "", frozenset(params)))
            cuts.add(len(self.cuts) - 1)
        if name in _RELU and outputs and outputs[0].numel() and not bool(outputs[0].any()):
            self.zero_makers.append(("relu", *self._here()))
        elif name in _MUL and any(_is_zero(a) for a in args):
            self.zero_makers.append(("mul", *self._here()))
        if params or cuts:
            entry = (frozenset(params), frozenset(cuts))
            for o in outputs:
                self.taint[id(o)] = (o, *entry)

    def _here(self) -> tuple[tuple | None, str]:
        """The user's line and the innermost module running (``""`` outside any)."""
        return _user_location(), self._modules[-1] if self._modules else ""


def _is_zero(a) -> bool:
    if isinstance(a, bool):
        return False
    if isinstance(a, (int, float)):
        return a == 0
    if isinstance(a, torch.Tensor) and a.dim() == 0:
        return bool(a == 0)
    return False


# --------------------------------------------------------------------------------------------
# The diagnosis
# --------------------------------------------------------------------------------------------


def _reachable_leaves(loss: torch.Tensor) -> set[int]:
    """ids of the leaf tensors whose ``AccumulateGrad`` node the loss's graph reaches."""
    if loss.grad_fn is None:
        return {id(loss)} if loss.requires_grad else set()
    found, seen, stack = set(), set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            found.add(id(variable))
        stack.extend(nxt for nxt, _ in node.next_functions)
    return found


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float rounding, relative to the larger of the two."""
    a, b = a.detach().double(), b.detach().double()
    scale = max(float(a.abs().max()), float(b.abs().max())) if a.numel() else 0.0
    return float((a - b).abs().max()) <= 1e-4 * scale if a.numel() else True


def _all_zero(g: torch.Tensor | None) -> bool:
    return g is None or not bool(g.detach().any())


def _param_list(names: list[str]) -> str:
    shown = _separator().join(f"`{n}`" for n in names[:3])
    if len(names) > 3:
        return _("{names} and {count} more", names=shown, count=len(names) - 3)
    return shown


def _then(first: str, second: str) -> str:
    """Two sentences, one after the other (no space between Chinese sentences)."""
    return first + ("" if is_chinese() else " ") + second


def _explain(status: str, theme: str, variant: str | None = None, **fields) -> str:
    """The finding's explanation: the technical sentences of ``status`` (of its ``variant``,
    for a status with several), then the analogy's sentence."""
    text = _TEXT[status]
    technical = text["technical"]
    if isinstance(technical, dict):
        technical = technical[variant]
    detail = translate(technical).format(**fields)
    if theme != "technical":
        detail = _then(detail, translate(text[theme]).format(**fields))
    return detail


def diagnose(model: torch.nn.Module, loss: torch.Tensor | None = None, *, step=None,
             optimizer: torch.optim.Optimizer | None = None, vanishing: float = 1e-7,
             exploding: float = 1e3, zero_tol: float = 0.0,
             theme: str = "logistics") -> Report:
    """Check the gradient flow of every parameter of ``model`` for one loss.

    Give exactly one of

    * ``loss``: a scalar tensor computed by ``model``. Its gradients are computed with
      ``torch.autograd.grad(..., retain_graph=True)``: no ``.grad`` is written and the graph is
      kept for your own ``loss.backward()``. If the graph was already freed by ``backward()``,
      the gradients are read from ``.grad``.
    * ``step``: a callable with no arguments that runs the forward pass and returns the loss
      (``lambda: F.cross_entropy(model(x), y)``), or a whole training step that also calls
      ``backward()`` (and ``optimizer.step()``) and returns the loss. The doctor calls it once,
      watching the forward pass, so it can say *why* a parameter gets no gradient (never used,
      ``detach()``, ``no_grad()``, a non-differentiable operation) and where.

    ``optimizer``: also check that it holds exactly the trainable parameters.
    ``vanishing`` / ``exploding``: gradient norms below / above these are reported.
    ``zero_tol``: a gradient with every ``|entry| <= zero_tol`` counts as zero.
    ``theme``: the analogy of the explanations: ``"logistics"``, ``"kitchen"`` or
    ``"technical"`` (no analogy).

    Returns a :class:`Report`: ``.findings``, ``.per_parameter``, ``.ok``, ``.plot()``.
    """
    if (loss is None) == (step is None):
        raise TypeError(_("diagnose() needs exactly one of loss=<scalar tensor> or "
                          "step=<callable returning the loss>"))
    if not isinstance(model, torch.nn.Module):
        raise TypeError(_("model must be a torch.nn.Module, not {type}",
                          type=type(model).__name__))
    if theme not in THEMES:
        raise ValueError(_("theme must be one of {themes}, not {theme!r}", themes=list(THEMES),
                           theme=theme))
    if not (zero_tol >= 0 and 0 < vanishing < exploding):
        raise ValueError(_("need 0 <= zero_tol and 0 < vanishing < exploding"))

    named = list(model.named_parameters())
    trainable = [(n, p) for n, p in named if p.requires_grad]
    notes: list[str] = []
    watcher = None
    captured: dict[str, torch.Tensor] = {}
    before: dict[str, torch.Tensor | None] = {}

    if step is not None:
        before = {n: None if p.grad is None else p.grad.detach().clone() for n, p in named}
        handles = [p.register_hook(_capture(captured, n)) for n, p in trainable]
        watcher = _ForwardWatcher(model, {id(p) for _n, p in named})
        try:
            with watcher:
                loss = step()
        finally:
            watcher.close()
            for handle in handles:
                handle.remove()
        if not isinstance(loss, torch.Tensor):
            raise TypeError(_("step() must return the loss tensor, not {type}",
                              type=type(loss).__name__))
        watcher.loss_cuts = watcher.taint_of(loss)[1]
        watcher.taint.clear()  # the forward's tensors are no longer needed
        if watcher.errors:
            notes.append(_("the forward watcher could not follow some operations: {errors}",
                           errors=("\uff1b" if is_chinese() else "; ").join(
                               _code(e) for e in watcher.errors[:3])))
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise ValueError(_("the loss must be a tensor with one element (a scalar), got "
                           "{shape}; reduce it first, e.g. loss.mean()", shape=shape))

    findings: list[Finding] = []
    reachable = _reachable_leaves(loss)
    fresh: dict[str, torch.Tensor | None] | None = None
    broken = False  # computing the gradients raised: backward() would raise as well
    if captured:  # step() ran backward: its gradients came through our parameter hooks
        fresh = {n: captured.get(n) for n, _p in trainable}
        source = _("the backward() inside step (read with parameter hooks; .grad not touched)")
    elif not loss.requires_grad:
        fresh = {n: None for n, _p in trainable}
        source = _("nowhere: the loss has no history")
        findings.append(Finding(None, "no_history", _explain("no_history", theme),
                                LESSONS["no_history"]))
    else:
        params = [p for _n, p in trainable]
        try:
            grads = torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True) \
                if params else ()
            fresh = {n: g for (n, _p), g in zip(trainable, grads, strict=True)}
            source = _("torch.autograd.grad on the loss (.grad not touched, graph kept)")
        except RuntimeError as exc:
            message = str(exc).split("\n")[0]
            source = _(".grad (the loss's graph could not be run again)")
            if "inplace" in message or "in-place" in message:
                broken = True
                findings.append(Finding(None, "inplace", _explain(
                    "inplace", theme, error=_quoted(message)), LESSONS["inplace"]))
            elif "second time" in message or "freed" in message:
                notes.append(_("The loss's graph was already freed by backward(), so the "
                               "gradients were read from .grad; the doctor cannot tell whether "
                               ".grad also holds leftovers from an earlier step. Call diagnose "
                               "before backward(), or pass step=..., to check for that."))
            else:
                notes.append(_("Computing the gradients raised RuntimeError ('{error}'), so "
                               "they were read from .grad.", error=_quoted(message)))

    in_optimizer: set[int] | None = None
    if optimizer is not None:
        in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}

    rows: list[ParamRow] = []
    for name, p in named:
        pid = id(p)
        grad_attr = "None" if p.grad is None else "zeros" if _all_zero(p.grad) else "values"
        if not p.requires_grad:
            rows.append(ParamRow(name, tuple(p.shape), False, pid in reachable, None, None,
                                 grad_attr, None if in_optimizer is None else pid in in_optimizer,
                                 "frozen"))
            continue
        g = p.grad if fresh is None else fresh.get(name)
        if fresh is None:
            grad_attr = "read"
        row = ParamRow(name, tuple(p.shape), True, pid in reachable, None, None, grad_attr,
                       None if in_optimizer is None else pid in in_optimizer, "ok")
        rows.append(row)
        if g is not None:
            g = g.detach()
            mags = g.abs().double()
            row.grad_norm = float(mags.norm())
            row.zero_fraction = float((mags <= zero_tol).double().mean()) if g.numel() else 1.0
        if broken and g is None and row.reachable:
            row.status = "inplace"  # the graph-wide finding explains it
            continue
        status, detail = _param_status(name, p, row, g, watcher, fresh is None, vanishing,
                                       exploding, zero_tol, theme)
        row.status = status
        if detail:
            findings.append(Finding(name, status, detail, LESSONS[status]))

    # .grad left over from an earlier backward()
    earlier = []
    if fresh is not None:
        for row, (name, p) in zip(rows, named, strict=True):
            if not p.requires_grad:
                continue
            stale, k = _stale(p, fresh.get(name), before.get(name), bool(captured))
            if stale is None:
                if row.grad_attr == "values":
                    row.grad_attr = "this loss"
                continue
            if stale == "earlier":
                row.grad_attr = "earlier"
                earlier.append(name)
                continue
            row.grad_attr = "stale"
            findings.append(Finding(name, "stale_grad", _explain("stale_grad", theme, stale,
                                                                  name=name, k=k),
                                    LESSONS["stale_grad"]))

    if earlier:
        notes.append(_(".grad of {params} still holds the gradient of an earlier backward(), "
                       "not this loss's. That is harmless if optimizer.zero_grad() runs before "
                       "this loss's backward(); without it the two add up. Pass your training "
                       "step as step=... to let the doctor check.",
                       params=_param_list(earlier)))

    if in_optimizer is not None:
        for row, (name, p) in zip(rows, named, strict=True):
            if row.in_optimizer and not p.requires_grad:
                findings.append(Finding(name, "frozen_in_optimizer", _explain(
                    "frozen_in_optimizer", theme, "none" if p.grad is None else "grad",
                    name=name), LESSONS["frozen_in_optimizer"]))
            elif p.requires_grad and not row.in_optimizer:
                findings.append(Finding(name, "not_in_optimizer", _explain(
                    "not_in_optimizer", theme, "grad" if row.grad_norm else "none", name=name),
                    LESSONS["not_in_optimizer"]))

    if watcher is not None:
        findings += _partial_detach_findings(watcher, named, reachable, theme)

    findings.sort(key=lambda f: _SEVERITY_ORDER.index(f.status))
    return Report(findings, rows, {"vanishing": vanishing, "exploding": exploding,
                                   "zero_tol": zero_tol}, source, notes)


def _capture(store: dict, name: str):
    def hook(grad):
        store[name] = grad.detach().clone() if name not in store else store[name] + grad.detach()
    return hook


def _param_status(name, p, row, g, watcher, from_grad_attr, vanishing, exploding, zero_tol,
                  theme) -> tuple[str, str]:
    """The gradient status of one trainable parameter and its explanation ('' if healthy)."""
    if not row.reachable:
        if watcher is None:
            return "unreachable", _explain("unreachable", theme, name=name)
        return _why_unreachable(name, p, watcher, theme)
    if g is None:
        return "none", _explain("none", theme, "grad_attr" if from_grad_attr else "backward_fn",
                                name=name)
    if not bool(torch.isfinite(g).all()):
        return "nonfinite", _explain("nonfinite", theme, name=name)
    if row.zero_fraction == 1.0:
        if watcher is not None and watcher.zero_makers:
            found = sorted(set(watcher.zero_makers), key=watcher.zero_makers.index)[:3]
            seen = ("\uff1b" if is_chinese() else "; ").join(_zero_maker(*z) for z in found)
            return "zero", _explain("zero", theme, "seen", name=name, thr=zero_tol, seen=seen)
        return "zero", _explain("zero", theme, "zero", name=name, thr=zero_tol)
    if row.grad_norm < vanishing:
        return "vanishing", _explain("vanishing", theme, name=name, norm=row.grad_norm,
                                     thr=vanishing)
    if row.grad_norm > exploding:
        return "exploding", _explain("exploding", theme, name=name, norm=row.grad_norm,
                                     thr=exploding)
    return "ok", ""


def _why_unreachable(name, p, watcher: _ForwardWatcher, theme) -> tuple[str, str]:
    pid = id(p)
    loss_cuts = watcher.loss_cuts
    cuts = [c for c in watcher.cuts if pid in c.params]
    reached = [c for i, c in enumerate(watcher.cuts) if pid in c.params and i in loss_cuts]
    cut = (reached or cuts or [None])[0]
    if cut is None:
        variant = "discarded" if pid in watcher.used else "unused"
        return "unused", _explain("unused", theme, variant, name=name)
    where = _place(cut.where, [cut.module])
    status = {"detach": "detached", "data": "detached", "no_grad": "no_grad",
              "nondiff": "cut"}[cut.reason]
    return status, _explain(status, theme, name=name, op=cut.op, where=where)


def _zero_maker(kind: str, site, module: str) -> str:
    """What the forward pass did that makes a gradient zero, and where."""
    where = _place(site, [module])
    if kind == "relu":
        return _("a ReLU at {where} output only zeros (dead ReLU)", where=where)
    return _("a value was multiplied by 0 at {where}", where=where)


def _stale(p, fresh, before, step_ran_backward) -> tuple[str | None, int]:
    """How ``p.grad`` shows an accumulation without ``zero_grad()``: ``("step", 0)`` (the step
    added its gradient onto the one already there) or ``("times", k)`` (``k`` times this loss's
    gradient) for a finding, ``("earlier", 0)`` when it merely still holds an earlier step's
    gradient (harmless if ``zero_grad()`` runs before the next ``backward()``), or
    ``(None, 0)``."""
    current = p.grad
    if step_ran_backward:
        if _all_zero(before) or current is None or fresh is None:
            return None, 0
        if _close(current, fresh) or not _close(current, before + fresh):
            return None, 0
        return "step", 0
    if _all_zero(current):
        return None, 0
    if fresh is None or _all_zero(fresh):
        return "earlier", 0
    f, c = fresh.detach().double(), current.detach().double()
    k = round(float((c * f).sum() / (f * f).sum()))
    if _close(current, fresh):
        return None, 0
    if k >= 2 and _close(c, k * f):
        return "times", k
    return "earlier", 0


def _partial_detach_findings(watcher, named, reachable, theme) -> list[Finding]:
    """detach() / .data cuts whose result reached the loss while the parameters upstream of it
    still reach the loss another way (so no per-parameter finding shows the cut)."""
    loss_cuts = watcher.loss_cuts
    names = {id(p): n for n, p in named}
    groups: dict[tuple[str, tuple | None], list[_Cut]] = {}
    for i, cut in enumerate(watcher.cuts):
        if cut.reason in ("detach", "data") and i in loss_cuts and cut.params & reachable:
            groups.setdefault((cut.op, cut.where), []).append(cut)
    findings = []
    for (op, site), cuts in groups.items():
        params = sorted({names[i] for c in cuts for i in c.params if i in reachable},
                        key=list(names.values()).index)
        place = _place(site, [c.module for c in cuts], times=len(cuts))
        text = _(_PARTIAL_DETACH["technical"], op=op, where=place, params=_param_list(params))
        if theme != "technical":
            text = _then(text, _(_PARTIAL_DETACH[theme], where=_place(site)))
        findings.append(Finding(None, "detached", text, LESSONS["detached"]))
    return findings


def _quoted(message: str) -> str:
    """torch's message, cut to 200 characters, safe inside a code span."""
    return message[:200].strip().replace("`", "'")


def _code(text: str) -> str:
    """``text`` as a code span."""
    return f"`{text.replace('`', chr(39))}`"
