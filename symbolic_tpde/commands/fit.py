"""``tpde fit``: least-squares fit of a scenario's parameters to observed moments or token clouds.

``tpde fit --scenario S --data D.npz --params h0_A,h0_V [--level 0.95] [--replicates R --seed N]
[--start continuation|given] [--max-seconds S] [--json]``

The scenario gives the model (its weights are the start values of the fitted parameters and the values of
all others; constant weights only) and the initial Gaussian ``alpha0``, ``Sigma0``.  ``D.npz`` (read with
``allow_pickle=False``) holds ``times`` ``(K,)`` and either ``clouds`` ``(K, n, d)`` (tokens at each time; the
moments and their sampling error are taken from them) or ``alpha`` ``(K, d)`` and/or ``Sigma`` ``(K, d, d)``
with optional ``noise`` (``m`` standard deviations or an ``(m, m)`` covariance of the stacked observations;
absent: estimated from the residuals).  ``--params``: comma-separated names (a parameter such as ``h0_A_0_1``,
a block such as ``h0_A``, initial data ``alpha0_0``/``Sigma0_0_1``).  ``--replicates R`` (clouds): the noise and a
bias correction from ``R`` particle runs at the fit (:func:`symbolic_tpde.analysis.fit.fit`), seeded by ``--seed``.

Prints the estimates with their confidence intervals and the identifiability report
(:func:`symbolic_tpde.analysis.fit.fit`): the rank of the whitened sensitivity matrix at the fit, its singular
values, and the null directions as combinations of the names; an unidentifiable parameter is printed as
``not identifiable`` with no number.  For clouds: the effective sample size of the softmax weights per time
(where it is a few per cent of n the particle system is far from its mean field), a WARNING line when its
smallest value is below the measured threshold under which the intervals are not calibrated, and the noise
description with the measured calibration of its intervals; a WARNING when the whitened residual is above the
0.999 chi-square quantile (the stated noise does not explain the residuals).  ``--start``: horizon continuation
(default) or one run from the scenario's values.  ``--max-seconds S``: wall-clock cap of the fit; when reached no
estimate is printed (JSON ``"status": "time-limit"``), exit 5.  Every fit also has a work budget derived from
its size (:func:`symbolic_tpde.analysis.fit.fit_budget`: right-hand-side evaluations of the model runs, from the
number of fitted values, of observation times and the last time); when it is used up no estimate is printed (JSON
``"status": "step-budget"`` with ``budget``, ``nfev`` and the ``formula``), exit 5.  Exit 0; 2 on bad input.
"""

from __future__ import annotations

import json

from ..errors import InputError
from .gaussian import DEFAULT_MAX_SECONDS, EXIT_TIME_LIMIT, add_max_seconds


def register(sub) -> None:
    p = sub.add_parser("fit", help="fit parameters to observed moments or token clouds, with identifiability")
    p.add_argument("--scenario", required=True, help="scenario file or built-in name (model and start values)")
    p.add_argument("--data", required=True, help=".npz with times and clouds, or alpha / Sigma (/ noise)")
    p.add_argument("--params", required=True, help="comma-separated directions, e.g. h0_A,h0_V_0_1,Sigma0_0_0")
    p.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    p.add_argument("--replicates", type=int, default=0,
                   help="clouds: R particle runs at the fit for the noise and a bias correction (default 0: none)")
    p.add_argument("--seed", type=int, default=None, help="seed of the replicate runs")
    p.add_argument("--start", choices=["continuation", "given"], default="continuation",
                   help="optimiser start: horizon continuation from the scenario's values (default) or one run on "
                        "all times from them")
    add_max_seconds(p, DEFAULT_MAX_SECONDS, "the fit")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _load(path: str) -> dict:
    from ..inputs.checks import read_arrays

    data = read_arrays(path, "data", ".npz")
    if "times" not in data:
        raise InputError("data", "the .npz has no 'times'")
    unknown = set(data) - {"times", "clouds", "alpha", "Sigma", "noise"}
    if unknown:
        raise InputError("data", f"unknown arrays {sorted(unknown)}; expected times, clouds, alpha, Sigma, noise")
    for k, v in data.items():
        if v.dtype.kind not in "fiu":
            raise InputError(f"data.{k}", f"must be numeric, got dtype {v.dtype}")
    return data


def run(args) -> int:
    from ..analysis.fit import FitBudgetReached, fit
    from ..gaussian import GaussianODE
    from ..inputs.scenario import load_scenario
    from ..numerics.ode.solve import TimeLimitReached
    from ..inputs.checks import strict_json
    from .gaussian import max_seconds

    if not 0 < args.level < 1:
        raise InputError("level", f"must be in (0, 1), got {args.level}")
    scn = load_scenario(args.scenario, need_T=False)
    data = _load(args.data)
    names = [s.strip() for s in args.params.split(",") if s.strip()]
    ode = GaussianODE.from_scenario(scn)
    kw = {k: data[k] for k in ("clouds", "alpha", "Sigma", "noise") if k in data}
    cap = max_seconds(args)
    try:
        res = fit(ode, data["times"], names, alpha0=scn.alpha0, Sigma0=scn.Sigma0, level=args.level,
                  replicates=args.replicates, seed=args.seed, start=args.start, max_seconds=cap, **kw)
    except TimeLimitReached as exc:     # no estimate: the optimiser was stopped before it converged
        print(strict_json({"status": "time-limit", "max_seconds": cap, "message": str(exc)}) if args.json else
              f"time-limit: {exc}; no estimate (the optimiser had not converged)")
        return EXIT_TIME_LIMIT
    except FitBudgetReached as exc:     # the work budget derived from the input: no estimate either
        print(strict_json({"status": "step-budget", "budget": exc.budget, "nfev": exc.used,
                           "formula": exc.formula, "message": str(exc)}) if args.json else f"step-budget: {exc}")
        return EXIT_TIME_LIMIT
    rep = {"status": "ok", **res.report()}
    if not res.converged:      # the JSON keeps "converged": false; the warning says what that means
        rep["not_converged_warning"] = ("the optimiser did NOT converge: the values are its end point, not a "
                                        "minimum, and their intervals are not confidence intervals")
    if args.json:
        print(strict_json(rep))
        return 0
    print(f"fit of {len(res.names)} parameters to {res.n_obs} observations ({res.noise}); "
          f"{'converged' if res.converged else 'NOT converged'}: {res.message}")
    if not res.converged:
        print("WARNING: the optimiser did NOT converge: the values below are its end point, not a minimum, and "
              "their intervals are not confidence intervals")
    tag = "" if res.converged else "  (not converged)"
    for nm, e, lo, hi, ok in zip(res.names, res.estimate, res.lower, res.upper, res.identifiable):
        print(f"  {nm:>14} = " + (f"{e:.6g}  [{lo:.6g}, {hi:.6g}] ({100 * res.level:g}%){tag}" if ok else
                                  "not identifiable from these observations"))
    print(f"identifiability: rank {res.rank} of {len(res.names)}; singular values "
          + json.dumps([float(f"{s:.3g}") for s in res.singular_values]))
    for text in res.describe_null():
        print(f"  null direction (no effect on the observations): {text}")
    if res.ess is not None:
        print("effective sample size of the softmax weights per time (median over tokens, fraction of n): "
              + ", ".join(f"t = {t:g}: {e:.3g}" for t, e in zip(data["times"], res.ess)))
    if res.warning:
        print(f"WARNING: {res.warning}")
    return 0
