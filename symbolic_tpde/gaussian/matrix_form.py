"""The moment equations in matrix form, without ``Σ⁻¹``: the affine field ``Γ_{N(α,Σ)}(x) = b + Jx`` and a
prebuilt right-hand side ``y ↦ (b + Jα, JΣ + ΣJᵀ)`` for constant weights (:func:`matrix_rhs`).

The generated entrywise right-hand side is a rational function of the entries of ``Σ`` (cofactors of the tilt
precision): where ``Σ`` is ill-conditioned it loses about ``cond(Σ)·eps`` of relative accuracy (measured
``2e-9`` at ``cond Σ ≈ 1e5`` for ℓ2), which an error-controlled integrator at ``rtol = 1e-12`` cannot accept:
its step collapses although the solution goes on.  The matrix form evaluates the tilt by one backward-stable
linear solve with ``I - ΣM`` (``M = R + Rᵀ``), exact products for softmax (``M = 0``), so it loses only
``cond(I - ΣM)·eps``.  :func:`symbolic_tpde.gaussian.integrate.integrate_gaussian` switches to it where
``cond Σ·eps`` exceeds the tolerance; the long-time classifier (:mod:`symbolic_tpde.analysis.verdict`) uses it
throughout.  Where ``I - ΣM`` itself becomes ill-conditioned (``Σ`` growing anisotropically under a head with
``M ≠ 0``), :func:`pair_rhs` carries ``P = Σ⁻¹`` beside ``Σ`` and solves with the well-conditioned ``P - M``.
"""

from __future__ import annotations

import numpy as np

from ..registry import kinds, layout

__all__ = ["head_form", "quadratic_form", "affine_field", "covariance_velocity", "matrix_rhs", "frozen_alpha",
           "tilt_margins", "pair_rhs", "checked_matrix_rhs", "root_rhs"]


def head_form(head) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(B, R, r)`` of a head whose kind is registered with a quadratic form and normalised (the Gaussian tilt
    applies): ``log k(x, y) = xᵀBy + yᵀRy + rᵀy + (terms in x alone)`` (README Mathematics §2–3; the form is
    the registry's, :attr:`symbolic_tpde.registry.kinds.KindSpec.quadratic`), zero blocks as zeros; ``None``
    for other kinds."""
    spec = kinds.get(head.kind)
    if not spec.tilt:
        return None
    f = spec.form(head.effective)
    B = np.asarray(f["B"], float)
    d = B.shape[0]
    R = np.zeros((d, d)) if f["R"] is None else np.asarray(f["R"], float)
    r = np.zeros(d) if f["r"] is None else np.asarray(f["r"], float)
    return B, R, r


def quadratic_form(head) -> tuple[np.ndarray, np.ndarray] | None:
    """``(B, R)`` of :func:`head_form` (softmax ``B = Aᵀ``, ``R = 0``; ℓ2 ``B = (2/τ)QᵀK``, ``R = -KᵀK/τ``;
    custom its ``B`` and ``R``), ``None`` for a kind without a normalised quadratic form."""
    f = head_form(head)
    return None if f is None else f[:2]


def _linear_affine(e, alpha, Sigma):
    """Linear ``Γ(x) = V E[yyᵀ]Ax``: ``b = 0``, ``J = V(Σ + ααᵀ)A``."""
    return np.zeros(len(alpha)), np.asarray(e["V"], float) @ (Sigma + np.outer(alpha, alpha)) @ np.asarray(e["A"], float)


def _sinkhorn_affine(e, alpha, Sigma):
    """Sinkhorn: ``E_π[y|x] = α + CᵀΣ⁻¹(x - α)``, ``J = VCᵀΣ⁻¹``, ``b = V(α - CᵀΣ⁻¹α)``."""
    from ..numerics.ode.numeric_matrix import sinkhorn_cross_cov

    V = np.asarray(e["V"], float)
    Ct = sinkhorn_cross_cov(np.asarray(e["A"], float), Sigma, float(e["epsilon"]))
    try:
        Jh = V @ np.linalg.solve(Sigma.T, Ct.T).T
    except np.linalg.LinAlgError:
        # a collapsed Σ (a Sinkhorn run going to rank one): Cᵀ = (2ΣA_εΣ^{1/2}(S + I)⁻¹)Σ^{1/2} ends in Σ^{1/2},
        # so with the pseudo-inverse JΣ = VCᵀΣ⁺Σ = VCᵀ still holds: the velocity VCᵀ + CVᵀ stays exact
        Jh = V @ Ct @ np.linalg.pinv(Sigma)
    return V @ alpha - Jh @ alpha, Jh


kinds.register("linear", "affine")(_linear_affine)
kinds.register("sinkhorn", "affine")(_sinkhorn_affine)


def affine_field(weights, alpha: np.ndarray, Sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(b, J)`` with ``Γ_{N(α, Σ)}(x) = b + Jx`` summed over heads (+ FFN ``Wx + c``), in matrix form without
    ``Σ⁻¹`` where it can be avoided (README Mathematics §3); ``None`` for a head of a kind that does not preserve
    Gaussians, or with an attention sink.

    * a normalised kind with a quadratic form ``log k = xᵀBy + yᵀRy + rᵀy + …`` (:func:`head_form`: softmax,
      ℓ2, custom, any kind registered with a form): the tilt of ``N(α, Σ)`` has mean
      ``(Σ⁻¹ - R - Rᵀ)⁻¹(Σ⁻¹α + r + Bᵀx) = (I - Σ(R + Rᵀ))⁻¹(α + Σr + ΣBᵀx)``, so
      ``b = V(I - ΣM)⁻¹(α + Σr)``, ``J = V(I - ΣM)⁻¹ΣBᵀ`` with ``M = R + Rᵀ`` (one backward-stable solve: it
      keeps its accuracy when ``Σ`` is ill-conditioned, where the entrywise cofactor form loses
      ``cond(Σ)·eps``);
    * other affine kinds register their own ``affine`` part ``(params, α, Σ) -> (b, J)`` here: linear
      ``b = 0``, ``J = V(Σ + ααᵀ)A``; Sinkhorn (the plan is Gaussian with cross-covariance ``C``,
      ``E_π[y|x] = α + CᵀΣ⁻¹(x - α)``) ``J = VCᵀΣ⁻¹``, ``b = V(α - CᵀΣ⁻¹α)`` (``dΣ/dt = JΣ + ΣJᵀ = VCᵀ + CVᵀ``)."""
    if weights.sink is not None:
        return None
    alpha = np.asarray(alpha, float)
    Sigma = np.asarray(Sigma, float)
    d = Sigma.shape[0]
    b, J = np.zeros(d), np.zeros((d, d))
    for h in weights.heads:
        form = head_form(h)
        if form is None:
            own = kinds.part(h.kind, "affine", None)
            if own is None:
                return None
            bh, Jh = own(h.effective, alpha, Sigma)
            b, J = b + bh, J + Jh
            continue
        B, R, r = form
        V = np.asarray(h.effective["V"], float)
        G = np.eye(d) - Sigma @ (R + R.T)
        b = b + V @ np.linalg.solve(G, alpha + Sigma @ r)
        J = J + V @ np.linalg.solve(G, Sigma @ B.T)
    if weights.ffn is not None:
        J = J + np.asarray(weights.ffn.W, float)
        b = b + np.asarray(weights.ffn.c, float)
    return b, J


def covariance_velocity(weights, Sigma: np.ndarray) -> np.ndarray | None:
    """``dΣ/dt = JΣ + ΣJᵀ`` with ``J`` of :func:`affine_field` (at ``α = 0``: the covariance equation of every
    kind here but linear attention does not involve ``α``); ``None`` where :func:`affine_field` is."""
    Sigma = np.asarray(Sigma, float)
    bJ = affine_field(weights, np.zeros(Sigma.shape[0]), Sigma)
    if bJ is None:
        return None
    J = bJ[1]
    return J @ Sigma + Sigma @ J.T


def matrix_rhs(weights, d: int):
    """``(f, Ms)`` for constant ``weights`` whose heads all have a quadratic log-kernel (softmax, ℓ2, custom),
    without attention sink: ``f(t, y)`` the moment right-hand side ``(b + Jα, JΣ + ΣJᵀ)`` on the Gaussian layout
    (:func:`affine_field` with the per-head matrices ``V``, ``ΣBᵀ``, ``I - ΣM`` assembled once; about ten times
    cheaper than calling it), ``Ms`` the non-zero ``M = R + Rᵀ`` (the solves whose conditioning limits the
    accuracy); ``None`` for other weights (Sinkhorn and linear heads keep the generated form)."""
    got = _framed_heads(weights, None)
    if got is None:
        return None
    heads = [(V, np.ascontiguousarray(Bt), M if np.abs(M).max() > 0 else None, r if np.abs(r).max() > 0 else None)
             for V, Bt, M, r in got[0]]
    W, c = got[1]
    eye = np.eye(d)
    n = layout.state_size(d)
    iu = np.triu_indices(d)
    tri = np.zeros((d, d), int)                  # packed position of each entry (both triangles)
    tri[iu] = np.arange(len(iu[0]))
    tri[iu[1], iu[0]] = tri[iu]
    sym, flat = tri.ravel(), iu[0] * d + iu[1]

    def f(t, y):
        y = np.asarray(y, float)
        a, S = y[:d], y[d:][sym].reshape(d, d)
        b = np.zeros(d) if c is None else c.copy()
        J = np.zeros((d, d)) if W is None else W.copy()
        for V, Bt, M, r in heads:
            rhs_a = a if r is None else a + S @ r
            if M is None:
                b += V @ rhs_a
                J += V @ (S @ Bt)
            else:
                X = np.linalg.solve(eye - S @ M, np.column_stack([rhs_a, S @ Bt]))
                b += V @ X[:, 0]
                J += V @ X[:, 1:]
        JS = J @ S
        out = np.empty(n)
        out[:d] = b + J @ a
        out[d:] = (JS + JS.T).ravel()[flat]
        return out

    f.n_states = n
    return f, [h[2] for h in heads if h[2] is not None]


def pair_rhs(weights, d: int):
    """``(f, lift, kappas)`` of the *pair form*: the Gaussian layout extended by ``P = Σ⁻¹`` (packed upper
    triangle after ``Σ``), for constant ``weights`` with at least one head whose ``M = R + Rᵀ ≠ 0`` (ℓ2, custom);
    ``None`` for other weights (those of :func:`matrix_rhs` with no such head, or none at all).

    The tilt gives ``(I - ΣM)⁻¹Σ = (P - M)⁻¹``, so a head with ``M ≠ 0`` contributes ``J = V(P - M)⁻¹Bᵀ``,
    ``b = V(P - M)⁻¹(Pα + r)``, and ``dP/dt = -P(dΣ/dt)P = -(PJ + JᵀP)`` (``PΣ = I``).  Why: where ``Σ`` grows
    anisotropically (its large eigenvalues exponentially, e.g. ``M ≺ 0`` and ``J → V(-M)⁻¹Bᵀ``), ``I - ΣM`` has
    the condition of ``Σ`` and :func:`matrix_rhs`'s solve returns ``J`` with a relative error
    ``cond(I - ΣM)·eps`` (measured 1e-6 at cond 1e10): an rhs that rough makes an error-controlled step at
    ``rtol = 1e-12`` collapse although the solution goes on.  ``P - M`` is then well conditioned (its eigenvalues
    lie between ``λ_min(-M)`` and ``1/λ_min(Σ) + ‖M‖``), so ``J`` comes with ``eps`` relative error; ``Σ`` and
    ``P`` both evolve by products with that ``J`` (no inverse of an ill-conditioned matrix anywhere), ``Σ``
    keeps its large eigenvalues and ``P`` its small ones (``λ_min(Σ) = 1/λ_max(P)``).  Heads with ``M = 0``
    contribute ``J = VΣBᵀ``, ``b = V(α + Σr)`` as in :func:`matrix_rhs`.

    ``lift(y)``: the pair state from a layout state (``P`` by a Cholesky solve).  ``kappas(y)``: the 2-norm
    condition numbers ``(max cond(I - ΣM), max cond(P - M))`` over the heads with ``M ≠ 0`` at a layout state:
    the accuracy of ``J`` by each route (:func:`symbolic_tpde.gaussian.integrate.integrate_moments` switches to the
    pair form where the first has lost the precision and the second is smaller)."""
    got = matrix_rhs(weights, d)
    if got is None or not got[1]:
        return None
    heads = []
    for h in weights.heads:
        B, R, r = head_form(h)
        M = R + R.T
        heads.append((np.asarray(h.effective["V"], float), np.ascontiguousarray(B.T),
                      M if np.abs(M).max() > 0 else None, r))
    W = c = None
    if weights.ffn is not None:
        W, c = np.asarray(weights.ffn.W, float), np.asarray(weights.ffn.c, float)
    n = layout.state_size(d)
    iu = np.triu_indices(d)
    m = len(iu[0])
    tri = np.zeros((d, d), int)
    tri[iu] = np.arange(m)
    tri[iu[1], iu[0]] = tri[iu]
    sym, flat = tri.ravel(), iu[0] * d + iu[1]

    def f(t, z):
        z = np.asarray(z, float)
        a, S, P = z[:d], z[d:n][sym].reshape(d, d), z[n:][sym].reshape(d, d)
        b = np.zeros(d) if c is None else c.copy()
        J = np.zeros((d, d)) if W is None else W.copy()
        for V, Bt, M, r in heads:
            if M is None:
                b += V @ (a + S @ r)
                J += V @ (S @ Bt)
            else:
                X = np.linalg.solve(P - M, np.column_stack([P @ a + r, Bt]))
                b += V @ X[:, 0]
                J += V @ X[:, 1:]
        JS, PJ = J @ S, P @ J
        out = np.empty(n + m)
        out[:d] = b + J @ a
        out[d:n] = (JS + JS.T).ravel()[flat]
        out[n:] = -(PJ + PJ.T).ravel()[flat]
        return out

    def lift(y):
        y = np.asarray(y, float)
        S = y[d:][sym].reshape(d, d)
        P = np.linalg.solve(S, np.eye(d))
        return np.concatenate([y, (0.5 * (P + P.T))[iu]])

    Ms = got[1]

    def kappas(y):
        S = np.asarray(y, float)[d:][sym].reshape(d, d)
        k_sigma = max(np.linalg.cond(np.eye(d) - S @ M) for M in Ms)
        try:
            P = np.linalg.inv(S)
        except np.linalg.LinAlgError:
            return k_sigma, np.inf
        return k_sigma, max(np.linalg.cond(P - M) for M in Ms)

    f.n_states = n + m
    return f, lift, kappas


def affine_rhs(weights, d: int):
    """``f(t, y) = (b + Jα, JΣ + ΣJᵀ)`` on the Gaussian layout with ``(b, J)`` of :func:`affine_field` at each
    call (every affine kind, Sinkhorn included; slower than :func:`matrix_rhs`), or ``None`` where
    :func:`affine_field` is."""
    if affine_field(weights, np.zeros(d), np.eye(d)) is None:
        return None

    def f(t, y):
        a, S = layout.unpack(np.asarray(y, float), d)
        b, J = affine_field(weights, a, S)
        JS = J @ S
        return layout.pack(b + J @ a, JS + JS.T)

    return f


def frozen_alpha(f, d: int):
    """``f`` on the Gaussian layout with ``α`` held at 0 (its entries and their derivatives zero): the covariance
    equation alone, for kinds whose ``dΣ/dt`` does not involve ``α`` (the classifier and ``--covariance-only``)."""

    def g(t, y):
        z = np.array(y, float)
        z[:d] = 0.0
        out = f(t, z)
        out[:d] = 0.0
        return out

    return g


def tilt_margins(weights, d: int):
    """``g(t, y)``: ``1 - λ_max(Σ^{1/2}MΣ^{1/2})`` per head with ``M = R + Rᵀ`` not ``⪯ 0`` (the tilt exists iff
    ``Σ⁻¹ - M ≻ 0``), a scale-free form of the tilt's existence condition that stays meaningful when ``Σ`` becomes
    nearly singular (the generated ``det``-type condition tends to 0 with ``Σ``); ``None`` when every head has its
    tilt for every ``Σ`` (softmax, ℓ2: ``M ⪯ 0``) or a head has no quadratic log-kernel."""
    Ms = []
    for h in weights.heads:
        form = quadratic_form(h)
        if form is None:
            return None
        M = form[1] + form[1].T
        if np.linalg.eigvalsh(M).max() > 0:
            Ms.append(M)
    if not Ms:
        return None

    def g(t, y):
        S = layout.unpack(np.asarray(y, float), d)[1]
        lam, U = np.linalg.eigh(0.5 * (S + S.T))
        half = (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T
        return np.array([1.0 - np.linalg.eigvalsh(half @ M @ half).max() for M in Ms])

    return g


def checked_matrix_rhs(weights, d: int, f, points, *, freeze_alpha: bool, affine: bool = False):
    """The one construction of the inverse-free matrix form for a run (``tpde gaussian`` through
    :func:`symbolic_tpde.gaussian.integrate.matrix_form_for`, the long-time classifier through
    :mod:`symbolic_tpde.analysis.verdict`): ``(g, Ms, tilt, agrees)`` for constant ``weights``, or ``None`` where
    they have no such form.

    ``g`` is :func:`matrix_rhs`'s right-hand side (``affine``: else :func:`affine_rhs`'s, every affine kind,
    Sinkhorn included), with ``α`` frozen at 0 when ``freeze_alpha``; ``Ms`` the non-zero ``M = R + Rᵀ`` of the
    heads with a quadratic log-kernel (the solves with ``I - ΣM`` whose conditioning limits ``g``'s accuracy);
    ``tilt`` :func:`tilt_margins` (``None``: none); ``agrees`` whether ``g`` equals the generated right-hand
    side ``f`` at every packed state of ``points`` to ``1e-10`` relative (both are float64 evaluations of one
    formula at well-conditioned points, so a larger gap is a wrong form, not round-off), ``f`` finite there."""
    got = matrix_rhs(weights, d)
    if got is not None:
        g, Ms = got
    elif affine:
        g = affine_rhs(weights, d)
        if g is None:
            return None
        # beside a head without a quadratic form (Sinkhorn), the heads with one still solve with I - ΣM
        Ms = [M for M in (q[1] + q[1].T for q in map(quadratic_form, weights.heads) if q is not None)
              if np.abs(M).max() > 0]
    else:
        return None
    g = frozen_alpha(g, d) if freeze_alpha else g
    agrees = True
    for y in points:
        y = np.asarray(y, float)
        with np.errstate(all="ignore"):
            ref, new = np.asarray(f(0.0, y), float), np.asarray(g(0.0, y), float)
        agrees = agrees and bool(np.all(np.isfinite(ref)) and np.allclose(
            new, ref, rtol=1e-10, atol=1e-10 * max(1.0, float(np.abs(ref).max()))))
    return g, Ms, tilt_margins(weights, d), agrees


def _packing(d: int):
    """``(iu, sym, flat)``: the packed upper triangle's indices, the packed position of every entry of a ``d × d``
    matrix (row-major, both triangles) and the row-major positions of the packed entries."""
    iu = np.triu_indices(d)
    tri = np.zeros((d, d), int)
    tri[iu] = np.arange(len(iu[0]))
    tri[iu[1], iu[0]] = tri[iu]
    return iu, tri.ravel(), iu[0] * d + iu[1]


def _framed_heads(weights, frame, dtype=float):
    """``([(V, Bᵀ, M, r)] per head, (W, c) of the FFN or ``(None, None)``)`` in the frame ``Q`` (:func:`_in_frame`),
    as ``dtype`` arrays; ``None`` with an attention sink or a head without a quadratic log-kernel."""
    if weights.sink is not None:
        return None
    heads = []
    for h in weights.heads:
        form = head_form(h)
        if form is None:
            return None
        B, R, r = form
        heads.append(tuple(np.asarray(X, dtype) for X in _in_frame(
            frame, np.asarray(h.effective["V"], float), np.asarray(B.T, float), R + R.T, np.asarray(r, float))))
    ffn = (None, None) if weights.ffn is None else tuple(np.asarray(X, dtype) for X in _in_frame(
        frame, np.asarray(weights.ffn.W, float), np.asarray(weights.ffn.c, float)))
    return heads, ffn


def _in_frame(Q, *mats):
    """Each matrix ``X`` as ``QᵀXQ`` and each vector ``x`` as ``Qᵀx`` (``Q = None``: unchanged)."""
    if Q is None:
        return mats
    return tuple(None if X is None else (Q.T @ X @ Q if np.ndim(X) == 2 else Q.T @ X) for X in mats)


def matrix_jacobian(weights, d: int, *, freeze_alpha: bool = False, frame=None):
    """``jac(t, y)``: the exact Jacobian of :func:`matrix_rhs`'s ``f`` on the Gaussian layout (``None`` where
    :func:`matrix_rhs` is; ``freeze_alpha``: of :func:`frozen_alpha`'s ``f``, the rows and columns of ``α`` zero),
    for the stiffness test and the implicit method of the stiff continuation
    (:func:`symbolic_tpde.gaussian.integrate.integrate_moments`); ``frame``: an orthogonal ``Q``, the Jacobian of
    the same equation for the state ``(Qᵀα, QᵀΣQ)`` (every head's ``V``, ``Bᵀ``, ``M`` as ``QᵀXQ``, ``r`` as
    ``Qᵀr``: the moment equation is covariant under rotations).

    Per head, with ``G = I - ΣM``, ``X = G⁻¹ΣBᵀ``, ``x = G⁻¹(α + Σr)`` (``J = Σ VX``, ``b = Σ Vx``): a change
    ``H`` of ``Σ`` gives ``dG⁻¹ = G⁻¹HMG⁻¹``, so ``dJ = VG⁻¹H(MX + Bᵀ)`` and ``db = VG⁻¹H(Mx + r)``; a change
    ``δα`` gives ``db = VG⁻¹δα``.  Then ``d(dΣ/dt) = dJΣ + ΣdJᵀ + JH + HJᵀ`` and ``d(dα/dt) = db + dJα + Jδα``
    (softmax: ``M = 0``, ``dJ = VHBᵀ``).  Checked against central differences of ``f`` in the tests."""
    got = _framed_heads(weights, frame)
    if got is None:
        return None
    heads, (W, _) = got
    eye = np.eye(d)
    n = layout.state_size(d)
    iu, sym, flat = _packing(d)
    m = len(iu[0])
    Hs = np.zeros((m, d, d))                      # the packed basis of Sym(d): E_ij + E_ji (E_ii on the diagonal)
    Hs[np.arange(m), iu[0], iu[1]] = 1.0
    Hs[np.arange(m), iu[1], iu[0]] = 1.0

    def jac(t, y):
        y = np.asarray(y, float)
        a, S = y[:d], y[d:][sym].reshape(d, d)
        J = np.zeros((d, d)) if W is None else W.copy()
        dJ = np.zeros((m, d, d))                  # dJ/dΣ along each basis matrix
        db = np.zeros((m, d))
        Da = np.zeros((d, d))                     # db/dα
        for V, Bt, M, r in heads:
            G = eye - S @ M
            X = np.linalg.solve(G, np.column_stack([a + S @ r, S @ Bt]))
            x, Xs = X[:, 0], X[:, 1:]
            J += V @ Xs
            VGi = V @ np.linalg.inv(G)
            dJ += VGi @ Hs @ (M @ Xs + Bt)
            db += (VGi @ Hs @ (M @ x + r)[:, None])[..., 0]
            Da += VGi
        out = np.zeros((n, n))
        dJS = dJ @ S
        JH = J @ Hs
        out[d:, d:] = (dJS + dJS.transpose(0, 2, 1) + JH + JH.transpose(0, 2, 1)).reshape(m, d * d)[:, flat].T
        out[:d, d:] = (db + dJ @ a).T
        out[:d, :d] = Da + J
        return out

    if not freeze_alpha:
        return jac

    def frozen(t, y):
        z = np.array(y, float)
        z[:d] = 0.0
        out = jac(t, z)
        out[:d, :] = 0.0
        out[:, :d] = 0.0
        return out

    return frozen


def extended_matrix_rhs(weights, d: int, frame=None):
    """:func:`matrix_rhs`'s ``f`` with its products in extended precision (``numpy.longdouble``, 64-bit mantissa
    on x86 Linux; float64 itself on platforms without it), returned in float64, for weights whose heads all have
    ``M = R + Rᵀ = 0`` (softmax; no solve, products only); ``None`` for others.  ``frame``: an orthogonal ``Q``, the
    equation of the rotated state ``(Qᵀα, QᵀΣQ)`` (as :func:`matrix_jacobian`), evaluated with the rotated
    matrices, so that entries of a small eigen-direction of ``Σ`` keep their relative accuracy.

    Why: on a stiff rank-one collapse (softmax, ``Σ ≈ s uuᵀ`` with ``uᵀAu → 0``) ``dΣ/dt`` is a cancellation of
    terms ``‖V‖‖Σ‖²‖A‖`` (2e9 at ``s = 1e5``) down to ``‖dΣ/dt‖ ≈ 300``: float64 products leave it ``5e-10``
    relative noise, which an implicit method's Newton iteration at ``rtol = 1e-12`` cannot get below (measured, fuzz
    seed 7301 case 14 from t = 92 over 5 time units: LSODA 7619 steps in float64, 721 with this form)."""
    got = _framed_heads(weights, frame, np.longdouble)
    if got is None or any(np.abs(M).max() > 0 for _, _, M, _ in got[0]):
        return None
    heads, (W, c) = got
    n = layout.state_size(d)
    _, sym, flat = _packing(d)

    def f(t, y):
        y = np.asarray(y, np.longdouble)
        a, S = y[:d], y[d:][sym].reshape(d, d)
        b = np.zeros(d, np.longdouble) if c is None else c.copy()
        J = np.zeros((d, d), np.longdouble) if W is None else W.copy()
        for V, Bt, _, r in heads:
            b += V @ (a + S @ r)
            J += V @ (S @ Bt)
        JS = J @ S
        out = np.empty(n, np.longdouble)
        out[:d] = b + J @ a
        out[d:] = (JS + JS.T).ravel()[flat]
        return out.astype(float)

    f.n_states = n
    return f


def _tilt_covariance(U, s, M):
    """``(Σ⁻¹ - M)⁻¹ = LG⁻¹Lᵀ`` (``G = I - LᵀML``) from the SVD ``L = U diag(s) Wᵀ``:
    ``U C (C H C)⁻¹ C Uᵀ`` with ``H = diag(s⁻²) - UᵀMU`` and ``C = |diag H|^{-1/2}`` (``c_i = s_i/sqrt|1 - s_i²m_ii|``,
    no division by ``s``).  Why not one solve with ``G``: ``G``'s condition is ``~‖M‖‖Σ‖`` (9e8 at the stall of fuzz
    seed 3030 case 25), so that solve returns ``J`` with relative noise ~1e-11, which rtol = 1e-12 cannot accept;
    ``H`` is ``G`` in ``L``'s singular frame, and its equilibrated ``CHC`` has the condition of ``M`` on the large
    directions and unit diagonal on the small ones (``s_i⁻²`` dominates there), so the solve keeps ``eps`` relative
    accuracy; a small direction enters only through ``c_i ≈ s_i``."""
    Mt = U.T @ M @ U
    den = np.abs(1.0 - s * s * np.diag(Mt))
    c = s / np.sqrt(den)
    Hs = np.diag(1.0 / den) - c[:, None] * Mt * c[None, :]
    Uc = U * c
    return Uc @ np.linalg.solve(Hs, Uc.T)


def root_rhs(weights, d: int):
    """``(f, lift, to_layout, margins)`` of the *square-root form*: the state ``(α, L)`` (``L`` a square factor,
    row-major after ``α``) with ``Σ = LLᵀ`` (not kept triangular), for constant ``weights`` whose heads all have a
    quadratic log-kernel (softmax, ℓ2, custom), without attention sink; ``None`` for others.

    ``dL/dt = JL`` gives ``d(LLᵀ)/dt = JΣ + ΣJᵀ`` exactly, and the tilt is evaluated without an inverse of ``Σ``
    or of ``L``: with ``G = I - LᵀML`` (``M = R + Rᵀ``), ``(Σ⁻¹ - M)⁻¹ = LG⁻¹Lᵀ`` (evaluated in ``L``'s singular
    frame, :func:`_tilt_covariance`) and
    ``(I - ΣM)⁻¹ = I + LG⁻¹LᵀM``, so a head contributes ``J = VLG⁻¹LᵀBᵀ`` and
    ``b = V(α + LG⁻¹Lᵀ(Mα + r))`` (``M = 0``: ``G = I``, ``J = VΣBᵀ``, ``b = V(α + Σr)`` as in
    :func:`matrix_rhs`); ``dα/dt = b + Jα``.  Why: where ``Σ``'s eigenvalues spread past ``1/eps`` (one growing
    to 4e7 while another collapses to 8e-11, fuzz seed 3030 cases 16 and 25), float64 entries of ``Σ`` cannot
    hold the small one, while ``L`` holds it as a singular value ``sqrt(λ)``, with the condition
    ``cond L = sqrt(cond Σ)``.  ``G`` is ``LᵀML``-similar to ``Σ^{1/2}MΣ^{1/2}``: ``λ_min(G)`` is the tilt
    margin of :func:`tilt_margins` (``G ⪰ I`` where ``M ⪯ 0``).

    ``lift(y)``: the root state from a layout state (Cholesky of the symmetrised ``Σ``); ``to_layout(z)``: the
    layout state ``(α, LLᵀ)`` of one state or of rows; ``margins(t, z)``: ``λ_min(G)`` per head whose ``M`` is
    not ``⪯ 0`` (an empty array when none)."""
    got = _framed_heads(weights, None)
    if got is None:
        return None
    heads = [(V, np.ascontiguousarray(Bt), M if np.abs(M).max() > 0 else None, r) for V, Bt, M, r in got[0]]
    W, c = got[1]
    eye = np.eye(d)
    n = layout.state_size(d)
    iu, _, _ = _packing(d)
    indefinite = [M for _, _, M, _ in heads if M is not None and np.linalg.eigvalsh(M).max() > 0]

    def f(t, z):
        z = np.asarray(z, float)
        a, L = z[:d], z[d:].reshape(d, d)
        b = np.zeros(d) if c is None else c.copy()
        J = np.zeros((d, d)) if W is None else W.copy()
        svd = None
        for V, Bt, M, r in heads:
            if M is None:
                K, x = L @ L.T, r
            else:
                if svd is None:
                    svd = np.linalg.svd(L)
                K, x = _tilt_covariance(svd[0], svd[1], M), M @ a + r
            b += V @ (a + K @ x)
            J += V @ (K @ Bt)
        out = np.empty(d + d * d)
        out[:d] = b + J @ a
        out[d:] = (J @ L).ravel()
        return out

    def lift(y):
        a, S = layout.unpack(np.asarray(y, float), d)
        return np.concatenate([a, np.linalg.cholesky(0.5 * (S + S.T)).ravel()])

    def to_layout(z):
        z = np.asarray(z, float)
        L = z[..., d:].reshape(z.shape[:-1] + (d, d))
        S = L @ np.swapaxes(L, -1, -2)
        out = np.empty(z.shape[:-1] + (n,))
        out[..., :d] = z[..., :d]
        out[..., d:] = S[..., iu[0], iu[1]]
        return out

    def margins(t, z):
        L = np.asarray(z, float)[d:].reshape(d, d)
        return np.array([np.linalg.eigvalsh(eye - L.T @ M @ L).min() for M in indefinite])

    f.n_states = d + d * d
    return f, lift, to_layout, margins
