"""One fresh process of ``bench_explorer.py --only kernel``: the first picture of a new kernel.

Run: ``python benchmarks/first_picture_child.py CASE [--baseline]`` (the benchmark does it).
Nothing is imported before the clock starts: torch, matplotlib and the course are timed
one after the other, then the first picture of ``CASE`` (an explorer built in static mode,
so no widget machinery), or with ``--baseline`` the same picture drawn the ordinary
matplotlib way (the process's first ``Figure``, ``Text`` and patch artists, ``savefig``;
the graph, its title and size are computed first, untimed, without drawing anything).
Prints one line of JSON: ``{step: [wall seconds, CPU seconds]}``.
"""

import json
import os
import sys
import time

CHAIN = """
from course.widgets import GraphExplorer, Scenario, Step
steps = [Step("x", "torch.randn(8)", "input", False)]
prev = "x"
for i in range(1, 6):
    steps.append(Step(f"w{i}", "torch.randn(8)", "input", True))
    steps.append(Step(f"h{i}", f"({prev} * w{i}).tanh()"))
    prev = f"h{i}"
steps.append(Step("out", f"{prev}.sum()"))
scenario = Scenario("chain5", "chain of 5 sorting centres", tuple(steps), "out")
"""

# case -> (the first picture, the graph/title/size of that picture computed without drawing)
CASES = {
    "RetainExplorer": (
        "import course\nex = course.RetainExplorer(theme='logistics')",
        "from course import draw, explorers\n"
        "ex = explorers.RetainExplorer.__new__(explorers.RetainExplorer)\n"
        "ex.theme, ex.state = 'logistics', dict(ex.DEFAULTS)\nex.compute()\n"
        "graph, title = ex.graph, ex.picture_title()\n"
        "size = draw.figure_size(graph, 'logistics', title,\n"
        "                        legend_extra=('gradient', 'retained', 'hooked'))\n"),
    "GraphExplorer, chain of 5": (
        CHAIN + "ex = GraphExplorer(scenario, theme='logistics')\n",
        CHAIN + "from course import widgets as W\n"
        "graph = W.run_scenario(scenario, W.Controls(requires_grad=W.scenario_inputs("
        "scenario))).graph\ntitle = scenario.title\n"
        "size = W.picture_size(scenario, theme='logistics')\n"),
}

BASELINE = """
import io
import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from course import draw
fig = Figure(dpi=draw.DISPLAY_DPI)
FigureCanvasAgg(fig)
draw._draw(graph, fig, None, "logistics", title, True, size=size)
with matplotlib.rc_context(draw.FAST_TEXT):
    fig.savefig(io.BytesIO(), format="png", dpi=draw.auto_dpi(size), facecolor="white")
"""


def main() -> None:
    case, baseline = sys.argv[1], "--baseline" in sys.argv[2:]
    os.environ["NBGRADER_EXECUTION"] = "1"  # static mode: the picture, no widget machinery
    times = {}

    def timed(what: str, source: str, env: dict) -> None:
        t, c = time.perf_counter(), time.process_time()
        exec(source, env)  # the benchmark's own code
        times[what] = (time.perf_counter() - t, time.process_time() - c)

    timed("import torch", "import torch", {})
    timed("import matplotlib", "import matplotlib\nmatplotlib.use('Agg')", {})
    timed("import the course", "import course, course.draw, course.explorers, course.widgets",
          {})
    env: dict = {}
    picture, setup = CASES[case]
    if baseline:
        exec(setup, env)  # the graph, title and size: nothing drawn yet
        timed("picture", BASELINE, env)
    else:
        timed("picture", picture, env)
    print(json.dumps(times))


if __name__ == "__main__":
    main()
