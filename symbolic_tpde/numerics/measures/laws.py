"""Initial laws of a scenario's ``init`` block: samplers, densities and cell masses by type.

The schema (keys, checks, exact mean and covariance) is :data:`symbolic_tpde.inputs.scenario.INIT_SCHEMAS`; this
module holds what needs numerics, one entry per type, added with :func:`register_init`:

* ``sampler(spec, n, rng) -> (n, d)`` i.i.d. draws (``rng`` a ``numpy.random.Generator``);
* ``density(spec, X) -> (m,)`` the Lebesgue density at the rows of ``X`` (``None``: the law has none, e.g.
  ``empirical``);
* ``cells(spec, edges) -> masses`` the mass of each cell of a Cartesian grid (``edges``: one increasing edge
  array per axis), used by the grid solver; the default integrates ``density`` by the midpoint rule on
  ``SUB``^d sub-cells;
* ``geometry``: ``"R^d"`` here; the sphere types (``uniform_sphere``, ``vmf``, ``frame``, ``points``) are
  registered at the end of this module (section "laws on the sphere"), their densities with respect to the
  surface measure of ``S^{d-1}``.

Built in: ``gaussian`` (the draws are those of ``rng.multivariate_normal(..., method="cholesky")``, as the
particle command always drew), ``mixture`` (component labels by ``rng.choice``, then Gaussian draws),
``uniform_box``, ``uniform_ball`` (direction ``g/|g|`` of a standard normal ``g``, radius ``r U^{1/d}``),
``empirical`` (i.i.d. draws *with replacement* from the file's points: the empirical measure's own law) and
``grid_density`` (a cell by its mass, then uniform in the cell).  Cell masses: Gaussian and mixture by a
tensor Gauss–Legendre rule of ``GAUSS`` points per axis (error ``O(h^{2·GAUSS})`` per cell for smooth
densities); ``uniform_box`` and ``grid_density`` exactly (interval overlaps per axis); ``empirical`` by
depositing each point's mass ``1/n`` in its cell.  A mass outside the grid is not put anywhere: callers
report ``1 - sum(masses)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...errors import InputError

__all__ = ["register_init", "sample", "density", "cell_masses", "INIT_TYPES", "InitType", "GAUSS", "SUB",
           "sample_sphere", "log_sphere_area"]

GAUSS = 4
SUB = 8


@dataclass(frozen=True)
class InitType:
    name: str
    sampler: Callable
    density: Callable | None = None
    geometry: str = "R^d"
    cells: Callable | None = None


INIT_TYPES: dict[str, InitType] = {}


def register_init(name: str, sampler: Callable, density: Callable | None = None, geometry: str = "R^d",
                  cells: Callable | None = None) -> InitType:
    """Register (or replace) the numerics of the ``init`` type ``name`` (its schema goes into
    :data:`symbolic_tpde.inputs.scenario.INIT_SCHEMAS`)."""
    INIT_TYPES[name] = InitType(name, sampler, density, geometry, cells)
    return INIT_TYPES[name]


def _get(spec) -> InitType:
    try:
        return INIT_TYPES[spec.type]
    except KeyError:
        raise InputError("init.type", f"no sampler registered for {spec.type!r}; known: {sorted(INIT_TYPES)}") \
            from None


def sample(spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` i.i.d. draws ``(n, d)`` from the law of ``spec`` (a :class:`symbolic_tpde.inputs.scenario.InitSpec`)."""
    X = np.asarray(_get(spec).sampler(spec, int(n), rng), dtype=float)
    return X.reshape(int(n), spec.d)


def density(spec, X) -> np.ndarray:
    """The density of ``spec`` at the rows of ``X`` (InputError if the law has none)."""
    t = _get(spec)
    if t.density is None:
        raise InputError("init.type", f"{spec.type!r} has no density (an empirical measure)")
    X = np.atleast_2d(np.asarray(X, dtype=float))
    return np.asarray(t.density(spec, X), dtype=float)


def _centres(e):
    return (e[1:] + e[:-1]) / 2


def _tensor_points(edges, nodes, weights):
    """Quadrature points ``(cells, q, d)`` and weights ``(cells, q)`` (volume included) on a Cartesian grid."""
    d = len(edges)
    pts_ax, w_ax = [], []
    for e in edges:
        h = np.diff(e)
        pts_ax.append(_centres(e)[:, None] + h[:, None] * nodes[None, :] / 2)   # (N_k, q)
        w_ax.append(h[:, None] * weights[None, :] / 2)
    grids = np.meshgrid(*[np.arange(len(e) - 1) for e in edges], indexing="ij")
    qgrids = np.meshgrid(*[np.arange(len(nodes))] * d, indexing="ij")
    cell_idx = [g.ravel() for g in grids]
    q_idx = [g.ravel() for g in qgrids]
    P = np.stack([pts_ax[k][cell_idx[k][:, None], q_idx[k][None, :]] for k in range(d)], axis=-1)
    W = np.ones(P.shape[:2])
    for k in range(d):
        W = W * w_ax[k][cell_idx[k][:, None], q_idx[k][None, :]]
    return P, W


def _quadrature_cells(spec, edges, nodes, weights):
    P, W = _tensor_points(edges, nodes, weights)
    f = density(spec, P.reshape(-1, spec.d)).reshape(W.shape)
    return (f * W).sum(axis=1).reshape([len(e) - 1 for e in edges])


def _gauss_cells(spec, edges):
    x, w = np.polynomial.legendre.leggauss(GAUSS)
    return _quadrature_cells(spec, edges, x, w)


def _midpoint_cells(spec, edges):
    x = (np.arange(SUB) + 0.5) / SUB * 2 - 1
    return _quadrature_cells(spec, edges, x, np.full(SUB, 2.0 / SUB))


def _overlap(e_to, e_from):
    """``O[i, j] = |cell_i ∩ src_j| / |src_j|`` for 1-D edge arrays."""
    lo = np.maximum(e_to[:-1, None], e_from[None, :-1])
    hi = np.minimum(e_to[1:, None], e_from[None, 1:])
    return np.clip(hi - lo, 0, None) / np.diff(e_from)[None, :]


def cell_masses(spec, edges) -> np.ndarray:
    """Mass of each cell of the Cartesian grid with the given edges (shape ``(N_0, ..., N_{d-1})``)."""
    edges = [np.asarray(e, dtype=float) for e in edges]
    if len(edges) != spec.d:
        raise InputError("grid", f"{len(edges)} edge arrays for a law on R^{spec.d}")
    t = _get(spec)
    if t.geometry != "R^d":
        raise InputError("init.type", f"{spec.type!r} is a law on the sphere: no cell masses on a grid of R^d")
    if t.cells is not None:
        return np.asarray(t.cells(spec, edges), dtype=float)
    if t.density is None:
        raise InputError("init.type", f"{spec.type!r} gives no cell masses")
    return _midpoint_cells(spec, edges)


# ---------------------------------------------------------------------------------------------- built-ins
def _gaussian_pdf(X, alpha, Sigma):
    d = len(alpha)
    L = np.linalg.cholesky(Sigma)
    Z = np.linalg.solve(L, (X - alpha).T)
    return np.exp(-0.5 * np.sum(Z * Z, axis=0)) / ((2 * math.pi) ** (d / 2) * np.prod(np.diag(L)))


def _mixture_sample(spec, n, rng):
    p = spec.params
    k = rng.choice(len(p["weights"]), size=n, p=p["weights"])
    X = np.empty((n, spec.d))
    for j in range(len(p["weights"])):
        sel = k == j
        X[sel] = rng.multivariate_normal(p["means"][j], p["covs"][j], size=int(sel.sum()), method="cholesky")
    return X


def _ball_sample(spec, n, rng):
    g = rng.standard_normal((n, spec.d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return spec.params["center"] + spec.params["radius"] * g * rng.random((n, 1)) ** (1.0 / spec.d)


def _ball_density(spec, X):
    d, r = spec.d, spec.params["radius"]
    vol = math.pi ** (d / 2) / math.gamma(d / 2 + 1) * r ** d
    return (np.linalg.norm(X - spec.params["center"], axis=1) <= r) / vol


def _box_density(spec, X):
    lo, hi = spec.params["low"], spec.params["high"]
    return np.all((X >= lo) & (X <= hi), axis=1) / float(np.prod(hi - lo))


def _box_cells(spec, edges):
    lo, hi = spec.params["low"], spec.params["high"]
    out = np.ones(())
    for k, e in enumerate(edges):
        o = _overlap(e, np.array([lo[k], hi[k]]))[:, 0]
        out = np.multiply.outer(out, o)
    return out


def _grid_sample(spec, n, rng):
    edges, p = spec.params["edges"], spec.params["mass"]
    flat = rng.choice(p.size, size=n, p=p.ravel())
    idx = np.unravel_index(flat, p.shape)
    U = rng.random((n, spec.d))
    return np.stack([e[i] + U[:, k] * (e[i + 1] - e[i]) for k, (e, i) in enumerate(zip(edges, idx))], axis=1)


def _grid_density(spec, X):
    edges, p = spec.params["edges"], spec.params["mass"]
    idx, inside = [], np.ones(len(X), bool)
    vol = np.ones(len(X))
    for k, e in enumerate(edges):
        i = np.searchsorted(e, X[:, k], side="right") - 1
        ok = (i >= 0) & (i < len(e) - 1)
        i = np.clip(i, 0, len(e) - 2)
        inside &= ok
        vol *= np.diff(e)[i]
        idx.append(i)
    return np.where(inside, p[tuple(idx)] / vol, 0.0)


def _grid_cells(spec, edges):
    out = spec.params["mass"]
    for k, (e_to, e_from) in enumerate(zip(edges, spec.params["edges"])):
        out = np.moveaxis(np.tensordot(_overlap(e_to, e_from), out, axes=([1], [k])), 0, k)
    return out


def _deposit_cells(spec, edges):
    X = spec.params["points"]
    H, _ = np.histogramdd(X, bins=list(edges))
    return H / len(X)


register_init("gaussian",
              lambda s, n, rng: rng.multivariate_normal(s.params["alpha"], s.params["Sigma"], size=n,
                                                        method="cholesky"),
              lambda s, X: _gaussian_pdf(X, s.params["alpha"], s.params["Sigma"]), cells=_gauss_cells)
register_init("mixture", _mixture_sample,
              lambda s, X: sum(w * _gaussian_pdf(X, m, C) for w, m, C in
                               zip(s.params["weights"], s.params["means"], s.params["covs"])),
              cells=_gauss_cells)
register_init("uniform_box",
              lambda s, n, rng: s.params["low"] + (s.params["high"] - s.params["low"]) * rng.random((n, s.d)),
              _box_density, cells=_box_cells)
register_init("uniform_ball", _ball_sample, _ball_density)
register_init("empirical", lambda s, n, rng: s.params["points"][rng.integers(0, len(s.params["points"]), n)],
              None, cells=_deposit_cells)
register_init("grid_density", _grid_sample, _grid_density, cells=_grid_cells)


# ------------------------------------------------------------------------------------ laws on the sphere
# One schema serves both geometries: the keys and checks of every type are in
# :data:`symbolic_tpde.inputs.scenario.INIT_SCHEMAS` (the sphere types are those of ``INIT_GEOMETRY``), the numerics
# here (``geometry="sphere"``):
#
# * ``{"type": "uniform_sphere"}``: normalised standard Gaussians (uniform by rotation invariance);
# * ``{"type": "vmf", "mu": [...], "kappa": k}``: von Mises-Fisher ``∝ e^{κ<μ, θ>}`` (``μ`` normalised,
#   ``κ >= 0``), Wood's rejection sampler (Wood, Comm. Stat. Simul. Comput. 23 (1994) 157);
# * ``{"type": "frame", "rotate": false}``: the first ``n`` basis vectors (``n <= d``, pairwise ``<θ_i, θ_j> = 0``);
#   ``"rotate": true`` applies a Haar-random rotation (QR of a Gaussian matrix with the sign fix of Mezzadri,
#   Notices AMS 54 (2007) 592).  Not i.i.d. and without a density;
# * ``{"type": "points", "path": "file.npy"}``: the ``(n, d)`` array's rows, normalised, are the tokens
#   themselves (``n`` must equal the file's row count; no density).
#
# Densities are with respect to the surface measure of ``S^{d-1}`` (uniform ``1/|S^{d-1}|``; vMF
# ``C_d(κ) e^{κ<μ,θ>}``, ``C_d(κ) = κ^{d/2-1}/((2π)^{d/2} I_{d/2-1}(κ))``).  A type with a density draws i.i.d.
# tokens, so a draw avoids any null set almost surely (what the "almost every initial condition" theorems of
# :mod:`symbolic_tpde.analysis.sphere_verdict` need).


def log_sphere_area(d: int) -> float:
    """``log |S^{d-1}| = log(2 π^{d/2}/Γ(d/2))``."""
    return math.log(2.0) + d / 2 * math.log(math.pi) - math.lgamma(d / 2)


def _uniform(spec, n, rng):
    g = rng.standard_normal((n, spec.d))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _vmf(spec, n, rng):
    mu, kappa, d = spec.params["mu"], spec.params["kappa"], spec.d
    m = d - 1
    if kappa == 0:
        return _uniform(spec, n, rng)
    # Wood (1994): w = <θ, μ> by rejection from a transformed Beta((d-1)/2, (d-1)/2)
    b = m / (2 * kappa + math.sqrt(4 * kappa ** 2 + m ** 2))          # = (-2κ + √(4κ² + m²))/m, stably
    x0 = (1 - b) / (1 + b)
    c = kappa * x0 + m * math.log(1 - x0 ** 2)
    w = np.empty(n)
    filled = 0
    while filled < n:
        k = 2 * (n - filled) + 8
        z = rng.beta(m / 2, m / 2, size=k)
        ww = (1 - (1 + b) * z) / (1 - (1 - b) * z)
        ok = kappa * ww + m * np.log1p(-x0 * ww) - c >= np.log(rng.random(k))
        got = ww[ok][: n - filled]
        w[filled: filled + got.size] = got
        filled += got.size
    v = rng.standard_normal((n, d))
    v -= np.outer(v @ mu, mu)
    v /= np.linalg.norm(v, axis=1)[:, None]
    X = w[:, None] * mu + np.sqrt(np.clip(1 - w ** 2, 0, None))[:, None] * v
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _vmf_density(spec, X):
    from scipy.special import ive

    mu, kappa, d = spec.params["mu"], spec.params["kappa"], spec.d
    if kappa == 0:
        return np.full(len(X), math.exp(-log_sphere_area(d)))
    logC = (d / 2 - 1) * math.log(kappa) - d / 2 * math.log(2 * math.pi) - math.log(ive(d / 2 - 1, kappa)) - kappa
    return np.exp(logC + kappa * (X @ mu))


def _frame(spec, n, rng):
    d = spec.d
    if n > d:
        raise InputError("init", f"an orthonormal frame has at most d = {d} tokens, got n = {n}")
    E = np.eye(d)[:n]
    if spec.params["rotate"]:
        Qm, R = np.linalg.qr(rng.standard_normal((d, d)))
        E = E @ (Qm * np.sign(np.diag(R))).T
    return E


def _points(spec, n, rng):
    X = spec.params["points"]
    if len(X) != n:
        raise InputError("init.path", f"the file holds {len(X)} tokens, the run asks for n = {n}")
    return np.array(X)


def _circle_modes_density(spec, X):
    p = spec.params
    th = np.arctan2(X[:, 1], X[:, 0])
    return (1 + np.cos(np.outer(th, p["k"]) - p["phase"]) @ p["a"]) / (2 * math.pi)


def _circle_modes(spec, n, rng):
    """Rejection from the uniform law: accept with probability ``2π ρ(θ)/(1 + Σ a)`` (``≥ ½`` on average)."""
    out, bound = [], (1 + float(np.sum(spec.params["a"]))) / (2 * math.pi)
    while sum(len(o) for o in out) < n:
        X = _uniform(spec, 2 * n, rng)
        out.append(X[rng.random(2 * n) * bound < _circle_modes_density(spec, X)])
    return np.concatenate(out)[:n]


register_init("circle_modes", _circle_modes, _circle_modes_density, geometry="sphere")
register_init("uniform_sphere", _uniform, lambda s, X: np.full(len(X), math.exp(-log_sphere_area(s.d))),
              geometry="sphere")
register_init("vmf", _vmf, _vmf_density, geometry="sphere")
register_init("frame", _frame, None, geometry="sphere")
register_init("points", _points, None, geometry="sphere")


def sample_sphere(block: dict, n: int, d: int, rng, base_dir=None) -> np.ndarray:
    """Validate the ``init`` block for ``S^{d-1}`` (:func:`symbolic_tpde.inputs.scenario.parse_init`) and draw ``n``
    unit tokens ``(n, d)`` from it."""
    from ...inputs.scenario import parse_init

    return sample(parse_init(block, base_dir, d=d, geometry="sphere"), n, rng)
