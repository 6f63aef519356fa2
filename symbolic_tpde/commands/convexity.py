"""``tpde convexity``: certify that the interaction energy is not geodesically convex (README Mathematics §5).

Prints ``{"certified_negative": bool, "interval": [lo, hi], "point": X, "direction": U, "dps": N, ...}``:
``interval`` encloses ``Hess E(U, U)`` (Riemannian Hessian of the n-particle energy for the twisted metric)
at the rational configuration ``point`` in the rational direction ``direction``; its endpoints are decimal
*strings* rounded outward (see :mod:`symbolic_tpde.validate.convexity`); ``point`` and ``direction`` are
``n × d`` lists of exact rationals as strings (``"7/17"``).  Float entries of ``--A``/``--V`` are taken as the
exact binary rationals they encode.  Exit status 0 when certified negative, 1 when not, 2 on bad input.
``certifies`` states in words what the certificate is about (:func:`..validate.convexity.certified_inputs`):
``A``, ``V``, ``G = -AV⁻¹`` as exact rationals, the energy and its normalisation, the metric, the layout of
``point`` / ``direction`` (rows are particles), that ``U`` is not normalised, and each float entry that was
certified as the binary rational it denotes (``0.3`` -> ``5404319552844595/18014398509481984``); the text
output prints the same sentences.  Also reported: a certified
*positive* example (the Hessian is not negative everywhere) and, at the critical point ``X = 0`` where the
Christoffel term vanishes, the intrinsic value along a negative direction of ``A``.

``--A`` / ``--V`` take JSON matrices (the package's strict JSON reader: nothing evaluated, NaN/Infinity and
number literals too large for a float rejected); defaults
``A = -I``, ``V = I`` in dimension ``--d``.
"""

from __future__ import annotations

import json

from ..errors import InputError


def register(sub) -> None:
    p = sub.add_parser("convexity", help="certify the sign of the Riemannian Hessian of the energy (mpmath.iv)")
    p.add_argument("--A", metavar="JSON", help="attention matrix A as a JSON list of rows (default -I)")
    p.add_argument("--V", metavar="JSON", help="value matrix V as a JSON list of rows (default I)")
    p.add_argument("--d", type=int, default=2, help="dimension when A is not given (default 2)")
    p.add_argument("--n", type=int, default=2, help="number of particles (default 2; symbolic cost grows fast)")
    p.add_argument("--dps", type=int, default=50, help="decimal digits (default 50)")
    p.add_argument("--seed", type=int, default=0, help="seed of the configuration search")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def parse_matrix(text: str, name: str) -> list:
    """JSON list of rows of finite numbers -> list of lists of float (InputError naming ``name``), read by
    the package's one strict reader (:func:`symbolic_tpde.inputs.checks.parse_json`: bounded size and depth, huge
    number literals refused before any float conversion)."""
    from ..inputs.checks import number_tree, parse_json

    M = parse_json(text, field=name)
    if not isinstance(M, list) or not M or not all(isinstance(r, list) for r in M):
        raise InputError(name, "expected a JSON list of rows, e.g. [[-1, 0], [0, -1]]")
    if any(len(r) != len(M) for r in M):
        raise InputError(name, f"expected a square matrix, got {len(M)} rows of lengths {[len(r) for r in M]}")
    number_tree(M, name, ndim=2)
    return [[float(v) for v in r] for r in M]


def convexity_report(A, V, n: int = 2, dps: int = 50, seed: int = 0) -> dict:
    """The JSON report (see module docstring); validates ``A`` symmetric and ``G = -AV⁻¹`` SPD."""
    import numpy as np

    from ..numerics.particles.energy import check_gradient_structure
    from ..symbolic.hessian import particle_hessian
    from ..validate.convexity import certified_inputs, certify_form, certify_particles, to_fraction_array

    if not isinstance(n, int) or n < 1 or n > 4:
        raise InputError("n", f"must be an integer in 1..4 (symbolic Hessian cost), got {n}")
    if not 15 <= dps <= 1000:
        raise InputError("dps", f"must lie in 15..1000, got {dps}")
    A, V, G = check_gradient_structure(A, V)
    d = A.shape[0]
    if n * d > 8:
        raise InputError("n", f"n·d = {n * d} > 8 coordinates: the explicit symbolic Hessian would be too large")
    certifies = certified_inputs(A, V)      # exact A, V, G and the statement in words
    ph = particle_hessian(n, d, A.tolist(), V.tolist())
    neg = certify_particles(A, V, n=n, dps=dps, seed=seed, want="negative", ph=ph)
    pos = certify_particles(A, V, n=n, dps=dps, seed=seed + 1, want="positive", ph=ph)
    out = {"certified_negative": neg["certified_negative"], "interval": neg["interval"], "point": neg["point"],
           "direction": neg["direction"], "dps": dps, "interval_format": "decimal strings, rounded outward",
           "value": neg["value"], "numeric_float64": neg["numeric_float64"], "n": n, "d": d,
           "positive_example": {k: pos[k] for k in ("certified_positive", "interval", "point", "direction")},
           "certifies": certifies}
    lam, vec = np.linalg.eigh(A)
    if lam[0] < 0:  # X = 0 is critical (∂E = 0): the Hessian is D²E = (Σu)ᵀA(Σu)/n², intrinsic
        v = vec[:, 0] / np.max(np.abs(vec[:, 0]))
        X0 = [[0] * d for _ in range(n)]
        Uq = to_fraction_array(np.tile(v, (n, 1)), "U")
        from fractions import Fraction

        c = certify_form(ph.H, ph.coords, [[Fraction(0)] * d for _ in range(n)], Uq, dps=dps)
        out["critical_point"] = {"point": X0, "direction": [[str(x) for x in r] for r in Uq],
                                 "certified_negative": c["sign"] < 0, "interval": c["interval"]}
    return out


def certificate_words(rep: dict, digits: int = 12) -> str:
    """What the report ``rep`` of :func:`convexity_report` certifies, as one sentence for a document (formulas
    between ``$``): the point and direction, the interval shortened to ``digits`` significant digits and rounded
    outward (so it still encloses the certified one), and what the sign proves."""
    from decimal import ROUND_CEILING, ROUND_FLOOR, Context
    from fractions import Fraction

    import sympy as sp

    def rows(M, letter):
        return ", ".join(f"{letter}_{i + 1} = (" + ", ".join(sp.latex(sp.Rational(Fraction(str(v)))) for v in r) + ")"
                         for i, r in enumerate(M))

    def enclose(iv):
        lo, hi = (Context(prec=digits, rounding=m).create_decimal(v) for v, m in zip(iv, (ROUND_FLOOR, ROUND_CEILING)))
        return f"[{lo}, {hi}]"

    pos = rep["positive_example"]
    return (rf"What the convexity command certifies (run for this document with $n = {rep['n']}$ particles, "
            rf"$d = {rep['d']}$, $A = -I$, $V = I$, {rep['dps']} digits): the Riemannian Hessian derived by SymPy "
            r"(Christoffel symbols of $g_X$) is evaluated in interval arithmetic (every rational input and every "
            r"operation enclosed, endpoints rounded outward) at the rational configuration $" + rows(rep["point"], "x")
            + r"$ in the direction $" + rows(rep["direction"], "u") + r"$ (row $i$ is particle $i$): "
            r"$\operatorname{Hess} E(U, U) \in " + enclose(rep["interval"]) + (
                r"$, an interval below $0$: the second derivative of $E$ along the geodesic through $X$ with velocity "
                r"$U$ is negative at $X$, so $E$ is not geodesically convex for the twisted metric"
                if rep["certified_negative"] else r"$: NOT certified negative (the interval does not lie below $0$)")
            + (
                r"; a certified positive value, $\operatorname{Hess} E \in " + enclose(pos["interval"]) + r"$ at "
                r"another rational configuration, shows the Hessian is indefinite" if pos["certified_positive"]
                else "") + r". $U$ is not normalised: only the sign is scale-invariant.")


def run(args) -> int:
    import numpy as np

    d = args.d
    A = parse_matrix(args.A, "A") if args.A else (-np.eye(d)).tolist()
    V = parse_matrix(args.V, "V") if args.V else np.eye(len(A)).tolist()
    if len(V) != len(A):
        raise InputError("V", f"expected shape {(len(A), len(A))}, got {(len(V), len(V))}")
    rep = convexity_report(A, V, n=args.n, dps=args.dps, seed=args.seed)
    if args.json:
        print(json.dumps(rep, indent=1))
    else:
        verdict = "CERTIFIED NEGATIVE" if rep["certified_negative"] else (
            "not certified negative (the most negative value found by the search is shown)")
        print(f"Hess E(U,U) at n={rep['n']}, d={rep['d']}: {verdict}")
        print(f"  interval ({args.dps} digits): [{rep['interval'][0]}, {rep['interval'][1]}]")
        print(f"  point X = {rep['point']}\n  direction U = {rep['direction']}")
        p = rep["positive_example"]
        print(f"  positive example: certified={p['certified_positive']} interval=[{p['interval'][0]}, "
              f"{p['interval'][1]}] at X = {p['point']}")
        if "critical_point" in rep:
            c = rep["critical_point"]
            print(f"  critical point X = 0: Hess = D²E (no Christoffel term), interval [{c['interval'][0]}, "
                  f"{c['interval'][1]}]")
        print("What was certified:")
        for sentence in rep["certifies"]["statement"]:
            print(f"  - {sentence}")
    return 0 if rep["certified_negative"] else 1
