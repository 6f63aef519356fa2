"""``tpde classify --scenario FILE [--T T] [--json]``: the long-time behaviour of the covariance.

Outcome (README Mathematics §4): collapse (``Σ → 0``), rank ``r`` with the limit ``Σ*``, diverge (growth without
finite-time singularity), blow-up with ``T*`` ± error, or undetermined at this horizon; plus the rate and the
linearised flow at ``Σ*`` (its spectrum; a zero eigenvalue means the limit is not hyperbolic, as for softmax
with ``V = I``, whose approach is ``O(1/t)``).  Computed by
:func:`symbolic_tpde.analysis.clustering.classify_ode`; the covariance equation alone is integrated where it
does not involve the mean.  ``--T`` defaults to ``10⁴`` (the scenario's ``T`` is a simulation horizon, usually
far too short to see a limit).  Strict JSON (non-finite numbers as ``null``); exit 0 for every outcome.
"""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("classify", help="collapse / rank r with Σ* / diverge / blow-up with T*, rate, linearisation")
    p.add_argument("--scenario", required=True, metavar="FILE", help="scenario JSON file (or a built-in name)")
    p.add_argument("--T", type=float, default=1e4, help="horizon of the classification (default 1e4)")
    p.add_argument("--rtol", type=float, default=1e-10, help="relative tolerance (default 1e-10)")
    p.add_argument("--backend", default="auto", choices=("auto", "numpy", "c"), help="generated-code backend")
    p.add_argument("--json", action="store_true", help="print JSON (default: text)")
    p.set_defaults(func=run)


def run(args) -> int:
    import numpy as np

    from ..analysis.clustering import classify_ode
    from ..errors import InputError
    from .gaussian import dumps, load_ode

    if not (0 < args.rtol < 1e-3):
        raise InputError("rtol", f"must lie in (0, 1e-3), got {args.rtol}")
    scn, T, ode = load_ode(args.scenario, args.T, args.backend)
    out = classify_ode(ode, scn.Sigma0, T, alpha0=scn.alpha0, rtol=args.rtol)
    if args.json:
        print(dumps(out))
        return 0
    print(f"{out['label']} at horizon T = {T:g}" + (" (covariance equation alone)" if out["covariance_only"] else ""))
    if out["blowup_time"] is not None:
        print(f"blow-up time T* = {out['blowup_time']:.12g} ± {out['blowup_time_error']:.2g}")
    if out["Sigma_star"] is not None:
        print("Sigma* =", np.array2string(np.asarray(out["Sigma_star"]), precision=6))
    if out["rate"] is not None:
        r = out["rate"]
        val = r.get("log_log_slope", r.get("rate"))
        print(f"rate: {r['law']}" + ("" if val is None else f" {val:.4g}") + f"  ({r['meaning']})")
    lin = out["linearisation"]
    if lin is not None:
        ev = np.asarray(lin["eigenvalues_real"]) + 1j * np.asarray(lin["eigenvalues_imag"])
        print("linearised flow at Sigma*: eigenvalues", np.array2string(ev, precision=4),
              "(hyperbolic)" if lin["hyperbolic"] else "(not hyperbolic: zero eigenvalue)")
    return 0
