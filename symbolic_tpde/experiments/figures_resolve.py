"""Resolving the limit rank in ``d = 2`` when ``Σ``'s small eigenvalue is below the integrator's resolution.

In the 'two lines' and 'initial data' families (indefinite ``A + Aᵀ``, random ``V``) the converging rows tend to a
rank-one matrix ``s uuᵀ`` with ``uᵀAu = 0`` (an equilibrium of ``dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ``: ``ΣAΣ = s²(uᵀAu)uuᵀ``),
approached *exponentially* (the linearisation of the flow at ``s uuᵀ`` is proportional to ``s``).  The small
eigenvalue therefore reaches the round-off level ``rtol·tr Σ`` of the integrated entries long before the horizon,
and the classifier of :mod:`.clustering`, which compares ``Σ(T/10)`` with ``Σ(T)``, sees noise: a "rank 2"
(noise that does not decay) or an "undetermined" verdict.

The fix integrates ``ℓ = log det Σ`` alongside ``Σ`` (README Mathematics §4, volume identity): for an affine field
``Γ(x) = b + Jx``, ``dΣ/dt = JΣ + ΣJᵀ`` gives ``dℓ/dt = tr(Σ⁻¹ dΣ/dt) = 2 tr J``, evaluated without ``Σ⁻¹``:

* softmax head (README Mathematics §3): ``J = VΣA``, so ``2 tr J = tr(Σ(AV + VᵀAᵀ))``;
* ℓ2 head: ``J = V(Σ⁻¹ + cKᵀK)⁻¹cKᵀQ = VΣ(I + cKᵀKΣ)⁻¹cKᵀQ`` with ``c = 2/τ``;
* multi-head: the sum over heads.

``ℓ`` is an ordinary quadrature of a bounded integrand, accurate to ``rtol`` *relative to ℓ* whatever the size
of ``det Σ``; the small eigenvalue is then ``λ_min = e^ℓ / λ_max`` (``λ_max`` is well resolved), and the
classification of :func:`.clustering.classify_pair` is applied to ``Σ`` rebuilt with this ``λ_min``.  The rate
formula is checked against ``tr(Σ⁻¹ F(Σ))`` on well-conditioned ``Σ`` in ``tests/test_figure_counts.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def logdet_rate(weights) -> Callable[[np.ndarray], np.ndarray]:
    """``G(S) (N,)``: ``d/dt log det Σ = 2 tr J(Σ)`` for ``S (N, d, d)`` (module docstring); softmax and ℓ2 heads.

    Raises ``ValueError`` for other kinds (no formula here; Sinkhorn's ``dΣ/dt = VCᵀ + CVᵀ`` is not of the
    form ``JΣ + ΣJᵀ`` with an explicit ``J``)."""
    terms = []
    for h in weights.heads:
        p = h.params
        if h.kind == "softmax":
            M = p["A"] @ p["V"] + p["V"].T @ p["A"].T
            terms.append(lambda S, M=M: np.einsum("nij,ji->n", S, M))
        elif h.kind == "l2":
            c = 2.0 / float(p["tau"])
            KK, KQ, V = c * p["K"].T @ p["K"], c * p["K"].T @ p["Q"], p["V"]
            eye = np.eye(KK.shape[0])

            def term(S, KK=KK, KQ=KQ, V=V, eye=eye):
                # X = Σ(I + cKᵀKΣ)⁻¹ from the solve Xᵀ = (I + cKᵀKΣ)⁻ᵀ Σ (Σ symmetric)
                X = np.linalg.solve(np.swapaxes(eye + KK @ S, 1, 2), np.swapaxes(S, 1, 2))
                X = np.swapaxes(X, 1, 2)
                return 2.0 * np.einsum("ij,njk,ki->n", V, X, KQ)

            terms.append(term)
        else:
            raise ValueError(f"no log-det rate for {h.kind!r} heads")
    return lambda S: sum(t(S) for t in terms)


def resolve_d2(weights, F: Callable, Sigma0s: np.ndarray, T: float, rtol: float = 1e-9) -> list:
    """Re-classify ``d = 2`` rows from ``Σ₀`` at horizon ``T`` with ``log det Σ`` integrated alongside ``Σ``
    (module docstring); returns :class:`.clustering.ClusteringResult` per row.  ``F`` is the batched
    Gaussian right-hand side (``α`` columns first, kept at 0)."""
    from ..numerics.rk import Status, rk_solve
    from ..analysis.clustering import ClusteringResult, classify_pair

    G = logdet_rate(weights)
    N = len(Sigma0s)

    def mats(Y):
        S = np.empty((len(Y), 2, 2))
        S[:, 0, 0], S[:, 0, 1], S[:, 1, 0], S[:, 1, 1] = Y[:, 2], Y[:, 3], Y[:, 3], Y[:, 4]
        return S

    def F_aug(t, Y):
        return np.concatenate([F(t, Y[:, :5]), G(mats(Y))[:, None]], axis=1)

    ell0 = np.linalg.slogdet(Sigma0s)[1]
    Y0 = np.concatenate([np.zeros((N, 2)), Sigma0s[:, 0, :], Sigma0s[:, 1, 1:], ell0[:, None]], axis=1)
    res = rk_solve(F_aug, 0.0, Y0, T, rtol=rtol, atol=1e-14, t_eval=[T / 10, T], max_steps=50_000)
    out = []
    tr0 = np.trace(Sigma0s, axis1=1, axis2=2)

    def eig_true(Y):
        # (λ_min, λ_max) with λ_max from the integrated entries and λ_min = e^ℓ/λ_max (module docstring)
        lmax = np.linalg.eigvalsh(mats(Y[None])[0])[1]
        return np.diag([np.exp(Y[5]) / lmax, lmax])

    for i in range(N):
        if res.status[i] != Status.OK or not np.all(np.isfinite(res.y[i])):
            out.append(ClusteringResult("undetermined", Sigma_T=mats(res.y[i][None])[0], t=float(res.t[i])))
            continue
        # classify_pair on the eigenvalue matrices diag(λ_min, λ_max) at T/10 and T (its eigen-decomposition
        # of a diagonal matrix is exact); this compares eigenvalue with eigenvalue, which is its
        # direction-by-direction test once the eigenvectors have settled (the limit s uuᵀ is approached along
        # a fixed u); the returned Σ_T and range are the integrated ones.
        c = classify_pair(eig_true(res.ys[0, i]), eig_true(res.y[i]), T / 10, T, float(tr0[i]), floor=0.0)
        S_T = mats(res.y[i][None])[0]
        U = np.linalg.eigh(S_T)[1]
        c.Sigma_T = S_T
        if c.rank is not None:
            c.range = U[:, 2 - c.rank:]
        out.append(c)
    return out
