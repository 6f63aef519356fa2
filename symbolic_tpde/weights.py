"""Attention weights as validated, immutable data.

This is the one description of "which attention, with which parameters, at which time" shared by the
particle simulator, the symbolic engine, code generation and the CLI.  Conventions (Castin, Ablin, Carrillo,
Peyré, arXiv 2501.18322, §2; README "Conventions"): the kernel of softmax-type attention is
``exp(<A x, y>) = exp(yᵀ A x)`` with ``x`` the query and ``y`` the key; ``V`` acts after averaging.

The head kinds, their parameters, shapes and constraints are those of the registry,
:mod:`symbolic_tpde.registry.kinds` (``python -m symbolic_tpde.cli kinds`` lists them); this module only validates
against it.  Note the ``custom`` convention ``xᵀ B y``: the softmax kernel ``<A x, y> = xᵀ Aᵀ y`` is ``B = Aᵀ``.

A :class:`Weights` is the set of heads acting at one time (their fields are summed), plus an optional affine
feed-forward term ``W x + c`` and, for masked heads, an optional attention sink.  A :class:`Schedule` gives
the weights as a function of time: constant, piecewise constant (layers) or any Python callable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from .errors import InputError
from .registry import kinds as _kinds
from .inputs.checks import check_shape as _check_shape
from .inputs.checks import finite_array, spd


def _finite_array(value: Any, field_name: str, ndim: int) -> np.ndarray:
    return finite_array(value, field_name, ndim)


def _freeze(value: Any):
    """Hashable, exact image of a parameter value (floats by their bit pattern)."""
    if isinstance(value, np.ndarray):
        return (value.shape, value.tobytes())
    return value


def _readonly(value: Any):
    """``value`` with its array made read-only (an unpickled or deep-copied array is a fresh, writable copy)."""
    if isinstance(value, np.ndarray):
        value.setflags(write=False)
    return value


class Head:
    """One attention head: its kind and its validated parameters, immutable, with ``==`` and ``hash``.

    ``params``: the parameters as given (read-only numpy arrays / floats, a read-only mapping), in the
    registry's layout order (:func:`symbolic_tpde.registry.kinds.head_param_specs`).  ``effective``: the kind's
    canonical parameters, with a structured head's ``A = KᵀQ/√k`` and ``V = WO V`` formed numerically (what
    the particle fields and numeric oracles use).  ``form``: the names and shapes of ``params`` (what the
    symbolic derivation depends on).

    >>> import numpy as np
    >>> h = make_head("softmax", A=np.eye(2), V=-np.eye(2))
    >>> h, h.d, h == make_head("softmax", A=np.eye(2), V=-np.eye(2))
    (Head('softmax': A[2, 2], V[2, 2]), 2, True)
    """

    __slots__ = ("kind", "params", "effective", "form", "_hash")

    def __init__(self, kind: str, params: Mapping[str, Any]):
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "params", MappingProxyType(dict(params)))
        object.__setattr__(self, "form", tuple((k, tuple(np.shape(v))) for k, v in params.items()))
        eff = dict(params)
        if "Q" in params and "A" in _kinds.get(kind).names:
            k = params["Q"].shape[0]
            A = params["K"].T @ params["Q"] / math.sqrt(k)
            A.setflags(write=False)
            eff["A"] = A
            del eff["Q"], eff["K"]
        if "WO" in params:
            Vf = params["WO"] @ params["V"]
            Vf.setflags(write=False)
            eff["V"] = Vf
            del eff["WO"]
        object.__setattr__(self, "effective", MappingProxyType(eff))
        object.__setattr__(self, "_hash", hash((kind, tuple((k, _freeze(v)) for k, v in params.items()))))

    def __setattr__(self, name, value):
        raise AttributeError("Head is immutable")

    # pickle / deepcopy: the kind and the parameters; the rest (effective, form, the per-process salted hash)
    # is rebuilt by __init__ in the receiving process
    def __getstate__(self):
        return self.kind, dict(self.params)

    def __setstate__(self, state) -> None:
        kind, params = state
        self.__init__(kind, {k: _readonly(v) for k, v in params.items()})

    def __eq__(self, other) -> bool:
        if not isinstance(other, Head):
            return NotImplemented
        return (self.kind == other.kind and self.form == other.form and self._hash == other._hash
                and all(_freeze(self.params[k]) == _freeze(other.params[k]) for k in self.params))

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}{list(s) if s else ''}" for k, s in self.form)
        return f"Head({self.kind!r}: {shapes})"

    @property
    def d(self) -> int:
        return int(self.params["V"].shape[1])

    def structure(self) -> tuple:
        """``(kind, ((name, shape), ...))``: the form the symbolic derivation depends on (one entry of
        :attr:`Structure.heads`)."""
        return (self.kind, self.form)


def make_head(kind: str, d: int | None = None, where: str = "", **params: Any) -> Head:
    """Validate and build a :class:`Head` from the registry entry of ``kind``.

    ``where`` prefixes field names in error messages (e.g. ``"heads[1]"``).  ``d`` is inferred from ``V`` when
    not given.  Unknown parameters, missing parameters, wrong shapes, NaN/Inf and a violated constraint (e.g.
    ``tau <= 0``) raise :class:`InputError` naming the field.  Structured heads: ``Q, K`` of shape ``(k, d)``
    instead of ``A`` (``A = KᵀQ/√k``) and an optional output block ``WO (d, v)`` before ``V (v, d)``.

    >>> import numpy as np
    >>> make_head("softmax", Q=np.eye(1, 2), K=np.eye(1, 2), V=np.eye(2)).effective["A"].tolist()
    [[1.0, 0.0], [0.0, 0.0]]
    >>> make_head("softmax", A=np.eye(2))
    Traceback (most recent call last):
    ...
    symbolic_tpde.errors.InputError: V: missing parameter (required for 'softmax' heads)
    """
    pre = f"{where}." if where else ""
    try:
        spec = _kinds.get(kind)
    except KeyError:
        raise InputError(f"{pre}attention", f"unknown variant {kind!r}; expected one of {sorted(_kinds.KINDS)}") from None
    given = {k for k, v in params.items() if v is not None}
    specs = _kinds.head_param_specs(kind, given)
    allowed = {p.name for p in specs}
    alternatives = set(spec.names)
    if "A" in spec.names:
        alternatives |= {p.name for p in _kinds.STRUCTURED_A}
    if "V" in spec.names:
        alternatives.add(_kinds.OUTPUT_BLOCK.name)
    for key in params:
        if key not in allowed:
            if key in alternatives:
                raise InputError(f"{pre}{key}", f"cannot be combined with the other parameters given for this "
                                 f"{kind!r} head (give A, or Q and K)")
            raise InputError(f"{pre}{key}", f"unknown parameter for {kind!r} heads; allowed: {sorted(alternatives)}")
    for p in specs:
        if p.required and (p.name not in params or params[p.name] is None):
            raise InputError(f"{pre}{p.name}", f"missing parameter (required for {kind!r} heads)")
    if "V" not in params or params["V"] is None:
        raise InputError(f"{pre}V", f"missing parameter (required for {kind!r} heads)")
    V = _finite_array(params["V"], f"{pre}V", 2)
    if d is None:
        d = V.shape[1]
    dims: dict[str, int] = {"d": int(d)}
    out: dict[str, Any] = {}
    for p in specs:
        fname = f"{pre}{p.name}"
        value = params.get(p.name)
        if p.block == "scalar":
            if value is None:
                if p.default is None or p.default == "zero":
                    raise InputError(fname, "missing parameter")
                value = p.default
            val = float(_finite_array(value, fname, 0))
            if p.violation(val):
                raise InputError(fname, p.violation(val))
            out[p.name] = val
            continue
        ndim = len(p.shape)
        if value is None:
            shape = tuple(dims[s] for s in p.shape)
            arr = np.zeros(shape)
            arr.setflags(write=False)
        else:
            arr = _finite_array(value, fname, ndim)
            for axis, dim in enumerate(p.shape):
                if dim not in dims:
                    dims[dim] = int(arr.shape[axis])
            shape = tuple(dims[s] for s in p.shape)
            if arr.shape != shape:
                want = tuple(dims.get(s, s) for s in p.shape)
                raise InputError(fname, f"expected shape {want}, got {arr.shape}")
        out[p.name] = arr
    from .inputs.checks import MAX_DIM

    for key in ("k", "m", "v"):
        if dims.get(key, 1) < 1:
            raise InputError(f"{pre}{key}", "head dimension must be at least 1")
        if dims.get(key, 1) > MAX_DIM:
            raise InputError(f"{pre}{key}", f"head dimension {dims[key]} exceeds {MAX_DIM}")
    head = Head(kind, out)
    _check_scales(head, pre)
    return head


def _check_scales(head: Head, pre: str) -> None:
    """A temperature divides the kernel's matrices: ℓ2's ``τ`` gives ``(2/τ)KᵀK`` and ``(2/τ)KᵀQ``, Sinkhorn's
    ``ε`` gives ``A/ε`` (README Mathematics §2–3).  Those products obey the same bound as a user's entries,
    :data:`symbolic_tpde.inputs.checks.MAX_ENTRY` (the moment right-hand sides are polynomials of degree up to 4 in
    them), so a subnormal ``τ`` or ``ε`` is refused here, naming the parameter, instead of overflowing later."""
    from .inputs.checks import MAX_ENTRY

    e = head.effective
    for name, mats, factor in (("tau", ("K", "Q"), 2.0), ("epsilon", ("A",), 1.0)):
        if name not in e:
            continue
        big = max(float(np.abs(np.asarray(e[m], float)).max(initial=0.0)) for m in mats if m in e)
        scale = factor * big * (big if name == "tau" else 1.0)
        if scale > MAX_ENTRY * e[name]:
            raise InputError(f"{pre}{name}", f"{e[name]:.3g} is too small for these matrices: the kernel's "
                             f"entries would reach {scale:.3g}/{e[name]:.3g} > {MAX_ENTRY:.0e}")


class _ByValue:
    """``==`` and ``hash`` by the exact values of the (array) fields of a frozen dataclass, whose arrays stay
    read-only through pickling and ``copy.deepcopy``."""

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, _readonly(v))

    def _key(self):
        return tuple(_freeze(getattr(self, f)) for f in self.__dataclass_fields__)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False)
class FFN(_ByValue):
    """Affine feed-forward term ``W x + c`` added to the attention field.

    >>> import numpy as np
    >>> w = make_weights([make_head("softmax", A=np.eye(2), V=np.eye(2))], ffn={"W": -np.eye(2), "c": [0.0, 1.0]})
    >>> w.ffn.c.tolist()
    [0.0, 1.0]
    """

    W: np.ndarray
    c: np.ndarray


@dataclass(frozen=True, eq=False)
class Sink(_ByValue):
    """Attention sink for masked heads: an atom of mass ``mass`` at position ``s = 0`` located at ``x``.

    Every query attends to it with total weight ``mass`` (the remaining ``1 - mass`` is shared by the tokens),
    which keeps the causal normaliser away from zero (README Mathematics §2).

    >>> import numpy as np
    >>> w = make_weights([make_head("masked", A=np.eye(2), V=np.eye(2))], sink={"mass": 0.1, "x": [0.0, 0.0]})
    >>> w.sink.mass
    0.1
    """

    mass: float
    x: np.ndarray


@dataclass(frozen=True)
class Structure:
    """The *form* of a :class:`Weights`, not its values: ``d``, per head ``(kind, ((name, shape), ...))``, and
    whether there is a feed-forward term and a sink.  Weights of one structure share one symbolic derivation
    and one generated right-hand side: it keys the in-memory memos and the warm on-disk cache
    (:func:`symbolic_tpde.codegen.warm.structure_key`)."""

    d: int
    heads: tuple[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]], ...]
    ffn: bool = False
    sink: bool = False


@dataclass(frozen=True)
class Weights:
    """All parameters acting at one time: heads (fields summed), optional FFN and optional sink.

    >>> import numpy as np
    >>> w = make_weights([make_head("softmax", A=np.eye(2), V=np.eye(2)),
    ...                   make_head("softmax", A=-np.eye(2), V=np.eye(2))])
    >>> len(w.heads), w.d
    (2, 2)
    """

    heads: tuple[Head, ...]
    ffn: FFN | None = None
    sink: Sink | None = None

    @property
    def d(self) -> int:
        return self.heads[0].d

    def structure(self) -> Structure:
        """The form of these weights (what the derivation and the generated code depend on)."""
        return Structure(self.d, tuple(h.structure() for h in self.heads), self.ffn is not None, self.sink is not None)


def make_weights(heads: list[Head] | tuple[Head, ...], ffn: Mapping[str, Any] | FFN | None = None,
                 sink: Mapping[str, Any] | Sink | None = None, where: str = "") -> Weights:
    """Validate a set of heads (same ``d``), an optional FFN ``{"W", "c"}`` and an optional sink.

    >>> import numpy as np
    >>> w = make_weights([make_head("softmax", A=np.eye(2), V=np.eye(2))], ffn={"W": np.zeros((2, 2)), "c": [1.0, 0.0]})
    >>> w.d, len(w.heads), w.ffn is not None
    (2, 1, True)
    """
    pre = f"{where}." if where else ""
    if not heads:
        raise InputError(f"{pre}heads", "at least one head is required")
    d = heads[0].d
    for i, h in enumerate(heads):
        if h.d != d:
            raise InputError(f"{pre}heads[{i}].V", f"dimension {h.d} differs from head 0's {d}")
    ffn_obj = None
    if ffn is not None:
        if isinstance(ffn, FFN):
            ffn = {"W": ffn.W, "c": ffn.c}
        unknown = set(ffn) - {"W", "c"}
        if unknown:
            raise InputError(f"{pre}ffn.{sorted(unknown)[0]}", "unknown key; allowed: ['W', 'c']")
        W = _finite_array(ffn.get("W", np.zeros((d, d))), f"{pre}ffn.W", 2)
        _check_shape(W, (d, d), f"{pre}ffn.W")
        c = _finite_array(ffn.get("c", np.zeros(d)), f"{pre}ffn.c", 1)
        _check_shape(c, (d,), f"{pre}ffn.c")
        ffn_obj = FFN(W=W, c=c)
    sink_obj = None
    if sink is not None:
        if not any(h.kind == "masked" for h in heads):
            raise InputError(f"{pre}sink", "an attention sink only applies to masked heads")
        if isinstance(sink, Sink):
            sink = {"mass": sink.mass, "x": sink.x}
        unknown = set(sink) - {"mass", "x"}
        if unknown:
            raise InputError(f"{pre}sink.{sorted(unknown)[0]}", "unknown key; allowed: ['mass', 'x']")
        if "mass" not in sink:
            raise InputError(f"{pre}sink.mass", "missing parameter")
        mass = float(_finite_array(sink["mass"], f"{pre}sink.mass", 0))
        if not 0 < mass < 1:
            raise InputError(f"{pre}sink.mass", f"must lie in (0, 1), got {mass}")
        x = _finite_array(sink.get("x", np.zeros(d)), f"{pre}sink.x", 1)
        _check_shape(x, (d,), f"{pre}sink.x")
        sink_obj = Sink(mass=mass, x=x)
    return Weights(heads=tuple(heads), ffn=ffn_obj, sink=sink_obj)


@dataclass(frozen=True)
class Schedule:
    """Weights as a function of depth ``t``.

    * ``Schedule.constant(w)``;
    * ``Schedule.layers([(t_end_1, w_1), (t_end_2, w_2), ...])``: ``w_k`` acts on ``[t_end_{k-1}, t_end_k)``
      (``t_end_0 = 0``; the last layer also acts at and after its ``t_end``);
    * ``Schedule.from_callable(f)``: any Python callable ``t -> Weights`` (validated at each call).

    Calling the schedule, ``schedule(t)``, returns the :class:`Weights` in force at ``t``.  A schedule pickles
    (to a worker process) when its callable does: a module-level function, not a lambda.

    >>> import numpy as np
    >>> w1, w2 = (make_weights([make_head("softmax", A=a * np.eye(2), V=np.eye(2))]) for a in (1.0, -1.0))
    >>> s = Schedule.layers([(0.5, w1), (1.0, w2)])
    >>> s(0.25) == w1, s(0.75) == w2, s.breakpoints(1.0)
    (True, True, [0.5])
    """

    t_ends: tuple[float, ...] = ()
    weights: tuple[Weights, ...] = ()
    func: Callable[[float], Weights] | None = None

    @classmethod
    def constant(cls, w: Weights) -> "Schedule":
        return cls(t_ends=(math.inf,), weights=(w,))

    @classmethod
    def layers(cls, layers: list[tuple[float, Weights]]) -> "Schedule":
        if not layers:
            raise InputError("layers", "at least one layer is required")
        t_ends = tuple(float(t) for t, _ in layers)
        for i, t in enumerate(t_ends):
            if not (math.isfinite(t) and t > 0) or (i and t <= t_ends[i - 1]):
                raise InputError(f"layers[{i}].t_end", f"must be finite, > 0 and increasing, got {t}")
        ws = tuple(w for _, w in layers)
        for i, w in enumerate(ws):
            if w.structure() != ws[0].structure():
                raise InputError(f"layers[{i}]", "every layer must have the same heads, FFN and sink structure")
        return cls(t_ends=t_ends, weights=ws)

    @classmethod
    def from_callable(cls, func: Callable[[float], Weights]) -> "Schedule":
        return cls(func=func)

    @property
    def is_constant(self) -> bool:
        return self.func is None and len(self.weights) == 1

    def breakpoints(self, T: float) -> list[float]:
        """Interior layer boundaries in ``(0, T)``: integrators should stop and restart there."""
        return [t for t in self.t_ends[:-1] if 0 < t < T]

    def index(self, t: float) -> int:
        """Index of the layer in force at ``t`` (layered schedules only)."""
        for i, t_end in enumerate(self.t_ends):
            if t < t_end:
                return i
        return len(self.weights) - 1

    def __call__(self, t: float) -> Weights:
        if self.func is not None:
            w = self.func(t)
            if not isinstance(w, Weights):
                raise InputError("schedule", f"callable returned {type(w).__name__}, expected Weights")
            return w
        return self.weights[self.index(t)]


@dataclass(frozen=True, eq=False)
class Scenario(_ByValue):
    """A complete run description: weights schedule, Gaussian initial data ``N(alpha0, Sigma0)``, horizon.

    >>> import symbolic_tpde as st
    >>> scn = st.load_scenario("softmax_2d")
    >>> scn.attention, scn.d, scn.T, scn.weights(0.0).d
    ('softmax', 2, 1.0, 2)
    """

    attention: str
    d: int
    schedule: Schedule
    alpha0: np.ndarray
    Sigma0: np.ndarray
    T: float
    init: Any = None   # scenario.InitSpec of a non-Gaussian (or explicit) "init" block; None: N(alpha0, Sigma0)

    def weights(self, t: float = 0.0) -> Weights:
        return self.schedule(t)


def check_gaussian(alpha: Any, Sigma: Any, d: int, names: tuple[str, str] = ("alpha0", "Sigma0")) -> tuple[np.ndarray, np.ndarray]:
    """Validate a mean vector and an SPD covariance (:func:`symbolic_tpde.inputs.checks.spd`); returns
    read-only float arrays."""
    a = finite_array(alpha, names[0], 1, shape=(d,))
    return a, spd(Sigma, d, names[1])
