"""A write-code answer computes with torch exactly as in the learner's kernel, and cannot reach
the checker that judges it (autograder/restricted.py).

Each case is a learner function run the way the oracle runs one (compiled by
``restricted.compile_function``, executed in ``restricted.namespace()``), in this process: the
doors out must be refused (at compile time or when reached), and torch code of the kind the
lessons ask for must behave natively. No oracle is needed for this.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from autograder import restricted

#: code that must not run: each tries one way out of the answer's sandbox
REFUSED = {
    "import os": "import os\nreturn os.getpid()",
    "from os import write": "from os import write\nreturn write",
    "a module through torch": "return torch.os.getpid()",
    "a module through getattr": "return getattr(torch, 'o' + 's')",
    "a module through an import": "from torch import serialization\nreturn serialization",
    "a dotted import": "import torch.serialization as s\nreturn s",
    "torch._C": "return torch._C._set_grad_enabled",
    "sys through nn's modules": "return torch.nn.modules.module.sys",
    "os through random": "import random\nreturn random._os",
    "a function's globals": "g = lambda: 0\nreturn g.__globals__",
    "globals through getattr": "return getattr(torch.Tensor.backward, '__glob' + 'als__')",
    "a frame through a traceback": "try:\n    1 / 0\nexcept Exception as e:\n"
                                   "    return e.__traceback__",
    "a generator's frame": "g = (x for x in [1])\nreturn g.gi_frame",
    "subclasses of object": "return ().__class__.mro()[-1].__subclasses__()",
    "str.format reading attributes": "return '{0.__class__}'.format(1)",
    "str.format through getattr": "return getattr('{0}', 'format')(1)",
    "patching torch.Tensor": "torch.Tensor.is_leaf = property(lambda s: True)",
    "patching through setattr": "setattr(torch.Tensor, 'grad', None)",
    "patching a function's code": "torch.nn.functional.relu.__code__ = None",
    "a tensor's method replaced": "t = torch.ones(2)\nt.tolist = lambda: [9.0]\nreturn t",
    "a module's forward replaced": "m = nn.Linear(2, 1)\nm.forward = lambda x: x\nreturn m",
    "changing an object's class": "t = torch.ones(1)\nt.__class__ = nn.Parameter\nreturn t",
    "writing bytes to a file": "torch.zeros(2).numpy().tofile('/proc/self/fd/1')",
    "torch.save": "torch.save(torch.zeros(1), '/proc/self/fd/1')",
    "torch.compile": "return torch.compile(lambda x: x)",
    "torch.ops": "return torch.ops.aten.add",
    "a tensor subclass": "class Liar(torch.Tensor):\n    pass\nreturn Liar",
    "a class made by type()": "return type('X', (), {})",
    "a lying __eq__": "class A:\n    def __eq__(self, other):\n        return True\nreturn A()",
    "__torch_function__": "class M:\n    def __torch_function__(self, *a):\n        return 1\n"
                          "return M",
    "eval": "return eval('1')",
    "exec": "exec('x = 1')",
    "__import__": "return __import__('os')",
    "breakpoint": "breakpoint()",
    "the builtins": "return __builtins__",
    "a guard's name": "_getattr_ = getattr\nreturn 1",
    "inference mode left on": "def g():\n    with torch.inference_mode():\n        yield 1\n"
                              "it = g()\nnext(it)\nkeep.append(it)\nreturn 1",
}

#: torch code of the kind the lessons ask for: it runs, and gives what plain Python gives
NATIVE = {
    "a leaf and its grad": ("x = torch.tensor([1.0, 2.0], requires_grad=True)\n"
                            "(x * x).sum().backward()\nreturn x.grad.tolist()", [2.0, 4.0]),
    "the version counter": "x = torch.ones(2)\nx.add_(1)\nx.mul_(2)\nreturn x._version",
    "a saved tensor": ("x = torch.ones(2, requires_grad=True)\ny = x * x\n"
                       "return tuple(y.grad_fn._saved_self.shape)"),
    "grad mode left off": "torch.set_grad_enabled(False)\nreturn torch.is_grad_enabled()",
    "setting .grad and .data": ("p = nn.Parameter(torch.ones(2))\np.grad = torch.zeros(2)\n"
                                "p.grad += 1\np.data -= 0.5 * p.grad\nreturn p.tolist()"),
    "an nn.Module": ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                     "        self.fc = nn.Linear(2, 1)\n    def forward(self, x):\n"
                     "        return self.fc(x)\nreturn tuple(Net()(torch.ones(2)).shape)"),
    "a custom autograd Function": (
        "class Sq(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n        return x * x\n    @staticmethod\n"
        "    def backward(ctx, g):\n        (x,) = ctx.saved_tensors\n        return 2 * x * g\n"
        "x = torch.ones(2, requires_grad=True)\nSq.apply(x).sum().backward()\n"
        "return x.grad.tolist()"),
    "a hook and a dict in a lambda": (
        "seen = {}\nx = torch.ones(2, requires_grad=True)\ny = x * 3\n"
        "y.register_hook(lambda g: seen.__setitem__('y', g.tolist()))\ny.sum().backward()\n"
        "return seen"),
    "in place on items and names": ("x = torch.zeros(3)\nx[0] += 5\nn = 1\nn += 2\n"
                                    "return x.tolist() + [n]"),
    "nonlocal": ("n = 0\ndef inc():\n    nonlocal n\n    n += 1\ninc()\ninc()\nreturn n"),
    "a private helper": "def _twice(v):\n    return 2 * v\nreturn _twice(3)",
    "no_grad as a decorator": ("@torch.no_grad()\ndef g(x):\n    return x * 2\n"
                               "return g(torch.ones(1, requires_grad=True)).requires_grad"),
    "an optimizer step": ("p = nn.Parameter(torch.ones(2))\nopt = torch.optim.SGD([p], lr=0.1)\n"
                          "p.sum().backward()\nopt.step()\nreturn [round(v, 4) for v in p.tolist()]"),
    "clipping with nn.utils": ("p = nn.Parameter(torch.ones(2))\n(p * 10).sum().backward()\n"
                               "torch.nn.utils.clip_grad_norm_([p], 1.0)\n"
                               "return round(p.grad.norm().item(), 4)"),
    "allowed modules": ("import math, copy, itertools, functools, collections\n"
                        "return [math.sqrt(4), len(list(itertools.chain([1], [2])))]"),
    "print": "print('hello')\nreturn 1",
    "a walrus and star-args": ("def g(*a, **k):\n    return len(a) + len(k)\n"
                               "return g(*[1, 2], **{'x': 1}) if (n := 3) else n"),
}


#: builtins an answer does not get at all
MISSING = ["open", "vars", "globals", "locals", "input", "memoryview", "dir",
           "compile", "exit", "quit", "help"]


def _run(body: str):
    source = "def answer():\n" + textwrap.indent(body, "    ") + "\n"
    code = restricted.compile_function(source, "<your function answer>")
    ns = restricted.namespace()
    ns["keep"] = []
    exec(code, ns)  # noqa: S102 -- the restricted code under test
    try:
        return ns["answer"]()
    finally:
        for kept in ns["keep"]:  # a generator left suspended in a `with`: close it here
            kept.close()


def _plain(body: str):
    ns = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "keep": []}
    exec("def answer():\n" + textwrap.indent(body, "    ") + "\n", ns)  # noqa: S102
    return ns["answer"]()


@pytest.mark.parametrize("body", REFUSED.values(), ids=REFUSED.keys())
def test_a_way_out_is_refused(body):
    grad = torch.is_grad_enabled()
    with pytest.raises(restricted.RefusedCode) as refused:
        _run(body)
    assert "the checker runs your function with torch's computations" in str(refused.value)
    assert torch.is_grad_enabled() == grad


@pytest.mark.parametrize("name", MISSING)
def test_builtins_that_reach_out_are_not_there(name):
    with pytest.raises(NameError, match=name):
        _run(f"return {name}")


@pytest.mark.parametrize("case", NATIVE.values(), ids=NATIVE.keys())
def test_torch_code_runs_as_in_the_kernel(case):
    body, want = case if isinstance(case, tuple) else (case, None)
    grad = torch.is_grad_enabled()
    try:
        got, plain = _run(body), _plain(body)
    finally:
        torch.set_grad_enabled(grad)
    assert got == plain
    if want is not None:
        assert got == want


def test_a_refusal_names_the_line_and_what_an_answer_may_use():
    with pytest.raises(restricted.RefusedCode) as refused:
        restricted.compile_function("def f(x):\n    y = x\n    return y.__dict__\n", "<f>")
    text = str(refused.value)
    assert "line 3 of your function (`return y.__dict__`)" in text  # def is line 1
    assert "`math`" in text


def test_a_syntax_error_is_pythons_own():
    with pytest.raises(SyntaxError):
        restricted.compile_function("def f(:\n    pass\n", "<f>")


def test_a_refused_attribute_reads_as_missing_to_hasattr():
    assert _run("return [hasattr(torch, 'os'), hasattr(torch, 'tensor')]") == [False, True]


def test_a_failing_line_is_counted_as_the_cell_shows_it_and_quoted():
    """Lesson 01 Q11's starter fails on its fifth line (``def`` is line 1, as in the cell)."""
    from autograder.lessons.l01_leaves import Q11Typo
    from autograder.questions import LearnerCodeError, LearnerFunction, run_learner

    with pytest.raises(LearnerCodeError) as failed:
        run_learner(LearnerFunction(name="weigh_parcels", source=Q11Typo.starter))
    assert Q11Typo.starter.splitlines()[4].strip() == "(w * weights).sum().backward()"
    assert "(line 5 of your function: `(w * weights).sum().backward()`)" in str(failed.value)
