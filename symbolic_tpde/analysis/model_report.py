"""Per-layer report of a trained model against its hidden states: which theorems' hypotheses hold, and what the
theory's models predict for each layer next to what the network does.

Inputs: a :class:`~.surrogate.Surrogate`, the residual streams ``H (L + 1, n, d)`` (the input of every layer and
the last layer's output; from a file, or the surrogate's own forward pass, which equals the network's to
round-off) and the sequence id of each token.  Each layer ``l`` is treated on its own, from its **real input**
``H[l]``; the attention sub-layer's input is ``x = H[l]`` (Post-LN) or ``N1(H[l])`` (Pre-LN).

Hypotheses (per layer, numeric, on that layer's weights; see :mod:`.theorems` for the statements):

* ``S = Σ_h (V_h A_h + A_hᵀ V_hᵀ)``: its largest and smallest eigenvalue and the count of positive ones;
* ``riccati``: every head's ``V_h`` a positive multiple of ``I`` (impossible when ``rank V_h ≤ k < d``);
* ``lyapunov``: one head, ``V`` symmetric positive definite, ``A + Aᵀ ⪯ 0``;
* ``growth``: no theorem covers softmax heads (stated as such);
* ``blowup_time``: the Gaussian ``N(α, Σ)`` fitted to the layer's attention input (all tokens pooled) under the
  layer's exact attention moment ODE (``dα/dt = Σ_h V_h(α + Σ(A_h α + r_h)) + c``, ``dΣ/dt = Σ_h V_hΣA_hΣ + (·)ᵀ``;
  the biases are exact terms), integrated by the package's one integrator with its blow-up monitor up to
  ``T_BLOWUP`` layer-time units; ``inf`` (with status) when it does not blow up before.

Predictions of the layer's output cloud, each a row with its time and status (``ok``, ``blow-up at t``,
``stalled``: such rows carry no numbers):

* ``euler``: ``h + τ f(h)`` (``f`` the attention update of the residual stream, through ``N1`` for Pre-LN): the
  attention residual alone as one Euler step of length ``τ`` (τ = 1: the network's own attention step, without
  the norms and the MLP);
* ``flow``: the particle flow ``dh/dt = f(h)`` at ``τ`` (classical RK4, ``steps`` steps; each sequence its own
  system; causal where the model is): a different map when the Jacobian of ``f`` is not small;
* ``gaussian``: the attention moment ODE from the fitted Gaussian at ``τ`` (covariance diagnostics only;
  Post-LN models, where the attention input is the residual stream);
* ``flow_block``: the flow's end point completed by the rest of the block (norms and MLP, exactly): the network
  with its attention Euler step replaced by the continuous flow, so its gap is the discrete-vs-continuous gap;
* ``surrogate``: the full surrogate block (the Euler step and the rest): the network itself to round-off (a
  check that the other rows' gaps are the theory's, not the reading's).

Diagnostics of a cloud ``Y`` (the network's output ``H[l + 1]`` as measured, each prediction as predicted):
``cos_within``/``cos_across`` (mean pairwise cosine of pairs in the same / in different sequences),
``eff_rank`` (:data:`.hidden_states.EFFECTIVE_RANK_DEFINITION`), ``top_fraction`` (largest covariance eigenvalue
over the trace), ``clusters`` (connected components of the graph joining tokens of the same sequence whose cosine
is ≥ :data:`CLUSTER_COS`, summed over sequences), ``attn_entropy`` (layer ``l``'s heads on the cloud: mean over
heads and queries of ``-Σ_j P_ij log P_ij``, nats; a cloud is first normalised by ``N1`` for Pre-LN).  The gap
is ``predicted - measured``, in its own column.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .hidden_states import EFFECTIVE_RANK_DEFINITION, cosine_within_across, covariance_spectrum, effective_rank

#: tokens with cosine ≥ this are joined in the cluster graph
CLUSTER_COS = 0.9
#: horizon (layer-time units) of the fitted Gaussian's blow-up search
T_BLOWUP = 20.0
#: wall-clock cap (s) of each Gaussian run (a capped run is reported as such, never as a result)
MAX_SECONDS = 10.0
#: relative tolerance of the Gaussian runs: the blow-up times at 1e-4 agree with runs at 1e-6 to ~1e-5 relative
#: (measured on all-MiniLM-L6-v2 layers 0 and 3: 0.4051711 vs 0.4051666, 2.4689356 vs 2.4689306) at 40 % of the
#: evaluations
GAUSSIAN_RTOL = 1e-4
#: blow-up monitor levels (tr Σ over its start): 10³ … 10⁶ (the package's default goes to 10¹⁰; at 10⁶ the
#: remaining time is ~10⁻⁶ T* for the Riccati rate p = 1, so the extrapolated T* keeps ~5 digits at a third of
#: the steps)
BLOWUP_LEVELS = tuple(10.0 ** np.arange(3, 7))
DIAGNOSTICS = ("cos_within", "cos_across", "eff_rank", "top_fraction", "clusters", "attn_entropy")
MODELS = ("euler", "flow", "gaussian", "flow_block", "surrogate")
COVARIANCE_ONLY = ("eff_rank", "top_fraction")


def _clusters(Y, seq) -> int:
    from scipy.sparse.csgraph import connected_components

    total = 0
    for s in np.unique(seq):
        Z = Y[seq == s]
        U = Z / np.maximum(np.linalg.norm(Z, axis=1), 1e-300)[:, None]
        total += int(connected_components(U @ U.T >= CLUSTER_COS, directed=False)[0])
    return total


def _attn_entropy(sur, l, Y, seq) -> float:
    x = sur.attention_input(l, Y)
    P = sur.probs(l, x, seq)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(P > 0, P * np.log(P), 0.0).sum(-1)
    return float(ent.mean())


def diagnostics(sur, l, Y, seq) -> dict:
    """The diagnostics of the module docstring for the cloud ``Y`` (``nan`` where not finite)."""
    if not np.isfinite(Y).all():
        return {k: float("nan") for k in DIAGNOSTICS}
    w, a = cosine_within_across(Y, seq)
    lam = covariance_spectrum(Y)
    return {"cos_within": w, "cos_across": a, "eff_rank": effective_rank(Y),
            "top_fraction": float(lam[0] / lam.sum()) if lam.sum() > 0 else 1.0,
            "clusters": float(_clusters(Y, seq)), "attn_entropy": _attn_entropy(sur, l, Y, seq)}


def _cov_diagnostics(S) -> dict:
    lam = np.clip(np.linalg.eigvalsh((S + S.T) / 2)[::-1], 0, None)
    p = lam / lam.sum()
    p = p[p > 0]
    return {"eff_rank": float(np.exp(-(p * np.log(p)).sum())), "top_fraction": float(lam[0] / lam.sum())}


def _stacked(sur, l):
    Q, K, Vv, WO, r, c = sur.heads(l)
    H, k, d = Q.shape
    return Q, K, Vv, WO, r, c, H, k


def moment_rhs(sur, l, m: int):
    """``f(t, y)`` of layer ``l``'s attention moment ODE with biases in square-root form: ``y = (α, vec Z)``,
    ``Σ = ZᵀZ`` with ``Z (m, d)`` (the centred fitted cloud over ``√(n-1)``: ``m = n - 1`` rows), and

        dα/dt = Σ_h V_h(α + Σ(A_h α + r_h)) + c,      dZ/dt = Z Σ_h A_hᵀ Σ V_hᵀ,

    so that ``d(ZᵀZ)/dt = Σ_h V_hΣA_hΣ + (·)ᵀ``: the exact Gaussian moment ODE (the Gaussian moves by the affine
    field ``V_h(α + Σ(A_h x + r_h)) + c``), with no ``d × d`` product (``O(m d H k)`` per evaluation)."""
    Q, K, Vv, WO, r, c, H, k = _stacked(sur, l)
    d = sur.d
    sq = np.sqrt(k)

    Qa, Ka, Va = (W.reshape(H * k, d) for W in (Q, K, Vv))
    Wa = WO.transpose(0, 2, 1).reshape(H * k, d)      # rows: WO_hᵀ stacked

    def f(t, y):
        a, Z = y[:d], y[d:].reshape(m, d)
        ZQ = (Z @ Qa.T).reshape(m, H, k).transpose(1, 0, 2)     # Z Q_hᵀ  (h, m, k)
        ZK = (Z @ Ka.T).reshape(m, H, k).transpose(1, 0, 2)
        ZV = (Z @ Va.T).reshape(m, H, k).transpose(1, 0, 2)
        G = ZQ @ ZK.transpose(0, 2, 1) / sq                      # Z A_hᵀ Zᵀ  (h, m, m)
        T1 = (G @ ZV).transpose(1, 0, 2).reshape(m, H * k)       # Z A_hᵀ ZᵀZ Vv_hᵀ, heads side by side
        dZ = T1 @ Wa                                             # Σ_h … WO_hᵀ
        qa = Qa @ a                                              # (Hk,)
        Aa = (Ka * qa[:, None]).reshape(H, k, d).sum(1) / sq + r  # A_h α + r_h = K_hᵀ Q_h α/√k + r_h
        tilt = a[None, :] + (Aa @ Z.T) @ Z                       # α + Σ(A_h α + r_h)
        vt = (Va.reshape(H, k, d) * tilt[:, None, :]).sum(2)     # Vv_h tilt_h  (h, k)
        da = Wa.T @ vt.ravel() + c
        return np.concatenate([da, dZ.ravel()])
    return f


def gaussian_run(sur, l, x, T, max_seconds=None, tau=1.0, rtol=GAUSSIAN_RTOL):
    """The attention moment ODE of layer ``l`` from the Gaussian fitted to ``x`` (:func:`moment_rhs`), with the
    package's integrator and blow-up monitor on ``tr Σ = |Z|²``; ``Solution`` (state ``(α, vec Z)``)."""
    from ..numerics.ode.solve import BlowupMonitor, integrate

    d = sur.d
    n = len(x)
    Z0 = (x - x.mean(0)) / np.sqrt(n - 1)
    mon = BlowupMonitor(lambda y: float(y[d:] @ y[d:]), lambda y, fy: float(2 * y[d:] @ fy[d:]), error_run=False,
                        levels=BLOWUP_LEVELS)
    y0 = np.concatenate([x.mean(0), Z0.ravel()])
    return integrate(moment_rhs(sur, l, n), y0, (0.0, T), method="dopri5", rtol=rtol, events=[mon],
                     max_seconds=max_seconds, t_eval=sorted({0.0, min(tau, T), T}))


def sigma_of(sur, y, n):
    Z = y[sur.d:].reshape(n, sur.d)
    return Z.T @ Z


def hypotheses(sur, l, x, sol) -> dict:
    """The per-layer hypothesis checks (module docstring) for the attention input ``x``; ``sol`` the run of
    :func:`gaussian_run` to :data:`T_BLOWUP`."""
    Q, K, Vv, WO, r, c, H, k = _stacked(sur, l)
    d = sur.d
    S = np.zeros((d, d))
    for h in range(H):
        VA = (WO[h] @ (Vv[h] @ K[h].T)) @ Q[h] / np.sqrt(k)
        S += VA + VA.T
    lam = np.linalg.eigvalsh(S)
    tol = 1e-12 * np.abs(lam).max()
    if k < d:
        ric = f"fails: V_h = W_O,h W_V,h has rank ≤ k = {k} < d = {d}, so it is no multiple of I"
        lyap = f"fails: {H} heads (one needed) and V of rank ≤ {k} < d (not positive definite)"
    else:
        ric = lyap = "not checked for full-rank heads here"
    if sol.status == "blowup":
        bt, bstat = float(sol.blowup_time), "blow-up"
    elif sol.status == "ok":
        bt, bstat = float("inf"), f"no blow-up before t = {T_BLOWUP:g}"
    else:
        bt, bstat = float("nan"), f"{sol.status} at t = {sol.t_end:.6g} (undetermined)"
    return {"layer": l, "S_eig_max": float(lam[-1]), "S_eig_min": float(lam[0]),
            "S_n_positive": int((lam > tol).sum()), "riccati": ric, "lyapunov": lyap,
            "growth": "fails: no theorem covers softmax heads", "blowup_time": bt, "blowup_status": bstat}


def particle_flow(sur, l, x, seq, tau=1.0, steps=8):
    """RK4 of the residual stream's attention flow ``dh/dt = f(attention_input(h))`` over ``[0, τ]`` from
    ``x``; returns ``(cloud, status)``: ``blow-up`` when a stage leaves the finite range or the cloud's RMS norm
    grows past 1e6 times its start."""
    h = tau / steps
    X = x.copy()
    r0 = np.sqrt((x * x).sum(1).mean())
    for i in range(steps):
        with np.errstate(all="ignore"):
            k1 = sur.residual_field(l, X, seq)
            k2 = sur.residual_field(l, X + h / 2 * k1, seq)
            k3 = sur.residual_field(l, X + h / 2 * k2, seq)
            k4 = sur.residual_field(l, X + h * k3, seq)
            X = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        if not np.isfinite(X).all() or np.sqrt((X * X).sum(1).mean()) > 1e6 * r0:
            return None, f"blow-up at t ≈ {(i + 1) * h:.3g}"
    return X, "ok"


def layer_rows(sur, l, H, seq, sol, *, tau=1.0, steps=8):
    """Prediction rows of layer ``l`` (module docstring); ``sol`` the Gaussian run of :func:`gaussian_run`."""
    Xin, Xout = H[l], H[l + 1]
    x = sur.attention_input(l, Xin)
    measured = diagnostics(sur, l, Xout, seq)
    measured_in = diagnostics(sur, l, Xin, seq)
    preds, status = {}, {}
    nan = {k: float("nan") for k in DIAGNOSTICS}
    f = sur.residual_field(l, Xin, seq)
    preds["euler"], status["euler"] = diagnostics(sur, l, Xin + tau * f, seq), "ok"
    Y, status["flow"] = particle_flow(sur, l, Xin, seq, tau, steps)
    preds["flow"] = diagnostics(sur, l, Y, seq) if Y is not None else dict(nan)
    preds["flow_block"] = diagnostics(sur, l, sur.finish(l, Y)[2], seq) if Y is not None else dict(nan)
    status["flow_block"] = status["flow"]
    preds["gaussian"] = dict(nan)
    at = [i for i, t in enumerate(sol.t) if abs(t - tau) <= 1e-12 * tau]
    if sur.placement != "post":
        status["gaussian"] = ("n/a: pre-norm, the Gaussian of the normalised attention input is not the residual "
                              "stream's")
    elif at and (sol.status == "ok" or sol.t_end > tau):
        preds["gaussian"].update(_cov_diagnostics(sigma_of(sur, sol.y[at[0]], len(x))))
        status["gaussian"] = "ok (covariance diagnostics only)"
    elif sol.status == "blowup":
        status["gaussian"] = f"blow-up at t = {sol.blowup_time:.6g} < τ"
    else:
        status["gaussian"] = f"{sol.status} at t = {sol.t_end:.6g} < τ"
    preds["surrogate"] = diagnostics(sur, l, sur.block(l, Xin, seq)["out"], seq)
    status["surrogate"] = "ok"
    rows = []
    for k in DIAGNOSTICS:
        row = {"layer": l, "diagnostic": k, "time": tau, "measured_in": measured_in[k], "measured": measured[k]}
        for mname in MODELS:
            v = preds[mname][k]
            row[mname] = v
            row[f"{mname}_gap"] = v - measured[k] if np.isfinite(v) and np.isfinite(measured[k]) else float("nan")
            row[f"{mname}_status"] = status[mname]
        rows.append(row)
    return rows


def model_report(sur, H, seq, *, tau: float = 1.0, steps: int = 8) -> dict:
    """``{"hypotheses": [per layer], "rows": [per layer and diagnostic], "definitions": {...}}``."""
    sur.check_modelled()
    H = np.asarray(H, float)
    seq = np.asarray(seq)
    if H.ndim != 3 or H.shape[0] != sur.L + 1 or H.shape[2] != sur.d:
        raise InputError("states", f"expected ({sur.L + 1}, tokens, {sur.d}) (the input of every layer and the "
                         f"output), got {H.shape}")
    if seq.shape != (H.shape[1],):
        raise InputError("seq", f"expected one sequence id per token ({H.shape[1]}), got shape {seq.shape}")
    if H.shape[1] < 3:
        raise InputError("states", f"need at least 3 tokens (a covariance and pairs of cosines), got {H.shape[1]}")
    if np.any(np.diff(seq) < 0):
        raise InputError("seq", "the tokens of one sequence must be consecutive, sequences in increasing id order")
    if not np.isfinite(H).all():
        raise InputError("states", "non-finite hidden states")
    from threadpoolctl import threadpool_limits

    hyp, rows = [], []
    # one BLAS thread: the products here are small (n tokens × d × Hk); measured 30x faster than the default
    # threading on the shared 2-core machine (threads contend), and never slower on one core
    with threadpool_limits(1):
        for l in range(sur.L):
            x = sur.attention_input(l, H[l])
            sol = gaussian_run(sur, l, x, max(T_BLOWUP, tau), max_seconds=MAX_SECONDS, tau=tau)
            hyp.append(hypotheses(sur, l, x, sol))
            rows += layer_rows(sur, l, H, seq, sol, tau=tau, steps=steps)
    return {"hypotheses": hyp, "rows": rows, "tokens": int(H.shape[1]), "sequences": int(len(np.unique(seq))),
            "definitions": {"eff_rank": EFFECTIVE_RANK_DEFINITION, "clusters": f"components of cos ≥ {CLUSTER_COS} "
                            "within each sequence, summed", "attn_entropy": "layer l's heads on the cloud, mean "
                            "over heads and queries of -Σ_j P_ij log P_ij (nats)", "time": f"τ = {tau} per layer "
                            "(euler: one step of length τ; flow: RK4 with %d steps)" % steps,
                            "gap": "predicted - measured", "blowup_horizon": T_BLOWUP}}
