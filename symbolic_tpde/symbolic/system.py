"""The one immutable object passed from the symbolic layer to code generation.

An :class:`OdeSystem` is an explicit first-order ODE ``dy/dt = rhs(t, y, p)`` written with SymPy ``Symbol``s:

* ``states``: ordered state symbols.  For Gaussian moment ODEs the order is fixed: ``alpha_0 .. alpha_{d-1}``
  then the upper triangle of ``Sigma`` row by row (``Sigma_0_0, Sigma_0_1, .., Sigma_0_{d-1}, Sigma_1_1, ..``);
  see :func:`symbolic_tpde.registry.layout.state_index`.
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


@dataclass(frozen=True, eq=False)
class OdeSystem:
    """``dy/dt = rhs(t, y, p)`` (module docstring).  Compared and hashed by identity: the right-hand sides
    are DAGs whose trees can be astronomically large, so nothing here walks them implicitly.

    ``conditions``: SymPy relations in the states and parameters under which the derivation holds (the
    Gaussian tilt exists: ``LDLᵀ`` pivots of ``N = Σ - Σ(R + Rᵀ)Σ`` positive, i.e. ``Σ⁻¹ - R - Rᵀ ≻ 0``).
    ``existence``: per head with a key-quadratic block, the symmetric matrix ``R + Rᵀ`` (in the parameters and
    time) for numerical checks.  ``steps``: the derivation as checked :class:`~.steps_eq.Step` objects, built on first
    access from ``derivation(system)`` (checking takes seconds; code that never asks does not pay).

    Pickles and deep-copies (to a worker process, a Dask cluster) when ``derivation`` is a module-level
    function or a ``functools.partial`` of one, as the package's are; the copy is a new system (compared by
    identity) with the same content key (:func:`symbolic_tpde.codegen.compile.system_key`).

    >>> import sympy as sp
    >>> u, k = sp.symbols("u k")
    >>> s = OdeSystem(states=(u,), params=(k,), rhs=(-k * u,))
    >>> s.n_states, s.n_params, s == s
    (1, 1, True)
    """

    states: tuple[sp.Symbol, ...]
    params: tuple[sp.Symbol, ...]
    rhs: tuple[sp.Expr, ...]
    param_layout: tuple[ParamBlock, ...] = ()
    time: sp.Symbol = field(default_factory=lambda: sp.Symbol("t", real=True))
    origin: Mapping[str, Any] = field(default_factory=dict)
    conditions: tuple = ()
    existence: tuple = ()
    derivation: Any = field(default=None, repr=False)   # callable (system) -> Steps or a Derivation (lazy)
    _memo: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.states) != len(self.rhs):
            raise ValueError(f"{len(self.states)} states but {len(self.rhs)} right-hand sides")
        names = [s.name for s in (*self.states, *self.params, self.time)]
        if len(set(names)) != len(names):
            raise ValueError("state, parameter and time symbol names must be distinct")
        if sum(b.size for b in self.param_layout) not in (0, len(self.params)):
            raise ValueError("param_layout does not cover the parameter vector")

    @property
    def steps(self) -> tuple:
        """The checked derivation steps (:mod:`.steps`), built on first access and kept."""
        if "steps" not in self._memo:
            out = self.derivation(self) if self.derivation is not None else ()
            self._memo["document"] = out if hasattr(out, "steps") else None     # a whole Derivation
            self._memo["steps"] = tuple(out.steps if hasattr(out, "steps") else out)
        return self._memo["steps"]

    @property
    def n_states(self) -> int:
        return len(self.states)

    @property
    def n_params(self) -> int:
        return len(self.params)

    def jacobian(self) -> sp.Matrix:
        """``∂rhs_i/∂state_j`` (SymPy, built on first call and kept)."""
        if "jac" not in self._memo:
            self._memo["jac"] = sp.Matrix(self.rhs).jacobian(list(self.states))
        return self._memo["jac"]

    def latex(self, **kw) -> str:
        """LaTeX ``align*`` fragment of the equations (:func:`symbolic_tpde.documents.printing.render_system`)."""
        from ..documents.printing import render_system

        if kw.get("standalone") and self.origin.get("document"):    # the derivation as a document
            return self.derivation(self, render=True)
        return render_system(self, "latex", **kw)

    def _repr_latex_(self) -> str:
        inner = self.latex().split("\\begin{align*}")[-1].split("\\end{align*}")[0]
        return "$$\\begin{aligned}" + inner + "\\end{aligned}$$"

    def __repr__(self) -> str:
        o = dict(self.origin)
        return (f"OdeSystem({o.get('variant', '?')!r}, d={o.get('d', '?')}: {self.n_states} states, "
                f"{self.n_params} params, time {self.time.name}, {len(self.conditions)} conditions, "
                f"steps {'on demand' if 'steps' not in self._memo else len(self.steps)})")
