"""Diagnostics of tokens on the sphere: clusters, their count over time, the time to one cluster, the energy.

**Cluster rule** (stated, one for the package): tokens ``i`` and ``j`` are linked when ``<θ_i, θ_j> >= 1 - δ``
(default ``δ = 1e-3``, the ``0.999`` of Rigollet's survey, arXiv 2512.01868); clusters are the connected
components of that graph (single linkage).  A cloud is "one cluster" when every pair is linked directly,
``min_ij <θ_i, θ_j> >= 1 - δ`` (stricter than one component, so a chain of close tokens does not count).

**Energy** ``E_β(μ) = (1/2β) ∬ e^{β<x,y>} dμ dμ`` of the empirical measure, reported with its constant removed,
``Ẽ_β = (1/(2β n²)) Σ_ij (e^{β<θ_i,θ_j>} - 1)`` (same increments; at ``β = 0`` its limit
``(1/2n²) Σ_ij <θ_i,θ_j> = |θ̄|²/2``).  USA with ``Q = K = V = I`` is its gradient ascent (Geshkovski et al.,
arXiv 2312.10794), so it increases along such runs; metastable plateaus appear as steps (a staircase),
each step with a drop of the cluster count (:func:`staircase`).

Every sphere kind registers its ``"diagnostic"`` part here: the cluster rule and the quantity it monitors
(the energy for SA/USA; for the causal mask the largest ``1 - <θ_i, θ_1>``, which must go to 0 with ``V = I``,
Karagodin-Polyanskiy-Rigollet, arXiv 2411.04990).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..registry.kinds import register

__all__ = ["DELTA", "STEP_BUDGET", "step_budget", "cluster_labels", "cluster_counts", "one_cluster", "time_to_one_cluster", "energy",
           "staircase", "distance_to_first", "Diagnostic"]

DELTA = 1e-3
#: Step budget of one sphere particle run from the command line (``tpde particles``/``classify``/``sweep`` on
#: the sphere): a step of a few tokens costs ~0.1 ms of overhead, so 50 000 steps are seconds, not the minutes
#: that the integrator's own limit (200 000 steps, or a step size collapsing where ``A_i/|A_i|`` jumps) allows;
#: the run then ends "stalled" at the time reached, with the reason.
STEP_BUDGET = 50_000
#: The step budget also follows the run's size (:func:`step_budget`): one field evaluation of a cloud costs
#: ``heads · max(n² d, CLOUD_OVERHEAD)`` multiply-add equivalents (the fixed cost of an evaluation, ~50 us, is the
#: work of ~5e4 multiply-adds at ~1 ns: measured, 1 000 clouds of 8 tokens in d = 3 to T = 1 in 8 s), a step 7
#: evaluations; a run may spend RUN_WORK (about a minute of one core), so large clouds get fewer steps than
#: STEP_BUDGET instead of being bounded only by the wall-clock cap (e.g. n = 10 000 tokens: hours)
CLOUD_OVERHEAD, RUN_WORK = 5e4, 5e10
#: never fewer steps than this (below, the run would say nothing: the commands' size caps refuse such inputs)
MIN_STEPS = 100


def step_budget(n: int, d: int, heads: int = 1, clouds: int = 1, work: float = RUN_WORK) -> int:
    """Steps a sphere run of ``clouds`` clouds of ``n`` tokens in dimension ``d`` may take: ``work / (7 · clouds ·
    heads · max(n² d, CLOUD_OVERHEAD))``, between MIN_STEPS and STEP_BUDGET."""
    size = float(clouds) * heads * max(float(n) ** 2 * d, CLOUD_OVERHEAD)
    return int(max(MIN_STEPS, min(STEP_BUDGET, work / (7 * size))))


def _theta(theta):
    th = np.asarray(theta, dtype=float)
    if th.ndim != 2 or not np.all(np.isfinite(th)):
        raise InputError("theta", f"expected finite tokens of shape (n, d), got {th.shape}")
    return th / np.linalg.norm(th, axis=1, keepdims=True)


def _delta(delta):
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 2:
        raise InputError("delta", f"must be a number in (0, 2), got {delta!r}")
    return float(delta)


def cluster_labels(theta, delta: float = DELTA) -> np.ndarray:
    """Component label of each token under the rule ``<θ_i, θ_j> >= 1 - δ`` (labels ``0..k-1`` by first token)."""
    from scipy.sparse.csgraph import connected_components

    th = _theta(theta)
    adj = th @ th.T >= 1 - _delta(delta)
    _, lab = connected_components(adj, directed=False)
    _, first = np.unique(lab, return_index=True)
    order = np.argsort(np.argsort(first))
    return order[lab]


def cluster_counts(trajectory, delta: float = DELTA) -> np.ndarray:
    """Number of clusters at each frame of ``trajectory (k, n, d)``."""
    return np.array([cluster_labels(X, delta).max() + 1 for X in np.asarray(trajectory)])


def one_cluster(theta, delta: float = DELTA) -> bool:
    th = _theta(theta)
    return bool(np.min(th @ th.T) >= 1 - _delta(delta))


def time_to_one_cluster(times, trajectory, delta: float = DELTA):
    """First saved time from which every later frame is one cluster (``None`` if the last frame is not)."""
    ok = [one_cluster(X, delta) for X in trajectory]
    if not ok or not ok[-1]:
        return None
    k = len(ok) - 1
    while k > 0 and ok[k - 1]:
        k -= 1
    return float(np.asarray(times)[k])


def energy(theta, beta: float) -> float:
    """``Ẽ_β`` of the empirical measure (module docstring)."""
    th = _theta(theta)
    G = th @ th.T
    if beta == 0:
        return float(G.sum() / (2 * len(th) ** 2))
    return float(np.expm1(beta * G).sum() / (2 * beta * len(th) ** 2))


def monitor_report(name: str, monitor, theta, beta: float) -> dict:
    """``{"name", "value"}`` of a kind's monitored quantity, every number finite: an energy beyond float64
    (``e^{β}/β`` overflows above β ≈ 709) is reported as ``log|energy|`` with its sign, computed by a
    log-sum-exp (``Σ e^{βG}`` with the largest exponent factored out), never as ``inf``/``null``."""
    with np.errstate(over="ignore", invalid="ignore"):
        v = float(monitor(theta, beta))
    if np.isfinite(v) or name != "energy" or beta == 0:
        return {"name": name, "value": v}
    th = _theta(theta)
    n2 = float(len(th)) ** 2
    z = beta * (th @ th.T)
    m = float(z.max())
    log_s = m + float(np.log(np.exp(z - m).sum()))           # log Σ e^{βG} (> 700 here, so S ≫ n²)
    log_abs = log_s + float(np.log1p(-n2 * np.exp(-log_s))) - float(np.log(2 * abs(beta) * n2))
    return {"name": "log|energy|", "value": log_abs, "sign": 1 if beta > 0 else -1,
            "note": "the energy exceeds float64; its natural log and sign are given"}


@dataclass(frozen=True)
class Step:
    t_start: float
    t_end: float
    clusters: int
    energy: float


def staircase(times, trajectory, beta: float, delta: float = DELTA) -> list[Step]:
    """Maximal runs of frames with the same cluster count: the plateaus, each with its mean energy."""
    counts = cluster_counts(trajectory, delta)
    E = np.array([energy(X, beta) for X in trajectory])
    times = np.asarray(times, float)
    out, a = [], 0
    for k in range(1, len(counts) + 1):
        if k == len(counts) or counts[k] != counts[a]:
            out.append(Step(float(times[a]), float(times[k - 1]), int(counts[a]), float(E[a:k].mean())))
            a = k
    return out


def distance_to_first(theta) -> float:
    """``max_i (1 - <θ_i, θ_1>)`` (causal mask: the first token sees only itself and does not move)."""
    th = _theta(theta)
    return float(np.max(1 - th @ th[0]))


@dataclass(frozen=True)
class Diagnostic:
    """A sphere kind's diagnostic part: the cluster rule and the monitored quantity ``(theta, beta) -> float``."""

    monitor_name: str
    monitor: object
    clusters: object = cluster_labels


register("sphere_sa", "diagnostic")(Diagnostic("energy", energy))
register("sphere_usa", "diagnostic")(Diagnostic("energy", energy))
register("sphere_causal", "diagnostic")(Diagnostic("distance_to_first", lambda th, beta: distance_to_first(th)))
