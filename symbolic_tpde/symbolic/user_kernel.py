"""The front door for a user's kernel: ``derive_kernel(log_kernel, query, key, value=None, *, time=None)``.

For a softmax-normalised attention with kernel ``k(x, y)`` and value matrix ``V``,
``Γ_μ(x) = V ∫ y k(x, y) dμ(y) / ∫ k(x, y) dμ(y)`` (Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §2-3).
On ``μ = N(α, Σ)`` the normalised measure ``k(x, ·) N(·; α, Σ)`` is the "tilted" measure.  The engine decides
from the kernel itself, by algebra, whether the tilt is Gaussian with an ``x``-affine mean (then Gaussians are
preserved and the moment ODE ``dα/dt = b + Jα``, ``dΣ/dt = JΣ + ΣJᵀ`` follows) and otherwise proves that it is
not, with a witness:

1. ``h(x, y) = log k(x, y) - log k(x, 0)`` (terms in ``x`` alone cancel in the normalisation);
2. ``h`` must be a polynomial of degree ``<= 2`` in ``y``: ``h = yᵀR y + g(x)ᵀy`` with ``R`` independent of
   ``x`` and ``g`` affine in ``x``, ``g(x) = Bᵀx + r``;
3. then the tilt is ``N(m(x), S)``, ``S = (Σ⁻¹ - R - Rᵀ)⁻¹`` (exists iff ``Σ⁻¹ - R - Rᵀ ≻ 0``),
   ``m(x) = S(Σ⁻¹α + r + Bᵀx)``, computed without inverting ``Σ`` by :func:`.tilt.tilt_explicit`; the
   field is ``Γ = V m(x)``: ``b = V m(0)``, ``J = V ∂m/∂x``.

When step 2 fails, :class:`symbolic_tpde.NotGaussianPreserving` is raised with a :class:`KernelWitness`: at
a base point ``x₀`` (``0`` first) along a direction ``e`` the second derivative ``∂²Γ(x₀ + te)/∂t²`` is computed
exactly from the Taylor coefficients ``ℓ₁, ℓ₂`` of ``log k(x₀ + te, y) = ℓ₀(y) + tℓ₁(y) + t²ℓ₂(y) + …`` and
Gaussian moments of the tilt at ``x₀`` (which must be Gaussian: ``ℓ₀`` quadratic in ``y``; with ``f = E₀[y e^Δ]``, ``g = E₀[e^Δ]``, ``(f/g)'' = f'' - 2f'g' - f g'' + 2f g'²`` at ``t = 0``,
``f' = E₀[yℓ₁]``, ``f'' = E₀[y(2ℓ₂ + ℓ₁²)]``, ``g' = E₀[ℓ₁]``, ``g'' = E₀[2ℓ₂ + ℓ₁²]``), in exact rational
arithmetic at stated rational parameter values; a non-zero value proves that ``Γ`` is not affine in ``x``.  For
``d <= 3`` the same number is recomputed by an independent route (tensor Gauss-Hermite quadrature of the
definition of ``Γ`` and a central second difference in ``t``).

Parameters of the returned system: every free symbol of ``log_kernel`` and ``value`` other than the entries of
``query`` and ``key`` and ``time``, **sorted by name** (documented order; ``system.params``).

The returned system carries its quadratic form (``system.origin["quadratic"]``, a :class:`KernelForm`: ``B, R,
r, V``), so the user's kernel, given numbers for its symbols, runs as particles and on the grid as a ``custom``
head (:func:`kernel_schedule`), the same registry form the built-in kinds use.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import sympy as sp

from ..errors import InputError, NotGaussianPreserving
from .kernels import TiltForm, analyse_log_kernel
from .system import OdeSystem

__all__ = ["derive_kernel", "KernelWitness", "KernelForm", "kernel_form", "kernel_schedule", "analyse_log_kernel",
           "TiltForm"]


@dataclass(frozen=True)
class KernelWitness:
    """Evidence that a user kernel does not preserve Gaussians (see the module docstring).

    >>> import sympy as sp
    >>> from symbolic_tpde import NotGaussianPreserving
    >>> x, y = sp.Matrix(sp.symbols("x0 x1")), sp.Matrix(sp.symbols("y0 y1"))
    >>> try:
    ...     derive_kernel((x.T * y)[0] ** 2, x, y)
    ... except NotGaussianPreserving as exc:
    ...     print(type(exc.witness).__name__, exc.witness.certified)
    KernelWitness True
    """

    reason: str
    log_kernel: sp.Expr
    point: dict = field(default_factory=dict)       # parameter values, alpha, Sigma, direction
    value: tuple = ()                               # exact ∂²Γ(te)/∂t² at t = 0 (rationals), or ()
    independent: tuple = ()                         # the same by quadrature + finite differences (floats)
    certified: bool = False                         # exact value non-zero
    method: str = ""

    def summary(self) -> str:
        if not self.value:
            return f"user kernel: NOT Gaussian-preserving. {self.reason}"
        pt = ", ".join(f"{k} = {v}" for k, v in self.point.items())
        ind = (f"; independent quadrature {[float(f'{v:.6g}') for v in self.independent]}"
               if self.independent else "")
        x0 = self.point.get("x0")
        at = "x = 0" if not x0 or all(v == 0 for v in x0) else f"x = x0 = {x0}"
        return (f"user kernel: NOT Gaussian-preserving. {self.reason} Witness: at {at} the field's second "
                f"derivative along e, d^2 Gamma(x0 + t e)/dt^2 at t = 0, is {list(self.value)} (exact){ind}, at "
                f"{pt}; it is non-zero, so Gamma is not affine in x. " + (
                    "In d = 1 this proves that N(alpha, Sigma) leaves the Gaussian family (a non-affine field moves "
                    "a Gaussian out of the family at once: d rho/dt = rho q with q quadratic forces the flux of an "
                    "affine field)." if len(self.point.get("alpha", [0, 0])) == 1 else
                    "In d >= 2 a non-affine field alone does not prove that Gaussians leave the family (J x |x|^2, "
                    "J a quarter turn, leaves N(0, I) invariant): the tilt is not Gaussian with an affine mean, "
                    "so the moment ODE is not exact, but no certificate of non-preservation is given here."))

    def to_dict(self) -> dict[str, Any]:
        return {"variant": "user kernel", "gaussian_preserving": False, "reason": self.reason,
                "log_kernel": sp.sstr(self.log_kernel), "point": {k: str(v) for k, v in self.point.items()},
                "value": [str(v) for v in self.value], "independent_value": [float(v) for v in self.independent],
                "certified": self.certified, "method": self.method}


# ------------------------------------------------------------------------------------------------ input
def _column(obj, name: str) -> sp.Matrix:
    if not isinstance(obj, sp.MatrixBase) or obj.shape[1] != 1 or obj.shape[0] < 1:
        raise InputError(name, f"must be a d×1 sympy.Matrix of symbols, got {type(obj).__name__}"
                         + (f" of shape {obj.shape}" if isinstance(obj, sp.MatrixBase) else ""))
    for e in obj:
        if not isinstance(e, sp.Symbol):
            raise InputError(name, f"entries must be SymPy Symbols, got {e!r}")
    if len(set(obj)) != len(obj):
        raise InputError(name, "entries must be distinct symbols")
    return sp.Matrix(obj)


def _expr(obj, name: str) -> sp.Expr:
    if isinstance(obj, str):
        raise InputError(name, "must be a SymPy expression, not a string (strings are never parsed)")
    if not isinstance(obj, sp.Basic) or isinstance(obj, sp.MatrixBase):
        if isinstance(obj, sp.MatrixBase) and obj.shape == (1, 1):
            return obj[0, 0]
        raise InputError(name, f"must be a scalar SymPy expression, got {type(obj).__name__}")
    return obj


def _witness(log_kernel, x, y, V, params, time, seed: int = 0, tries: int = 12) -> KernelWitness:
    """Exact ``∂²Γ(x₀ + te)/∂t²`` at ``t = 0`` at rational parameter values (module docstring): base point
    ``x₀ = 0`` first, then rational points (a field that is flat to second order at 0 may bend elsewhere)."""
    from .moments import gaussian_expectation

    reason = analyse_log_kernel(log_kernel, x, y)
    d = len(x)
    rng = random.Random(seed)
    t_ = sp.Dummy("t")
    for attempt in range(tries):
        vals = {p: sp.Rational(rng.randint(1, 4), rng.randint(2, 5)) * rng.choice((1, -1)) for p in params}
        if time is not None:
            vals[time] = sp.Rational(1, 3)
        e = [0] * d
        e[attempt % d] = 1
        if attempt >= d:
            e = [sp.Rational(rng.randint(1, 3), 2) for _ in range(d)]
        alpha = sp.Matrix([sp.Rational(1, 2 + i) for i in range(d)])
        s = sp.Rational(1, 2 ** (attempt % 4 // 2 + 1))
        xb = [0] * d if attempt < tries // 2 else [sp.Rational(rng.randint(1, 3), 3) for _ in range(d)]
        ell = log_kernel.xreplace(vals)
        ell_t = ell.xreplace({xi: xbi + ei * t_ for xi, xbi, ei in zip(x, xb, e)})
        ell0 = ell_t.xreplace({t_: 0})
        l1 = sp.diff(ell_t, t_).xreplace({t_: 0})
        l2 = (sp.diff(ell_t, t_, 2) / 2).xreplace({t_: 0})
        base = analyse_log_kernel(ell0, [], y)
        if isinstance(base, str):
            continue
        try:
            polys = [sp.Poly(sp.expand(q), *y) for q in (l1, l2)]
        except sp.PolynomialError:
            continue
        if any(not all(cf.is_Rational for cf in pq.coeffs()) for pq in polys):
            l1, l2 = sp.nsimplify(l1), sp.nsimplify(l2)
        Sigma = s * sp.eye(d)
        prec = Sigma.inv() - base.R - base.R.T
        if not prec.is_positive_definite:
            continue
        S0 = prec.inv()
        m0 = S0 * (Sigma.inv() * alpha + base.r)
        E = (lambda expr: sp.nsimplify(gaussian_expectation(sp.expand(expr), list(y), m0, S0)))
        u2 = 2 * l2 + l1 ** 2
        g1, g2 = E(l1), E(u2)
        Vn = V.xreplace(vals)
        val = []
        for i in range(d):
            f1, f2 = E(y[i] * l1), E(y[i] * u2)
            val.append(f2 - 2 * f1 * g1 - m0[i] * g2 + 2 * m0[i] * g1 ** 2)
        w = [sp.nsimplify(sp.expand(v)) for v in (Vn * sp.Matrix(val))]
        if any(v != 0 for v in w):
            point = {str(k): v for k, v in vals.items()}
            point.update(x0=list(xb), alpha=list(alpha), Sigma=f"{s} I", direction=list(e))
            ind = _independent(ell, x, y, Vn, alpha, Sigma, e, xb) if d <= 3 else ()
            return KernelWitness(reason if isinstance(reason, str) else "", log_kernel, point, tuple(w), ind,
                                 True, "exact: Taylor coefficients of log k along x = t e and Gaussian moments "
                                 "of the tilt at x = 0 (moment generating function), rational arithmetic")
    return KernelWitness(reason if isinstance(reason, str) else "the tilt is not Gaussian with affine mean",
                         log_kernel, method="structural (no exact witness found at the tried points)")


def _independent(ell, x, y, V, alpha, Sigma, e, xb, nodes: int = 24, h: float = 1e-3) -> tuple:
    """``∂²Γ(x₀ + te)/∂t²`` at 0 by tensor Gauss-Hermite quadrature of the definition and a central difference
    (truncation ``O(h²)``, about 1e-6 relative here; meant as an independent confirmation of the sign)."""
    import itertools

    import numpy as np

    d = len(x)
    z, wts = np.polynomial.hermite_e.hermegauss(nodes)
    Sn = np.array(Sigma, dtype=float)
    L = np.linalg.cholesky(Sn)
    an = np.array(alpha, dtype=float).reshape(-1)
    pts = np.array(list(itertools.product(z, repeat=d)))
    w = np.prod(np.array(list(itertools.product(wts, repeat=d))), axis=1)
    Y = an + pts @ L.T
    f = sp.lambdify([*x, *y], ell, "numpy")
    Vn = np.array(V, dtype=float)
    en = np.array([float(v) for v in e])
    xbn = np.array([float(v) for v in xb])

    def gamma(t: float) -> np.ndarray:
        lk = np.broadcast_to(np.asarray(f(*(xbn + t * en), *Y.T), dtype=float), (len(Y),))
        kw = w * np.exp(lk - lk.max())
        return Vn @ (kw @ Y / kw.sum())

    with np.errstate(all="ignore"):
        sec = (gamma(h) - 2 * gamma(0.0) + gamma(-h)) / h ** 2
    return tuple(float(v) for v in sec) if np.isfinite(sec).all() else ()


# ----------------------------------------------------------------------------------------- front door
def derive_kernel(log_kernel, query, key, value=None, *, time=None, method: str = "ldl") -> OdeSystem:
    """Derive the Gaussian moment ODE of the softmax-normalised attention with kernel ``exp(log_kernel)``.

    ``log_kernel``: a SymPy expression in the entries of ``query`` (``d×1`` Matrix of Symbols, the token ``x``)
    and ``key`` (``d×1``, the key/value ``y``); every other free symbol is a parameter.  ``time``: a SymPy
    Symbol that may appear anywhere (time-dependent weights).  ``value``: the ``d×d`` SymPy matrix ``V``
    (default identity), ``Γ_μ(x) = V ∫ y k(x,y) dμ(y) / ∫ k(x,y) dμ(y)``.

    Returns an :class:`~.system.OdeSystem` (states ``alpha_i``, ``Sigma_i_j``; ``params`` sorted by name) with
    ``.conditions`` (tilt existence), ``.steps``, ``.jacobian()``, ``.latex()``.  Raises
    :class:`~symbolic_tpde.NotGaussianPreserving` (with a :class:`KernelWitness`) when the tilt is not Gaussian
    with an ``x``-affine mean, and :class:`~symbolic_tpde.InputError` for malformed input.

    >>> import sympy as sp
    >>> x, y = sp.Matrix(sp.symbols("x0 x1")), sp.Matrix(sp.symbols("y0 y1"))
    >>> system = derive_kernel(sp.Symbol("a") * (x.T * y)[0], x, y)
    >>> system.n_states, [p.name for p in system.params]
    (5, ['a'])
    """
    from .moments import assemble_system, gaussian_symbols, tilt_head

    x = _column(query, "query")
    y = _column(key, "key")
    d = x.shape[0]
    if y.shape[0] != d:
        raise InputError("key", f"has {y.shape[0]} entries but query has {d}")
    if set(x) & set(y):
        raise InputError("key", "query and key must use different symbols")
    ell = _expr(log_kernel, "log_kernel")
    if time is not None and not isinstance(time, sp.Symbol):
        raise InputError("time", f"must be a SymPy Symbol, got {type(time).__name__}")
    if value is None:
        V = sp.eye(d)
    else:
        if isinstance(value, str) or not isinstance(value, sp.MatrixBase):
            raise InputError("value", f"must be a {d}×{d} sympy.Matrix, got {type(value).__name__}")
        if value.shape != (d, d):
            raise InputError("value", f"expected shape ({d}, {d}), got {value.shape}")
        V = sp.Matrix(value)
        if any(e.has(*x) or e.has(*y) for e in V):
            raise InputError("value", "must not depend on the query or key symbols")
    reserved = {xi for xi in x} | {yi for yi in y} | ({time} if time is not None else set())
    free = (ell.free_symbols | set().union(*(e.free_symbols for e in V))) - reserved
    params = tuple(sorted(free, key=lambda s: s.name))
    alpha, Sigma = gaussian_symbols(d)
    clash = sorted({s.name for s in params} & {s.name for s in (*alpha, *Sigma)} | ({"t"} & {s.name for s in params}
                                                                                          if time is None else set()))
    if clash:
        raise InputError("log_kernel", f"parameter names {clash} are reserved for the Gaussian state"
                         + (" / time (pass time=...)" if "t" in clash else ""))
    form = analyse_log_kernel(ell, list(x), list(y))
    if isinstance(form, str):
        raise NotGaussianPreserving(_witness(ell, list(x), list(y), V, params, time))
    hf = tilt_head(form.kernel(), V, alpha, Sigma, x, method=method, kind="user kernel")
    return assemble_system(
        d, [hf], params=params, layout=(), time=time,
        origin={"variant": "user kernel", "d": d, "form": "entrywise", "method": method,
                "log_kernel": sp.sstr(ell)[:400], "structure": None, "document": True,
                "quadratic": KernelForm(form.B, form.R, form.r, V)},
        derivation=partial(_kernel_steps, ell, form, V, x, y))


@dataclass(frozen=True)
class KernelForm:
    """The quadratic form a user kernel was derived from: ``log k(x, y) = xᵀBy + yᵀRy + rᵀy + (terms in x
    alone)`` and the value matrix ``V`` (SymPy, in the system's parameters and time), the registry's
    description of an exponential-quadratic kind (:attr:`symbolic_tpde.registry.kinds.KindSpec.quadratic`):
    with numbers for its symbols it is a ``custom`` head (``P = p = 0``), which runs as particles and on the
    grid (:func:`kernel_schedule`)."""

    B: sp.Matrix
    R: sp.Matrix
    r: sp.Matrix
    V: sp.Matrix

    def __repr__(self) -> str:                       # short: the system's origin is printed in generated code
        return f"KernelForm(d={self.B.shape[0]})"


def kernel_form(system) -> KernelForm:
    """The :class:`KernelForm` carried by a system from :func:`derive_kernel`; :class:`~symbolic_tpde.InputError`
    naming why there is none (a system derived otherwise: a built-in kind's system is run from its weights)."""
    form = dict(getattr(system, "origin", {}) or {}).get("quadratic")
    if not isinstance(form, KernelForm):
        raise InputError("system", f"{type(system).__name__} of variant {dict(getattr(system, 'origin', {}) or {}).get('variant', '?')!r} "
                         "carries no kernel form (only derive_kernel's systems do; a kernel that is not "
                         "exp(xᵀBy + yᵀRy + rᵀy + terms in x alone) has no Gaussian tilt and no particle field "
                         "from a form: derive_kernel raises NotGaussianPreserving with the reason)")
    return form


def params_from_values(system, values):
    """Flat parameter vector (numpy, in ``system.params`` order) from ``values``: each parameter symbol (or its
    name) -> a number; a SymPy ``Matrix`` of parameter symbols may map to an array of the same shape.  Missing
    or extra names are an :class:`InputError` naming them (used by ``GaussianODE.from_system`` and
    :func:`kernel_schedule`)."""
    import math

    import numpy as np

    if not hasattr(values, "items"):
        raise InputError("values", f"must map parameter symbols or names to numbers, got {type(values).__name__}")
    by_name = {s.name: i for i, s in enumerate(system.params)}
    p = np.full(system.n_params, np.nan)
    extra: list[str] = []
    for key, val in values.items():
        if isinstance(key, sp.MatrixBase):
            arr = np.asarray(val, dtype=float)
            if arr.shape != key.shape:
                raise InputError(str(key), f"expected an array of shape {key.shape}, got {arr.shape}")
            pairs = list(zip(list(key), arr.reshape(-1)))
        else:
            pairs = [(key, val)]
        for k, v in pairs:
            name = k.name if isinstance(k, sp.Symbol) else str(k)
            if name not in by_name:
                extra.append(name)
                continue
            if isinstance(v, (bool, str)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise InputError(name, f"must be a real number, got {v!r}")
            fv = float(v)
            if not math.isfinite(fv):
                raise InputError(name, "must be finite")
            p[by_name[name]] = fv
    if extra:
        raise InputError("values", f"unknown parameters {sorted(set(extra))}; the system's are "
                         f"{[s.name for s in system.params]}")
    missing = [s.name for s, v in zip(system.params, p) if np.isnan(v)]
    if missing:
        raise InputError("values", f"missing parameters {missing}")
    return p


def kernel_schedule(system, values):
    """The weights of a :func:`derive_kernel` system at numbers ``values`` for its parameters (symbol or name
    -> number), as a :class:`~symbolic_tpde.weights.Schedule` of one ``custom`` head ``B, R, r, V`` (constant,
    or a callable of ``t`` when the kernel depends on the system's time): ready for the particle and grid
    solvers (``simulate(X0, kernel_schedule(system, values), T)``), which then run the user's kernel through
    the registry's quadratic form.  InputError when the system carries no form (:func:`kernel_form`).  The
    schedule pickles (its callable is module-level and holds SymPy blocks, not a lambdified function)."""
    from ..weights import Schedule

    kf = kernel_form(system)
    num = dict(zip(system.params, params_from_values(system, values).tolist()))
    weights = _KernelWeights(tuple(m.xreplace(num) for m in (kf.B, kf.R, kf.r, kf.V)), system.time)
    if any(m.has(system.time) for m in weights.blocks):
        return Schedule.from_callable(weights)
    return Schedule.constant(weights(0.0))


@dataclass(frozen=True)
class _KernelWeights:
    """A user kernel's one ``custom`` head at time ``t`` (blocks ``B, R, r, V`` with numbers for every
    parameter; only the system's time may remain)."""

    blocks: tuple
    time: Any

    def __call__(self, t: float):
        import numpy as np

        from ..weights import make_head, make_weights

        B, R, r, V = (np.array(m.xreplace({self.time: float(t)}).evalf(), dtype=float) for m in self.blocks)
        return make_weights([make_head("custom", B=B, R=R, r=r.reshape(-1), V=V)])


def _kernel_steps(ell, form, V, x, y, system, render: bool = False):
    """The derivation of a user-kernel system (module-level, so that the system pickles); with ``render`` the
    system's derivation (built once, kept by ``system.steps``) as a standalone LaTeX document."""
    if render:
        from ..documents.render import standalone

        return standalone(system._memo["document"]) if system.steps else ""
    import warnings

    from ..documents.steps import user_kernel_derivation

    dv = user_kernel_derivation(ell, form, V, x, y, system)
    bad = [s.title for s in dv.steps if not s.checked]
    if bad:
        warnings.warn(f"derive_kernel: {len(bad)} derivation step(s) could not be checked ({'; '.join(bad)[:300]}); "
                      "the system is derived, its document marks them NOT checked", stacklevel=3)
    return dv
