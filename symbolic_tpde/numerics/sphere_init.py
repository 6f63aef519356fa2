"""Initial data on the sphere ``S^{d-1}``: the sphere types of the scenario's ``"init"`` block.

Each sampler is ``f(spec: dict, n: int, d: int, rng) -> np.ndarray`` of shape ``(n, d)`` with unit rows, and
validates every key of ``spec`` (an :class:`~symbolic_tpde.errors.InputError` names the field ``init.KEY``):

* ``{"type": "uniform_sphere"}``: normalised standard Gaussians (uniform by rotation invariance);
* ``{"type": "vmf", "mu": [...], "kappa": k}``: von Mises-Fisher ``∝ e^{κ<μ, θ>}`` (``μ`` normalised,
  ``κ >= 0``), Wood's rejection sampler (Wood, Comm. Stat. Simul. Comput. 23 (1994) 157);
* ``{"type": "frame", "rotate": false}``: the first ``n`` basis vectors (``n <= d``, pairwise ``<θ_i, θ_j> = 0``);
  ``"rotate": true`` applies a Haar-random rotation (QR of a Gaussian matrix with the sign fix of Mezzadri,
  Notices AMS 54 (2007) 592);
* ``{"type": "points", "path": "file.npy"}``: an ``(n, d)`` array (no pickle), each row normalised (a zero
  row is refused).

``SAMPLERS`` maps the type to its sampler (the lead hooks them into the shared ``init`` registry).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..errors import InputError

__all__ = ["SAMPLERS", "sample", "uniform_sphere", "vmf", "frame", "points"]


def _keys(spec, allowed, required=()):
    for k in spec:
        if k not in allowed and k != "type":
            raise InputError(f"init.{k}", f"unknown key for init type {spec.get('type')!r}; allowed: "
                                          f"{sorted(allowed)}")
    for k in required:
        if k not in spec:
            raise InputError(f"init.{k}", f"missing (required for init type {spec.get('type')!r})")


def _unit_rows(X, field):
    nr = np.linalg.norm(X, axis=1)
    if not np.all(np.isfinite(X)) or np.any(nr == 0):
        raise InputError(field, "every point must be finite and non-zero (it is normalised onto the sphere)")
    return X / nr[:, None]


def uniform_sphere(spec, n, d, rng):
    _keys(spec, ())
    return _unit_rows(rng.standard_normal((n, d)), "init")


def vmf(spec, n, d, rng):
    _keys(spec, ("mu", "kappa"), ("mu", "kappa"))
    mu = np.asarray(spec["mu"], dtype=float) if isinstance(spec["mu"], list) else None
    if mu is None or mu.shape != (d,) or not np.all(np.isfinite(mu)) or not np.any(mu):
        raise InputError("init.mu", f"expected a non-zero list of {d} finite numbers")
    kappa = spec["kappa"]
    if isinstance(kappa, bool) or not isinstance(kappa, (int, float)) or not (0 <= kappa < 1e8):
        raise InputError("init.kappa", f"expected a number in [0, 1e8), got {kappa!r}")
    mu = mu / np.linalg.norm(mu)
    kappa, m = float(kappa), d - 1
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
    return _unit_rows(w[:, None] * mu + np.sqrt(np.clip(1 - w ** 2, 0, None))[:, None] * v, "init")


def frame(spec, n, d, rng):
    _keys(spec, ("rotate",))
    rotate = spec.get("rotate", False)
    if not isinstance(rotate, bool):
        raise InputError("init.rotate", f"expected true or false, got {rotate!r}")
    if n > d:
        raise InputError("init", f"an orthonormal frame has at most d = {d} tokens, got n = {n}")
    E = np.eye(d)[:n]
    if rotate:
        Qm, R = np.linalg.qr(rng.standard_normal((d, d)))
        E = E @ (Qm * np.sign(np.diag(R))).T
    return E


def points(spec, n, d, rng):
    _keys(spec, ("path",), ("path",))
    path = spec["path"]
    if not isinstance(path, str) or not path.endswith(".npy"):
        raise InputError("init.path", "expected the path of a .npy file")
    if not Path(path).is_file():
        raise InputError("init.path", f"no such file: {path!r}")
    try:
        X = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InputError("init.path", f"cannot read a numeric array: {exc}") from None
    if X.shape != (n, d) or not np.issubdtype(X.dtype, np.number):
        raise InputError("init.path", f"expected a numeric array of shape ({n}, {d}), got {X.dtype} {X.shape}")
    return _unit_rows(X.astype(float), "init.path")


SAMPLERS = {"uniform_sphere": uniform_sphere, "vmf": vmf, "frame": frame, "points": points}


def sample(spec, n: int, d: int, rng) -> np.ndarray:
    """Dispatch on ``spec["type"]`` (the sphere types only)."""
    if not isinstance(spec, dict):
        raise InputError("init", "expected an object {\"type\": NAME, ...}")
    kind = spec.get("type")
    if kind not in SAMPLERS:
        raise InputError("init.type", f"unknown sphere init type {kind!r}; expected one of {sorted(SAMPLERS)}")
    return SAMPLERS[kind](spec, n, d, rng)
