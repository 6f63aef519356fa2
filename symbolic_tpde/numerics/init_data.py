"""Initial laws of a scenario's ``init`` block: samplers, densities and cell masses by type.

The schema (keys, checks, exact mean and covariance) is :data:`symbolic_tpde.scenario.INIT_SCHEMAS`; this
module holds what needs numerics, one entry per type, added with :func:`register_init`:

* ``sampler(spec, n, rng) -> (n, d)`` i.i.d. draws (``rng`` a ``numpy.random.Generator``);
* ``density(spec, X) -> (m,)`` the Lebesgue density at the rows of ``X`` (``None``: the law has none, e.g.
  ``empirical``);
* ``cells(spec, edges) -> masses`` the mass of each cell of a Cartesian grid (``edges``: one increasing edge
  array per axis), used by the grid solver; the default integrates ``density`` by the midpoint rule on
  ``SUB``^d sub-cells;
* ``geometry``: ``"R^d"`` here; the sphere kinds register theirs (``uniform_sphere``, ``vmf``, ...).

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

from ..errors import InputError

__all__ = ["register_init", "sample", "density", "cell_masses", "INIT_TYPES", "InitType", "GAUSS", "SUB"]

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
    :data:`symbolic_tpde.scenario.INIT_SCHEMAS`)."""
    INIT_TYPES[name] = InitType(name, sampler, density, geometry, cells)
    return INIT_TYPES[name]


def _get(spec) -> InitType:
    try:
        return INIT_TYPES[spec.type]
    except KeyError:
        raise InputError("init.type", f"no sampler registered for {spec.type!r}; known: {sorted(INIT_TYPES)}") \
            from None


def sample(spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` i.i.d. draws ``(n, d)`` from the law of ``spec`` (a :class:`symbolic_tpde.scenario.InitSpec`)."""
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
