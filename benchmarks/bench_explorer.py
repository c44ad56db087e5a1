"""How long a GraphExplorer takes to react to a control change, for 10/30/60-node graphs.

Run: ``PYTHONPATH=. python benchmarks/bench_explorer.py [--repeats 15]``

The graph is a chain of sorting centres: ``h1 = tanh(x * w1)``, ``h2 = tanh(h1 * w2)``,
... ``out = h_k.sum()`` (5 nodes per layer). Each timed change toggles
``w1.requires_grad`` and runs ``backward()``, which is what a click does: re-run
the recipe with torch and build the graph (*build*), lay out and rasterise the
figure (*draw*), encode the PNG (*png*). The target is a median under 100 ms at
30 nodes for a state not drawn before. Three kinds of click are timed:

* *new state*: the PNG cache is emptied before each click, so the figure is drawn;
  the pictures of its texts, boxes and arrows and the layout were seen before (what
  most clicks are: a toggle changes a few marks and gradients, not every label);
* *nothing cached*: every cache of ``course.draw`` is emptied too (the first
  picture of a graph, or a state whose every label is new): the worst case;
* *first theme switch*: the theme dropdown changed to a theme not shown before
  (logistics -> kitchen with empty caches): role words, colours and legend are new,
  node names, operation names and gradients are not;
* *seen before*: a state already drawn, from the PNG cache.

The lesson explorers of ``course.explorers`` (02-07) are timed too (``--only lessons``):
each is built with every ``course.draw`` cache emptied (its *first picture*), then
clicked through a fixed round of control changes, each a state not drawn before; the
median is over the first picture and the clicks together.

Prints Markdown tables (docs/benchmarks.md keeps the figures). CPU time
(``time.process_time``) is the honest figure when other work shares the machine
(wall time then inflates); both are medians.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import matplotlib
import numpy as np

matplotlib.use("Agg")

from course import draw  # noqa: E402
from course import explorers as X  # noqa: E402
from course.widgets import Controls, GraphExplorer, Scenario, Step, run_scenario  # noqa: E402


def chain(layers: int) -> Scenario:
    """A chain scenario with ``5 * layers + 3`` graph nodes."""
    steps = [Step("x", "torch.randn(8)", "input", False)]
    prev = "x"
    for i in range(1, layers + 1):
        steps.append(Step(f"w{i}", "torch.randn(8)", "input", True))
        steps.append(Step(f"h{i}", f"({prev} * w{i}).tanh()"))
        prev = f"h{i}"
    steps.append(Step("out", f"{prev}.sum()"))
    return Scenario(f"chain{layers}", f"chain of {layers} sorting centres", tuple(steps), "out")


def empty_caches(pictures_too: bool) -> None:
    getattr(draw, "_PNG_CACHE", {}).clear()
    if pictures_too:
        for name in ("_STAMPS", "_LAYOUTS"):
            getattr(draw, name, {}).clear()


# A round of clicks per lesson explorer: (control, value), each a new state.
LESSON_CLICKS = {
    X.RetainExplorer: [("monitor", "after"), ("audits", 3), ("monitor", "none"),
                       ("audits", 0), ("monitor", "before"), ("audits", 2)],
    X.SkipPathExplorer: [("detach", True), ("blocks", 20), ("detach", False), ("blocks", 5),
                         ("detach", True), ("blocks", 15)],
    X.HookExplorer: [("action", "scale"), ("passes", 3), ("remove", True), ("action", "look"),
                     ("hook", False), ("passes", 1)],
    X.NoGradExplorer: [("cover", (1, 2)), ("cover", (1, 1)), ("cover", (3, 5)),
                       ("use", False), ("use", True), ("cover", (2, 4))],
    X.InplaceExplorer: [("edit", "before"), ("edit", "none"), ("inplace", False),
                        ("edit", "after"), ("edit", "before"), ("inplace", True)],
    X.DoctorExplorer: [("bug", "none"), ("bug", "sigmoid"), ("layers", 20),
                       ("bug", "no_grad"), ("bug", "dead_relu"), ("layers", 12)],
}


def bench_lessons(repeats: int) -> list[dict]:
    """Per lesson explorer: the first picture (caches empty) and a round of clicks.

    Each explorer is built once untimed first (imports, torch's first calls); then
    ``repeats`` times: empty every cache, build it (the first picture), click the round.
    Wall and CPU medians over the first pictures and the clicks together.
    """
    rows = []
    for cls, round_ in LESSON_CLICKS.items():
        cls(theme="logistics")  # warm-up: imports and torch's first calls, not timed
        first, first_cpu, every, cpu, nodes = [], [], [], [], 0
        for _ in range(repeats):
            empty_caches(True)
            steps = [(None, None), *round_]
            for i, (key, value) in enumerate(steps):
                t, c = time.perf_counter(), time.process_time()
                if i == 0:
                    ex = cls(theme="logistics")
                else:
                    ex.set(**{key: value})
                every.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
                if i == 0:
                    first.append(every[-1])
                    first_cpu.append(cpu[-1])
                nodes = max(nodes, len(ex.graph) if ex.graph is not None else 0)
        rows.append({"name": cls.__name__, "nodes": nodes or "chart (SVG)",
                     "median": statistics.median(every), "cpu": statistics.median(cpu),
                     "first": statistics.median(first), "worst": max(every),
                     "first_cpu": statistics.median(first_cpu)})
    return rows


def phases(scenario: Scenario, controls: Controls, dpi: int,
           size=None) -> tuple[float, float, float]:
    """Seconds for build, draw and PNG encoding of one change (the steps of render_png)."""
    t0 = time.perf_counter()
    run = run_scenario(scenario, controls)
    t1 = time.perf_counter()
    with draw._LOCK, matplotlib.rc_context(draw.FAST_TEXT):
        fig, canvas, ax = draw._canvas(dpi)
        try:
            draw._draw(run.graph, fig, ax, "logistics", scenario.title, True, stamps=True,
                       size=size)
            canvas.draw()
            t2 = time.perf_counter()
            draw._encode_png(np.asarray(canvas.buffer_rgba()), dpi)
            t3 = time.perf_counter()
        finally:
            draw._clear_canvas()
    return t1 - t0, t2 - t1, t3 - t2


def clicks(explorer: GraphExplorer, repeats: int, empty=None) -> tuple[float, float]:
    """Median wall and CPU seconds of ``repeats`` clicks, calling ``empty()`` before each."""
    wall, cpu = [], []
    for i in range(repeats):
        if empty is not None:
            empty()
        t, c = time.perf_counter(), time.process_time()
        explorer.set(requires_grad={"w1": i % 2 == 0})
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def bench(layers: int, repeats: int, dpi: int) -> dict:
    scenario = chain(layers)
    explorer = GraphExplorer(scenario, theme="logistics", dpi=dpi)
    explorer.set(backward=True)
    new = clicks(explorer, repeats, lambda: empty_caches(False))
    bare = clicks(explorer, repeats, lambda: empty_caches(True))
    seen = clicks(explorer, repeats)
    wall, cpu = [], []
    for _ in range(repeats):
        empty_caches(True)
        explorer.set(theme="logistics")
        t, c = time.perf_counter(), time.process_time()
        explorer.set(theme="kitchen")
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    explorer.set(theme="logistics")
    theme = statistics.median(wall), statistics.median(cpu)
    size = explorer.sizes[explorer.theme]
    used = dpi or draw.auto_dpi(size)
    parts = [phases(scenario, Controls(requires_grad={"w1": i % 2 == 0}, backward=True), used,
                    size) for i in range(repeats)]
    build, drawn, png = (statistics.median(p[k] for p in parts) for k in range(3))
    pixels = int.from_bytes(explorer.png[16:20]), int.from_bytes(explorer.png[20:24])
    return {"nodes": len(explorer.run.graph), "new": new, "bare": bare, "theme": theme,
            "seen": seen, "build": build, "draw": drawn, "png": png, "dpi": used,
            "pixels": pixels, "css": draw.display_width(explorer.png)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--dpi", type=int, default=None,
                        help="render dpi (default: the explorer's own, course.draw.auto_dpi)")
    parser.add_argument("--only", choices=("chain", "lessons"), default=None,
                        help="time only the chain explorers or only the lesson explorers")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = [] if args.only == "lessons" else [bench(layers, args.repeats, args.dpi)
                                              for layers in (2, 5, 11)]
    lessons = [] if args.only == "chain" else bench_lessons(args.repeats)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}, "
          f"matplotlib {matplotlib.__version__}, dpi {args.dpi or 'auto'}, {args.repeats} repeats\n")
    if lessons:
        print("| lesson explorer | graph nodes | median, first picture + clicks: CPU | same: wall "
              "| first picture: CPU | first picture: wall | worst (wall) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in lessons:
            print(f"| {r['name']} | {r['nodes']} | {r['cpu'] * 1e3:.0f} ms | "
                  f"{r['median'] * 1e3:.0f} ms | {r['first_cpu'] * 1e3:.0f} ms | "
                  f"{r['first'] * 1e3:.0f} ms | {r['worst'] * 1e3:.0f} ms |")
        print()
    if not rows:
        return
    print("| nodes | new state: CPU | new state: wall | nothing cached: CPU | nothing cached: "
          "wall | first theme switch: CPU | first theme switch: wall | seen before (wall) "
          "| build | draw | PNG encode | PNG pixels (dpi) | shown at (CSS px) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['nodes']} | {r['new'][1] * 1e3:.0f} ms | {r['new'][0] * 1e3:.0f} ms | "
              f"{r['bare'][1] * 1e3:.0f} ms | {r['bare'][0] * 1e3:.0f} ms | "
              f"{r['theme'][1] * 1e3:.0f} ms | {r['theme'][0] * 1e3:.0f} ms | "
              f"{r['seen'][0] * 1e3:.1f} ms | {r['build'] * 1e3:.1f} ms | "
              f"{r['draw'] * 1e3:.1f} ms | {r['png'] * 1e3:.1f} ms | "
              f"{r['pixels'][0]}x{r['pixels'][1]} ({r['dpi']}) | {r['css']} |")


if __name__ == "__main__":
    main()
