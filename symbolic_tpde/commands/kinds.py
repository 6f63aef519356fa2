"""``tpde kinds``: the registry of attention kinds (geometry, parameters, shapes, constraints, Gaussian preservation).

Every kind says its geometry: ``R^d`` (tokens in ``R^d``; particles, moment ODE or witness) or ``sphere``
(normalised tokens on ``S^{d-1}``, README "Sphere"; particles, reductions and diagnostics, no Gaussian part).

Printed from :mod:`symbolic_tpde.registry.kinds`, the one table every layer reads; ``--json`` for programs;
``--markdown`` prints the README's table (``tests/test_registry.py`` fails when the README's copy is stale).
"""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser("kinds", help="list the attention kinds of the registry and their parameters")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print the registry as JSON")
    g.add_argument("--markdown", action="store_true", help="print the README's kinds table (Markdown)")
    p.set_defaults(func=run)


def _param(p) -> dict:
    return {"name": p.name, "shape": list(p.shape), "required": p.required,
            "default": None if p.required else p.default, "constraint": p.constraint, "description": p.description}


def _shape(p) -> str:
    return "×".join(p.shape)


def _md_param(p) -> str:
    from ..registry.kinds import CONSTRAINTS

    out = f"`{p.name}`" + (f" ({_shape(p)})" if p.shape else "")
    if p.constraint:
        out += f" {CONSTRAINTS[p.constraint][1]}"
    if p.default == "zero":
        out += ", zero when absent"
    elif not p.required:
        out += f", default {p.default:g}"
    return out


def _all(kinds):
    """Every kind of every geometry, ``R^d`` first."""
    return list(kinds.KINDS.values()) + [s for s in kinds.SPHERE_KINDS.values() if s.name not in kinds.KINDS]


def markdown() -> str:
    """The kinds table of the README, generated from the registry."""
    from ..registry import kinds

    rows = ["| kind | geometry | parameters | field Γ_μ(x) | Gaussian-preserving | notes |",
            "|---|---|---|---|---|---|"]
    for s in _all(kinds):
        gauss = ("yes (moment ODE)" if s.preserves_gaussians else "no (witness)") if s.geometry == "R^d" else \
            "— (reductions, diagnostics)"
        cells = [f"`{s.name}`", s.geometry, "; ".join(_md_param(p) for p in s.params), s.field, gauss, s.notes]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def run(args) -> int:
    from ..registry import kinds

    rows = [{"kind": s.name, "geometry": s.geometry, "gaussian": s.gaussian, "field": s.field,
             "params": [_param(p) for p in s.params], "structured_A": "A" in s.names, "notes": s.notes}
            for s in _all(kinds)]
    if args.markdown:
        print(markdown())
        return 0
    if args.json:
        print(json.dumps({"kinds": rows, "structured": {"A": [_param(p) for p in kinds.STRUCTURED_A],
                                                        "V": _param(kinds.OUTPUT_BLOCK)}}))
        return 0
    for r in rows:
        shapes = ", ".join(p["name"] + (f"({','.join(p['shape'])})" if p["shape"] else "")
                           + ("" if p["required"] else f"={p['default']}")
                           + (f" {kinds.CONSTRAINTS[p['constraint']][1]}" if p["constraint"] else "")
                           for p in r["params"])
        pres = "preserves Gaussians" if r["gaussian"] == "affine" else "not Gaussian-preserving (witness)"
        if r["geometry"] != "R^d":
            pres = "tokens on the sphere S^(d-1): particles, reductions, diagnostics"
        print(f"{r['kind']:<22} [{r['geometry']}] {shapes}\n{'':<22} {r['field']}; {pres}")
    print("structured heads: A may be given as Q, K (k, d) with A = K^T Q / sqrt(k); an output block WO (d, v) "
          "before V (v, d) makes the value matrix WO V")
    return 0
