"""Checking one derivation step ``lhs = rhs`` with SymPy (README, "What is derived, and how it is checked").

A step of a derivation (:class:`~.steps_eq.Step`) is an equation between SymPy objects: scalars, explicit
``Matrix``es or matrix expressions in ``MatrixSymbol``s of general size ``d`` (Castin, Ablin, Carrillo, Peyré,
arXiv 2501.18322, §3).  A general-``d`` identity cannot be reduced to zero by SymPy's matrix-expression
algebra in general, so it is checked on explicit instances (the method says which):

* ``exact d = 2``: every ``MatrixSymbol`` becomes a ``2×2`` matrix of fresh symbols (``Sigma``-like
  matrices symmetric), the expression is evaluated by :func:`explicit` and each entry of ``lhs - rhs`` is
  reduced by ``sympy.cancel``; zero is a proof for that ``d``;
* ``rational points``: all symbols at seeded random rationals (``Sigma`` symmetric positive definite, built as
  ``LLᵀ``), ``d = 2`` and ``d = 3``, the difference computed in exact rational arithmetic; a polynomial
  identity that holds at random points can still fail elsewhere only on a measure-zero set (Schwartz-Zippel),
  so this is evidence, stated as such, not a proof;
* ``50 digits``: where a principal matrix square root appears (Sinkhorn, exact surds for ``d <= 2`` by
  :func:`.sinkhorn.sqrtm_explicit`), the exact difference is evaluated with 50 significant digits and must be
  below ``1e-40`` (round-off of a 50-digit evaluation of an expression of a few hundred operations);
* ``modulo``: for exponents of densities, "equal up to terms free of ``y``": the difference, at rational
  values of everything but ``y``, must not depend on ``y`` after expansion.

:func:`check_equal` returns ``(checked, method)``; an exception during a check counts as *not checked*.
"""

from __future__ import annotations

import random
import re
from typing import Any, Iterable

import sympy as sp
from sympy.matrices.expressions.matexpr import MatrixElement

#: matrix symbols that stand for covariances (symmetric positive definite in every check)
SPD_NAMES = ("Sigma", "Sigma_0", "S")
#: matrix symbols that are symmetric by the user's stated structure (filled in by the caller)
TOL_50 = sp.Float("1e-40", 50)


def _dim(n, dims: dict) -> int:
    if isinstance(n, (int, sp.Integer)):
        return int(n)
    return int(n.xreplace({s: dims[s.name] for s in n.free_symbols}))


def explicit(e, env: dict, dims: dict):
    """Evaluate ``e`` with ``MatrixSymbol``s replaced by ``env[name]`` (explicit matrices) and scalar symbols
    by ``env[name]`` when present; sizes ``d``, ``m`` from ``dims``.  Returns a Matrix or a scalar."""
    if isinstance(e, sp.MatrixBase):
        memo: dict = {}
        return e.applyfunc(lambda v: _scalar(v, env, memo))
    if isinstance(e, sp.MatrixSymbol):
        return env[e.name]
    if hasattr(e, "explicit_value"):      # an operator of the derivations (steps_eq): E[...], Hessian, ...
        return e.explicit_value(env, dims, explicit)
    if isinstance(e, sp.Identity):
        return sp.eye(_dim(e.shape[0], dims))
    if isinstance(e, sp.ZeroMatrix):
        return sp.zeros(_dim(e.shape[0], dims), _dim(e.shape[1], dims))
    if isinstance(e, sp.MatAdd):
        parts = [explicit(a, env, dims) for a in e.args]
        total = parts[0]
        for p in parts[1:]:
            total = total + p
        return total
    if isinstance(e, sp.MatMul):
        out = sp.S.One
        for a in e.args:
            out = out * explicit(a, env, dims)
        return out
    if isinstance(e, sp.Transpose):
        return explicit(e.arg, env, dims).T
    if isinstance(e, sp.Inverse):
        M = explicit(e.arg, env, dims)
        return M.inv(method="LU")
    if isinstance(e, sp.MatPow):
        M = explicit(e.base, env, dims)
        if e.exp == sp.S.Half:
            return _sqrtm(M)
        if e.exp == -1:
            return M.inv(method="LU")
        return M ** int(e.exp)
    if isinstance(e, MatrixElement):
        return explicit(e.parent, env, dims)[int(e.i), int(e.j)]
    if isinstance(e, sp.Trace):
        return explicit(e.arg, env, dims).trace()
    if isinstance(e, sp.Determinant):
        return explicit(e.arg, env, dims).det()
    if getattr(e, "is_Matrix", False):
        raise TypeError(f"cannot evaluate matrix expression of type {type(e).__name__}")
    return _scalar(e, env, {})


def _sqrtm(M: sp.Matrix) -> sp.Matrix:
    """Principal square root: exact surds for ``d <= 2`` (:func:`.sinkhorn.sqrtm_explicit`); for a matrix of
    floats (the 60-digit checks) ``mpmath.sqrtm`` at 60 digits, any ``d``."""
    from ..symbolic.sinkhorn import sqrtm_explicit

    if M.shape[0] > 2 and all(v.is_Float or v.is_Rational for v in M):
        import mpmath as mp
        with mp.workdps(60):
            R = mp.sqrtm(mp.matrix([[mp.mpf(str(sp.Float(v, 60))) for v in row] for row in M.tolist()]))
            if any(abs(mp.im(v)) > mp.mpf(10) ** -45 for v in R):
                raise ValueError("the matrix has no real principal square root")
            return sp.Matrix(M.rows, M.cols, lambda i, j: sp.Float(mp.nstr(mp.re(R[i, j]), 60), 60))
    return sqrtm_explicit(M)


def _scalar(e, env: dict, memo: dict):
    """A scalar expression with symbols from ``env``, evaluated on the DAG (each shared node once: the
    entrywise right-hand sides are DAGs whose trees are astronomically larger)."""
    k = id(e)
    if k in memo:
        return memo[k][1]
    if isinstance(e, sp.Symbol):
        out = env.get(e.name, e)
    elif not e.args:
        out = e
    else:
        out = e.func(*[_scalar(a, env, memo) for a in e.args])
    memo[k] = (e, out)
    return out


def _atoms(objs: Iterable) -> tuple[dict, set]:
    """Matrix symbols (name -> shape) and scalar symbols of ``objs`` (shape symbols excluded)."""
    mats: dict[str, tuple] = {}
    scal: set = set()
    for o in objs:
        if not isinstance(o, sp.Basic):
            continue
        for a in o.atoms(sp.MatrixSymbol):
            mats[a.name] = a.shape
        for s in o.free_symbols:
            if isinstance(s, sp.Symbol) and not isinstance(s, sp.MatrixSymbol):
                scal.add(s)
    shape_syms = {s for shp in mats.values() for n in shp if isinstance(n, sp.Basic) for s in n.free_symbols}
    return mats, scal - shape_syms


def _rand(rng: random.Random, positive: bool = False) -> sp.Rational:
    v = sp.Rational(rng.randint(1, 9), rng.randint(2, 7))
    return v if positive or rng.random() < 0.5 else -v


def _env(mats: dict, scal: set, dims: dict, rng: random.Random | None, symmetric: tuple, keep: tuple) -> dict:
    """Explicit values: random rationals (``rng``) or fresh symbols (``rng is None``); names in ``keep`` stay
    symbolic always (the variable of a "modulo" check)."""
    env: dict[str, Any] = {}
    for name, shp in mats.items():
        r, c = _dim(shp[0], dims), _dim(shp[1], dims)
        if rng is None or name in keep:
            tag = name.replace("\\", "")
            if name in SPD_NAMES or name in symmetric:
                env[name] = sp.Matrix(r, c, lambda i, j: sp.Symbol(f"{tag}_{min(i, j)}{max(i, j)}", real=True))
            else:
                env[name] = sp.Matrix(r, c, lambda i, j: sp.Symbol(f"{tag}_{i}{j}", real=True))
        elif name in SPD_NAMES:
            L = sp.Matrix(r, r, lambda i, j: _rand(rng, True) if i == j else (_rand(rng) if i > j else 0))
            env[name] = L * L.T
        elif name in symmetric:
            M = sp.Matrix(r, c, lambda i, j: _rand(rng))
            env[name] = (M + M.T) / 2
        else:
            env[name] = sp.Matrix(r, c, lambda i, j: _rand(rng))
    sig = [s for s in scal if re.fullmatch(r"Sigma_\d+_\d+", s.name)]
    if sig and rng is not None:           # entrywise covariance symbols: one random SPD matrix
        n = 1 + max(int(v) for s in sig for v in s.name.split("_")[1:])
        L = sp.Matrix(n, n, lambda i, j: _rand(rng, True) if i == j else (_rand(rng) if i > j else 0))
        S = L * L.T
        env.update({s.name: S[int(s.name.split("_")[1]), int(s.name.split("_")[2])] for s in sig})
    for s in scal:
        if rng is not None and s.name not in keep and s.name not in env:
            env[s.name] = _rand(rng, bool(s.is_positive))
    return env


def _zero(v, numeric: bool, keep_syms: set) -> bool:
    if keep_syms:                         # modulo: the difference must be free of the kept symbols
        return not (sp.cancel(sp.together(sp.expand(v))).free_symbols & keep_syms)
    if numeric:
        return abs(sp.N(v, 50)) < TOL_50
    return sp.cancel(sp.together(v)) == 0


def _entries(v):
    return list(v) if isinstance(v, sp.MatrixBase) else [v]


def check_equal(lhs, rhs, *, exact_d: tuple | str = "auto", random_d: tuple = (2, 3), points: int = 2,
                numeric: bool = False, modulo: tuple = (), symmetric: tuple = (), seed: int = 0,
                dims_extra: dict | None = None, free: bool = True) -> tuple[bool, str, str]:
    """``(True, method, scope)`` when ``lhs - rhs`` vanishes (module docstring), else ``(False, reason, "")``.
    First the free algebra of matrix symbols (:mod:`.steps_free`; scope ``"every d"``, a proof for every size);
    when that proves nothing, the explicit checks at the stated ``d`` (scope ``"d = 2, 3"`` etc.).
    ``modulo``: names of matrix symbols the difference may not depend on (e.g. ``y``); ``symmetric``: names of
    matrix symbols symmetric by assumption; ``numeric``: 60-digit evaluation instead of exact cancellation
    (square roots)."""
    from .free_algebra import free_equal

    if free and all(getattr(o, "is_Matrix", False) and not isinstance(o, sp.MatrixBase) for o in (lhs, rhs)) \
            and free_equal(lhs, rhs, tuple(SPD_NAMES) + tuple(symmetric), modulo):
        what = (r"$\text{lhs} - \text{rhs}$" if not modulo else r"every term of $\text{lhs} - \text{rhs}$ that "
                f"contains ${', '.join(modulo)}$")
        sym = ", ".join(f"${sp.latex(sp.Symbol(n))}$" for n in sorted(set(SPD_NAMES) | set(symmetric)))
        return True, (f"proved for every $d$: {what} has normal form $0$ in the free algebra of non-commuting "
                      rf"matrix symbols ($(XY)^{{\top}} = Y^{{\top}}X^{{\top}}$, $XX^{{-1}} = I$; {sym} "
                      "symmetric)"), "every d"
    ok, method = _check_explicit(lhs, rhs, exact_d=exact_d, random_d=random_d, points=points, numeric=numeric,
                                 modulo=modulo, symmetric=symmetric, seed=seed, dims_extra=dims_extra)
    if not ok:
        return False, method, ""
    mats, _ = _atoms([lhs, rhs])
    ds = sorted(set((exact_d if isinstance(exact_d, tuple) else ()) + tuple(random_d)))
    return True, method, (f"d = {', '.join(map(str, ds))}" if mats else "exact")


def _check_explicit(lhs, rhs, *, exact_d, random_d, points, numeric, modulo, symmetric, seed, dims_extra):
    mats, scal = _atoms([lhs, rhs])
    if exact_d == "auto":   # symbolic inverses of sums nest into large rational functions: points only
        n_inv = sum(len(o.atoms(sp.Inverse)) for o in (lhs, rhs) if isinstance(o, sp.Basic))
        exact_d, points = ((2,), points) if n_inv <= 1 else ((), max(points, 3))
    if not mats:
        exact_d, random_d = ((1,) if exact_d else ()), ((1,) if random_d and (numeric or modulo or not exact_d)
                                                         else ())
    done: list[str] = []
    rng = random.Random(seed)
    try:
        for dv in exact_d:
            dims = {"d": dv, "m": dv, **(dims_extra or {})}
            env = _env(mats, scal, dims, None, symmetric, modulo)
            keep = {s for n in modulo for s in env[n].free_symbols} if modulo else set()
            if modulo:   # y symbolic, others symbolic too: expand and look for y
                diff = explicit(lhs, env, dims) - explicit(rhs, env, dims)
                if not all(_zero(v, False, keep) for v in _entries(diff)):
                    return False, f"the two sides differ by a function of {', '.join(modulo)} (exact, d = {dv})"
            else:
                diff = explicit(lhs, env, dims) - explicit(rhs, env, dims)
                if not all(_zero(v, False, set()) for v in _entries(diff)):
                    return False, f"difference does not cancel to 0 (exact, symbolic entries, d = {dv})"
            done.append(f"d = {dv}" if mats else "exactly")
        rdone = []
        for dv in random_d:
            dims = {"d": dv, "m": max(1, dv - 1), **(dims_extra or {})}
            for _ in range(points):
                env = _env(mats, scal, dims, rng, symmetric, modulo)
                if numeric:       # 60-digit floats from the start (exact surds nest and are slow)
                    env = {k: (v.applyfunc(lambda e: sp.Float(e, 60)) if isinstance(v, sp.MatrixBase)
                               else sp.Float(v, 60)) for k, v in env.items()}
                keep = {s for n in modulo for s in env[n].free_symbols} if modulo else set()
                diff = explicit(lhs, env, dims) - explicit(rhs, env, dims)
                if not all(_zero(v, numeric, keep) for v in _entries(diff)):
                    return False, f"difference non-zero at a random rational point (d = {dv})"
            rdone.append(str(dv) if mats else "")
    except Exception as exc:     # noqa: BLE001 - a check that cannot run is reported, never passed
        return False, f"check could not be carried out ({type(exc).__name__}: {str(exc)[:120]})"
    parts = []
    mods = ", ".join(modulo)
    what = (r"$\text{lhs} - \text{rhs}$" if not modulo else
            rf"$\text{{lhs}} - \text{{rhs}}$ is free of ${mods}$ (equal up to terms free of ${mods}$)")
    at_d = ", ".join(f"${v}$" if v.startswith("d = ") else v for v in done)
    if done:
        if mats:
            parts.append(f"{what}: exact, matrices of symbolic entries at {at_d}, "
                         "entries reduced to $0$ by exact cancellation" if not modulo else
                         f"{what}: exact, symbolic entries at {at_d}, after expansion")
        else:
            parts.append(f"{what} reduced to $0$ by exact cancellation" if not modulo else
                         f"{what}: exact")
    if rdone:
        how = (r"exact rational inputs evaluated with 60-digit floats, $|\text{difference}| < 10^{-40}$" if numeric
               else "exact rational arithmetic")
        at = f" at $d = {', '.join(rdone)}$" if mats else " (all symbols; the system's own size)"
        parts.append(f"{points} seeded random rational points{at} ({how})")
    if not parts:
        return False, "no check was requested"
    return True, "; ".join(parts)
