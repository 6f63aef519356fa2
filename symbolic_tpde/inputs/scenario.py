"""Scenario files: JSON in, a validated :class:`~symbolic_tpde.weights.Scenario` out.

Parsed with :mod:`json` only: nothing is evaluated.  ``NaN``/``Infinity`` literals and duplicate keys are
rejected.  Format (every key documented in README.md)::

    {"attention": "softmax",          # a kind of the registry (symbolic_tpde.registry.kinds: softmax | l2 |
                                      #   sinkhorn | sigmoid | linear | masked | custom | softmax_unnormalized)
                                      #   or multihead (= softmax heads given in "heads")
     "d": 2,                          # optional, inferred from alpha0
     "A": [[...]], "V": [[...]],      # one head: its parameters at top level (A may be given as Q, K with
                                      #   A = K^T Q / sqrt(k); WO before V: value matrix WO V), or
     "heads": [{"A": ..., "V": ...}, ...],   # several heads, each optionally with its own "attention"
     "ffn": {"W": [[...]], "c": [...]},      # optional affine feed-forward term W x + c
     "sink": {"mass": 0.1, "x": [...]},      # optional attention sink (masked only)
     "layers": [{"t_end": 0.5, "A": ...}, ...],  # optional piecewise-constant weights; keys a layer does
                                                 #   not give are taken from the top level
     "alpha0": [...], "Sigma0": [[...]], # Gaussian initial data N(alpha0, Sigma0), or instead
     "init": {"type": "mixture", ...},   # any initial law of INIT_SCHEMAS (see :func:`parse_init`)
     "T": 1.0,                        # horizon
     "name": "...", "description": "..."}  # optional free text

Every problem raises :class:`~symbolic_tpde.errors.InputError` naming the field, e.g. ``heads[1].tau: must be
> 0, got -1.0`` or ``Sigma0: not positive definite (smallest eigenvalue -0.5)``.  The reader is strict
(:func:`symbolic_tpde.inputs.checks.parse_json`): UTF-8 only, at most ``MAX_BYTES`` bytes and ``MAX_DEPTH``
levels, numbers only where numbers go (no strings, booleans or ``null`` in arrays), magnitudes at most
``MAX_ENTRY`` checked before any float conversion, ``0 <= T <= T_MAX``, ``d <= MAX_DIM``, keys that are not
parameters (e.g. ``d`` or ``kind`` inside a head) refused by name.  Field names in messages are escaped, so a
message is always one line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..weights import Scenario, Schedule, Weights, check_gaussian, make_head, make_weights
from . import checks as _checks
from ..registry import kinds as _kinds
from .checks import field_name as _fname


def attentions() -> tuple[str, ...]:
    """Variant names a scenario may give: the registry's kinds, plus "multihead" (softmax heads in "heads")."""
    return _kinds.kind_names() + ("multihead",)


def _keys() -> tuple[list[str], set[str], set[str], set[str]]:
    """Head-parameter keys of every registry kind (with the structured-head keys Q, K, WO), weight keys,
    top-level keys and layer keys: read from the registry at each call, so a newly registered kind works."""
    head = sorted({p.name for s in _kinds.KINDS.values() for p in s.params}
                  | {p.name for p in _kinds.STRUCTURED_A} | {_kinds.OUTPUT_BLOCK.name})
    weight = set(head) | {"heads", "ffn", "sink"}
    return head, weight, weight | {"attention", "d", "layers", "alpha0", "Sigma0", "init", "T", "name",
                                   "description", "geometry"}, \
        weight | {"t_end"}


def loads(text: str | bytes) -> dict[str, Any]:
    """Parse scenario JSON text with the strict reader (:func:`symbolic_tpde.inputs.checks.parse_json`: no
    evaluation, NaN/Infinity and duplicate keys rejected, bounded size and depth)."""
    data = _checks.parse_json(text, "scenario")
    if not isinstance(data, dict):
        raise InputError("scenario", f"expected a JSON object at top level, got {type(data).__name__}")
    return data


_BUILTIN_DIR = Path(__file__).parent.parent / "scenarios"


def builtin_scenarios(geometry: str = "R^d") -> list[str]:
    """Names of the scenarios shipped with the package (usable as ``--scenario NAME``) of one geometry
    (``"geometry"`` key, default ``"R^d"``; the sphere ones are read by :mod:`.numerics.sphere`)."""
    return sorted(p.stem for p in _BUILTIN_DIR.glob("*.json")
                  if _checks.read_json(p, "scenario").get("geometry", "R^d") == geometry)


def load_scenario(path: str | Path, *, need_T: bool = True, gaussian_data: bool = True) -> Scenario:
    """Read and validate a scenario file; a name from :func:`builtin_scenarios` loads the shipped one.

    ``gaussian_data=True`` (commands built on the Gaussian moment ODE): a non-Gaussian ``init`` is refused
    (InputError naming ``init.type``); ``tpde particles`` and ``tpde pde`` pass ``False``.  Relative file paths
    inside ``init`` are read relative to the scenario file's directory."""
    data, base_dir = read_scenario_file(path)
    return parse_scenario(data, need_T=need_T, gaussian_data=gaussian_data, base_dir=base_dir)


def read_scenario_file(path: str | Path, geometries: tuple[str, ...] = ("R^d",)) -> tuple[dict[str, Any], Path]:
    """The JSON object of a scenario file, or of a built-in scenario of one of ``geometries`` named ``path``,
    read once by the strict reader, and the directory relative ``init`` paths are read from
    (:func:`symbolic_tpde.load_scenario` dispatches on its ``"geometry"``)."""
    p = Path(path)
    if not p.exists() and any(str(path) in builtin_scenarios(g) for g in geometries):
        p = _BUILTIN_DIR / f"{path}.json"
    if p.is_dir():
        raise InputError("scenario", f"{str(p)!r} is a directory, not a scenario file")
    data = _checks.read_json(p, "scenario")
    if not isinstance(data, dict):
        raise InputError("scenario", f"expected a JSON object at top level, got {type(data).__name__}")
    # relative paths inside init: from the scenario file's directory; a pipe (<(cat f.json)) has none: the cwd
    return data, (p.parent if p.is_file() else Path.cwd())


def _attention_of(data: dict[str, Any], field: str) -> str:
    att = data.get("attention")
    if not isinstance(att, str):
        raise InputError(field, f"must be a string naming the variant, one of {list(attentions())}")
    if att not in attentions():
        raise InputError(field, f"unknown variant {_fname(att)}; expected one of {list(attentions())}")
    return att


def _weights_from(spec: dict[str, Any], attention: str, d: int, where: str) -> Weights:
    """Build the Weights of one layer from a merged spec (top-level keys overridden by the layer's)."""
    pre = f"{where}." if where else ""
    head_keys = _keys()[0]
    head_params = {k: spec[k] for k in head_keys if k in spec}
    kind = "softmax" if attention == "multihead" else attention
    if "heads" in spec:
        if head_params:
            key = sorted(head_params)[0]
            raise InputError(f"{pre}{key}", "give head parameters either at this level or inside 'heads', not both")
        heads_spec = spec["heads"]
        if not isinstance(heads_spec, list) or not heads_spec:
            raise InputError(f"{pre}heads", "must be a non-empty list of head objects")
        heads = []
        for i, h in enumerate(heads_spec):
            hw = f"{pre}heads[{i}]"
            if not isinstance(h, dict):
                raise InputError(hw, "must be an object of head parameters")
            for key in h:
                if key not in head_keys and key != "attention":
                    raise InputError(f"{hw}.{_fname(key)}", f"unknown key in a head; allowed: "
                                     f"{sorted(head_keys + ['attention'])}")
            h = dict(h)
            hkind = _attention_of({"attention": h.pop("attention", kind)}, f"{hw}.attention")
            hkind = "softmax" if hkind == "multihead" else hkind
            heads.append(make_head(hkind, d, where=hw, **h))
    else:
        if attention == "multihead":
            raise InputError(f"{pre}heads", "'multihead' attention needs a 'heads' list")
        if not head_params:
            raise InputError(f"{pre}V", f"missing parameter (give the {attention!r} head's parameters or 'heads')")
        heads = [make_head(kind, d, where=where, **head_params)]
    for key in ("ffn", "sink"):
        if key in spec and not isinstance(spec[key], dict):
            raise InputError(f"{pre}{key}", f"must be an object, got {type(spec[key]).__name__}")
    ffn, sink = spec.get("ffn"), spec.get("sink")
    if ffn is not None:
        for key in ffn:
            if key not in ("W", "c"):
                raise InputError(f"{pre}ffn.{_fname(key)}", "unknown key; allowed: ['W', 'c']")
    if sink is not None:
        for key in sink:
            if key not in ("mass", "x"):
                raise InputError(f"{pre}sink.{_fname(key)}", "unknown key; allowed: ['mass', 'x']")
        if "mass" in sink:
            _checks.number_tree(sink["mass"], f"{pre}sink.mass", 0)
    return make_weights(heads, ffn=ffn, sink=sink, where=where)


def parse_scenario(data: dict[str, Any], *, need_T: bool = True, gaussian_data: bool = True,
                   base_dir: str | Path | None = None) -> Scenario:
    """Validate a scenario dictionary (as read by :func:`loads`) and build the :class:`Scenario`.

    With an ``init`` block, ``alpha0``/``Sigma0`` of the result are the exact mean and covariance of the initial
    law (empirical and grid data: of the file's measure) and ``Scenario.init`` is its :class:`InitSpec`;
    ``gaussian_data``/``base_dir`` as in :func:`load_scenario`.

    >>> scn = parse_scenario({"attention": "softmax", "A": [[0.0]], "V": [[-1.0]], "alpha0": [1.0],
    ...                       "Sigma0": [[1.0]], "T": 1.0})
    >>> scn.d, scn.T
    (1, 1.0)
    """
    head_keys, weight_keys, top_keys, layer_keys = _keys()
    if not isinstance(data, dict):
        raise InputError("scenario", f"expected a JSON object at top level, got {type(data).__name__}")
    if _kinds.scenario_geometry(data) != "R^d":
        raise InputError("geometry", "this command reads R^d scenarios; sphere scenarios run with tpde particles, classify, sweep and pde (d = 2)")
    for key in data:
        if key not in top_keys:
            raise InputError(_fname(key), f"unknown key; allowed keys: {sorted(top_keys)}")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise InputError(key, "must be a string (free text)")
    attention = _attention_of(data, "attention")
    init = None
    if "init" in data:
        for key in ("alpha0", "Sigma0"):
            if key in data:
                raise InputError(key, "give the initial data either as alpha0, Sigma0 or as an 'init' block, not both")
        init = parse_init(data["init"], base_dir)
        d = data.get("d", init.d)
        if d != init.d:
            raise InputError("d", f"is {d!r} but the init block describes a law on R^{init.d}"[:120])
        if gaussian_data and not init.gaussian:
            raise InputError("init.type", f"{init.type!r} is not Gaussian: this command needs Gaussian initial data "
                             "N(alpha0, Sigma0) (tpde particles and tpde pde take any init)")
        alpha0, Sigma0 = init.mean, init.cov
    else:
        for key in ("alpha0", "Sigma0"):
            if key not in data:
                raise InputError(key, "missing (the Gaussian initial data N(alpha0, Sigma0), or an 'init' block, "
                                 "is required)")
        if not isinstance(data["alpha0"], list):
            raise InputError("alpha0", "must be a list of numbers")
        d = data.get("d", len(data["alpha0"]))
    if not isinstance(d, int) or isinstance(d, bool) or d < 1 or d > _checks.MAX_DIM:
        raise InputError("d", f"must be an integer in [1, {_checks.MAX_DIM}], got {d!r}"[:120])
    if init is None:
        alpha0, Sigma0 = check_gaussian(data["alpha0"], data["Sigma0"], d)
    T = data.get("T")
    if T is None:
        if need_T or "T" in data:
            raise InputError("T", "missing (the horizon of the run)")
        T = math.nan
    else:
        T = _checks.horizon(T, "T")
    base = {k: v for k, v in data.items() if k in weight_keys}
    if "layers" in data:
        layers = data["layers"]
        if not isinstance(layers, list) or not layers:
            raise InputError("layers", "must be a non-empty list of layer objects")
        parsed = []
        for i, layer in enumerate(layers):
            where = f"layers[{i}]"
            if not isinstance(layer, dict):
                raise InputError(where, "must be an object with 't_end' and parameters")
            for key in layer:
                if key not in layer_keys:
                    raise InputError(f"{where}.{_fname(key)}", f"unknown key; allowed: {sorted(layer_keys)}")
            if "t_end" not in layer:
                raise InputError(f"{where}.t_end", "missing")
            t_end = _checks.horizon(layer["t_end"], f"{where}.t_end", allow_zero=False)
            spec = dict(base)
            if "heads" in layer:  # a layer's heads replace top-level head parameters entirely
                for k in head_keys:
                    spec.pop(k, None)
            elif any(k in layer for k in head_keys):
                spec.pop("heads", None)
            spec.update({k: v for k, v in layer.items() if k != "t_end"})
            parsed.append((t_end, _weights_from(spec, attention, d, where)))
        if math.isfinite(T) and parsed[-1][0] < T:
            raise InputError(f"layers[{len(parsed) - 1}].t_end",
                             f"the last layer ends at {parsed[-1][0]} < T = {T}; weights after it are undefined")
        schedule = Schedule.layers(parsed)
    else:
        schedule = Schedule.constant(_weights_from(base, attention, d, ""))
    return Scenario(attention=attention, d=d, schedule=schedule, alpha0=alpha0, Sigma0=Sigma0, T=T, init=init)


# ------------------------------------------------------------------------------------------ initial data
#: Largest file an ``init`` block may read (``empirical`` .npy, ``grid_density`` .npz).
MAX_INIT_FILE_BYTES = 1 << 30


class InitSpec:
    """A validated ``init`` block: ``type``, dimension ``d``, ``params`` (read-only arrays by key), the exact
    ``mean`` and ``cov`` of the law (of the file's measure for ``empirical`` and ``grid_density``), ``gaussian``
    (whether the law is a Gaussian) and ``geometry`` (``"R^d"`` or ``"sphere"``: the law of the unit tokens
    ``θ`` on ``S^{d-1}``; ``mean``/``cov`` are ``None`` when they depend on the number of tokens, ``frame``).
    Samplers and densities live in :mod:`symbolic_tpde.numerics.measures.laws`."""

    __slots__ = ("type", "d", "params", "mean", "cov", "gaussian", "geometry")

    def __init__(self, type, d, params, mean, cov, gaussian=False, geometry="R^d"):
        self.type, self.d, self.params, self.gaussian, self.geometry = type, d, dict(params), gaussian, geometry
        self.mean, self.cov = (None, None) if mean is None else (_ro(mean), _ro(cov))

    def __repr__(self) -> str:
        return f"InitSpec({self.type!r}, d={self.d})"

    def _key(self):
        import numpy as np

        def frz(v):
            if isinstance(v, (tuple, list)):
                return tuple(frz(x) for x in v)
            a = np.asarray(v)
            return (a.shape, a.dtype.str, a.tobytes())
        return (self.type, self.d, self.geometry, self.gaussian, tuple((k, frz(v)) for k, v in sorted(self.params.items())))

    def __eq__(self, other) -> bool:       # by value, as Scenario (symbolic_tpde.weights._ByValue)
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def _ro(a):
    import numpy as np

    a = np.array(a, dtype=float)
    a.setflags(write=False)
    return a


def _vec(block, key, where, d=None):
    v = _checks.finite_array(block[key], f"{where}.{key}", 1, shape=None if d is None else (d,))
    # with d given, the shape is d's, bounded by the scenario's geometry (R^d: MAX_DIM; sphere: up to 1024)
    if d is None and not 1 <= v.shape[0] <= _checks.MAX_DIM:
        raise InputError(f"{where}.{key}", f"dimension must lie in [1, {_checks.MAX_DIM}], got {v.shape[0]}")
    return v


def _init_gaussian(block, where, base_dir):
    alpha = _vec(block, "alpha", where)
    alpha, Sigma = check_gaussian(alpha, block["Sigma"], alpha.shape[0], (f"{where}.alpha", f"{where}.Sigma"))
    return {"alpha": alpha, "Sigma": Sigma}, alpha, Sigma


def _init_mixture(block, where, base_dir):
    import numpy as np

    w = _checks.finite_array(block["weights"], f"{where}.weights", 1)
    if w.shape[0] < 1 or np.any(w <= 0):
        raise InputError(f"{where}.weights", "must be a non-empty list of positive numbers")
    if abs(float(w.sum()) - 1.0) > 1e-9:
        raise InputError(f"{where}.weights", f"must sum to 1 (within 1e-9), got {float(w.sum())!r}")
    k = w.shape[0]
    means = _checks.finite_array(block["means"], f"{where}.means", 2)
    if means.shape[0] != k or not 1 <= means.shape[1] <= _checks.MAX_DIM:
        raise InputError(f"{where}.means", f"expected {k} mean vectors (one per weight), got shape {means.shape}")
    d = means.shape[1]
    covs_in = block["covs"]
    if not isinstance(covs_in, list) or len(covs_in) != k:
        raise InputError(f"{where}.covs", f"expected a list of {k} covariance matrices (one per weight)")
    covs = np.array([_checks.spd(c, d, f"{where}.covs[{i}]") for i, c in enumerate(covs_in)])
    w = w / w.sum()
    mean = w @ means
    cov = np.einsum("k,kij->ij", w, covs + np.einsum("ki,kj->kij", means, means)) - np.outer(mean, mean)
    return {"weights": _ro(w), "means": means, "covs": _ro(covs)}, mean, (cov + cov.T) / 2


def _init_box(block, where, base_dir):
    import numpy as np

    low = _vec(block, "low", where)
    high = _vec(block, "high", where, low.shape[0])
    if np.any(high <= low):
        i = int(np.argmax(high <= low))
        raise InputError(f"{where}.high", f"must exceed low in every coordinate (coordinate {i}: "
                         f"{high[i]!r} <= {low[i]!r})")
    if np.any((high - low) ** 2 / 12 < np.finfo(float).tiny):
        raise InputError(f"{where}.high", "high - low is too small: the variance (high - low)^2/12 underflows "
                         "(widths >= 1e-150)")
    return {"low": low, "high": high}, (low + high) / 2, np.diag((high - low) ** 2 / 12)


def _init_ball(block, where, base_dir):
    import numpy as np

    c = _vec(block, "center", where)
    r = _checks.positive_number(block["radius"], f"{where}.radius")
    d = c.shape[0]
    if r * r / (d + 2) < np.finfo(float).tiny:
        raise InputError(f"{where}.radius", f"{r!r} is too small: the variance r^2/(d+2) underflows (radius >= 1e-150)")
    return {"center": c, "radius": r}, c, np.eye(d) * r * r / (d + 2)


def _init_file(block, where, base_dir, suffix):
    import numpy as np

    raw = block["path"]
    if not isinstance(raw, str) or not raw:
        raise InputError(f"{where}.path", "must be a non-empty string (a file path)")
    p = Path(raw)
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    if p.suffix != suffix:
        raise InputError(f"{where}.path", f"expected a {suffix} file, got {_fname(raw)}")
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise InputError(f"{where}.path", f"cannot read {_fname(str(p))}: {exc.strerror or exc}") from None
    if size > MAX_INIT_FILE_BYTES:
        raise InputError(f"{where}.path", f"file of {size} bytes exceeds the bound {MAX_INIT_FILE_BYTES}")
    return _checks.read_arrays(p, f"{where}.path", suffix)


def _init_empirical(block, where, base_dir):
    import numpy as np

    X = _init_file(block, where, base_dir, ".npy")
    if not isinstance(X, np.ndarray) or X.dtype.kind not in "iuf":
        raise InputError(f"{where}.path", "must hold a numeric array")
    X = np.array(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] < 2 or not 1 <= X.shape[1] <= _checks.MAX_DIM:
        raise InputError(f"{where}.path", f"expected points of shape (n, d) with n >= 2, got {X.shape}")
    if not np.all(np.isfinite(X)) or np.abs(X).max() > _checks.MAX_ENTRY:
        raise InputError(f"{where}.path", f"points must be finite with magnitude <= {_checks.MAX_ENTRY:g}")
    mean = X.mean(axis=0)
    cov = (X - mean).T @ (X - mean) / X.shape[0]
    return {"points": _ro(X)}, mean, (cov + cov.T) / 2


def _init_grid_density(block, where, base_dir):
    import numpy as np

    z = _init_file(block, where, base_dir, ".npz")
    bad = sorted(k for k, v in z.items() if v.dtype.kind not in "iuf")
    if bad:
        raise InputError(f"{where}.path", f"array {_fname(bad[0])} of the .npz file is not real numbers")
    names = set(z)
    if "density" not in names:
        raise InputError(f"{where}.path", f"the .npz file needs an array 'density', has {sorted(names)[:10]}")
    dens = np.array(z["density"], dtype=float)
    d = dens.ndim
    if not 1 <= d <= 3:
        raise InputError(f"{where}.path", f"density must have 1 to 3 axes (one per dimension), got {d}")
    keys = ["edges"] if d == 1 and "edges" in names else [f"edges_{k}" for k in range(d)]
    extra = names - set(keys) - {"density"}
    if extra:
        raise InputError(f"{where}.path", f"unknown arrays in the .npz file: {sorted(extra)[:5]}; expected "
                         f"'density' and {keys}")
    edges = []
    for k, key in enumerate(keys):
        if key not in names:
            raise InputError(f"{where}.path", f"the .npz file needs an array {key!r} (cell edges of axis {k})")
        e = np.array(z[key], dtype=float)
        if e.shape != (dens.shape[k] + 1,) or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
            raise InputError(f"{where}.path", f"{key} must be {dens.shape[k] + 1} finite increasing edges")
        if np.abs(e).max() > _checks.MAX_ENTRY:           # the bound of empirical points, for the same reason
            raise InputError(f"{where}.path", f"{key} must have magnitude <= {_checks.MAX_ENTRY:g}")
        edges.append(_ro(e))
    if not np.all(np.isfinite(dens)) or np.any(dens < 0):
        raise InputError(f"{where}.path", "density must be finite and >= 0")
    vol = dens
    for k, e in enumerate(edges):
        shape = [1] * d
        shape[k] = -1
        vol = vol * np.diff(e).reshape(shape)
    total = float(vol.sum())
    if not total > 0:
        raise InputError(f"{where}.path", "density has zero total mass")
    p = vol / total
    cs = [(e[1:] + e[:-1]) / 2 for e in edges]
    C = np.stack(np.meshgrid(*cs, indexing="ij"), axis=-1).reshape(-1, d)
    pf = p.ravel()
    mean = pf @ C
    w2 = np.stack(np.meshgrid(*[np.diff(e) ** 2 / 12 for e in edges], indexing="ij"), axis=-1).reshape(-1, d)
    cov = np.einsum("c,ci,cj->ij", pf, C, C) + np.diag(pf @ w2) - np.outer(mean, mean)
    return {"edges": tuple(edges), "mass": _ro(p)}, mean, (cov + cov.T) / 2


# ------------------------------------------------------------------- laws on the sphere S^{d-1} (d given)
#: the largest von Mises-Fisher concentration accepted (the sampler's rejection step stays well-conditioned)
MAX_KAPPA = 1e8


def _sphere_d(d, where):
    if not isinstance(d, int) or isinstance(d, bool) or d < 2:
        raise InputError(where, f"a law on the sphere S^(d-1) needs the scenario's d >= 2, got {d!r}"[:120])
    return d


def _init_uniform_sphere(block, where, base_dir, d):
    import numpy as np

    return {}, np.zeros(d), np.eye(d) / d


def _init_vmf(block, where, base_dir, d):
    import numpy as np
    from scipy.special import ive

    mu = _vec(block, "mu", where, d)
    if not np.any(mu):
        raise InputError(f"{where}.mu", "must be a non-zero vector (the mean direction, normalised here)")
    mu = mu / np.linalg.norm(mu)
    kappa = _checks.positive_number(block["kappa"], f"{where}.kappa", allow_zero=True)
    if kappa > MAX_KAPPA:
        raise InputError(f"{where}.kappa", f"must be <= {MAX_KAPPA:g}, got {kappa!r}")
    # E θ = A_d(κ) μ, E θθᵀ = (A_d/κ) I + (1 - d A_d/κ) μμᵀ with A_d = I_{d/2}(κ)/I_{d/2-1}(κ) (Mardia-Jupp 9.3)
    if kappa == 0:
        A, A_over_k = 0.0, 1.0 / d
    else:
        A = float(ive(d / 2, kappa) / ive(d / 2 - 1, kappa))
        A_over_k = A / kappa
    second = A_over_k * np.eye(d) + (1 - d * A_over_k) * np.outer(mu, mu)
    cov = second - A * A * np.outer(mu, mu)
    return {"mu": _ro(mu), "kappa": kappa}, A * mu, (cov + cov.T) / 2


MAX_MODE = 1024


def _init_circle_modes(block, where, base_dir, d):
    """``ρ(θ) = (1 + Σ_j a_j cos(k_j θ - φ_j))/2π`` on S¹: ``modes`` a list of ``[k, a, φ]`` (integer
    ``1 <= k <= MAX_MODE``, ``a >= 0`` with ``Σ a_j <= 1`` so that ``ρ >= 0``, phase ``φ`` in radians)."""
    import numpy as np

    if d != 2:
        raise InputError(f"{where}.type", f"'circle_modes' is a law on the circle S^1 (d = 2), got d = {d}")
    modes = block["modes"]
    if not isinstance(modes, list) or not modes:
        raise InputError(f"{where}.modes", "must be a non-empty list of [k, amplitude, phase]")
    rows = []
    for i, row in enumerate(modes):
        w = f"{where}.modes[{i}]"
        if not isinstance(row, list) or len(row) != 3:
            raise InputError(w, f"must be [k, amplitude, phase], got {row!r}"[:120])
        k = row[0]
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_MODE:
            raise InputError(f"{w}[0]", f"the mode must be an integer in [1, {MAX_MODE}], got {k!r}"[:120])
        a = _checks.positive_number(row[1], f"{w}[1]", allow_zero=True)
        phi = float(_checks.finite_array(row[2], f"{w}[2]", ndim=0))
        rows.append((k, a, phi))
    K, a, phi = (np.array(c, dtype=float) for c in zip(*rows))
    if a.sum() > 1:
        raise InputError(f"{where}.modes", f"the amplitudes sum to {a.sum():g} > 1: the density would be negative")
    # E e^{iθ} and E e^{2iθ} come from the k = 1 and k = 2 modes: ∫ e^{ikθ} a cos(kθ - φ) dθ/2π = a e^{iφ}/2
    z1, z2 = (complex(np.sum((a * np.exp(1j * phi))[K == k])) / 2 for k in (1, 2))
    mean = np.array([z1.real, z1.imag])
    second = np.array([[0.5 + z2.real / 2, z2.imag / 2], [z2.imag / 2, 0.5 - z2.real / 2]])
    cov = second - np.outer(mean, mean)
    return {"k": _ro(K.astype(int)), "a": _ro(a), "phase": _ro(phi)}, mean, (cov + cov.T) / 2


def _init_frame(block, where, base_dir, d):
    rotate = block.get("rotate", False)
    if not isinstance(rotate, bool):
        raise InputError(f"{where}.rotate", f"expected true or false, got {rotate!r}"[:120])
    return {"rotate": rotate}, None, None        # not i.i.d.: mean and covariance depend on n


def _init_points(block, where, base_dir, d):
    import numpy as np

    X = _init_file(block, where, base_dir, ".npy")
    if not isinstance(X, np.ndarray) or X.dtype.kind not in "iuf" or X.ndim != 2 or X.shape[1] != d:
        raise InputError(f"{where}.path", f"expected a numeric array of shape (n, {d}), got "
                         f"{getattr(X, 'dtype', '?')} {getattr(X, 'shape', '?')}")
    X = np.array(X, dtype=float)
    nr = np.linalg.norm(X, axis=1) if np.all(np.isfinite(X)) else np.zeros(len(X))
    if len(X) < 1 or not np.all(nr > 0) or np.abs(X).max() > _checks.MAX_ENTRY:
        raise InputError(f"{where}.path", "every point must be finite, non-zero and of magnitude <= "
                         f"{_checks.MAX_ENTRY:g} (it is normalised onto the sphere)")
    X = X / nr[:, None]
    mean = X.mean(axis=0)
    cov = (X - mean).T @ (X - mean) / len(X)
    return {"points": _ro(X)}, mean, (cov + cov.T) / 2


#: ``type -> (required keys, optional keys, checker)``; a checker ``(block, where, base_dir)`` returns
#: ``(params, mean, cov)``; the checkers of the types in :data:`INIT_GEOMETRY` (laws on the sphere) take the
#: scenario's ``d`` as a fourth argument (``mean``/``cov`` ``None`` when they depend on ``n``: ``frame``).
#: Samplers and densities: :mod:`symbolic_tpde.numerics.measures.laws` (register both).
INIT_SCHEMAS: dict[str, tuple[tuple[str, ...], tuple[str, ...], Any]] = {
    "gaussian": (("alpha", "Sigma"), (), _init_gaussian),
    "mixture": (("weights", "means", "covs"), (), _init_mixture),
    "uniform_box": (("low", "high"), (), _init_box),
    "uniform_ball": (("center", "radius"), (), _init_ball),
    "empirical": (("path",), (), _init_empirical),
    "grid_density": (("path",), (), _init_grid_density),
    "uniform_sphere": ((), (), _init_uniform_sphere),
    "vmf": (("mu", "kappa"), (), _init_vmf),
    "circle_modes": (("modes",), (), _init_circle_modes),
    "frame": ((), ("rotate",), _init_frame),
    "points": (("path",), (), _init_points),
}
#: the geometry of each ``init`` type that does not live in ``R^d`` (one schema, both geometries)
INIT_GEOMETRY: dict[str, str] = {"uniform_sphere": "sphere", "vmf": "sphere", "frame": "sphere",
                                 "points": "sphere", "circle_modes": "sphere"}


def init_types(geometry: str = "R^d") -> tuple[str, ...]:
    """The ``init`` types of a geometry (``"R^d"`` or ``"sphere"``)."""
    return tuple(sorted(t for t in INIT_SCHEMAS if INIT_GEOMETRY.get(t, "R^d") == geometry))


def parse_init(block: Any, base_dir: str | Path | None = None, where: str = "init", *, d: int | None = None,
               geometry: str = "R^d") -> InitSpec:
    """Validate an ``init`` block ``{"type": NAME, ...}`` (keys of :data:`INIT_SCHEMAS`; unknown keys refused
    by name; files read with ``numpy.load(allow_pickle=False)``, relative paths from ``base_dir``).
    ``geometry``: the scenario's (``"R^d"`` or ``"sphere"``); a type of the other geometry is refused by name.
    On the sphere ``d`` (the scenario's) is required: ``uniform_sphere`` and ``frame`` do not carry it."""
    if not isinstance(block, dict):
        raise InputError(where, f"must be an object {{\"type\": ..., ...}}, got {type(block).__name__}")
    typ = block.get("type")
    if not isinstance(typ, str) or typ not in INIT_SCHEMAS:
        shown = _fname(typ) if isinstance(typ, str) else repr(typ)[:40]
        raise InputError(f"{where}.type", f"unknown initial law {shown}; expected one of {list(init_types(geometry))}")
    if INIT_GEOMETRY.get(typ, "R^d") != geometry:
        raise InputError(f"{where}.type", f"{typ!r} is a law {'on the sphere' if geometry == 'R^d' else 'on R^d'}; "
                         f"a scenario with geometry {geometry!r} takes one of {list(init_types(geometry))}")
    required, optional, check = INIT_SCHEMAS[typ]
    for key in block:
        if key != "type" and key not in required + optional:
            raise InputError(f"{where}.{_fname(key)}", f"unknown key for type {typ!r}; allowed: "
                             f"{sorted(('type',) + required + optional)}")
    for key in required:
        if key not in block:
            raise InputError(f"{where}.{key}", f"missing (type {typ!r} needs {list(required)})")
    if geometry == "sphere":
        d = _sphere_d(d, where)
        params, mean, cov = check(block, where, base_dir, d)
        return InitSpec(typ, d, params, mean, cov, geometry="sphere")
    params, mean, cov = check(block, where, base_dir)
    return InitSpec(typ, int(len(mean)), params, mean, cov, gaussian=typ == "gaussian")
