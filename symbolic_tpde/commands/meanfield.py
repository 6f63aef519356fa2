"""``tpde meanfield``: stability, mean-field convergence and masked attention, measured (README Mathematics §2, §6).

Writes to ``--out`` (default ``meanfield_out``):

* ``stability_curves.png`` / ``.csv``: ``W₂(μ_t, ν_t)/W₂(μ₀, ν₀)`` against ``t`` for every variant, two
  initial data (uniform ball, Gaussian mixture) and two regimes (expanding ``A``; clustering ``A + Aᵀ ≺ 0``),
  with the fitted growth constant ``λ`` (``ratio ≈ e^{λt}``);
* ``stability_radius.png``: ``log C(T, R₀)`` against ``R₀²`` per variant with the fitted ``e^{c‖A‖R²}`` line;
* ``meanfield_convergence.png`` / ``.csv``: log-log errors against ``n`` with the fitted slopes and their 95%
  intervals: the propagation-of-chaos error (softmax and ℓ2: interacting particles against the decoupled
  mean-field particles from the same initial sample, a coupling, :mod:`symbolic_tpde.experiments.meanfield_chaos`)
  and, from the same runs, the moment error against the Gaussian moment ODE (mostly the initial sample's CLT,
  shown for contrast); sigmoid (not Gaussian-preserving): coupling to a larger system started from the same
  points, and the moment error against an independent copy;
* ``masked_sensitivity.png`` / ``.csv``: ``|δx_i(T)|/|δ|`` per position after moving the first token, with
  and without an attention sink, the flat-kernel prediction, and ``W^c`` stability curves;
* ``masked_gaussianity.png``: final token clouds (masked with sink vs unmasked control) with Mardia z-scores;
* ``summary.json``: every fitted number, the settings and the seed.

Defaults: ``d = 2``, ``A = A₀/‖A₀‖`` with ``A₀ = [[1, .5], [-.5, .6]]``, ``V = I``, ``T = 1``, seed 0.
``--quick`` shrinks particle counts and seeds.  ``--json`` prints the summary as JSON on stdout (progress
lines then go to stderr).  The run is one process under the thread policy of
:mod:`symbolic_tpde.numerics.threads` (``pool_plan(tasks=1)``: one worker, BLAS/OpenMP and the package's
kernels held to the usable cores by ``limit_threads``); every random draw comes from one
``numpy.random.default_rng(seed)`` consumed in a fixed order, so a seed gives the same bits whatever the thread
count (tests/test_meanfield.py).
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("meanfield", help="stability / mean-field convergence / masked attention experiments "
                       "(plots + data)")
    p.add_argument("--out", default="meanfield_out", help="output directory (created if missing)")
    p.add_argument("--quick", action="store_true", help="smaller runs (about 20 s of CPU time)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (default: text lines)")
    p.add_argument("--seed", type=int, default=0, help="seed of numpy.random.default_rng (default 0)")
    p.add_argument("--only", choices=("stability", "convergence", "masked"), action="append",
                   help="run only this part (repeatable)")
    p.set_defaults(func=run)


A0 = ((1.0, 0.5), (-0.5, 0.6))
A_NEG = ((1.0, 0.3), (-0.3, 0.8))  # minus this: symmetric part -diag(1, .8) ≺ 0 (clustering regime)
R_CURVES = 1.25
SINK_X = (3.0, 0.0)  # sink location of the Gaussianity experiment (away from the data: logistic sink share)


def settings(quick: bool) -> dict:
    """Experiment sizes.  RK4 steps are chosen so that the time-discretisation error (O(h⁴)) stays far below
    the effects measured (checked in tests/test_meanfield.py by halving the step)."""
    if quick:
        return dict(stab_n=80, stab_steps=20, radii=[0.5, 1.0, 1.5, 2.0], radius_n=60,
                    conv_ns=[64, 128, 256, 512], conv_seeds=5, chaos_ns=[64, 128, 256, 512, 1024], chaos_seeds=8,
                    ref_ns=[64, 128, 256, 512], ref_N=2048, ref_seeds=5, mask_n=128, mask_seeds=3, gauss_n=1500)
    return dict(stab_n=200, stab_steps=40, radii=[0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0], radius_n=150,
                conv_ns=[64, 128, 256, 512, 1024], conv_seeds=8, chaos_ns=[64, 128, 256, 512, 1024, 2048, 4096],
                chaos_seeds=12, ref_ns=[64, 128, 256, 512, 1024], ref_N=4096, ref_seeds=8, mask_n=256, mask_seeds=8,
                gauss_n=3000)


def _write_csv(path: Path, header: list[str], rows) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def run_stability(out: Path, cfg: dict, rng, A, V, plt) -> dict:
    import numpy as np

    from ..experiments import stability as S
    from ..errors import BlowupError

    res: dict = {"curves": {}, "radius": {}}
    rows = []
    # expanding regime (A from A₀, V = I) and clustering regime (A + Aᵀ ≺ 0: particles collapse)
    regimes = (("expanding", A), ("clustering", -np.asarray(A_NEG) / np.linalg.norm(A_NEG, 2)))
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for row_axes, (regime, A_r) in zip(axes, regimes):
        for ax, data in zip(row_axes, ("ball", "mixture")):
            X0 = S.initial_cloud(data, cfg["stab_n"], 2, R_CURVES, rng)
            finite_max = 1.0
            for var in S.VARIANTS:
                w = S.variant_weights(var, A_r, V, sink_mass=0.2 if var == "masked" else None)
                try:
                    c = S.stability_curve(w, X0, 1.0, cfg["stab_steps"], rng, n_save=10)
                except BlowupError as exc:
                    res["curves"][f"{regime}/{var}/{data}"] = {"blowup_t": exc.t}
                    ax.plot([], [], label=f"{var}: blow-up at t = {exc.t:.2f}")
                    continue
                res["curves"][f"{regime}/{var}/{data}"] = c.as_dict()
                label = f"{var}{' (W^c, sink .2)' if var == 'masked' else ''}: λ = {c.growth:.2f}"
                r = c.ratio[2.0]
                if r.max() > 1e3:  # near a finite-time blow-up (linear attention): keep the plot readable
                    label += f" (max {r.max():.0e}, off scale)"
                else:
                    finite_max = max(finite_max, float(r.max()))
                ax.plot(c.times, r, marker="o", ms=3, label=label)
                rows += [[regime, var, data, t, c.w[1.0][k], c.w[2.0][k], r[k]] for k, t in enumerate(c.times)]
            lo = min(0.9, min(float(np.min(v["ratio"]["2.0"])) for k, v in res["curves"].items()
                              if k.startswith(regime) and k.endswith(data) and "ratio" in v))
            ax.set_ylim(0.9 * lo, 1.15 * finite_max)
            ax.set_yscale("log")
            ax.set_title(f"{regime}: R₀ = {R_CURVES}, {'uniform ball' if data == 'ball' else 'Gaussian mixture'}, "
                         f"n = {cfg['stab_n']}", fontsize=10)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
        row_axes[0].set_ylabel("W₂(μ_t, ν_t) / W₂(μ₀, ν₀)")
    for ax in axes[1]:
        ax.set_xlabel("t (depth)")
    fig.suptitle("Dobrushin stability of nearby initial measures (‖A‖ = 1, V = I); λ: fitted ratio ≈ e^{λt}")
    fig.tight_layout()
    fig.savefig(out / "stability_curves.png", dpi=120)
    plt.close(fig)
    _write_csv(out / "stability_curves.csv", ["regime", "variant", "data", "t", "W1", "W2", "ratio_W2"], rows)

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    top = 0.1
    for var in S.VARIANTS:
        w = S.variant_weights(var, A, V, sink_mass=0.2 if var == "masked" else None)
        try:
            f = S.radius_dependence(w, float(np.linalg.norm(A, 2)), cfg["radii"], cfg["radius_n"], 1.0,
                                    cfg["stab_steps"], rng)
        except BlowupError as exc:
            res["radius"][var] = {"error": str(exc)}
            continue
        res["radius"][var] = f.as_dict()
        x = np.square(f.radii)
        if f.r2 > 0.5:
            top = max(top, max(f.log_C))
        line = ax.plot(x, f.log_C, "o", ms=4)[0]
        ax.plot(x, f.fit.intercept + f.fit.slope * x, "-",
                color=line.get_color(), label=f"{var}: c = {f.c:.3f} [{f.fit.ci[0]:.3f}, {f.fit.ci[1]:.3f}]"
                + (f" (blow-up R₀ ≥ {f.blowups[0]['radius']})" if f.blowups else ""))
    ax.set_ylim(top=1.3 * top)  # variants far above (linear attention near blow-up) are clipped
    ax.set_xlabel("R₀²")
    ax.set_ylabel("log C(T=1, R₀)")
    ax.set_title("Stability constant vs support radius: log C ≈ a + c‖A‖T R₀²")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "stability_radius.png", dpi=120)
    plt.close(fig)
    # rigorous softmax bound at the plotted radius, for comparison with the measured constant
    # the rigorous a-priori bound is finite but astronomically loose beyond R0 ~ 0.5, T ~ 0.5
    res["softmax_dobrushin_bound"] = [{"R0": R, "T": T, "bound": S.softmax_dobrushin_bound(A, V, R, T)}
                                      for R, T in ((0.5, 0.5), (0.5, 1.0), (R_CURVES, 1.0))]
    return res


CHAOS_VARIANTS = ("softmax", "l2")   # Gaussian-preserving: exact decoupled flow (affine mean-field field)


def run_convergence(out: Path, cfg: dict, rng, A, V, plt) -> dict:
    """Propagation of chaos (coupling) and moment errors for softmax and ℓ2 from the same runs
    (``cfg["chaos_ns"]``, ``cfg["chaos_seeds"]``); sigmoid: propagation of chaos against an ``N = cfg["ref_N"]``
    system from the same points, and the moment error against an independent copy."""
    import numpy as np

    from ..analysis import meanfield as MF
    from ..experiments import meanfield_chaos as MC
    from ..experiments import stability as S

    alpha0, Sigma0 = np.array([0.5, 0.0]), np.array([[0.5, 0.1], [0.1, 0.3]])
    res, rows = {"propagation_of_chaos": {}}, []
    fig, ax = plt.subplots(figsize=(7.5, 5.0))

    def draw(c, label, marker, ls):
        ns = np.asarray(c.ns, float)
        line = ax.loglog(ns, c.rms, marker, label=None)[0]
        ax.loglog(ns, np.exp(c.fit.intercept) * ns ** c.fit.slope, ls, color=line.get_color(),
                  label=f"{label}: slope {c.fit.slope:.3f} [{c.fit.ci[0]:.3f}, {c.fit.ci[1]:.3f}]")

    for var in CHAOS_VARIANTS:
        w = S.variant_weights(var, 0.5 * A, V)
        ch = MC.chaos_convergence(w, alpha0, Sigma0, 1.0, cfg["chaos_ns"], cfg["chaos_seeds"], rng, steps=20)
        res["propagation_of_chaos"][var] = ch.chaos.as_dict()
        res[var] = ch.moments.as_dict()   # the former figure (initial-sample CLT), same runs
        draw(ch.chaos, f"{var} chaos (coupling)", "s", "-")
        draw(ch.moments, f"{var} moments vs ODE (initial CLT)", "o", ":")
        for kind, c in (("coupling", ch.chaos), ("moments_vs_gaussian_ode", ch.moments)):
            for n, errs in zip(c.ns, c.errors):
                rows += [[var, kind, n, k, e] for k, e in enumerate(errs)]
    w = S.variant_weights("sigmoid", 0.5 * A, V)
    # not Gaussian-preserving: propagation of chaos against a larger system from the same initial points
    ref = MC.reference_convergence(w, alpha0, Sigma0, 1.0, cfg["ref_ns"], cfg["ref_seeds"], rng, N=cfg["ref_N"],
                                   steps=20)
    res["propagation_of_chaos"]["sigmoid"] = ref.as_dict()
    draw(ref, f"sigmoid chaos (vs N = {cfg['ref_N']} system)", "D", "-")
    for n, errs in zip(ref.ns, ref.errors):
        rows += [["sigmoid", "coupling_vs_larger_system", n, k, e] for k, e in enumerate(errs)]
    c = MF.moment_convergence(w, alpha0, Sigma0, 1.0, cfg["conv_ns"], cfg["conv_seeds"], rng, steps=20,
                              reference="pair")
    res["sigmoid"] = c.as_dict()
    draw(c, "sigmoid moments vs independent copy", "^", "--")
    for n, errs in zip(c.ns, c.errors):
        rows += [["sigmoid", "moments_vs_independent_copy", n, k, e] for k, e in enumerate(errs)]
    ns = np.asarray(cfg["chaos_ns"], float)
    r0 = res["propagation_of_chaos"]["softmax"]["rms"][0]
    ax.loglog(ns, 0.5 * r0 * (ns / ns[0]) ** -0.5, "k:", lw=0.8, label="n^(-1/2)")
    ax.set_xlabel("n (particles)")
    ax.set_ylabel("RMS error at T = 1")
    ax.set_title("Mean-field limit: propagation of chaos ((1/n)Σ|x_i - x̄_i|²)^½ vs moment error\n"
                 f"({cfg['chaos_seeds']} seeds per n; OLS slope, 95% Student-t CI)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "meanfield_convergence.png", dpi=120)
    plt.close(fig)
    _write_csv(out / "meanfield_convergence.csv", ["variant", "error", "n", "seed", "value"], rows)
    return res


def convergence_lines(res: dict) -> list[str]:
    """Text summary of the rates (printed by ``tpde meanfield``)."""
    out = []
    for var, c in res["propagation_of_chaos"].items():
        if c["reference"] == "larger_system":
            out.append(f"  {var}: propagation of chaos (same-sample coupling to an N = {c['N']} system, T = "
                       f"{c['T']:g}): slope {c['fit']['slope']:.3f}, 95% t-CI [{c['fit']['ci'][0]:.3f}, "
                       f"{c['fit']['ci'][1]:.3f}], bootstrap [{c['bootstrap_ci'][0]:.3f}, {c['bootstrap_ci'][1]:.3f}] "
                       f"(expected -1/2; n = {c['ns'][0]}..{c['ns'][-1]}, {len(c['errors'][0])} seeds)")
            continue
        m = res[var]
        out.append(f"  {var}: propagation of chaos (same-sample coupling to the mean-field flow, T = {c['T']:g}): "
                   f"slope {c['fit']['slope']:.3f}, 95% t-CI [{c['fit']['ci'][0]:.3f}, {c['fit']['ci'][1]:.3f}], "
                   f"bootstrap [{c['bootstrap_ci'][0]:.3f}, {c['bootstrap_ci'][1]:.3f}] (expected -1/2; "
                   f"n = {c['ns'][0]}..{c['ns'][-1]}, {len(c['errors'][0])} seeds)")
        out.append(f"  {var}: initial-sample CLT (moment error vs Gaussian ODE, same runs): slope "
                   f"{m['fit']['slope']:.3f}, 95% t-CI [{m['fit']['ci'][0]:.3f}, {m['fit']['ci'][1]:.3f}]")
    s = res["sigmoid"]
    out.append(f"  sigmoid: moment error vs independent copy: slope {s['fit']['slope']:.3f}, 95% t-CI "
               f"[{s['fit']['ci'][0]:.3f}, {s['fit']['ci'][1]:.3f}]")
    return out


def run_masked(out: Path, cfg: dict, rng, A, V, plt) -> dict:
    import numpy as np

    from ..experiments import masked as M
    from ..analysis import meanfield as MF
    from ..experiments import stability as S

    n, res, rows = cfg["mask_n"], {"sensitivity": {}}, []
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    s = np.arange(n) / n
    for m in (None, 0.1, 0.3):
        prof = np.mean([M.token_sensitivity(A, V, MF.uniform_ball(n, 2, 1.0, rng), 1.0, 10, rng,
                                            sink_mass=m).sensitivity for _ in range(cfg["mask_seeds"])], axis=0)
        key = "none" if m is None else str(m)
        res["sensitivity"][key] = {"mean_profile": prof.tolist(), "early_max": float(prof[1:max(2, n // 8)].max()),
                                   "predicted_weight": M.predicted_weight(n, m).tolist()}
        line = axes[0].loglog(s[1:], prof[1:], label=f"sink m₀ = {m}" if m else "no sink")[0]
        axes[0].loglog(s[1:], M.predicted_weight(n, m)[1:], ":", color=line.get_color())
        axes[1].loglog(s[1:], n * prof[1:], color=line.get_color(), label=f"m₀ = {m}" if m else "no sink")
        if m:
            axes[1].axhline(1 / m, color=line.get_color(), ls="--", lw=0.8)
        rows += [[key, k / n, prof[k]] for k in range(n)]
    ns = res["sensitivity"]["none"]["mean_profile"]
    fit = MF.ols(np.log(s[n // 16:]), np.log(np.asarray(ns)[n // 16:]))
    res["no_sink_decay_exponent"] = fit.as_dict()
    axes[0].set_title(f"|δx_i(T)|/|δ|, token 0 moved (n = {n})\ndotted: flat-kernel attention weight", fontsize=10)
    axes[0].set_xlabel("position s_i")
    axes[1].set_title(f"response per unit W₁ᶜ: n|δx_i|/|δ| (dashed: 1/m₀)\nno sink: log-log slope {fit.slope:.2f}",
                      fontsize=10)
    axes[1].set_xlabel("position s_i")
    for m in (None, 0.2):
        X0 = MF.uniform_ball(n, 2, 1.0, rng)
        c = S.stability_curve(M.masked_weights(A, V, m), X0, 1.0, 20, rng, n_save=10)
        res[f"wc_curve_sink_{m}"] = c.as_dict()
        axes[2].plot(c.times, c.ratio[2.0], "o-", ms=3, label=f"{'no sink' if m is None else f'm₀ = {m}'}: "
                     f"λ = {c.growth:.2f}")
    axes[2].set_title("conditional stability\nW₂ᶜ(μ_t, ν_t) / W₂ᶜ(μ₀, ν₀)", fontsize=10)
    axes[2].set_xlabel("t")
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "masked_sensitivity.png", dpi=120)
    plt.close(fig)
    _write_csv(out / "masked_sensitivity.csv", ["sink_mass", "position", "sensitivity"], rows)

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.3))
    wit = {}
    for m in (None, 0.5):
        g = M.gaussian_witness(0.3 * A, V, cfg["gauss_n"], 1.0, 10, rng, sink_mass=m, sink_x=SINK_X)
        wit["none" if m is None else f"{m} at {list(SINK_X)}"] = g.as_dict()
    res["gaussian_witness"] = wit
    clouds = [("initial N(0, I)", g.clouds[0], g.initial), ("unmasked softmax (control)", g.clouds[2], g.control),
              (f"masked, sink m₀ = 0.5 at x = {list(SINK_X)}", g.clouds[1], g.masked)]
    for ax, (title, X, st) in zip(axes, clouds):
        ax.scatter(X[:, 0], X[:, 1], s=2, alpha=0.4, c=np.arange(len(X)), cmap="viridis")
        ax.set_title(f"{title}\nMardia kurtosis z = {st.kurt_z:.1f}, skewness p = {st.skew_p:.1e}", fontsize=9)
        ax.set_aspect("equal")
    fig.suptitle("Masked attention with a sink does not preserve Gaussian data (colour = position s)")
    fig.tight_layout()
    fig.savefig(out / "masked_gaussianity.png", dpi=120)
    plt.close(fig)
    return res


def run(args) -> int:
    import sys

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ..errors import InputError
    from ..numerics.threads import limit_threads, pool_plan

    if args.seed < 0:
        raise InputError("seed", f"must be a non-negative integer, got {args.seed}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = settings(args.quick)
    rng = np.random.default_rng(args.seed)
    A = np.asarray(A0) / np.linalg.norm(np.asarray(A0), 2)
    V = np.eye(2)
    parts = args.only or ["stability", "convergence", "masked"]
    as_json = bool(getattr(args, "json", False))
    say = sys.stderr if as_json else sys.stdout
    summary = {"seed": args.seed, "quick": bool(args.quick), "settings": cfg, "A": A.tolist(), "V": V.tolist()}
    _, threads = pool_plan(tasks=1)  # one process: all usable cores for BLAS/OpenMP and the kernels, no more
    with limit_threads(threads):
        for name, fn in (("stability", run_stability), ("convergence", run_convergence), ("masked", run_masked)):
            if name not in parts:
                continue
            t0 = time.perf_counter()
            summary[name] = fn(out, cfg, rng, A, V, plt)
            summary[name]["seconds"] = time.perf_counter() - t0
            print(f"tpde meanfield: {name} done in {summary[name]['seconds']:.1f} s", file=say, flush=True)
            if name == "convergence":
                print("\n".join(convergence_lines(summary[name])), file=say, flush=True)
            with open(out / "summary.json", "w") as fh:  # rewritten after each part: partial runs keep their data
                json.dump(summary, fh, indent=1, default=float)
    print(f"tpde meanfield: wrote {out}/summary.json and plots", file=say, flush=True)
    if as_json:
        print(json.dumps(summary, indent=1, default=float), flush=True)
    return 0
