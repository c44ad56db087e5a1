"""Turn a learner's answer into plain JSON for the oracle process, and back.

Answers cross a process boundary (see :mod:`autograder.client`), so they travel
as data, never as live objects: booleans, numbers, strings, ``None``, lists,
dicts, ``...`` (an unanswered blank), exception classes (``RuntimeError``),
tensors (as their values) and functions (as their source code, which the oracle
runs in a clean process).
"""

from __future__ import annotations

import inspect
import math
import textwrap
from typing import Any

ELLIPSIS = {"__ellipsis__": True}


class AnswerEncodingError(ValueError):
    """The answer holds something that cannot be sent to the checker."""


def _function_source(fn: Any) -> str:
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError) as exc:  # defined in exec() or a lambda in a list
        raise AnswerEncodingError(
            f"could not read the source of {getattr(fn, '__name__', fn)!r}: define it with "
            "`def` in a notebook cell and run that cell again"
        ) from exc
    return textwrap.dedent(source)


def encode(value: Any, _depth: int = 0) -> Any:
    """Encode ``value`` as JSON-compatible data (see the module docstring)."""
    if _depth > 20:
        raise AnswerEncodingError("the answer is nested too deeply")
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return {"__float__": repr(value)}
        return value
    if value is Ellipsis:
        return dict(ELLIPSIS)
    if isinstance(value, type) and issubclass(value, BaseException):
        return {"__exception__": value.__name__}
    if isinstance(value, BaseException):
        return {"__exception__": type(value).__name__, "message": str(value)}
    if isinstance(value, list | tuple):
        return [encode(v, _depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v, _depth + 1) for k, v in value.items()}
    # Tensors and numpy values, without importing torch or numpy here.
    if hasattr(value, "tolist") and hasattr(value, "dtype"):
        return {"__tensor__": encode(value.tolist(), _depth + 1), "dtype": str(value.dtype)}
    if inspect.isfunction(value):
        return {"__function__": _function_source(value), "name": value.__name__}
    raise AnswerEncodingError(
        f"answers must be plain values (True/False, numbers, strings, None, lists, dicts, "
        f"tensors, exception classes or functions), not {type(value).__name__}"
    )


def decode(data: Any) -> Any:
    """Inverse of :func:`encode`, except that tensors and functions stay as descriptions.

    A tensor decodes to :class:`TensorValue`, a function to :class:`LearnerFunction`;
    the question that receives them decides how to use them.
    """
    if isinstance(data, list):
        return [decode(v) for v in data]
    if isinstance(data, dict):
        if data.get("__ellipsis__") is True and len(data) == 1:
            return Ellipsis
        if "__float__" in data:
            return float(data["__float__"])
        if "__exception__" in data:
            return ExceptionName(data["__exception__"])
        if "__tensor__" in data:
            return TensorValue(decode(data["__tensor__"]), data.get("dtype", ""))
        if "__function__" in data:
            return LearnerFunction(data["__function__"], data.get("name", ""))
        return {k: decode(v) for k, v in data.items()}
    return data


class ExceptionName(str):
    """The name of an exception class given as an answer (``RuntimeError``)."""


class TensorValue:
    """The values of a tensor given as an answer."""

    def __init__(self, values: Any, dtype: str):
        self.values = values
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"tensor({self.values!r})"


class LearnerFunction:
    """Source code of a function the learner wrote; the oracle runs it in a clean process."""

    def __init__(self, source: str, name: str):
        self.source = source
        self.name = name

    def __repr__(self) -> str:
        return f"<learner function {self.name}>"
