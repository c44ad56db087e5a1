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

Prints a Markdown table (docs/benchmarks.md keeps the figures). CPU time
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
    draw._PNG_CACHE.clear()
    if pictures_too:
        draw._STAMPS.clear()
        draw._LAYOUTS.clear()


def phases(scenario: Scenario, controls: Controls, dpi: int) -> tuple[float, float, float]:
    """Seconds for build, draw and PNG encoding of one change (the steps of render_png)."""
    t0 = time.perf_counter()
    run = run_scenario(scenario, controls)
    t1 = time.perf_counter()
    with draw._LOCK, matplotlib.rc_context(draw.FAST_TEXT):
        fig, canvas, ax = draw._canvas(dpi)
        try:
            draw._draw(run.graph, fig, ax, "logistics", scenario.title, True, stamps=True)
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
    parts = [phases(scenario, Controls(requires_grad={"w1": i % 2 == 0}, backward=True), dpi)
             for i in range(repeats)]
    build, drawn, png = (statistics.median(p[k] for p in parts) for k in range(3))
    return {"nodes": len(explorer.run.graph), "new": new, "bare": bare, "theme": theme,
            "seen": seen,
            "build": build, "draw": drawn, "png": png}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--dpi", type=int, default=72)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = [bench(layers, args.repeats, args.dpi) for layers in (2, 5, 11)]
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}, "
          f"matplotlib {matplotlib.__version__}, dpi {args.dpi}, {args.repeats} repeats\n")
    print("| nodes | new state: CPU | new state: wall | nothing cached: CPU | nothing cached: "
          "wall | first theme switch: CPU | first theme switch: wall | seen before (wall) "
          "| build | draw | PNG encode |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['nodes']} | {r['new'][1] * 1e3:.0f} ms | {r['new'][0] * 1e3:.0f} ms | "
              f"{r['bare'][1] * 1e3:.0f} ms | {r['bare'][0] * 1e3:.0f} ms | "
              f"{r['theme'][1] * 1e3:.0f} ms | {r['theme'][0] * 1e3:.0f} ms | "
              f"{r['seen'][0] * 1e3:.1f} ms | {r['build'] * 1e3:.1f} ms | "
              f"{r['draw'] * 1e3:.1f} ms | {r['png'] * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
