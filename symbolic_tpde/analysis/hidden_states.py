"""Per-layer statistics of hidden states ``(layers, tokens, d)`` and their comparison with the moment ODE.

Per layer (:func:`layer_report`):

* ``mean_cosine``: mean of ``cos(x_i, x_j)`` over pairs ``i ≠ j``, and its ``histogram`` (counts on
  ``bins`` equal bins of ``[-1, 1]``); → 1 as tokens cluster in one direction;
* ``effective_rank``: ``exp(H(p))``, ``p = λ/Σλ`` the normalised eigenvalues of the **covariance** of the cloud
  (entropy effective rank, Roy & Vetterli 2007, on the covariance spectrum; the squares of the centred cloud's
  singular values, not the singular values themselves, whose entropy is another number that can move the other
  way over depth): ``d`` for an isotropic cloud, 1 for a line; ``top_fraction`` ``λ_max/Σλ``;
* ``mean_cosine_within`` / ``mean_cosine_across``: with sequence ids ``seq``, the mean of ``cos(x_i, x_j)`` over
  pairs ``i ≠ j`` of the same sequence and over pairs of different sequences, separately (pooling them hides
  that they move apart); ``mean_cosine`` pools all pairs;
* ``alpha``, ``Sigma``: the Gaussian fit (sample mean and covariance); ``gaussianity``: the projection
  skewness/kurtosis witness of :func:`symbolic_tpde.numerics.measures.estimators.gaussianity_witness` (``max_abs_z``
  against its Bonferroni threshold: rejected or not at level 1e-3);
* ``clusters``: connected components of the graph joining tokens closer than ``radius`` = ``cluster_rel``
  times the tokens' RMS norm ``sqrt(mean |x_i|²)`` (single linkage; a stated, scale-free criterion, not a
  test that the cloud is clustered: a diffuse cloud splits into many components).

:func:`compare_with_ode`: the matrix moment ODE of a :class:`~.model_io.LowRankModel` started from the first
layer's Gaussian fit, against the Gaussian fits of the later layers (relative Frobenius error of ``Σ``, error
of ``α``).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError


def _components(X: np.ndarray, radius: float) -> int:
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    pairs = cKDTree(X).query_pairs(radius, output_type="ndarray")
    from scipy.sparse import coo_matrix

    n = len(X)
    G = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n)) if len(pairs) else \
        coo_matrix((n, n))
    return int(connected_components(G, directed=False)[0])


EFFECTIVE_RANK_DEFINITION = ("exp of the entropy of the normalised covariance eigenvalues λ_k/Σλ (centred cloud, "
                             "tokens of all sequences pooled)")


def covariance_spectrum(X) -> np.ndarray:
    """Eigenvalues (descending, clipped at 0) of the sample covariance of ``X (n, d)``."""
    X = np.asarray(X, float)
    Xc = X - X.mean(0)
    s = np.linalg.svd(Xc, compute_uv=False)
    return np.sort(s * s / max(len(X) - 1, 1))[::-1]


def effective_rank(X) -> float:
    """``exp`` of the entropy of the normalised covariance eigenvalues (:data:`EFFECTIVE_RANK_DEFINITION`)."""
    lam = covariance_spectrum(X)
    if lam.sum() <= 0:
        return 1.0
    p = lam / lam.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def cosine_within_across(X, seq) -> tuple[float, float]:
    """Mean pairwise cosine over pairs ``i ≠ j`` of the same sequence, and over pairs of different sequences
    (``nan`` when there is one sequence)."""
    X = np.asarray(X, float)
    seq = np.asarray(seq)
    norms = np.linalg.norm(X, axis=1)
    U = X / np.where(norms > 0, norms, 1.0)[:, None]
    G = U @ U.T
    same = seq[:, None] == seq[None, :]
    within = same & ~np.eye(len(X), dtype=bool)
    return (float(G[within].mean()) if within.any() else float("nan"),
            float(G[~same].mean()) if (~same).any() else float("nan"))


def layer_report(X, *, bins: int = 20, cluster_rel: float = 0.1, seq=None) -> dict:
    """Statistics of one cloud ``X (n, d)`` (module docstring); ``seq``: sequence id of each token."""
    from ..numerics.measures.estimators import gaussianity_witness

    X = np.asarray(X, float)
    n, d = X.shape
    if n < 3:
        raise InputError("hidden_states", "need at least 3 tokens per layer")
    norms = np.linalg.norm(X, axis=1)
    U = X / np.where(norms > 0, norms, 1.0)[:, None]
    G = U @ U.T
    off = G[~np.eye(n, dtype=bool)]
    hist, _ = np.histogram(np.clip(off, -1, 1), bins=bins, range=(-1, 1))
    mu = X.mean(0)
    Xc = X - mu
    lam = covariance_spectrum(X)
    within, across = cosine_within_across(X, np.zeros(n, int) if seq is None else seq)
    rms = float(np.sqrt((X ** 2).sum(1).mean()))
    gw = gaussianity_witness(X, rng=np.random.default_rng(0)) if n > 8 else None
    return {"mean_cosine": float(off.mean()), "histogram": hist.tolist(), "effective_rank": effective_rank(X),
            "effective_rank_definition": EFFECTIVE_RANK_DEFINITION,
            "top_fraction": float(lam[0] / lam.sum()) if lam.sum() > 0 else 1.0,
            "mean_cosine_within": within, "mean_cosine_across": across,
            "alpha": mu, "Sigma": Xc.T @ Xc / (n - 1), "gaussianity": None if gw is None else
            {"max_abs_z": float(gw["max_abs_z"]), "threshold": float(gw["threshold"]),
             "gaussian_rejected": bool(gw["gaussian_rejected"])},
            "clusters": _components(X, cluster_rel * rms) if rms > 0 else 1}


def hidden_state_report(H, seq=None, **kw) -> list[dict]:
    """:func:`layer_report` of every layer of ``H (layers, tokens, d)``; ``seq`` the sequence id of each token."""
    H = np.asarray(H, float)
    if H.ndim != 3:
        raise InputError("hidden_states", f"expected (layers, tokens, d), got shape {H.shape}")
    if seq is not None and np.shape(seq) != (H.shape[1],):
        raise InputError("seq", f"expected one sequence id per token ({H.shape[1]}), got shape {np.shape(seq)}")
    return [layer_report(X, seq=seq, **kw) for X in H]


def compare_with_ode(model, H, tau: float = 1.0, steps_per_layer: int = 10) -> list[dict]:
    """Per layer: the moment ODE from layer 0's fit vs the fit of the hidden states (module docstring).  One row
    per layer ``0 … L`` always; ``status`` ``ok``, or ``not reached`` (errors NaN) for the layers after the
    integration stopped (a blow-up or a stalled run: ``stopped`` names it with its time); the stopping state is
    never reported as a layer."""
    from ..numerics.particles.lowrank import integrate_moments

    H = np.asarray(H, float)
    if H.shape[0] != model.n_layers + 1 or H.shape[2] != model.d:
        raise InputError("hidden_states", f"expected ({model.n_layers + 1}, tokens, {model.d}) (input of every layer "
                         f"and the output), got {H.shape}")
    a0 = H[0].mean(0)
    S0 = np.cov(H[0], rowvar=False)
    sol = integrate_moments(a0, S0, model.layers(), tau, steps_per_layer=steps_per_layer)
    d = model.d
    out = []
    reached = {round(float(t) / tau): y for t, y in zip(sol.t, sol.y)
               if abs(float(t) / tau - round(float(t) / tau)) < 1e-9}
    stopped = "" if sol.status == "ok" else f"{sol.status} at t = {sol.t_end:.6g}"
    for l in range(model.n_layers + 1):
        a, S = H[l].mean(0), np.cov(H[l], rowvar=False)
        y = reached.get(l)
        if y is None or (stopped and l * tau > sol.t_end):
            out.append({"layer": l, "alpha_error": float("nan"), "Sigma_rel_error": float("nan"),
                        "status": "not reached", "stopped": stopped})
            continue
        out.append({"layer": l, "alpha_error": float(np.linalg.norm(y[:d] - a)),
                    "Sigma_rel_error": float(np.linalg.norm(y[d:].reshape(d, d) - S) / np.linalg.norm(S)),
                    "status": "ok", "stopped": stopped})
    return out
