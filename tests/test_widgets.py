"""GraphExplorer and BackwardStepper driven from Python, with real torch."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course import widgets  # noqa: E402
from course.widgets import (  # noqa: E402
    SCENARIOS,
    BackwardStepper,
    Controls,
    GraphExplorer,
    run_scenario,
)


@pytest.fixture(autouse=True)
def live_widgets(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)


def kinds(graph) -> dict:
    return {n: d["kind"] for n, d in graph.nodes(data=True) if d["kind"] != "function"}


def test_builtin_scenarios_run():
    assert {"basics", "kitchen", "parcel", "sequential"} <= set(SCENARIOS)
    for name in SCENARIOS:
        run = run_scenario(name, Controls(backward=True))
        assert run.output.requires_grad and not run.messages, name


def test_kitchen_recipe_adds_the_water_torch_forgets():
    run = run_scenario("kitchen")
    assert run.graph.nodes["water"]["kind"] == "constant"
    assert run.graph.edges["water", "add"]["recovered"]


def test_a_module_input_is_drawn_into_the_first_layer_before_and_after_backward():
    """x in y = model(x) enters the first Linear (torch saved it there); the recipe must not
    also draw it into the model's last operation, nor lose it when backward frees it."""
    for backward in (False, True):
        g = run_scenario("sequential", Controls(backward=backward)).graph
        (consumer,) = list(g.successors("x"))
        first_linear = next(n for n, d in g.nodes(data=True)
                            if d.get("torch_class") == "AddmmBackward0"
                            and not any(g.nodes[p].get("torch_class") == "ReluBackward0"
                                        for p in g.predecessors(n)))
        assert consumer == first_linear, backward
        if backward:
            assert g.nodes["model.0.weight"]["grad"] is not None


def test_toggling_requires_grad_changes_model_and_picture():
    ex = GraphExplorer("basics", theme="logistics")
    png, table = ex.png, ex.controls["requires_grad"]["a"]
    assert kinds(ex.run.graph)["a"] == "parameter"
    table_before = ex.table.value
    table.value = False  # what a click on the toggle does
    assert ex.state.requires_grad["a"] is False
    assert kinds(ex.run.graph)["a"] == "constant"
    assert not ex.run.tensors["a"].requires_grad and ex.run.tensors["c"].requires_grad
    assert ex.png != png and ex.table.value != table_before
    assert "ordinary parcel" in ex.table.value


def test_backward_button_fills_grads_like_torch():
    ex = GraphExplorer("basics")
    ex.controls["backward"].value = True
    assert ex.run.tensors["a"].grad.item() == 21.0
    assert ex.run.graph.nodes["a"]["grad"].item() == 21.0
    assert "21" in ex.table.value


def test_detach_no_grad_retain_and_hook_controls():
    ex = GraphExplorer("basics")
    ex.controls["detach"].value = "c"
    ex.controls["backward"].value = True
    assert kinds(ex.run.graph)["c"] == "constant"
    assert ex.run.tensors["a"].grad.item() == 15.0  # only the d = a*b route is left: c * b
    ex.controls["detach"].value = widgets.NONE
    ex.controls["no_grad"].value = "d"
    assert not ex.run.tensors["d"].requires_grad and ex.run.tensors["a"].grad.item() == 6.0
    ex.controls["no_grad"].value = widgets.NONE
    ex.controls["retain"].value = "c"
    assert ex.run.graph.nodes["c"]["retains_grad"] and ex.run.tensors["c"].grad.item() == 6.0
    png = ex.png
    ex.controls["hook"].value = "d"
    assert ex.run.graph.nodes["d"]["has_hooks"] and ex.png != png
    assert [(n, g.item()) for n, g in ex.run.hook_seen] == [("d", 5.0)]
    assert "saw the efficiency report (gradient) [5.0]" in ex.status_html.value  # logistics
    ex.set(theme="technical")
    assert "saw gradient [5.0]" in ex.status_html.value


def test_torch_errors_become_messages():
    ex = GraphExplorer("basics")
    ex.set(requires_grad={"a": False, "b": False}, backward=True)
    assert "does not require grad" in ex.status()
    ex.set(hook="a")  # a hook on a tensor that does not require grad
    assert "register_hook" in ex.status()


def test_kitchen_messages_use_kitchen_words():
    ex = GraphExplorer("kitchen", theme="kitchen")
    ex.set(hook="dough", backward=True)
    assert "tasting spoon (hook) on dough tasted the origin record (gradient)" in ex.status()
    ex.set(requires_grad={"flour": False}, hook=widgets.NONE)
    status = ex.status()
    assert "Nothing to trace back" in status and "market ingredient" in status
    assert "does not require grad" in status  # torch's own words are kept
    ex.set(hook="water")
    assert "tasting spoon (hook)" in ex.status() and "bottled sauce" in ex.status()
    bs = BackwardStepper("kitchen", theme="kitchen")
    assert "semi-finished dish" in bs.describe(1)
    assert "a market ingredient" in bs.describe(len(bs.events))


def test_controls_are_checkboxes_as_the_lessons_say_tick():
    import ipywidgets as w

    ex = GraphExplorer("basics")
    assert all(isinstance(c, w.Checkbox) for c in ex.controls["requires_grad"].values())
    assert isinstance(ex.controls["backward"], w.Checkbox)


def test_picture_keeps_its_size_while_clicking():
    import io

    from PIL import Image

    from course import draw

    def size(png):
        return Image.open(io.BytesIO(png)).size

    ex = GraphExplorer("basics", theme="logistics")
    first = size(ex.png)
    for change in ({"requires_grad": {"a": False}}, {"backward": True}, {"detach": "c"},
                   {"no_grad": "d"}, {"retain": "c"}, {"hook": "d"},
                   {"requires_grad": {"a": True, "b": False}}, {"detach": widgets.NONE}):
        ex.set(**change)
        assert size(ex.png) == first, change
    assert draw.display_width(ex.png) == round(first[0] / 2)  # 2x pixels, shown at 1x
    bs = BackwardStepper("kitchen", theme="kitchen")
    sizes = {size(bs.goto(k).png) for k in range(len(bs.events) + 1)}
    assert len(sizes) == 1


def test_theme_switch_redraws():
    ex = GraphExplorer("kitchen", theme="kitchen")
    png = ex.png
    ex.controls["theme"].value = "technical"
    assert ex.theme == "technical" and ex.png != png
    assert "leaf, requires grad" in ex.table.value


def test_sequential_parameters_can_be_frozen():
    ex = GraphExplorer("sequential")
    ex.controls["requires_grad"]["model.0.weight"].value = False
    ex.set(backward=True)
    assert ex.run.tensors["model.0.weight"].grad is None
    assert ex.run.tensors["model.2.weight"].grad is not None


def test_figure_output_holds_exactly_one_png():
    ex = GraphExplorer("parcel")
    ex.set(backward=True)
    (output,) = ex.figure_out.outputs
    assert "image/png" in output["data"]


def test_dom_hooks_for_the_browser():
    ex = GraphExplorer("basics")
    assert "graph-explorer" in ex.widget._dom_classes
    assert "ge-requires-grad-a" in ex.controls["requires_grad"]["a"]._dom_classes
    assert "ge-backward" in ex.controls["backward"]._dom_classes
    assert "ge-table" in ex.table._dom_classes and "ge-figure" in ex.figure_out._dom_classes
    bs = BackwardStepper("basics")
    assert "bs-next" in bs.buttons["next"]._dom_classes


def torch_order(scenario):
    """The backward order, recorded independently with pre-hooks on every node."""
    run = run_scenario(scenario)
    seen, todo, order = set(), [run.output.grad_fn], []
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        fn.register_prehook(lambda go, fn=fn: order.append(type(fn).__name__))
        todo.extend(n for n, _ in fn.next_functions)
    run.output.backward()
    return order, run


@pytest.mark.parametrize("scenario", ["basics", "kitchen", "parcel", "sequential"])
def test_stepper_order_is_torchs(scenario):
    bs = BackwardStepper(scenario)
    order, run = torch_order(scenario)
    assert [e.torch_class for e in bs.events] == order
    # stored gradients are torch's .grad of leaves; nothing else is stored by default
    for e in bs.events:
        if e.stored_in:
            torch.testing.assert_close(bs.graph.nodes[e.stored_in]["grad"],
                                       run.tensors[e.stored_in].grad)


def test_stepper_steps_show_arrivals_and_storage():
    bs = BackwardStepper("basics", theme="logistics")
    assert bs.order == ["mul", "mul_1", "add", "accumulate(a)", "accumulate(b)"]
    first = bs.png
    bs.buttons["next"].click()
    assert bs.position == 1 and bs.png != first
    assert "sends 6 to c, 5 to d" in bs.label.value and "e.grad stays None" in bs.label.value
    for _ in range(10):
        bs.next()
    assert bs.position == 5 and "Stored in b.grad" in bs.describe()
    bs.prev()
    assert "Stored in a.grad" in bs.describe()
    bs.buttons["reset"].click()
    assert bs.position == 0


def test_stepper_with_retain_grad_stores_the_transit_gradient():
    bs = BackwardStepper("basics", controls=Controls(retain="c"))
    (add,) = [e for e in bs.events if e.node == "add"]
    assert add.stored_in == "c" and bs.graph.nodes["c"]["grad"].item() == 6.0


def test_static_twins(monkeypatch):
    ex = GraphExplorer("kitchen")
    fig = ex.static_figure()
    assert fig.axes and ex.static_png().startswith(b"\x89PNG")
    plt.close(fig)
    fig = BackwardStepper("kitchen").static_figure()
    assert any(t.get_text().startswith("#") for t in fig.axes[0].texts)  # step numbers
    plt.close(fig)


def test_static_mode_under_nbgrader(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert widgets.static_mode()
    InteractiveShell.instance()
    ex = GraphExplorer("basics")
    assert ex.widget is None  # no widgets built for autograding
    with capture_output() as captured:
        ex._ipython_display_()
    mimes = [set(o.data) for o in captured.outputs]
    assert {"image/png"} <= mimes[0] and "text/html" in mimes[1]
    assert not any("application/vnd.jupyter.widget-view+json" in m for m in mimes)


# -- the zh-CN edition ------------------------------------------------------------------------

def test_chinese_graph_explorer_and_stepper_speak_glossary_zh():
    from course import draw, themes
    from course.i18n import using

    with using("zh-CN"):
        ex = GraphExplorer("basics", theme="logistics")
        ex.set(hook="d", backward=True)
        assert "d上的质检探头（hook）看到了效率报告（梯度）：[5.0]" in ex.status_html.value
        theme = ex.controls["theme"]
        assert theme.value == "logistics" and theme.label == "快递分拣（logistics）"
        assert theme.description == "主题"
        assert ex.controls["detach"].label == "（无）" and ex.controls["detach"].value == widgets.NONE
        ex.set(requires_grad={"a": False, "b": False}, hook=widgets.NONE)
        status = ex.status()
        assert status.startswith("没有报告可回溯") and "does not require grad" in status  # torch's
        fig = ex.static_figure()
        try:
            texts = draw.legend_texts(fig)
            assert themes.GLOSSARY_ZH["logistics"]["constant"] in texts
        finally:
            plt.close(fig)
        bs = BackwardStepper("basics", theme="logistics")
        assert bs.describe(1) == ("第1/5步：mul（MulBackward0）收到1（e的梯度）；向c发送6，向d发送5。"
                                  "不存储：e.grad仍为None（它是临时中转站：梯度算出来、传下去，"
                                  "然后被丢弃）。")
        assert "存入a.grad（它是分拣中心）。" in bs.describe(4)
        assert bs.describe(0).startswith("反向传播（沿路线反向追踪效率报告）之前：")
        assert [b.description for b in bs.buttons.values()] == ["◀ 上一步", "下一步 ▶", "重置"]
    assert GraphExplorer("basics").controls["theme"].label == "logistics"  # English again
