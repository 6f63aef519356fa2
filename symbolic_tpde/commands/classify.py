"""``tpde classify --scenario FILE [--T T] [--json]``: the long-time behaviour of the covariance.

One classifier (:func:`symbolic_tpde.analysis.verdict.classify_long_time`, also behind ``tpde sweep``):
theorems first (the closed form of softmax with ``V = cI``: ``T*`` or ``Σ*`` and its rank exactly; the growth
theorems of ℓ2 and Sinkhorn, which exclude a blow-up), numerics second, labelled "numerical" with their
evidence.  Outcomes: blow-up with ``T*`` ± error; "no singularity before T" (with ``T*`` beyond it when one
was found); rank ``r`` with ``Σ*`` (closed form, or extrapolated with its error bound; rank 0 is collapse);
diverge (exponential rate); oscillating / bursting; the tilt ceasing; undetermined (with the reason).  The
linearised flow at ``Σ*`` is reported with the tolerance that the error of ``Σ*`` allows, and a continuum of
equilibria is never called hyperbolic.  ``--T`` defaults to ``10⁴`` (the scenario's ``T`` is a simulation
horizon, usually far too short to see a limit).  Strict JSON (non-finite numbers as ``null``); exit 0 for
every outcome.  A sphere scenario (``"geometry": "sphere"``) draws ``--n`` tokens (``--seed``) from its
``init`` block and gets the sphere verdict of the same classifier (:mod:`symbolic_tpde.analysis.sphere_verdict`).
"""

from __future__ import annotations


from .gaussian import add_max_seconds


def register(sub) -> None:
    p = sub.add_parser("classify", help="blow-up with T* / rank r with Σ* / diverge / oscillating / undetermined, with evidence")
    p.add_argument("--scenario", required=True, metavar="FILE", help="scenario JSON file (or a built-in name)")
    p.add_argument("--T", type=float, default=1e4, help="horizon of the classification (default 1e4)")
    p.add_argument("--rtol", type=float, default=1e-10, help="relative tolerance (default 1e-10)")
    p.add_argument("--backend", default="auto", choices=("auto", "numpy", "c"), help="generated-code backend")
    p.add_argument("--n", type=int, default=None, help="sphere scenarios: tokens drawn from the init block (default 32)")
    p.add_argument("--seed", type=int, default=None, help="sphere scenarios: seed of the draw (default 0)")
    p.add_argument("--certify", type=float, default=0.0, metavar="S",
                   help="softmax, d <= 3: certify a numerical blow-up (or no blow-up before T) in interval "
                        "arithmetic within S seconds (default 0: off)")
    add_max_seconds(p, 600.0, "the classification")
    p.add_argument("--json", action="store_true", help="print JSON (default: text)")
    p.set_defaults(func=run)


def run(args) -> int:
    import numpy as np

    from ..analysis.verdict import classify_long_time
    from ..errors import InputError
    from .gaussian import dumps, load_ode, max_seconds

    from .sphere import is_sphere_file, run_classify

    if is_sphere_file(args.scenario):        # tokens on the sphere: the same classifier, its sphere branch
        args.n = 32 if args.n is None else args.n
        args.seed = 0 if args.seed is None else args.seed
        return run_classify(args)
    for name in ("n", "seed"):
        if getattr(args, name) is not None:
            raise InputError(name, "only for sphere scenarios (a scenario in R^d is classified from its moment ODE: "
                             "no tokens are drawn)")
    if not (0 < args.rtol < 1e-3):
        raise InputError("rtol", f"must lie in (0, 1e-3), got {args.rtol}")
    scn, T, ode = load_ode(args.scenario, args.T, args.backend)
    if not (0 <= args.certify <= 600):
        raise InputError("certify", f"must lie in [0, 600] seconds, got {args.certify}")
    v = classify_long_time(ode, scn.Sigma0, T, alpha0=scn.alpha0, rtol=args.rtol, max_seconds=max_seconds(args),
                           certify=args.certify)
    if args.json:
        print(dumps(v.as_dict()))
        return 0
    print(v.label + (" [covariance equation alone]" if v.covariance_only else ""))
    if v.Sigma_star is not None and v.rank:
        print("Sigma* =", np.array2string(np.asarray(v.Sigma_star), precision=8, prefix="Sigma* = "))
    for f in v.facts:
        print(f"theorem '{f.name}': {f.statement}")
        for h in f.hypotheses:
            print(f"    hypothesis: {h}")
    for e in v.evidence:
        print(f"evidence: {e}")
    lin = v.linearisation
    if lin is not None:
        ev = np.asarray(lin["eigenvalues_real"]) + 1j * np.asarray(lin["eigenvalues_imag"])
        print("linearised flow at Sigma*: eigenvalues", np.array2string(ev, precision=4), f"({lin['meaning']})")
    return 0
