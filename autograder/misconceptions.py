"""The misconceptions the course corrects, each with a short name and the truth.

Feedback names the misconception a wrong answer reveals, so a learner reads
"thinks leaf means trainable" instead of "assertion failed". Keys are stable:
lessons and tests refer to them. Each carries its correction and the section of the
lesson that teaches it (a test checks that the heading exists).

Names, truths and sections are marked with ``N_()`` and translated where they are shown
(:mod:`autograder.feedback`); their Chinese is in
``course/locale/zh_CN/autograder.misconceptions.po``.
A section's Chinese is the heading of that section in the Chinese lesson
(``translations/zh_CN/<lesson>.po``), numbered only where the English is, so that a learner
told where to look finds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from course.i18n import N_


@dataclass(frozen=True)
class Misconception:
    """``name`` as feedback says it ("thinks ..."), the ``truth`` that corrects it, and where
    the course teaches that: the ``lesson`` and the title of its ``section``."""

    name: str
    truth: str
    lesson: str
    section: str = ""


MISCONCEPTIONS: dict[str, Misconception] = {
    "leaf_means_trainable": Misconception(
        N_("thinks leaf means trainable"),
        N_("every tensor that does not require grad is a leaf by convention; being a leaf only "
           "means no recorded operation made it (an ordinary parcel is a leaf too)."),
        "01_leaves",
        section=N_("Three questions to ask any tensor"),
    ),
    "created_is_not_leaf": Misconception(
        N_("thinks a hand-made tensor needs an operation to enter the graph"),
        N_("a tensor you create yourself, with or without requires_grad, is a leaf: it is where "
           "the route starts."),
        "01_leaves",
        section=N_("Who is a leaf?"),
    ),
    "output_can_be_leaf": Misconception(
        N_("thinks a computed result can be a leaf while its inputs require grad"),
        N_("a differentiable operation (arithmetic, sum, sigmoid, ...) on a tensor that requires "
           "grad records a grad_fn while recording is on, so its result is a non-leaf (a transit "
           "station, a semi-finished dish); leaves come only from results that carry no "
           "gradient (comparisons, argmax, integer casts), from detach() or .data, and from "
           "anything computed under no_grad()."),
        "01_leaves",
        section=N_("Who is a leaf?"),
    ),
    "no_grad_inputs_make_nonleaf": Misconception(
        N_("thinks every computed tensor is a non-leaf"),
        N_("a result computed only from tensors that do not require grad records no history: it is "
           "a leaf with requires_grad=False (mixing bottled sauces records no recipe)."),
        "01_leaves",
        section=N_("Who is a leaf?"),
    ),
    "nonleaf_grad_never_computed": Misconception(
        N_("thinks non-leaf gradients are never computed"),
        N_("backward computes the gradient of every tensor on the path (a hook sees it); it is "
           "only not *stored* in .grad unless you call retain_grad()."),
        "01_leaves",
        section=N_("What backward() stores"),
    ),
    "nonleaf_grad_stored": Misconception(
        N_("thinks backward stores .grad on every tensor"),
        N_("only leaves that require grad keep .grad (only sorting centres keep efficiency "
           "reports); a non-leaf's .grad stays None unless retain_grad() was called before "
           "backward."),
        "01_leaves",
        section=N_("What backward() stores"),
    ),
    "constant_gets_grad": Misconception(
        N_("thinks a leaf that does not require grad receives a gradient"),
        N_("nobody audits an ordinary parcel: a tensor with requires_grad=False never gets .grad."),
        "01_leaves",
        section=N_("What backward() stores"),
    ),
    "nonleaf_grad_silent": Misconception(
        N_("thinks reading a non-leaf's .grad is silent"),
        N_("reading .grad of a non-leaf returns None *and* emits a UserWarning pointing at "
           "retain_grad()."),
        "01_leaves",
        section=N_("What backward() stores"),
    ),
    "grad_fn_on_leaf": Misconception(
        N_("thinks a parameter has a grad_fn"),
        N_("grad_fn is the recipe step that made a tensor; a leaf was made by no recorded step, so "
           "its grad_fn is None even when it requires grad."),
        "01_leaves",
        section=N_("Three questions to ask any tensor"),
    ),
    "graph_is_all_leaves": Misconception(
        N_("thinks the autograd graph is made of tensors, or of leaves only"),
        N_("the graph torch records is made of backward Functions (MulBackward0, ...); each leaf "
           "that requires grad is reached through an AccumulateGrad node."),
        "01_leaves",
        section=N_("What the graph really is"),
    ),
    "one_route_only": Misconception(
        N_("follows only one route back to a leaf"),
        N_("when a tensor reaches the output by several routes, backward adds the gradients of all "
           "routes (a sorting centre gets reports from every line it feeds)."),
        "01_leaves",
        section=N_("The computation-graph article's example, three ways"),
    ),
    "mean_grad_halved": Misconception(
        N_("copies a popular tutorial's printed x.grad for mean(2*x)"),
        N_("d/dx_i mean(2*x) = 2/n; with n = 2 that is 1.0, not 0.5."),
        "01_leaves",
        section=N_("What backward() stores"),
    ),
    "require_grad_typo": Misconception(
        N_("spells the flag require_grad"),
        N_("the flag is requires_grad (with an s); torch.tensor(..., require_grad=True) is a "
           "TypeError and setting t.require_grad = True just adds an unused attribute."),
        "01_leaves",
        section=N_("What backward() stores"),
    ),
    "requires_grad_spreads": Misconception(
        N_("thinks requires_grad spreads to everything computed afterwards"),
        N_("a result requires grad only when one of its own inputs does: salt = water * 0.01, "
           "computed after flour but from bottled water alone, records no recipe and stays a leaf "
           "with requires_grad=False."),
        "01_leaves",
        section=N_("Who is a leaf?"),
    ),
    "requires_grad_not_inherited": Misconception(
        N_("thinks only the tensors you flag with requires_grad=True require grad"),
        N_("requires_grad spreads downstream along recorded operations: whatever a differentiable "
           "operation makes from a tensor that requires grad requires grad too, and has a grad_fn "
           "(bread, from dough, from flour)."),
        "01_leaves",
        section=N_("Who is a leaf?"),
    ),
    "accumulate_per_use": Misconception(
        N_("thinks the graph has one AccumulateGrad node per use of a leaf"),
        N_("each leaf that requires grad has exactly one AccumulateGrad node, however many "
           "operations use it: the routes from every use meet there and their gradients are added "
           "into the one .grad (a sorting centre files one report, fed by every line)."),
        "01_leaves",
        section=N_("What the graph really is"),
    ),
    "grad_accumulates_not": Misconception(
        N_("thinks backward overwrites .grad"),
        N_("backward adds into .grad; call backward twice without zeroing and the gradient "
           "doubles."),
        "02_retain_grad",
        section=N_("Reports pile up: .grad accumulates"),
    ),
    "retain_grad_after_backward": Misconception(
        N_("thinks retain_grad() works after backward()"),
        N_("retain_grad() must be installed before backward runs; afterwards it silently does "
           "nothing for the pass that already happened."),
        "02_retain_grad",
        section=N_("Too late: retain_grad() after backward()"),
    ),
    "retains_grad_means_stored": Misconception(
        N_("thinks retains_grad says a gradient was stored"),
        N_("retains_grad only records that retain_grad() was called; called after backward() it is "
           "True while .grad stays None (the monitor arrived after the audit)."),
        "02_retain_grad",
        section=N_("Too late: retain_grad() after backward()"),
    ),
    "retain_grad_on_constant": Misconception(
        N_("thinks a monitor can be installed on a tensor that does not require grad"),
        N_("retain_grad() on a tensor with requires_grad=False raises RuntimeError: no gradient "
           "will ever pass it (nobody audits an ordinary parcel), so there is nothing to keep."),
        "02_retain_grad",
        section=N_("Leaves need no monitor"),
    ),
    "retains_grad_on_leaf": Misconception(
        N_("thinks retains_grad is True on a leaf whose .grad is kept"),
        N_("a leaf that requires grad always keeps .grad (through AccumulateGrad); retains_grad is "
           "about non-leaves and stays False on a leaf, where retain_grad() is a no-op."),
        "02_retain_grad",
        section=N_("Leaves need no monitor"),
    ),
    "zero_grad_fills_zeros": Misconception(
        N_("thinks zero_grad() fills .grad with zeros"),
        N_("since torch 2.0 zero_grad() sets every .grad to None (set_to_none=True); only "
           "zero_grad(set_to_none=False) leaves zero tensors."),
        "02_retain_grad",
        section=N_("Reports pile up: .grad accumulates"),
    ),
    "graph_survives_backward": Misconception(
        N_("thinks a graph can be backpropagated again without retain_graph=True"),
        N_("backward() frees the tensors the graph saved for backward (the route is torn down); a "
           "second backward through them raises RuntimeError unless the first used "
           "retain_graph=True (or backward once through the sum of the losses)."),
        "02_retain_grad",
        section=N_("retain_graph=True: auditing the same route twice"),
    ),
    "second_backward_always_fails": Misconception(
        N_("thinks a second backward always raises"),
        N_("the error comes from saved tensors that were freed; a graph that saved none (x + 1, a "
           "sum) can be backpropagated twice, and the gradients add up."),
        "02_retain_grad",
        section=N_("retain_graph=True: auditing the same route twice"),
    ),
    "retain_cost_fixed": Misconception(
        N_("thinks keeping gradients costs a fixed share of memory"),
        N_("a retained .grad has the shape of its activation (batch x features), a parameter's "
           ".grad the shape of the parameter: what retaining costs (the kitchen article's '20-40 "
           "%') depends on the model and the batch, from under 1 % to over half."),
        "02_retain_grad",
        section=N_("What keeping gradients costs"),
    ),
    "zero_grad_misplaced": Misconception(
        N_("thinks zero_grad() can go anywhere in the training loop"),
        N_("clear the desk once per step, before the new report is filed: zero_grad() goes before "
           "backward() (or after step()). Between backward() and step() it throws away the report "
           "the step needs, so nothing moves; once before the loop, every step's report piles on "
           "the last."),
        "02_retain_grad",
        section=N_("Reports pile up: .grad accumulates"),
    ),
    "float_is_four_bytes": Misconception(
        N_("thinks every float takes 4 bytes"),
        N_("an element takes element_size() bytes: 4 for float32 (torch's default), 8 for float64, "
           "2 for float16 and bfloat16. Count a tensor's bytes as numel() * element_size()."),
        "02_retain_grad",
        section=N_("What keeping gradients costs"),
    ),
    "detach_copies": Misconception(
        N_("thinks detach() makes a copy"),
        N_("detach() returns a tensor that shares storage and the version counter with the "
           "original; use detach().clone() for a real copy."),
        "03_detach",
        section=N_("Same parcel, same storage, same version counter"),
    ),
    "detach_freezes": Misconception(
        N_("thinks p.detach() freezes a parameter"),
        N_("p.detach() returns a new tensor and leaves p trainable; freeze with "
           "p.requires_grad_(False)."),
        "03_detach",
        section=N_("Freezing a layer"),
    ),
    "inplace_always_fatal": Misconception(
        N_("thinks every in-place operation breaks backward"),
        N_("backward() raises only when a value saved for backward was overwritten (an "
           "in-place edit of a leaf that requires grad is refused at once); z = x*y; "
           "z.add_(1) backpropagates fine."),
        "06_inplace",
        section=N_("Which parcels the audit photographed"),
    ),
    "grad_none_check_enough": Misconception(
        N_("thinks `grad is None` finds every gradient problem"),
        N_("zero gradients (dead branches, x*0) are not None, and zero_grad() sets grads to None "
           "by default since torch 2.0, which raises false alarms."),
        "07_gradient_clinic",
        section=N_("1. The parcel-sorting article's alarm, and what it cannot hear"),
    ),
    "detach_keeps_grad": Misconception(
        N_("thinks a detached tensor keeps its history"),
        N_("detach() (and detach().clone(), torch.tensor(t)) returns a leaf with "
           "requires_grad=False and no grad_fn: the new waybill carries no sorting rule."),
        "03_detach",
        section=N_("What detach() returns"),
    ),
    "clone_shares_storage": Misconception(
        N_("thinks detach().clone() still shares storage"),
        N_("clone() allocates new memory: writing into detach().clone() never reaches the "
           "original."),
        "03_detach",
        section=N_("Real copies: re-making the broth from scratch"),
    ),
    "clone_cuts_history": Misconception(
        N_("thinks clone() alone makes an independent copy"),
        N_("clone() is a recorded operation (CloneBackward0): the copy stays on the recipe and "
           "requires grad; a fresh leaf is detach().clone()."),
        "03_detach",
        section=N_("Real copies: re-making the broth from scratch"),
    ),
    "torch_tensor_silent": Misconception(
        N_("thinks torch.tensor(t) is a clean, silent copy"),
        N_("torch.tensor(t) on a tensor copies it but emits a UserWarning recommending "
           "t.detach().clone(), which is the idiomatic copy."),
        "03_detach",
        section=N_("Real copies: re-making the broth from scratch"),
    ),
    "requires_grad_off_nonleaf": Misconception(
        N_("thinks requires_grad_(False) works on a computed tensor"),
        N_("only a leaf's requires_grad flag can be changed; on a non-leaf requires_grad_(False) "
           "raises RuntimeError (use detach() there)."),
        "03_detach",
        section=N_("Switching gradients off: requires_grad_(False) and detach_()"),
    ),
    "detach_inplace_harmless": Misconception(
        N_("thinks detach_() is as harmless as detach()"),
        N_("detach_() changes the tensor itself: a non-leaf becomes a leaf cut off its recipe, a "
           "leaf parameter stops requiring grad (it is frozen)."),
        "03_detach",
        section=N_("Switching gradients off: requires_grad_(False) and detach_()"),
    ),
    "residual_detach_harmless": Misconception(
        N_("thinks detaching the residual identity is harmless"),
        N_("x + identity.detach() removes the skip path's gradient; only the product of the "
           "blocks' Jacobians is left, and in a deep stack the input gradient vanishes."),
        "03_detach",
        section=N_("The kitchen article's residual block: the skip path that carries no gradient"),
    ),
    "detach_in_loss_harmless": Misconception(
        N_("thinks detaching a feature inside a loss only protects the graph"),
        N_("a term computed from feat.detach() sends no gradient to the layers that made feat: the "
           "auxiliary loss trains nothing (the five-scenarios article, scenario 2)."),
        "03_detach",
        section=N_("The five-scenarios article's scenario 2: an auxiliary loss that trains "
                   "nothing"),
    ),
    "detach_activation_freezes_one": Misconception(
        N_("thinks detaching an activation freezes just one layer"),
        N_("detaching an activation cuts the gradient for everything upstream of it; freeze one "
           "layer with requires_grad_(False) on its parameters and the gradient still flows "
           "through it."),
        "03_detach",
        section=N_("Freezing a layer"),
    ),
    "fake_batch_not_detached": Misconception(
        N_("forgets to detach the fake batch in the discriminator step"),
        N_("D(G(z)) backpropagates into the generator; the discriminator step uses "
           "D(G(z).detach()) so the generator gets no gradient from it."),
        "03_detach",
        section=N_("When detaching is right"),
    ),
    "module_requires_grad_attr": Misconception(
        N_("thinks module.requires_grad = False freezes the module"),
        N_("a module has no requires_grad flag: the assignment only sets a plain Python attribute "
           "that nothing reads, and every parameter keeps requires_grad=True. Call the method "
           "module.requires_grad_(False) (with the underscore) or p.requires_grad_(False) on each "
           "parameter."),
        "03_detach",
        section=N_("Freezing a layer"),
    ),
    "eval_freezes": Misconception(
        N_("thinks eval() freezes a layer"),
        N_("eval() only sets module.training = False, which changes how layers such as Dropout and "
           "BatchNorm compute; the parameters keep requires_grad=True, get their gradients and are "
           "updated by the optimizer. Freeze with requires_grad_(False)."),
        "03_detach",
        section=N_("Freezing a layer"),
    ),
    "detach_no_grad_confused": Misconception(
        N_("confuses detach() with no_grad()"),
        N_("detach() cuts one tensor off its recipe and touches nothing else; no_grad() records "
           "nothing for every operation inside the block, so no layer used there learns from what "
           "it computes (and no existing tensor changes). To keep one input out of backward, "
           "detach that input: D(G(z).detach()), not D(G(z)) under no_grad()."),
        "03_detach",
        section=N_("When detaching is right"),
    ),
    "inplace_grad_none": Misconception(
        N_("thinks a troublesome in-place op silently leaves .grad None"),
        N_("autograd never silently drops a gradient because of an in-place op: an edit it sees "
           "either overwrote nothing saved (the gradient is right) or makes backward raise "
           "RuntimeError ('modified by an inplace operation'). Only edits it cannot see (.data, a "
           "NumPy view) or no_grad() edits of unsaved values pass silently, and even they leave a "
           "gradient, not None."),
        "06_inplace",
        section=N_("Which parcels the audit photographed"),
    ),
    "inplace_never_checked": Misconception(
        N_("thinks autograd does not notice in-place edits"),
        N_("every saved tensor remembers the version it was saved at; if an in-place op has bumped "
           "it since, backward raises RuntimeError instead of using the changed value."),
        "06_inplace",
        section=N_("Which parcels the audit photographed"),
    ),
    "inplace_not_recorded": Misconception(
        N_("thinks an in-place op on a non-leaf is left out of the graph"),
        N_("an in-place op is recorded like its out-of-place twin (z.mul_(2) becomes z's new "
           "grad_fn, MulBackward0), so the gradient includes it."),
        "06_inplace",
        section=N_("A seal count on every parcel: `_version`"),
    ),
    "version_counts_wrong": Misconception(
        N_("miscounts the version counter"),
        N_("t._version starts at 0 and every in-place change of t (add_, mul_, t[i] = v, an edit "
           "under no_grad()) adds exactly one; out-of-place ops never change it."),
        "06_inplace",
        section=N_("A seal count on every parcel: `_version`"),
    ),
    "saved_values_confused": Misconception(
        N_("mixes up what an operation saves for backward"),
        N_("exp, sigmoid, tanh, relu and sqrt save their output; mul saves the inputs the "
           "gradient formula needs (for x * c with c not requiring grad: only c); pow saves its "
           "base and exponent, and its output too when the exponent is a tensor; add saves "
           "nothing. Only overwriting a saved value breaks backward."),
        "06_inplace",
        section=N_("Which parcels the audit photographed"),
    ),
    "data_is_safe": Misconception(
        N_("thinks .data is a safe way to edit a tensor"),
        N_("an edit through .data (like a write through t.detach().numpy()) does not bump the "
           "version counter, so autograd cannot notice that a saved value changed and returns "
           "silently wrong gradients; edit under torch.no_grad() instead."),
        "06_inplace",
        section=N_("`.data`: repacking behind the audit's back"),
    ),
    "no_grad_edit_unchecked": Misconception(
        N_("thinks an edit under no_grad() is hidden from autograd"),
        N_("no_grad() stops recording new operations but in-place edits still bump the version "
           "counter: overwriting a saved value under no_grad() makes backward raise, loudly."),
        "06_inplace",
        section=N_("`.data`: repacking behind the audit's back"),
    ),
    "index_assign_untracked": Misconception(
        N_("thinks indexed assignment is not tracked by autograd"),
        N_("t[i] = v on a tensor in the graph is an in-place copy recorded as a CopySlices node "
           "(t[mask] = v and t[[i, j]] = v as IndexPutBackward0); the overwritten entries get zero "
           "gradient."),
        "06_inplace",
        section=N_("Indexed assignment: `CopySlices` and `IndexPutBackward0`"),
    ),
    "leaf_inplace_ok": Misconception(
        N_("thinks a parameter can be edited in place while autograd records"),
        N_("an in-place op on a leaf that requires grad raises ('a leaf Variable that requires "
           "grad is being used in an in-place operation'); edit parameters under torch.no_grad()."),
        "06_inplace",
        section=N_("Sorting centres: in place on a leaf"),
    ),
    "refused_edit_applied": Misconception(
        N_("thinks a refused in-place edit still changed the tensor"),
        N_("when torch refuses an in-place op (RuntimeError, e.g. on a leaf that requires grad "
           "while autograd records) it raises before writing anything: the tensor keeps its values "
           "and its version count. Only the edit under no_grad() takes place."),
        "06_inplace",
        section=N_("Sorting centres: in place on a leaf"),
    ),
    "no_grad_edit_makes_nonleaf": Misconception(
        N_("thinks editing a parameter under no_grad() makes it a non-leaf"),
        N_("under no_grad() nothing is recorded: the parameter stays a leaf that requires grad, "
           "only its values and its version counter change."),
        "06_inplace",
        section=N_("Sorting centres: in place on a leaf"),
    ),
    "anomaly_points_at_inplace": Misconception(
        N_("thinks anomaly mode points at the in-place line"),
        N_("set_detect_anomaly(True) prints the forward line of the operation whose backward "
           "failed (the one that saved the value); the culprit is a later in-place edit of that "
           "value."),
        "06_inplace",
        section=N_("Reading the error, and finding the culprit"),
    ),
    "no_grad_flips_flag": Misconception(
        N_("thinks no_grad() changes the requires_grad flag of existing tensors"),
        N_("no_grad() only stops recording new operations; a parameter stays a leaf that requires "
           "grad inside and after the block (the sorting centre still exists, its monitors are "
           "just switched off)."),
        "05_no_grad",
        section=N_("Switching the monitors off"),
    ),
    "no_grad_result_has_history": Misconception(
        N_("thinks a result computed under no_grad() still records its history"),
        N_("nothing is recorded inside no_grad() or inference_mode(): a result made there has no "
           "grad_fn and does not require grad, so it is a leaf (cooked with the recipe notebook "
           "closed); only a view of a tensor that requires grad keeps the flag, still with no "
           "route back."),
        "05_no_grad",
        section=N_("Switching the monitors off"),
    ),
    "no_grad_wears_off": Misconception(
        N_("thinks a tensor made under no_grad() rejoins the graph when the block ends"),
        N_("the tensor keeps no history for good: what is computed from it (and from nothing else "
           "that requires grad) records nothing either, and backward() through it raises 'does not "
           "require grad and does not have a grad_fn'."),
        "05_no_grad",
        section=N_("What you make with the monitors off stays unmonitored"),
    ),
    "no_grad_branch_counts": Misconception(
        N_("thinks a branch computed under no_grad() still sends gradient back"),
        N_("the route that was computed with the monitors off was never recorded: backward only "
           "follows the recorded routes, so that branch contributes nothing, silently."),
        "05_no_grad",
        section=N_("What you make with the monitors off stays unmonitored"),
    ),
    "no_grad_result_unusable": Misconception(
        N_("thinks a tensor made under no_grad() cannot take part in a later backward"),
        N_("it can, as a constant (bottled sauce): gradients reach the other inputs that require "
           "grad; only the route *through* it is missing."),
        "05_no_grad",
        section=N_("What you make with the monitors off stays unmonitored"),
    ),
    "no_grad_backward_silent": Misconception(
        N_("thinks backward() through a no_grad() result quietly gives no gradient"),
        N_("when nothing on the route requires grad, backward() raises RuntimeError ('does not "
           "require grad and does not have a grad_fn'); it does not return quietly."),
        "05_no_grad",
        section=N_("What you make with the monitors off stays unmonitored"),
    ),
    "grad_mode_scope": Misconception(
        N_("misjudges which grad-mode switch is in force"),
        N_("grad mode is a switch per thread: the innermost with-block or decorator in force when "
           "an operation runs decides; torch.set_grad_enabled(False) called as a plain function "
           "stays off until switched on again, so prefer the with-block form."),
        "05_no_grad",
        section=N_("Four switches, one rule"),
    ),
    "inference_mode_is_no_grad": Misconception(
        N_("thinks inference_mode() is just another name for no_grad()"),
        N_("inference_mode() also marks the new tensors it makes as inference tensors: they can "
           "join later computations as constants, but can never be saved for backward or edited in "
           "place outside inference mode (clone them first); no_grad() makes ordinary tensors."),
        "05_no_grad",
        section=N_("`inference_mode()`: the strictest switch"),
    ),
    "eval_is_no_grad": Misconception(
        N_("thinks model.eval() switches gradient recording off"),
        N_("eval() only switches layers such as Dropout and BatchNorm to their evaluation "
           "behaviour; autograd keeps recording and saving activations. Inference needs both "
           "eval() and no_grad() (or inference_mode())."),
        "05_no_grad",
        section=N_("`model.eval()` is not `no_grad()`"),
    ),
    "no_grad_changes_values": Misconception(
        N_("thinks no_grad() changes the numbers a model computes"),
        N_("no_grad() changes what is recorded, never what is computed: the same model in the same "
           "mode gives the same output with the monitors on or off."),
        "05_no_grad",
        section=N_("`model.eval()` is not `no_grad()`"),
    ),
    "no_grad_disables_dropout": Misconception(
        N_("thinks no_grad() puts a model into evaluation mode"),
        N_("no_grad() does not touch module.training: in training mode Dropout still drops at "
           "random and BatchNorm still uses batch statistics; call model.eval() for that."),
        "05_no_grad",
        section=N_("`model.eval()` is not `no_grad()`"),
    ),
    "step_inside_no_grad_breaks": Misconception(
        N_("thinks optimizer.step() inside no_grad() breaks the update"),
        N_("step() already switches grad off while it updates, so wrapping it in no_grad() is "
           "harmless: the same parameters move by the same amounts and stay leaves that require "
           "grad."),
        "05_no_grad",
        section=N_("`optimizer.step()` inside `no_grad()`"),
    ),
    "step_uses_data": Misconception(
        N_("thinks optimizers update parameters through .data"),
        N_("step() writes into each parameter in place (p.add_(...)) with grad switched off; the "
           "version counter records the write, which an edit through .data would hide."),
        "05_no_grad",
        section=N_("`optimizer.step()` inside `no_grad()`"),
    ),
    "step_updates_all": Misconception(
        N_("thinks step() updates every parameter, or every tensor with a gradient"),
        N_("step() updates only the parameters registered with that optimizer, and among them only "
           "those whose .grad is not None (weight decay included); a tensor it was not given is "
           "never touched."),
        "05_no_grad",
        section=N_("`optimizer.step()` inside `no_grad()`"),
    ),
    "no_grad_keeps_activations": Misconception(
        N_("thinks no_grad() still keeps the activations for backward"),
        N_("with recording off autograd saves nothing for backward, so each activation can be "
           "freed as soon as the next layer has used it: that is where no_grad() saves memory."),
        "05_no_grad",
        section=N_("What switching off saves, measured"),
    ),
    "detach_saves_memory": Misconception(
        N_("thinks detaching (or .item()) after the forward pass saves the forward's memory"),
        N_("the tensors saved for backward are kept *while* the forward pass runs with recording "
           "on; detaching the result afterwards cannot undo that. Switch recording off around the "
           "forward pass instead."),
        "05_no_grad",
        section=N_("What switching off saves, measured"),
    ),
    "inference_freezes_params": Misconception(
        N_("thinks inference or a parameter edit needs the parameters frozen"),
        N_("no_grad() is enough: parameters keep requires_grad=True and the next training step "
           "works; requires_grad_(False) left behind silently stops training."),
        "05_no_grad",
        section=N_("Retuning sorting centres: parameter edits belong under `no_grad()`"),
    ),
    "leaf_hook_sees_accumulated": Misconception(
        N_("thinks a leaf's hook sees the accumulated .grad"),
        N_("register_hook on a leaf fires before AccumulateGrad: it sees this pass's gradient "
           "only; the running total is what register_post_accumulate_grad_hook sees in p.grad."),
        "04_hooks",
        section=N_("A probe at a sorting centre, and one behind the desk"),
    ),
    "post_hook_sees_pass": Misconception(
        N_("thinks a post-accumulate-grad hook sees only this pass's gradient"),
        N_("register_post_accumulate_grad_hook is called with the leaf after AccumulateGrad: "
           "p.grad is the running total, including earlier backward passes."),
        "04_hooks",
        section=N_("A probe at a sorting centre, and one behind the desk"),
    ),
    "hook_return_ignored": Misconception(
        N_("thinks a hook can only look at the gradient"),
        N_("a tensor returned by a hook replaces the gradient for everything upstream (a leaf's "
           ".grad included); return None to only look."),
        "04_hooks",
        section=N_("A probe that changes what passes: scaling and clipping"),
    ),
    "retain_grad_sees_raw": Misconception(
        N_("thinks retain_grad() keeps the gradient before the hooks changed it"),
        N_("retain_grad()'s monitor runs after every tensor hook (since torch 2.0), whatever the "
           "order they were installed in: .grad holds the gradient as the hooks left it."),
        "04_hooks",
        section=N_("A probe that changes what passes: scaling and clipping"),
    ),
    "hook_on_constant": Misconception(
        N_("thinks a probe can go on any tensor"),
        N_("register_hook on a tensor that does not require grad raises RuntimeError: no gradient "
           "will ever pass an ordinary parcel; on any tensor that requires grad it works."),
        "04_hooks",
        section=N_("Where a probe cannot go"),
    ),
    "post_hook_on_nonleaf": Misconception(
        N_("thinks post-accumulate-grad hooks work on non-leaves"),
        N_("only a leaf accumulates into .grad: register_post_accumulate_grad_hook on a non-leaf "
           "raises RuntimeError, on a leaf that requires grad it works."),
        "04_hooks",
        section=N_("Where a probe cannot go"),
    ),
    "backward_hooks_forward_order": Misconception(
        N_("thinks backward hooks fire in forward order"),
        N_("backward runs from the output back to the input, so the last layer's backward hook "
           "fires first."),
        "04_hooks",
        section=N_("A probe at every station: module hooks"),
    ),
    "grad_input_is_param_grad": Misconception(
        N_("thinks a module backward hook's grad_input holds the parameter gradients"),
        N_("grad_input of register_full_backward_hook holds the gradients with respect to the "
           "module's inputs (shaped like the input batch), None for an input that does not require "
           "grad; parameter gradients are in p.grad."),
        "04_hooks",
        section=N_("A probe at every station: module hooks"),
    ),
    "hook_costs_most": Misconception(
        N_("thinks hooks cost more memory than retain_grad() (the parcel-sorting article's table)"),
        N_("a hook costs what it keeps: one that only looks, or records a float, keeps no tensor; "
           "one that stores grad.clone() keeps exactly the bytes retain_grad() keeps."),
        "04_hooks",
        section=N_("What a probe costs, measured"),
    ),
    "hook_is_free_when_storing": Misconception(
        N_("thinks storing gradients from a hook is free"),
        N_("every stored clone is a tensor shaped like its station: a hook that keeps copies costs "
           "what retain_grad() costs."),
        "04_hooks",
        section=N_("What a probe costs, measured"),
    ),
    "grad_log_aliases": Misconception(
        N_("logs p.grad without copying it"),
        N_("while gradients accumulate, an ordinary backward adds into the same .grad tensor in "
           "place (only backward(create_graph=True) files a new one each pass): every logged "
           "reference ends up showing the last total. Log p.grad.clone() (or a float)."),
        "04_hooks",
        section=N_("A probe at a sorting centre, and one behind the desk"),
    ),
    "hooks_pile_up": Misconception(
        N_("installs probes without removing them"),
        N_("every register_*hook call adds a probe that stays until handle.remove(); registered "
           "inside a training loop, step k runs k copies of it."),
        "04_hooks",
        section=N_("Taking a probe off the line"),
    ),
    "hook_inplace_edit": Misconception(
        N_("edits the gradient in place inside a hook"),
        N_("a hook must not modify its argument (it may be shared or expanded, and in-place edits "
           "raise or leak into other branches); return a new tensor, e.g. g.clamp(-c, c)."),
        "04_hooks",
        section=N_("A probe that changes what passes: scaling and clipping"),
    ),
    "hook_only_on_leaves": Misconception(
        N_("thinks a probe cannot go on a transit station (a non-leaf)"),
        N_("register_hook works on every tensor that requires grad; on a non-leaf it is how you "
           "see the gradient backward computes there without storing it. Only a tensor that does "
           "not require grad (an ordinary parcel) refuses a probe."),
        "04_hooks",
        section=N_("A probe at a transit station"),
    ),
    "monitor_watches_layer": Misconception(
        N_("thinks a probe or monitor watches the layer, not one tensor"),
        N_("register_hook and retain_grad() are installed on one tensor: they see that tensor's "
           "gradient in the one graph it belongs to. A probe on layer.weight sees the weight's "
           "gradient, not the output's; a probe on the output of one forward pass sees nothing of "
           "the next pass, which makes new outputs. To watch a layer at every pass, use a module "
           "hook (register_full_backward_hook's grad_output)."),
        "04_hooks",
        section=N_("A probe at every station: module hooks"),
    ),
    "tensor_attribute_is_parameter": Misconception(
        N_("thinks a tensor stored on a module is one of its parameters"),
        N_("a module registers only nn.Parameter attributes (and sub-modules): a plain tensor, "
           "even one that requires grad, is missing from model.parameters(), so the optimizer "
           "never updates it and the doctor never examines it. Wrap it: nn.Parameter(values)."),
        "08_capstone",
        section=N_("The first clue: a transit station posing as a sorting centre"),
    ),
    "warmup_freeze_forgotten": Misconception(
        N_("leaves a layer frozen and expects it to train"),
        N_("a parameter with requires_grad=False gets no .grad and step() skips it; the doctor "
           "lists it as `frozen`, not as a problem, because freezing is often deliberate. Switch "
           "it back on with requires_grad_(True) when it should train."),
        "08_capstone",
        section=N_("Ask the doctor"),
    ),
    "zero_gradient_is_none": Misconception(
        N_("thinks a branch that contributes nothing gets no gradient (None)"),
        N_("x * 0, a dead ReLU and the branch torch.where did not pick are recorded operations: "
           "backward reaches their parameters and stores a gradient of zeros. None means there is "
           "no recorded route at all (never used, detach(), no_grad(), a comparison)."),
        "07_gradient_clinic",
        section=N_("6. Case 5: control flow that silently kills a branch"),
    ),
    "grad_none_means_vanished": Misconception(
        N_("thinks `grad is None` means the gradient vanished"),
        N_("None only says that no report was filed: there is no recorded route back (never used, "
           "detach(), no_grad(), a comparison), or zero_grad() has just cleared the desk. A "
           "gradient that faded or died on the way is still a tensor, of tiny numbers or of zeros; "
           "and a route that was never recorded gives None, never zeros. Ask "
           "torch.autograd.grad(..., allow_unused=True) and read the norm, not `is None`."),
        "07_gradient_clinic",
        section=N_("1. The parcel-sorting article's alarm, and what it cannot hear"),
    ),
    "sigmoid_stack_healthy": Misconception(
        N_("thinks a deep stack passes its gradient back intact"),
        N_("each layer multiplies the gradient by its Jacobian; sigmoid's slope is at most 0.25, "
           "so through a dozen plain sigmoid layers the first layer's gradient is many orders of "
           "magnitude smaller than the last's. Skip connections (h + f(h)) or ReLU-like "
           "activations with a suited initialisation keep it alive."),
        "07_gradient_clinic",
        section=N_("7. True vanishing gradients: a deep stack"),
    ),
    "residual_fades": Misconception(
        N_("thinks a residual stack's gradient fades like a plain stack's"),
        N_("h + f(h) has Jacobian I + f'(h): the identity route carries the gradient past every "
           "block unchanged, so the first block's gradient stays comparable to the last's, even "
           "with sigmoid blocks (as long as the skip path is not detached)."),
        "07_gradient_clinic",
        section=N_("7. True vanishing gradients: a deep stack"),
    ),
    "residual_never_explodes": Misconception(
        N_("thinks a skip connection keeps a deep stack's gradient in check"),
        N_("the identity route stops the gradient from vanishing, but each block h + f(h) also "
           "adds its own output: with unbounded blocks (h + relu(layer(h))) the activations, the "
           "loss and the gradients grow with depth, and a few SGD steps blow up to inf or nan. "
           "Bound the blocks (tanh), scale them down, or normalise."),
        "07_gradient_clinic",
        section=N_("7. True vanishing gradients: a deep stack"),
    ),
    "hard_choice_trains": Misconception(
        N_("thinks a hard choice (a comparison, torch.where, argmax) trains what made the choice"),
        N_("a comparison has no gradient: the gate that decides gets None, and the branch that is "
           "never picked gets zeros, so neither ever learns. A soft choice, g = sigmoid(gate(h)); "
           "g * a + (1 - g) * b, sends gradient to all three."),
        "07_gradient_clinic",
        section=N_("6. Case 5: control flow that silently kills a branch"),
    ),
}


# --------------------------------------------------------------------------- learner errors
#: The exceptions a learner's code raises that carry a misconception's signature: the
#: exception type, a stable substring of torch's message, and the belief it reveals. The shared
#: scoring code (:func:`autograder.questions.score`) consults it for every lesson; a question
#: may put its own reading first (``on_error``). Messages as torch 2.13 words them.
ERROR_SIGNATURES: list[tuple[str, str, str]] = [
    ("TypeError", "unexpected keyword argument 'require_grad'", "require_grad_typo"),
    ("TypeError", "require_grad=bool", "require_grad_typo"),
    ("AttributeError", "has no attribute 'require_grad", "require_grad_typo"),
    ("AttributeError", "'Linear' object has no attribute 'retain_grad'", "monitor_watches_layer"),
    ("AttributeError", "'Sequential' object has no attribute 'retain_grad'",
     "monitor_watches_layer"),
    ("RuntimeError", "a leaf Variable that requires grad is being used in an in-place operation",
     "leaf_inplace_ok"),
    ("RuntimeError", "has been modified by an inplace operation", "inplace_never_checked"),
    ("RuntimeError", "Trying to backward through the graph a second time",
     "graph_survives_backward"),
    ("RuntimeError", "cannot register a hook on a tensor that doesn't require gradient",
     "hook_on_constant"),
    ("RuntimeError", "can't retain_grad on Tensor that has requires_grad=False",
     "retain_grad_on_constant"),
    ("RuntimeError", "post accumulate grad hooks cannot be registered on non-leaf tensors",
     "post_hook_on_nonleaf"),
    ("RuntimeError", "you can only change requires_grad flags of leaf variables",
     "requires_grad_off_nonleaf"),
    ("TypeError", "(torch.nn.Parameter or None required)", "tensor_attribute_is_parameter"),
    ("ValueError", "can't optimize a non-leaf Tensor", "output_can_be_leaf"),
    ("AttributeError", "'NoneType' object has no attribute 'zero_'", "zero_grad_fills_zeros"),
]


def diagnose_error(exc_type: str, message: str) -> str | None:
    """The misconception whose signature an exception carries, or None."""
    for kind, text, key in ERROR_SIGNATURES:
        if exc_type == kind and text in message:
            return key
    return None
