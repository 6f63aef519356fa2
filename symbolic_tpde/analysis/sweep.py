"""Phase diagrams: sweep two eigenvalues of ``A + Aᵀ`` and classify the covariance dynamics.

Grid (any Gaussian-preserving kind of the registry, any ``d >= 2``): ``A = R diag(s₁, s₂, r, …, r) Rᵀ / 2 +
k N`` with ``R`` the rotation by ``theta`` in the ``(e₀, e₁)`` plane, ``N = R(e₀e₁ᵀ - e₁e₀ᵀ)Rᵀ`` (the skew part,
``A - Aᵀ = 2kN``) and ``r`` (``rest``) the remaining eigenvalues of ``A + Aᵀ``; ``V`` any ``d×d`` matrix.  The
head is built by the registry (:func:`head_for`, the kind's ``interaction``): kinds with ``A`` take it
directly, ℓ2 takes ``Q = A, K = I, τ = 2`` (cross term ``(2/τ)KᵀQ = A``, README Mathematics §3), ``custom``
takes ``B = Aᵀ``; other parameters take their neutral value (zero, a scalar's default).

Initial data: **one** sample of ``K`` covariances ``Σ₀ = GGᵀ/d + 0.1 I`` (``G`` standard normal,
``default_rng(seed)``) shared by every grid point, so differences across the map come from ``A``, not from
redrawn data.  With ``symmetrise`` (default) the sample is closed under ``P = R·swap(e₀, e₁)·Rᵀ``: each ``Σ₀`` and
``PΣ₀Pᵀ``.  Since ``P A(s₁, s₂, k) Pᵀ = A(s₂, s₁, -k)``, an ODE equivariant under orthogonal conjugation whose
``V`` commutes with ``P`` gives the same set of outcomes and blow-up times at ``(s₁, s₂, k)`` and ``(s₂, s₁, -k)``;
for softmax with ``V = I`` the skew part drops out (``dΣ/dt = Σ(A + Aᵀ)Σ``, README Mathematics §4), so the
blow-up-time map is symmetric about the diagonal, up to the integration error of the blow-up times.

Per point: the counts of each outcome of the one classifier (:mod:`.verdict`, the same as ``tpde classify``:
theorems first, so an ℓ2 or Sinkhorn point is never "blow-up"), the majority phase, the median blow-up time
and the largest error bound of the blow-up times there.  Phases: 0 collapse, 1 low rank (``1 <= r < d``),
2 full rank, 3 diverge, 4 blow-up, 5 undetermined, 6 time-limit, 7 oscillating (bursting, not convergent on
``[0, T]``), 8 no blow-up before ``T`` (a singularity follows after ``T``).

Bounded work: every point gets ``max_seconds_point`` seconds of wall-clock time (default
:data:`DEFAULT_POINT_SECONDS`; the integrator's one cap, :class:`symbolic_tpde.numerics.ode.solve.Deadline`, checked
before every batched right-hand side evaluation, the clock starting after the ODE is built); a point that
reaches it counts all its ``Σ₀`` as ``"time-limit"`` (phase 6) and the sweep goes on.  The step count is
capped too (the classifier's evaluation budget: such a run is ``"undetermined"`` with the reason).
With the cap reached the map depends on the machine's speed; without, it is deterministic.

Execution: the grid is cut into chunks (rows of the grid) evaluated by :func:`sweep_chunk`, a pure module-level
function, on a local ``concurrent.futures.ProcessPoolExecutor`` (``workers``) or, with ``scheduler``, on a Dask
distributed cluster (``dask.distributed.Client(address).map``).  The results are identical either way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PHASES = ("collapse", "low rank", "full rank", "diverge", "blow-up", "undetermined", "time-limit", "oscillating",
          "no blow-up before T")
#: wall-clock cap of one grid point, seconds (``tpde sweep --max-seconds``)
DEFAULT_POINT_SECONDS = 60.0


@dataclass(frozen=True)
class SweepSpec:
    n: int = 9
    smin: float = -1.0
    smax: float = 1.0
    v: tuple = (1.0, 1.0)          # d numbers (V diagonal) or d*d numbers (V row by row)
    theta: float = 0.4
    K: int = 8
    T: float = 1e3
    seed: int = 0
    kind: str = "softmax"
    d: int = 2
    skew: float = 0.0
    rest: float = -1.0
    symmetrise: bool = True
    max_seconds_point: float | None = DEFAULT_POINT_SECONDS

    def points(self) -> np.ndarray:
        s = np.linspace(self.smin, self.smax, self.n)
        s1, s2 = np.meshgrid(s, s, indexing="ij")
        return np.stack([s1.ravel(), s2.ravel()], axis=1)

    def rotation(self) -> np.ndarray:
        R = np.eye(self.d)
        c, s = np.cos(self.theta), np.sin(self.theta)
        R[:2, :2] = [[c, -s], [s, c]]
        return R

    def V(self) -> np.ndarray:
        v = np.asarray(self.v, float)
        if v.size == self.d:
            return np.diag(v)
        if v.size == self.d**2:
            return v.reshape(self.d, self.d)
        raise ValueError(f"v must have d = {self.d} or d² = {self.d ** 2} entries, got {v.size}")

    def A(self, s1: float, s2: float) -> np.ndarray:
        R = self.rotation()
        lam = np.full(self.d, self.rest)
        lam[:2] = s1, s2
        N = np.zeros((self.d, self.d))
        N[0, 1], N[1, 0] = 1.0, -1.0
        return R @ (np.diag(lam) / 2 + self.skew * N) @ R.T

    def swap(self) -> np.ndarray:
        R = self.rotation()
        Pm = np.eye(self.d)
        Pm[[0, 1]] = Pm[[1, 0]]
        return R @ Pm @ R.T


def initial_sample(spec: SweepSpec) -> np.ndarray:
    """The shared ``Σ₀`` sample (module docstring): ``(K, d, d)``, or ``(2K, d, d)`` with ``symmetrise``."""
    rng = np.random.default_rng(spec.seed)
    G = rng.normal(size=(spec.K, spec.d, spec.d))
    S0 = G @ G.transpose(0, 2, 1) / spec.d + 0.1 * np.eye(spec.d)
    if spec.symmetrise:
        P = spec.swap()
        S0 = np.concatenate([S0, P @ S0 @ P.T])
    return S0


def interaction_head(kind: str, A: np.ndarray, V: np.ndarray):
    """One head of ``kind`` whose kernel's bilinear term is ``<Ax, y>``: the registry's
    :attr:`~symbolic_tpde.registry.kinds.KindSpec.interaction` gives its parameters from ``A``, the other required
    ones take their :meth:`~symbolic_tpde.registry.kinds.ParamSpec.neutral` value (zeros, a scalar's default)."""
    from ..errors import InputError
    from ..weights import make_head
    from ..registry import kinds

    spec = kinds.get(kind)
    if spec.interaction is None:
        raise InputError("kind", f"{kind!r}: the registry gives no head with kernel term <Ax, y> (no interaction)")
    A = np.asarray(A, float)
    d = A.shape[0]
    given = spec.interaction(A, np.eye(d))
    rest = {p.name: np.zeros((d,) * len(p.shape)) if p.shape else p.neutral()
            for p in spec.params if p.name not in given and p.name != "V" and p.required}
    return make_head(kind, V=V, **given, **rest)


def head_for(kind: str, A: np.ndarray, V: np.ndarray):
    """:func:`interaction_head` of a Gaussian-preserving ``kind`` (the sweep needs its moment ODE)."""
    from ..errors import InputError
    from ..registry import kinds

    if not kinds.get(kind).preserves_gaussians:
        raise InputError("kind", f"{kind!r} does not preserve Gaussians: no moment ODE to sweep")
    return interaction_head(kind, A, V)


def phase_of(verdict, d: int) -> int:
    """The phase (index into :data:`PHASES`) of a :class:`~symbolic_tpde.analysis.verdict.Verdict`."""
    o = verdict.outcome
    if o == "rank":
        return 0 if verdict.rank == 0 else (1 if verdict.rank < d else 2)
    return PHASES.index({"diverge": "diverge", "blowup": "blow-up", "oscillating": "oscillating",
                         "no-singularity-before-T": "no blow-up before T"}.get(o, "undetermined"))


def sweep_chunk(spec: SweepSpec, indices: list[int]) -> list[tuple[int, np.ndarray, float, float]]:
    """Classify the grid points ``indices`` with the one classifier of ``tpde classify``
    (:func:`symbolic_tpde.analysis.verdict.classify_long_time`, each ``Σ₀`` of the shared sample at horizon
    ``T``), so a point of the map and ``tpde classify`` on the same scenario cannot disagree; returns
    ``(index, outcome counts (len(PHASES),), median T* or NaN, largest T* error bound or NaN)``.  The point's
    wall-clock cap is shared by its ``Σ₀``: once spent, the remaining ones count as ``"time-limit"``."""
    import time

    from ..gaussian import GaussianODE
    from ..weights import make_weights
    from .verdict import classify_long_time

    pts = spec.points()
    V = spec.V()
    S0 = initial_sample(spec)
    out = []
    for i in indices:
        ode = GaussianODE.from_weights(make_weights([head_for(spec.kind, spec.A(*pts[i]), V)]))
        counts = np.zeros(len(PHASES), dtype=int)
        start = time.monotonic()
        bt, be = [], []
        for S in S0:
            left = None if spec.max_seconds_point is None else spec.max_seconds_point - (time.monotonic() - start)
            if left is not None and left <= 0:
                counts[PHASES.index("time-limit")] += 1
                continue
            v = classify_long_time(ode, S, spec.T, max_seconds=left)
            if v.outcome == "undetermined" and "wall-clock cap" in v.label:
                counts[PHASES.index("time-limit")] += 1
                continue
            counts[phase_of(v, spec.d)] += 1
            if v.outcome == "blowup":
                bt.append(v.blowup_time)
                be.append(v.blowup_time_error)
        out.append((i, counts, float(np.median(bt)) if bt else float("nan"), float(max(be)) if be else float("nan")))
    return out


@dataclass
class SweepResult:
    spec: SweepSpec
    points: np.ndarray        # (P, 2)
    counts: np.ndarray        # (P, len(PHASES)), columns PHASES
    phase: np.ndarray         # (P,) majority phase; -1 for a point not computed yet (a partial result)
    blowup_time: np.ndarray   # (P,) median T* (NaN if none)
    blowup_time_error: np.ndarray | None = None  # (P,) largest error bound of the T* there (NaN if none)
    done: np.ndarray | None = None               # (P,) bool: the point is computed (None: all are)


def warm_worker(spec: SweepSpec | None = None) -> None:
    """Derive and load the sweep's generated right-hand side once in this process (pool initializer)."""
    from dataclasses import replace

    spec = SweepSpec() if spec is None else spec
    sweep_chunk(replace(spec, n=1, K=1, T=1.0), [0])


def run_sweep(spec: SweepSpec, *, workers: int = 1, scheduler: str | None = None, executor=None,
              on_progress=None) -> SweepResult:
    """Evaluate the grid serially (``workers=1``, one point at a time), on a new local process pool, on a
    given ``concurrent.futures`` ``executor`` (reused across sweeps, e.g. warmed with :func:`warm_worker`), or
    on a Dask cluster at ``scheduler``.  ``on_progress(partial, done, total)`` is called as results arrive
    (``partial``: the :class:`SweepResult` so far, its pending points with ``phase = -1``)."""
    pts = spec.points()
    P = len(pts)
    counts = np.zeros((P, len(PHASES)), dtype=int)
    bt = np.full(P, np.nan)
    be = np.full(P, np.nan)
    done = np.zeros(P, dtype=bool)

    def partial():
        phase = np.where(done, counts.argmax(axis=1), -1)
        return SweepResult(spec, pts, counts.copy(), phase, bt.copy(), be.copy(), None if done.all() else done.copy())

    def take(parts):
        for part in parts:
            for i, c, b, e in part:
                counts[i], bt[i], be[i], done[i] = c, b, e, True
            if on_progress is not None:
                on_progress(partial(), int(done.sum()), P)

    rows = [list(range(r * spec.n, (r + 1) * spec.n)) for r in range(spec.n)]
    if executor is not None:
        take(executor.map(sweep_chunk, [spec] * len(rows), rows))
    elif scheduler is not None:
        from dask.distributed import Client, as_completed

        with Client(scheduler) as client:
            futures = client.map(sweep_chunk, [spec] * len(rows), rows, pure=False)
            take(f.result() for f in as_completed(futures))
    elif workers <= 1:
        take(sweep_chunk(spec, [i]) for i in range(P))
    else:
        from concurrent.futures import ProcessPoolExecutor, as_completed

        from ..numerics.threads import pool_plan, worker_initializer

        # workers x threads per worker <= cores (the package's one thread policy)
        w, per = pool_plan(tasks=len(rows), requested=workers)
        with ProcessPoolExecutor(max_workers=w, initializer=worker_initializer, initargs=(per,)) as ex:
            take(f.result() for f in as_completed([ex.submit(sweep_chunk, spec, ch) for ch in rows]))
    return partial()


def save_sweep(res: SweepResult, out: Path, png: bool = True) -> list[Path]:
    """Write ``out.npz``, ``out.csv`` and (``png``) ``out.png`` (phase map with its legend outside, and the
    median blow-up time with a colour bar).  A partial result (``res.done`` not all true) is written with
    ``done`` in the npz and ``pending`` as the phase of its points not computed yet."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sp_ = res.spec
    be = res.blowup_time_error if res.blowup_time_error is not None else np.full(len(res.points), np.nan)
    done = np.ones(len(res.points), dtype=bool) if res.done is None else res.done
    # written to a temporary name and renamed: an interrupted sweep leaves the last complete file
    tmp_npz, tmp_csv = (out.with_name(out.name + ".tmp" + x) for x in (".npz", ".csv"))
    np.savez(tmp_npz, points=res.points, counts=res.counts, phase=res.phase,
             blowup_time=res.blowup_time, blowup_time_error=be, phases=np.array(PHASES), done=done,
             spec=np.array(repr(sp_)), A_example=sp_.A(sp_.smin, sp_.smax), V=sp_.V(),
             Sigma0=initial_sample(sp_))
    tmp_npz.replace(out.with_suffix(".npz"))
    # the CSV is a plain table (pandas.read_csv(path) and numpy.genfromtxt(path, delimiter=",", names=True)
    # load it with no option); its metadata sits beside it in STEM.meta.json, as tpde gaussian --save x.csv
    cols = ["s1", "s2"] + [p.replace(" ", "_").replace("-", "_") for p in PHASES] + ["phase", "median_blowup_time",
                                                                    "max_blowup_time_error"]
    out.with_suffix(".meta.json").write_text(json.dumps({"spec": repr(sp_), "columns": cols,
                                                         "phases": list(PHASES)}) + "\n")
    with open(tmp_csv, "w") as fh:
        fh.write(",".join(cols) + "\n")      # identifiers: genfromtxt(names=True) keeps them as they are
        for (s1, s2), c, ph, b, e in zip(res.points, res.counts, res.phase, res.blowup_time, be):
            name = PHASES[ph] if ph >= 0 else "pending"
            fh.write(f"{s1:.6g},{s2:.6g}," + ",".join(map(str, c)) + f",{name},{b:.10g},{e:.3g}\n")
    tmp_csv.replace(out.with_suffix(".csv"))
    if not png:
        return [out.with_suffix(x) for x in (".npz", ".csv", ".meta.json")]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    n = sp_.n
    s = np.linspace(sp_.smin, sp_.smax, n)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13.5, 5.2), gridspec_kw={"wspace": 0.55})
    cmap = ListedColormap(["tab:green", "tab:blue", "tab:cyan", "tab:orange", "tab:red", "grey", "black",
                           "tab:purple", "tab:pink"])
    a1.pcolormesh(s, s, res.phase.reshape(n, n).T, cmap=cmap, vmin=-0.5, vmax=len(PHASES) - 0.5,
                  shading="nearest")
    for k, name in enumerate(PHASES):
        a1.plot([], [], "s", color=cmap(k), label=name)
    a1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, title="majority")
    a1.set_aspect("equal")
    a1.set_xlabel(r"$s_1$ (eigenvalue of $A + A^\top$)")
    a1.set_ylabel(r"$s_2$")
    Vs = np.array2string(sp_.V(), precision=2, separator=",").replace("\n", "")
    nS = len(initial_sample(sp_))
    a1.set_title(f"{sp_.kind}, d = {sp_.d}: majority outcome of {nS} shared $\\Sigma_0$\n"
                 f"skew $k$ = {sp_.skew:g}, rest = {sp_.rest:g}, V = {Vs}, T = {sp_.T:g}", fontsize=9)
    with np.errstate(divide="ignore", invalid="ignore"):
        im = a2.pcolormesh(s, s, np.log10(res.blowup_time.reshape(n, n)).T, shading="nearest")
    fig.colorbar(im, ax=a2, label=r"$\log_{10}$ median blow-up time $T^*$")
    a2.set_aspect("equal")
    a2.set_xlabel(r"$s_1$")
    a2.set_ylabel(r"$s_2$")
    a2.set_title("median blow-up time (blank: no blow-up)", fontsize=9)
    fig.savefig(out.with_suffix(".png"), dpi=100, bbox_inches="tight")
    plt.close(fig)
    return [out.with_suffix(x) for x in (".npz", ".csv", ".meta.json", ".png")]
