"""Validation oracles of every attention kind: independent routes, registered against the registry.

Each kind's ``oracle`` part (:mod:`symbolic_tpde.registry.kinds`) is an :class:`Oracle` with

* ``loop(X, prm, sink=None)``: the particle field by a pure-Python double loop over the definition of the
  kind (Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §2) -- no numpy linear algebra, no blocking, no
  log-sum-exp: an independent route for the vectorised particle fields (``tests/test_fields.py``);
* ``affine(prm, alpha, Sigma)`` (Gaussian-preserving kinds): numeric ``(b, J)`` with ``Γ(x) = b + Jx`` on
  ``N(α, Σ)`` from the closed forms (tilt ``k(x, y) N(y; α, Σ) ∝ N(y; m(x), S)``,
  ``S = (Σ⁻¹ - R - Rᵀ)⁻¹``, ``m(x) = S(Σ⁻¹α + r + Bᵀx)``; linear ``J = V(Σ + ααᵀ)A``; Sinkhorn
  ``E[y|x] = α + CᵀΣ⁻¹(x - α)``), an independent route for the SymPy-derived moment ODEs;
* ``query_key(prm) -> (B, r)``: the log-kernel's part linear in the key ``y`` is ``yᵀ(Bx + r)`` (``r`` may be
  ``None``): the tilt strength of the moments rows, for a kind with an exponential kernel and no quadratic
  form in the registry (Sinkhorn, sigmoid, masked); a kind with a form has it from the form
  (:func:`key_linear`).  The loops and ``affine`` never read the registry's form: they are the independent
  route the form is checked against.

Each affine kind's ``claim`` part is a :class:`Claim`: the closed forms as the paper states them, the claims
the ``tpde verify`` rows check (never used by the engine):

* ``exact(prm, alpha, Sigma) -> (b, J)`` on exact rational SymPy matrices (softmax ``E[y|x] = α + ΣAx``; ℓ2
  ``(Σ⁻¹ + (2/τ)KᵀK)⁻¹(Σ⁻¹α + (2/τ)KᵀQx)``; custom with symmetric ``R``: ``S = (Σ⁻¹ - 2R)⁻¹``,
  ``m = S(Σ⁻¹α + Bᵀx + r)``; linear ``J = V(Σ + ααᵀ)A``);
* ``matrix(head, alpha, Sigma)``: the same in matrix form (general ``d``, ``MatrixSymbol``s; ``head`` an entry
  of :attr:`~symbolic_tpde.symbolic.moments.MatrixForm.heads`), either ``{"b", "J"}`` or the head's
  contributions ``{"alpha_dot", "Sigma_dot"}``; ``symmetric``: parameters the claim takes symmetric.

Example parameters come from the registry's :attr:`ParamSpec.example` ranges (:func:`example_params`).
``prm`` holds the kind's canonical parameters (``Head.effective``, or SymPy matrices for claims).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import InputError
from ..registry.kinds import register


@dataclass(frozen=True)
class Oracle:
    loop: Callable
    affine: Callable | None = None
    query_key: Callable | None = None     # prm -> (B, r): query-key matrix, key linear term (None: no kernel)


@dataclass(frozen=True)
class Claim:
    exact: Callable | None = None         # (prm, alpha, Sigma) -> (b, J), exact rational SymPy matrices
    matrix: Callable | None = None        # (head, alpha, Sigma) -> {"b", "J"} or {"alpha_dot", "Sigma_dot"}
    symmetric: tuple[str, ...] = ()       # parameters the claim takes symmetric


def key_linear(kind: str, prm: dict):
    """``(B, r)`` with the part of ``log k`` linear in the key ``y`` equal to ``yᵀ(Bx + r)`` (``r`` may be
    ``None``): ``(Bᵀ, r)`` of the registry's quadratic form ``xᵀBy + yᵀRy + rᵀy`` when the kind has one, else the
    oracle's ``query_key``; ``None`` for a kind without an exponential kernel (linear)."""
    from ..registry import kinds

    form = kinds.get(kind).form(prm)
    if form is not None:
        return np.asarray(form["B"], float).T, None if form["r"] is None else np.asarray(form["r"], float)
    qk = kinds.part(kind, "oracle").query_key
    return None if qk is None else qk(prm)


def example_params(kind: str, d: int, rng: np.random.Generator, m: int | None = None) -> dict:
    """Example parameters of a ``kind`` head at ``d`` (ℓ2 head dimension ``m``, default ``d``), drawn in the
    registry's parameter order from each :attr:`~symbolic_tpde.registry.kinds.ParamSpec.example` range."""
    from ..registry import kinds

    dims = {"d": d, "m": d if m is None else m}
    return {p.name: kinds.draw_example(p, dims, rng) for p in kinds.get(kind).params}


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def matvec(M, x):
    return [dot(row, x) for row in M]


def _avg(weights, X):
    tot = sum(weights)
    d = len(X[0])
    return [sum(w * x[c] for w, x in zip(weights, X)) / tot for c in range(d)]


def ref_softmax(X, A, V):
    X, A, V = X.tolist(), A.tolist(), V.tolist()
    out = []
    for xi in X:
        Ax = matvec(A, xi)
        w = [math.exp(dot(Ax, xj)) for xj in X]  # <A x_i, x_j>
        out.append(matvec(V, _avg(w, X)))
    return np.array(out)


def ref_l2(X, Q, K, V, tau):
    X, Q, K, V = X.tolist(), Q.tolist(), K.tolist(), V.tolist()
    out = []
    for xi in X:
        Qx = matvec(Q, xi)
        w = [math.exp(-sum((a - b) ** 2 for a, b in zip(Qx, matvec(K, xj))) / tau) for xj in X]
        out.append(matvec(V, _avg(w, X)))
    return np.array(out)


def ref_sigmoid(X, A, V, b):
    X, A, V = X.tolist(), A.tolist(), V.tolist()
    n, d = len(X), len(X[0])
    out = []
    for xi in X:
        Ax = matvec(A, xi)
        s = [0.0] * d
        for xj in X:
            w = 1.0 / (1.0 + math.exp(-(dot(Ax, xj) + b)))
            Vx = matvec(V, xj)
            s = [a + w * c / n for a, c in zip(s, Vx)]
        out.append(s)
    return np.array(out)


def ref_linear(X, A, V):
    X, A, V = X.tolist(), A.tolist(), V.tolist()
    n, d = len(X), len(X[0])
    out = []
    for xi in X:
        Ax = matvec(A, xi)
        s = [0.0] * d
        for xj in X:
            Vx = matvec(V, xj)
            s = [a + dot(Ax, xj) * c / n for a, c in zip(s, Vx)]
        out.append(s)
    return np.array(out)


def ref_unnormalized(X, A, V):
    X, A, V = X.tolist(), A.tolist(), V.tolist()
    n, d = len(X), len(X[0])
    out = []
    for xi in X:
        Ax = matvec(A, xi)
        s = [0.0] * d
        for xj in X:
            w = math.exp(dot(Ax, xj)) / n
            s = [a + w * c for a, c in zip(s, xj)]
        out.append(matvec(V, s))
    return np.array(out)


def ref_custom(X, B, P, R, p, r, V):
    X, V = X.tolist(), V.tolist()
    B, P, R, p, r = B.tolist(), P.tolist(), R.tolist(), p.tolist(), r.tolist()
    out = []
    for x in X:
        logk = [dot(x, matvec(B, y)) + dot(x, matvec(P, x)) + dot(y, matvec(R, y)) + dot(p, x) + dot(r, y)
                for y in X]
        w = [math.exp(v) for v in logk]
        out.append(matvec(V, _avg(w, X)))
    return np.array(out)


def ref_masked(X, A, V, sink=None, positions=None):
    X, A, V = X.tolist(), A.tolist(), V.tolist()
    n = len(X)
    s = list(range(n)) if positions is None else list(positions)
    out = []
    for i, xi in enumerate(X):
        Ax = matvec(A, xi)
        keys, w = [], []
        if sink is not None:
            keys.append(sink.x.tolist())
            w.append(sink.mass * math.exp(dot(Ax, sink.x.tolist())))
        for j, xj in enumerate(X):
            if s[j] <= s[i]:
                keys.append(xj)
                w.append((1.0 if sink is None else (1 - sink.mass) / n) * math.exp(dot(Ax, xj)))
        out.append(matvec(V, _avg(w, keys)))
    return np.array(out)


def ref_sinkhorn(X, A, V, eps, tol=1e-14, max_iter=100_000):
    """Plain (not log-domain) Sinkhorn matrix scaling in Python lists: an independent route."""
    Xl, Al, Vl = X.tolist(), A.tolist(), V.tolist()
    n = len(Xl)
    K = [[math.exp(dot(matvec(Al, xi), xj) / eps) for xj in Xl] for xi in Xl]
    u, v = [1.0] * n, [1.0] * n
    for _ in range(max_iter):
        u = [1.0 / sum(K[i][j] * v[j] for j in range(n)) for i in range(n)]
        v = [1.0 / sum(K[i][j] * u[i] for i in range(n)) for j in range(n)]
        rows = [sum(u[i] * K[i][j] * v[j] for j in range(n)) for i in range(n)]
        if max(abs(r - 1) for r in rows) < tol:
            break
    P = [[u[i] * K[i][j] * v[j] for j in range(n)] for i in range(n)]
    out = [matvec(Vl, [sum(P[i][j] * Xl[j][c] for j in range(n)) for c in range(len(Xl[0]))]) for i in range(n)]
    return np.array(out), np.array(P)


# ------------------------------------------------------------------------------- numeric closed forms
def _tilt_affine(B, R, r, V, alpha, Sigma, where="head"):
    Sinv = np.linalg.inv(Sigma)
    prec = Sinv - R - R.T
    try:
        np.linalg.cholesky(prec)
    except np.linalg.LinAlgError:
        raise InputError(where, "tilted precision Σ⁻¹ - R - Rᵀ is not positive definite: the kernel is not "
                         "integrable against this Gaussian") from None
    return V @ np.linalg.solve(prec, Sinv @ alpha + r), V @ np.linalg.solve(prec, B.T)


def _zeros(d):
    return np.zeros((d, d)), np.zeros(d)


def _softmax_affine(p, alpha, Sigma):
    Z, z = _zeros(len(alpha))
    return _tilt_affine(p["A"].T, Z, z, p["V"], alpha, Sigma)


def _l2_affine(p, alpha, Sigma):
    _, z = _zeros(len(alpha))
    B = 2.0 * p["Q"].T @ p["K"] / p["tau"]
    return _tilt_affine(B, -p["K"].T @ p["K"] / p["tau"], z, p["V"], alpha, Sigma)


def _custom_affine(p, alpha, Sigma):
    return _tilt_affine(p["B"], p["R"], p["r"], p["V"], alpha, Sigma)


def _linear_affine(p, alpha, Sigma):
    return np.zeros(len(alpha)), p["V"] @ (Sigma + np.outer(alpha, alpha)) @ p["A"]


def _sinkhorn_affine(p, alpha, Sigma):
    from ..numerics.ode.numeric_matrix import sinkhorn_cross_cov

    Ct = sinkhorn_cross_cov(p["A"], Sigma, p.get("epsilon", 1.0))
    J = p["V"] @ np.linalg.solve(Sigma.T, Ct.T).T  # V Cᵀ Σ⁻¹
    return p["V"] @ alpha - J @ alpha, J


def affine_field(weights, alpha: np.ndarray, Sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numeric ``(b, J)`` with ``Γ(x) = b + J x`` on ``N(alpha, Sigma)``, summed over heads (+ FFN)."""
    from ..registry import kinds

    d = alpha.shape[0]
    b = np.zeros(d)
    J = np.zeros((d, d))
    for i, head in enumerate(weights.heads):
        orc = kinds.part(head.kind, "oracle")
        if orc.affine is None:
            raise InputError(f"heads[{i}].attention", f"{head.kind!r} attention is not Gaussian-preserving")
        try:
            bh, Jh = orc.affine(head.effective, alpha, Sigma)
        except InputError as exc:
            raise InputError(f"heads[{i}]", exc.problem) from None
        b, J = b + bh, J + Jh
    if weights.ffn is not None:
        J += weights.ffn.W
        b += weights.ffn.c
    return b, J


# ------------------------------------------------------------------ exact claims (rational SymPy matrices)
def _softmax_claim(P, alpha, Sigma):                   # E[y|x] = α + ΣAx
    return P["V"] * alpha, P["V"] * Sigma * P["A"]


def _l2_claim(P, alpha, Sigma):                        # (Σ⁻¹ + (2/τ)KᵀK)⁻¹(Σ⁻¹α + (2/τ)KᵀQx)
    Si = Sigma.inv()
    S = (Si + 2 / P["tau"] * P["K"].T * P["K"]).inv()
    return P["V"] * S * Si * alpha, P["V"] * S * (2 / P["tau"]) * P["K"].T * P["Q"]


def _custom_claim(P, alpha, Sigma):                    # S = (Σ⁻¹ - 2R)⁻¹, m = S(Σ⁻¹α + Bᵀx + r), R symmetric
    R = (P["R"] + P["R"].T) / 2
    S = (Sigma.inv() - 2 * R).inv()
    return P["V"] * S * (Sigma.inv() * alpha + P["r"]), P["V"] * S * P["B"].T


def _linear_claim(P, alpha, Sigma):                    # J = V(Σ + ααᵀ)A, b = 0
    return alpha * 0, P["V"] * (Sigma + alpha * alpha.T) * P["A"]


def _A(p):
    return p["A"], None


# ------------------------------------------------------------------------- matrix-form claims (general d)
def _softmax_matrix(h, alpha, Sigma):                  # dα/dt = V(α + ΣAα), dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ
    A, V = h["symbols"]["A"], h["symbols"]["V"]
    return {"alpha_dot": V * (alpha + Sigma * A * alpha), "Sigma_dot": V * Sigma * A * Sigma + Sigma * A.T * Sigma * V.T}


def _l2_matrix(h, alpha, Sigma):
    s = h["symbols"]
    S = (Sigma.I + (2 / s["tau"]) * s["K"].T * s["K"]).I
    return {"b": s["V"] * S * Sigma.I * alpha, "J": s["V"] * S * (2 / s["tau"]) * s["K"].T * s["Q"]}


def _custom_matrix(h, alpha, Sigma):                   # R symmetric (Claim.symmetric)
    s = h["symbols"]
    S = (Sigma.I - 2 * s["R"]).I
    return {"b": s["V"] * S * (Sigma.I * alpha + s["r"]), "J": s["V"] * S * s["B"].T}


def _linear_matrix(h, alpha, Sigma):
    import sympy as sp

    s = h["symbols"]
    return {"J": s["V"] * (Sigma + alpha * alpha.T) * s["A"], "b": sp.ZeroMatrix(*alpha.shape)}


def _sinkhorn_matrix(h, alpha, Sigma):                 # dα/dt = Vα, dΣ/dt = VCᵀ + CVᵀ (C from the head)
    V, C = h["symbols"]["V"], h["Ct"].T
    return {"alpha_dot": V * alpha, "Sigma_dot": V * C.T + C * V.T}


register("softmax", "oracle")(Oracle(lambda X, p, sink=None: ref_softmax(X, p["A"], p["V"]), _softmax_affine))
register("l2", "oracle")(Oracle(lambda X, p, sink=None: ref_l2(X, p["Q"], p["K"], p["V"], p["tau"]), _l2_affine))
register("sinkhorn", "oracle")(Oracle(lambda X, p, sink=None: ref_sinkhorn(X, p["A"], p["V"], p["epsilon"])[0],
                                      _sinkhorn_affine, query_key=_A))
register("sigmoid", "oracle")(Oracle(lambda X, p, sink=None: ref_sigmoid(X, p["A"], p["V"], p["b"]), query_key=_A))
register("linear", "oracle")(Oracle(lambda X, p, sink=None: ref_linear(X, p["A"], p["V"]), _linear_affine))
register("softmax_unnormalized", "oracle")(Oracle(lambda X, p, sink=None: ref_unnormalized(X, p["A"], p["V"])))
register("masked", "oracle")(Oracle(lambda X, p, sink=None: ref_masked(X, p["A"], p["V"], sink=sink), query_key=_A))
register("custom", "oracle")(Oracle(lambda X, p, sink=None: ref_custom(X, p["B"], p["P"], p["R"], p["p"], p["r"],
                                                                       p["V"]), _custom_affine))

register("softmax", "claim")(Claim(_softmax_claim, _softmax_matrix))
register("l2", "claim")(Claim(_l2_claim, _l2_matrix))
register("sinkhorn", "claim")(Claim(None, _sinkhorn_matrix))
register("linear", "claim")(Claim(_linear_claim, _linear_matrix))
register("custom", "claim")(Claim(_custom_claim, _custom_matrix, symmetric=("R",)))
