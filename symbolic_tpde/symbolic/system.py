"""The one immutable object passed from the symbolic layer to code generation.

An :class:`OdeSystem` is an explicit first-order ODE ``dy/dt = rhs(t, y, p)`` written with SymPy ``Symbol``s:

* ``states``: ordered state symbols.  For Gaussian moment ODEs the order is fixed: ``alpha_0 .. alpha_{d-1}``
  then the upper triangle of ``Sigma`` row by row (``Sigma_0_0, Sigma_0_1, .., Sigma_0_{d-1}, Sigma_1_1, ..``);
  see :func:`gaussian_state_layout`.
* ``params``: ordered parameter symbols; ``param_layout`` says how to fill the flat parameter vector ``p``
  from named arrays (``("heads", 0, "A")`` means ``weights.heads[0].params["A"]`` flattened row-major,
  ``("ffn", "W")`` the feed-forward matrix, and so on).
* ``rhs``: one SymPy expression per state, in the symbols of ``states``, ``params`` and ``time``.
* ``origin``: where it came from (variant, d, structure, options), for provenance and cache keys.

No numpy here: this module belongs to the symbolic layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import sympy as sp


@dataclass(frozen=True)
class ParamBlock:
    """A named block of the flat parameter vector: ``key`` addresses the array, ``shape`` its shape.

    The block occupies ``p[offset : offset + size]`` with the array flattened row-major.
    """

    key: tuple
    shape: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class OdeSystem:
    states: tuple[sp.Symbol, ...]
    params: tuple[sp.Symbol, ...]
    rhs: tuple[sp.Expr, ...]
    param_layout: tuple[ParamBlock, ...] = ()
    time: sp.Symbol = field(default_factory=lambda: sp.Symbol("t", real=True))
    origin: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.states) != len(self.rhs):
            raise ValueError(f"{len(self.states)} states but {len(self.rhs)} right-hand sides")
        names = [s.name for s in (*self.states, *self.params, self.time)]
        if len(set(names)) != len(names):
            raise ValueError("state, parameter and time symbol names must be distinct")
        if sum(b.size for b in self.param_layout) not in (0, len(self.params)):
            raise ValueError("param_layout does not cover the parameter vector")

    @property
    def n_states(self) -> int:
        return len(self.states)

    @property
    def n_params(self) -> int:
        return len(self.params)


def gaussian_state_layout(d: int) -> list[tuple[str, tuple[int, ...]]]:
    """Names of the flat Gaussian state: ``[("alpha", (i,)), ..., ("Sigma", (i, j)) for i <= j]``."""
    out: list[tuple[str, tuple[int, ...]]] = [("alpha", (i,)) for i in range(d)]
    out += [("Sigma", (i, j)) for i in range(d) for j in range(i, d)]
    return out


def gaussian_state_size(d: int) -> int:
    return d + d * (d + 1) // 2
