"""Equality by value for the result objects that hold arrays (solutions, particle runs).

A dataclass's generated ``==`` compares fields with ``==``, which for numpy arrays is an array, not a truth
value; these results therefore compared by accident or raised.  :func:`same` compares two values exactly:
arrays by shape, dtype and every entry (NaN equal to NaN, so a run that recorded a NaN still equals its
copy), floats with NaN equal to NaN, containers and dataclasses field by field (fields with
``compare=False`` are skipped).  A class opts in with ``__eq__ = value_eq`` in its body; such values are
results, not keys, and are not hashed.

>>> import numpy as np
>>> same({"t": np.array([0.0, np.nan])}, {"t": np.array([0.0, np.nan])})
True
>>> same(np.zeros(2), np.zeros(2, dtype=np.float32))
False
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


def same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` hold exactly the same value (module docstring)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return (a.shape == b.shape and a.dtype == b.dtype
                and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")))
    if isinstance(a, (float, np.floating)):
        return bool(a == b or (a != a and b != b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a) if f.compare)
    return bool(a == b)


def value_eq(self, other) -> bool:
    """``__eq__`` for a dataclass of arrays: :func:`same` field by field."""
    if type(other) is not type(self):
        return NotImplemented
    return all(same(getattr(self, f.name), getattr(other, f.name)) for f in dataclasses.fields(self) if f.compare)
