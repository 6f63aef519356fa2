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
     "alpha0": [...], "Sigma0": [[...]], # Gaussian initial data N(alpha0, Sigma0)
     "T": 1.0,                        # horizon
     "name": "...", "description": "..."}  # optional free text

Every problem raises :class:`~symbolic_tpde.errors.InputError` naming the field, e.g. ``heads[1].tau: must be
> 0, got -1.0`` or ``Sigma0: not positive definite (smallest eigenvalue -0.5)``.  The reader is strict
(:func:`symbolic_tpde.validation.parse_json`): UTF-8 only, at most ``MAX_BYTES`` bytes and ``MAX_DEPTH``
levels, numbers only where numbers go (no strings, booleans or ``null`` in arrays), magnitudes at most
``MAX_ENTRY`` checked before any float conversion, ``0 <= T <= T_MAX``, ``d <= MAX_DIM``, keys that are not
parameters (e.g. ``d`` or ``kind`` inside a head) refused by name.  Field names in messages are escaped, so a
message is always one line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .errors import InputError
from .weights import Scenario, Schedule, Weights, check_gaussian, make_head, make_weights
from . import validation as _checks
from .registry import kinds as _kinds
from .validation import field_name as _fname


def attentions() -> tuple[str, ...]:
    """Variant names a scenario may give: the registry's kinds, plus "multihead" (softmax heads in "heads")."""
    return _kinds.kind_names() + ("multihead",)


def _keys() -> tuple[list[str], set[str], set[str], set[str]]:
    """Head-parameter keys of every registry kind (with the structured-head keys Q, K, WO), weight keys,
    top-level keys and layer keys: read from the registry at each call, so a newly registered kind works."""
    head = sorted({p.name for s in _kinds.KINDS.values() for p in s.params}
                  | {p.name for p in _kinds.STRUCTURED_A} | {_kinds.OUTPUT_BLOCK.name})
    weight = set(head) | {"heads", "ffn", "sink"}
    return head, weight, weight | {"attention", "d", "layers", "alpha0", "Sigma0", "T", "name", "description",
                                   "geometry"}, \
        weight | {"t_end"}


def loads(text: str | bytes) -> dict[str, Any]:
    """Parse scenario JSON text with the strict reader (:func:`symbolic_tpde.validation.parse_json`: no
    evaluation, NaN/Infinity and duplicate keys rejected, bounded size and depth)."""
    data = _checks.parse_json(text, "scenario")
    if not isinstance(data, dict):
        raise InputError("scenario", f"expected a JSON object at top level, got {type(data).__name__}")
    return data


_BUILTIN_DIR = Path(__file__).parent / "scenarios"


def builtin_scenarios(geometry: str = "R^d") -> list[str]:
    """Names of the scenarios shipped with the package (usable as ``--scenario NAME``) of one geometry
    (``"geometry"`` key, default ``"R^d"``; the sphere ones are read by :mod:`.numerics.sphere`)."""
    return sorted(p.stem for p in _BUILTIN_DIR.glob("*.json")
                  if _checks.read_json(p, "scenario").get("geometry", "R^d") == geometry)


def load_scenario(path: str | Path, *, need_T: bool = True) -> Scenario:
    """Read and validate a scenario file; a name from :func:`builtin_scenarios` loads the shipped one."""
    p = Path(path)
    if not p.exists() and str(path) in builtin_scenarios():
        p = _BUILTIN_DIR / f"{path}.json"
    if p.is_dir():
        raise InputError("scenario", f"{str(p)!r} is a directory, not a scenario file")
    data = _checks.read_json(p, "scenario")
    if not isinstance(data, dict):
        raise InputError("scenario", f"expected a JSON object at top level, got {type(data).__name__}")
    return parse_scenario(data, need_T=need_T)


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


def parse_scenario(data: dict[str, Any], *, need_T: bool = True) -> Scenario:
    """Validate a scenario dictionary (as read by :func:`loads`) and build the :class:`Scenario`."""
    head_keys, weight_keys, top_keys, layer_keys = _keys()
    if not isinstance(data, dict):
        raise InputError("scenario", f"expected a JSON object at top level, got {type(data).__name__}")
    if data.get("geometry", "R^d") != "R^d":
        raise InputError("geometry", "this command reads R^d scenarios; sphere scenarios run with tpde particles")
    for key in data:
        if key not in top_keys:
            raise InputError(_fname(key), f"unknown key; allowed keys: {sorted(top_keys)}")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise InputError(key, "must be a string (free text)")
    attention = _attention_of(data, "attention")
    for key in ("alpha0", "Sigma0"):
        if key not in data:
            raise InputError(key, "missing (the Gaussian initial data N(alpha0, Sigma0) is required)")
    if not isinstance(data["alpha0"], list):
        raise InputError("alpha0", "must be a list of numbers")
    d = data.get("d", len(data["alpha0"]))
    if not isinstance(d, int) or isinstance(d, bool) or d < 1 or d > _checks.MAX_DIM:
        raise InputError("d", f"must be an integer in [1, {_checks.MAX_DIM}], got {d!r}"[:120])
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
    return Scenario(attention=attention, d=d, schedule=schedule, alpha0=alpha0, Sigma0=Sigma0, T=T)
