"""Per-layer statistics of hidden states ``(layers, tokens, d)`` and their comparison with the moment ODE.

Per layer (:func:`layer_report`):

* ``mean_cosine``: mean of ``cos(x_i, x_j)`` over pairs ``i ≠ j``, and its ``histogram`` (counts on
  ``bins`` equal bins of ``[-1, 1]``); → 1 as tokens cluster in one direction;
* ``effective_rank``: ``exp(H(p))``, ``p = s/Σs`` the normalised singular values of the centred cloud
  (Roy & Vetterli 2007): ``d`` for an isotropic cloud, 1 for a line;
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


def layer_report(X, *, bins: int = 20, cluster_rel: float = 0.1) -> dict:
    """Statistics of one cloud ``X (n, d)`` (module docstring)."""
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
    s = np.linalg.svd(Xc, compute_uv=False)
    p = s / s.sum() if s.sum() > 0 else np.ones(1)
    p = p[p > 0]
    rms = float(np.sqrt((X ** 2).sum(1).mean()))
    gw = gaussianity_witness(X, rng=np.random.default_rng(0)) if n > 8 else None
    return {"mean_cosine": float(off.mean()), "histogram": hist.tolist(), "effective_rank": float(np.exp(-(p * np.log(p)).sum())),
            "alpha": mu, "Sigma": Xc.T @ Xc / (n - 1), "gaussianity": None if gw is None else
            {"max_abs_z": float(gw["max_abs_z"]), "threshold": float(gw["threshold"]),
             "gaussian_rejected": bool(gw["gaussian_rejected"])},
            "clusters": _components(X, cluster_rel * rms) if rms > 0 else 1}


def hidden_state_report(H, **kw) -> list[dict]:
    """:func:`layer_report` of every layer of ``H (layers, tokens, d)``."""
    H = np.asarray(H, float)
    if H.ndim != 3:
        raise InputError("hidden_states", f"expected (layers, tokens, d), got shape {H.shape}")
    return [layer_report(X, **kw) for X in H]


def compare_with_ode(model, H, tau: float = 1.0, steps_per_layer: int = 10) -> list[dict]:
    """Per layer: the moment ODE from layer 0's fit vs the fit of the hidden states (module docstring)."""
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
    for l, y in enumerate(sol.y):
        a, S = H[l].mean(0), np.cov(H[l], rowvar=False)
        out.append({"layer": l, "alpha_error": float(np.linalg.norm(y[:d] - a)),
                    "Sigma_rel_error": float(np.linalg.norm(y[d:].reshape(d, d) - S) / np.linalg.norm(S))})
    return out
