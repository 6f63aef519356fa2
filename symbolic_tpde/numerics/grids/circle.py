"""Spectral solver of the Transformer PDE on the circle: the sphere kinds of the registry in d = 2.

Tokens ``θ ∈ [0, 2π)``, written as unit complex numbers ``e^{iθ}``.  A head of kind ``sphere_sa`` or
``sphere_usa`` (registry; parameters ``beta``, ``A``, ``V`` as in :mod:`.sphere`) whose ``A`` and ``V`` commute
with rotations, ``A = a I + b J`` (``J`` the quarter turn) ↔ the complex number ``α = a + ib`` and likewise
``V`` ↔ ``ν``, has the attention vector (complex) of the probability density ``ρ``

    A(θ) = ν N(θ) / Z(θ),   N = K * (e^{iφ} ρ),   Z = K * ρ (SA) or 1 (USA),
    K(x) = e^{β Re(α e^{ix})} = e^{β|α| cos(x + arg α)},   (f * g)(θ) = ∫ f(θ - φ) g(φ) dφ,

(``<Aθ, θ'> = Re(α e^{iθ} e^{-iθ'})``: the kernel depends on ``θ - θ'`` only, a convolution; a general ``A``
or ``V`` is not, and is refused), summed over the heads.  Post-LN moves the angle at the tangential component
``v = Im(e^{-iθ} A)``; nGPT at ``v = a_n Im(e^{-iθ} A)/|A|`` (``a_n`` the scenario's ``alpha``); the PDE is
``∂ₜρ + ∂_θ(ρ v) = σ ∂²_θ ρ`` (``noise = σ ≥ 0``: the mean field of independent Brownian angles of variance
``2σ t``; the particle simulator has no noise, so the comparison with particles is at ``σ = 0``).  Pre- and
Peri-LN move radii too and the causal kind has a position axis: refused, with the reason.

Convolutions are exact in the kernel: ``K̂_k = I_{|k|}(β|α|) e^{ik arg α}`` (``e^{c cos x} = Σ_k I_k(c) e^{ikx}``,
modified Bessel functions, evaluated with mpmath), ``(f * g)^_k = 2π f̂_k ĝ_k`` and ``(e^{iφ}ρ)^_k = ρ̂_{k-1}``.
The density is held at ``M`` equispaced points (``M`` even, modes ``|k| < M/2``, the Nyquist mode dropped);
``N`` and ``Z`` are exact at the points for such a density, the products ``ρ v`` are pseudo-spectral; time by
the package's integrator (:func:`.solve.integrate`, Dormand–Prince 5(4)).

Linearisation at the uniform density ``1/2π`` (``v = 0``), ``A = V = I``, Post-LN: mode ``k`` grows at

    λ_k = k² I_k(β) / (β c) - σ k²,    c = I_0(β) (SA) or 1 (USA),

(:func:`growth_rates`), largest at ``k* ~ √β``: the number of clusters that appear first from a nearly uniform
start (β = 5: three).  Checked against the solver in ``tests/test_grid_circle.py``.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import InputError

__all__ = ["bessel_coefficients", "growth_rates", "circle_heads", "circle_weights", "circle_velocity",
           "solve_circle", "initial_density", "project_initial", "resolution", "trig_moments"]

KINDS = {"sphere_sa": "SA", "sphere_usa": "USA"}
NORMS = ("post", "ngpt")


def bessel_coefficients(beta: float, kmax: int, scaled: bool = False) -> np.ndarray:
    """``I_k(β)`` for ``k = 0..kmax`` (mpmath, 30 digits, rounded to float); ``scaled``: ``e^{-|β|} I_k(β)``, finite
    for every ``β`` (``I_k(β)`` overflows float64 from ``|β| ≈ 713``)."""
    import mpmath

    with mpmath.workdps(30):
        b = mpmath.mpf(beta)
        s = mpmath.exp(-abs(b)) if scaled else 1      # |β|: I_k(-x) = (-1)^k I_k(x) is of size e^{|x|}
        return np.array([float(mpmath.besseli(k, b) * s) for k in range(kmax + 1)])


def growth_rates(beta: float, kmax: int, kind: str = "SA", noise: float = 0.0) -> np.ndarray:
    """``λ_k``, ``k = 0..kmax``, of the linearisation at the uniform state (module docstring)."""
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise InputError("beta", f"must be a finite number > 0, got {beta!r}")
    if kind not in ("SA", "USA"):
        raise InputError("kind", f"must be 'SA' or 'USA', got {kind!r}")
    _check_noise(noise)
    I = bessel_coefficients(beta, kmax, scaled=kind == "SA")    # SA: a ratio, so the scale e^{-β} cancels
    k = np.arange(kmax + 1)
    c = I[0] if kind == "SA" else 1.0
    return k ** 2 * I / (beta * c) - noise * k ** 2


def _check_noise(noise):
    from ...inputs.checks import MAX_ENTRY

    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not (math.isfinite(noise) and noise >= 0):
        raise InputError("noise", f"must be finite and >= 0, got {noise!r}")
    if noise > MAX_ENTRY:       # like scenario entries: sigma k^2 stays finite for every k < M/2 <= 32768
        raise InputError("noise", f"must be at most {MAX_ENTRY:.0e} (the bound on scenario entries), got {noise!r}")


def circle_weights(beta: float, kind: str = "SA"):
    """The weights of one head ``sphere_sa`` (``kind="SA"``) or ``sphere_usa`` with ``A = V = I``, d = 2."""
    from ...weights import make_head, make_weights

    name = {"SA": "sphere_sa", "USA": "sphere_usa"}.get(kind)
    if name is None:
        raise InputError("kind", f"must be 'SA' or 'USA', got {kind!r}")
    return make_weights([make_head(name, A=np.eye(2), V=np.eye(2), beta=beta)])


def _as_complex(Mx, field):
    """``a I + b J`` → ``a + ib``; an InputError for a matrix that does not commute with rotations."""
    Mx = np.asarray(Mx, dtype=float)
    a, b = (Mx[0, 0] + Mx[1, 1]) / 2, (Mx[1, 0] - Mx[0, 1]) / 2
    if Mx.shape != (2, 2) or np.abs(Mx - np.array([[a, -b], [b, a]])).max() > 1e-12 * max(1.0, np.abs(Mx).max()):
        raise InputError(field, "on the circle the spectral solver needs a I + b J (a matrix commuting with "
                                "rotations: the kernel is then a convolution); use tpde particles otherwise")
    return complex(a, b)


def circle_heads(weights) -> list[tuple[bool, complex, complex, float]]:
    """``[(normalised, α, ν, β)]`` per head of ``weights`` (sphere kinds, d = 2; module docstring)."""
    from ...weights import Weights

    if not isinstance(weights, Weights):
        raise InputError("weights", f"expected Weights, got {type(weights).__name__}")
    if weights.d != 2:
        raise InputError("d", f"the circle solver is for d = 2 (tokens on S^1), got d = {weights.d}")
    if weights.ffn is not None or weights.sink is not None:
        raise InputError("ffn" if weights.ffn is not None else "sink", "not defined for tokens on the circle")
    out = []
    for i, h in enumerate(weights.heads):
        if h.kind not in KINDS:
            why = ("its position axis makes it a problem on positions x S^1" if h.kind == "sphere_causal"
                   else "not a sphere kind")
            raise InputError(f"heads[{i}].attention", f"{h.kind!r} is not in the circle solver: {why} "
                                                      "(use tpde particles)")
        p = h.effective
        beta = float(p["beta"])
        if not math.isfinite(beta):       # β < 0 (repulsive) is valid, as in the schema and tpde particles
            raise InputError(f"heads[{i}].beta", f"must be finite, got {beta}")
        out.append((h.kind == "sphere_sa", _as_complex(p["A"], f"heads[{i}].A"), _as_complex(p["V"], f"heads[{i}].V"),
                    beta))
    return out


class _Circle:
    def __init__(self, M, weights, norm, alpha, noise):
        if norm not in NORMS:
            raise InputError("norm", f"the circle solver covers {list(NORMS)} (pre and peri move radii too), "
                                     f"got {norm!r}")
        _check_noise(noise)
        self.M, self.norm, self.alpha, self.noise = M, norm, float(alpha), noise
        k = np.fft.fftfreq(M, 1.0 / M)
        k[M // 2] = 0.0                                  # the Nyquist mode is dropped
        self.k = k
        self.nyq = np.zeros(M, bool)
        self.nyq[M // 2] = True
        K = M // 2 - 1
        self.kz = np.arange(-K, K + 1)                   # modes of ρ, Z and e^{-iθ}N
        self.idx = np.mod(self.kz, M)
        self.heads = []
        for normalised, a, nu, beta in circle_heads(weights):
            # a normalised head's field is of degree 0 in the kernel's coefficients (frame_attention): scaled
            # by e^{-β|a|} they stay finite for any β; an unnormalised head's field is of size e^{β|a|} itself
            I = bessel_coefficients(beta * abs(a), K + 1, scaled=normalised)
            if not np.all(np.isfinite(I)):
                raise InputError("beta", f"the unnormalised kernel's coefficients I_k(β|a|) overflow float64 at "
                                 f"β|a| = {beta * abs(a):g} (its field is of size e^(|β||a|)): beyond the circle "
                                 "solver's range (|β||a| <= 700)")
            phase = np.angle(a) if a != 0 else 0.0
            kern = lambda kk: 2 * math.pi * I[np.abs(kk)] * np.exp(1j * kk * phase)   # noqa: E731
            # (e^{-iθ}N)^_k = 2π K̂_{k+1} ρ̂_k: the tangential frame folded into the kernel's coefficients
            self.heads.append((normalised, nu, kern(self.kz), kern(self.kz + 1)))

    def _points(self, coef):
        """Values at the ``M`` points of ``Σ_{|k| < M/2} coef_k e^{ikθ}`` (``coef`` on the modes ``kz``)."""
        buf = np.zeros(self.M, complex)
        buf[self.idx] = coef
        return np.fft.ifft(buf) * self.M

    def frame_attention(self, r):
        """``e^{-iθ} A(θ) = c + δ(θ)`` at the points from the coefficients ``r = ρ̂`` (FFT / M): ``c`` the value for
        the uniform density of the same mass, ``δ`` formed from the modes ``k ≠ 0`` only (so a perturbation of
        1e-12 keeps its relative precision: no O(1) constant passes through the FFT)."""
        rk = r[self.idx]
        r0 = rk[self.kz == 0][0]
        rd = np.where(self.kz == 0, 0.0, rk)
        c, dlt = 0j, np.zeros(self.M, complex)
        for normalised, nu, Kz, Kn in self.heads:
            Nb, dN = Kn[self.kz == 0][0] * r0, self._points(Kn * rd)
            if normalised:
                Zb, dZ = np.real(Kz[self.kz == 0][0] * r0), np.real(self._points(Kz * rd))
                c += nu * Nb / Zb
                dlt += nu * (dN - (Nb / Zb) * dZ) / (Zb + dZ)
            else:
                c += nu * Nb
                dlt += nu * dN
        return c, dlt

    def velocity(self, rho, bar=0.0):
        """Angular velocity at the points for the density ``bar + rho`` (``bar`` a constant, added to mode 0
        only: no round-off of the constant leaks into the other modes)."""
        r = np.fft.fft(rho) / self.M
        r[0] += bar
        c, dlt = self.frame_attention(r)
        v = np.imag(c) + np.imag(dlt)
        if self.norm == "ngpt":
            with np.errstate(divide="ignore", invalid="ignore"):
                v = self.alpha * v / np.abs(c + dlt)
        return v

    def rhs(self, t, u, bar=0.0):
        """``∂ₜ`` of the density ``bar + u``."""
        v = self.velocity(u, bar)
        if not np.all(np.isfinite(v)):
            raise _NonFinite()
        f = np.fft.fft((bar + u) * v)
        f[self.nyq] = 0.0
        out = -np.real(np.fft.ifft(1j * self.k * f))
        if self.noise:
            r = np.fft.fft(u)
            r[self.nyq] = 0.0
            out += np.real(np.fft.ifft(-self.noise * self.k ** 2 * r))
        return out


class _NonFinite(ArithmeticError):
    pass


def _check_points(rho, name):
    rho = np.asarray(rho, dtype=float)
    if rho.ndim != 1 or len(rho) < 8 or len(rho) % 2 or not np.all(np.isfinite(rho)):
        raise InputError(name, f"must be M >= 8 (even) finite density values, got shape {rho.shape}")
    return rho


def circle_velocity(rho, weights, norm: str = "post", alpha: float = 1.0) -> np.ndarray:
    """The angular velocity ``v(θ_j)`` at the ``M`` equispaced points ``θ_j = 2πj/M`` for the density values
    ``rho`` (heads of ``weights``: module docstring)."""
    rho = _check_points(rho, "rho")
    return _Circle(len(rho), weights, norm, alpha, 0.0).velocity(rho)


def solve_circle(rho0, weights, T: float, *, norm: str = "post", alpha: float = 1.0, noise: float = 0.0,
                 t_eval=None, rtol: float = 1e-10, max_seconds=None, watch_resolution: bool = True):
    """Integrate the circle PDE from the density values ``rho0`` on ``M`` equispaced points (``M`` even ≥ 8) to
    ``T`` under the sphere-kind ``weights`` (d = 2; :func:`circle_weights` for one head with ``A = V = I``);
    returns the :class:`.solve.Solution` (rows of ``y``: densities at ``t``).  The state integrated is
    ``ρ - ρ̄`` (``ρ̄`` the mean of ``rho0``), so the relative error control applies to the deviation from the
    uniform state (a perturbation of 1e-8 is resolved to ``rtol`` of itself); the mass is its mode 0, which
    the right-hand side never changes.  A non-finite velocity (nGPT where ``A = 0``) raises
    :class:`~symbolic_tpde.errors.BlowupError` with the last time reached.

    ``watch_resolution``: the run stops (status ``EVENT``, event kind ``"under-resolved"``) at the first
    accepted step where the density goes below ``-NEGATIVE_TOL ρ̄`` or its resolution measure exceeds
    ``RESOLUTION_TOL`` (:func:`resolution`).  The spectral scheme is not positivity preserving (a
    positivity limiter, e.g. Zhang-Shu scaling towards the mean, would clip the aliasing error it should
    report and cost the spectral accuracy; it is not applied): this check is what keeps an under-resolved
    density from being reported as a result.  A step-size collapse stops the run after 2000 evaluations
    without progress (status ``STALLED``), and the evaluation budget is ``max(20000, 2e8 / (M log M))``,
    derived from ``M`` (each evaluation costs a few FFTs of ``M`` points)."""
    from ...errors import BlowupError
    from ..ode.solve import integrate

    rho0 = _check_points(rho0, "rho0")
    if not (isinstance(T, (int, float)) and math.isfinite(T) and T >= 0):
        raise InputError("T", f"must be finite and >= 0, got {T!r}")
    circ = _Circle(len(rho0), weights, norm, alpha, noise)
    bar = float(rho0.mean())        # the state is ρ - ρ̄ (mode 0 stays 0): the error control acts on deviations
    u0 = rho0 - bar
    atol = rtol * max(float(np.abs(u0).max()), 1e-300)   # absolute error: rtol of the deviation's size
    last = [0.0]

    def f(t, u):
        try:
            return circ.rhs(t, u, bar)
        except _NonFinite:
            raise BlowupError(last[0], "circle velocity", "the attention vector vanished (nGPT divides by |A|)"
                              if norm == "ngpt" else "the velocity is not finite") from None

    from ..ode.solve import StopCondition

    M = len(rho0)
    events = []
    if watch_resolution:
        def g(t, u):
            return np.array([float(np.min(u)) + bar * (1 + NEGATIVE_TOL), RESOLUTION_TOL - resolution(bar + u)])

        events = [StopCondition(g, "under-resolved", "the density is under-resolved at t = {t:.6g}")]
    budget = evaluation_budget(M)
    sol = integrate(f, u0, (0.0, float(T)), method="dopri5", rtol=rtol, atol=atol, t_eval=t_eval,
                    max_seconds=max_seconds, progress=lambda t, _T: last.__setitem__(0, t), events=events,
                    max_nfev=budget, stuck_evals=2000)
    sol.y = sol.y + bar
    if sol.y_end is not None:
        sol.y_end = sol.y_end + bar
    return sol


def evaluation_budget(M: int) -> int:
    """Right-hand-side evaluations a circle run on ``M`` points may spend: ``max(20000, 2e8 / (M log₂ M))`` (each
    costs a few FFTs of ``M`` points: about a minute of one core)."""
    return max(20_000, int(2e8 / (M * math.log2(M))))


#: Resolution measure of a density on ``M`` points: the relative size of its top third of modes,
#: ``R(ρ) = (Σ_{M/3 <= |k| < M/2} |ρ̂_k|²)^{1/2} / ρ̂_0`` (ρ̂_0 the mean density).  A run whose density reaches
#: ``R > RESOLUTION_TOL`` (the peaks are no longer resolved: aliasing fills the top modes) or goes below
#: ``-NEGATIVE_TOL ρ̂_0`` stops with status ``"under-resolved"``; an initial law whose projection has
#: ``R > RESOLUTION_TOL / 10`` or drops modes of total size above ``MAX_TRUNCATED`` of its peak is refused.
RESOLUTION_TOL = 1e-2
NEGATIVE_TOL = 1e-6
MAX_TRUNCATED = 1e-6


def resolution(rho) -> float:
    """``R(ρ)`` of the module constants (relative size of the top third of the modes)."""
    rho = np.asarray(rho, dtype=float)
    M = len(rho)
    r = np.fft.fft(rho) / M
    k = np.abs(np.fft.fftfreq(M, 1.0 / M))
    top = (k >= M / 3) & (k < M / 2)
    return float(np.sqrt(np.sum(np.abs(r[top]) ** 2)) / max(abs(r[0].real), 1e-300))


def _vmf_coefficients(kappa: float, kmax: int) -> np.ndarray:
    """``I_k(κ)/I_0(κ)``, ``k = 0..kmax`` (the Fourier coefficients of the von Mises law times 2π; scipy's
    exponentially scaled ``ive``, finite for every κ)."""
    from scipy.special import ive

    k = np.arange(kmax + 1)
    return ive(k, kappa) / ive(0, kappa)


def grid_needed(init: dict) -> int:
    """The smallest even ``M`` (a power of two times 8, up to 65536) whose projection of ``init`` passes the
    checks of :func:`project_initial`, or 0 if none does."""
    M = 8
    while M <= 1 << 16:
        try:
            project_initial(init, M)
            return M
        except InputError:
            M *= 2
    return 0


def project_initial(init: dict, M: int) -> tuple[np.ndarray, float]:
    """``(ρ, truncated)``: the projection of a sphere ``init`` law in d = 2 onto the ``M``-point spectral grid
    (its Fourier modes ``|k| < M/2``, exact coefficients: mass exactly 1, trigonometric moments exact) and the
    size of the dropped modes relative to the law's peak density (``Σ_{|k| >= M/2} 2|ρ̂_k| / max ρ``).  Types:
    ``uniform_sphere`` (``1/2π``), ``vmf`` (von Mises, ``ρ̂_k = I_k(κ)/I_0(κ) e^{-ikθ_μ}/2π``) and
    ``circle_modes`` (``(1 + Σ a_j cos(k_j θ - φ_j))/2π``, band-limited: a mode ``k_j >= M/2`` is refused);
    ``frame`` and ``points`` are atoms: refused (no density to resolve).  Refused as well (InputError naming
    ``grid``, with the grid that suffices): ``truncated > MAX_TRUNCATED``, a negative projected density or a
    resolution measure above ``RESOLUTION_TOL / 10`` (:func:`resolution`)."""
    kind = init.get("type")
    theta = 2 * math.pi * np.arange(M) / M
    K = M // 2 - 1
    truncated = 0.0
    if kind == "uniform_sphere":
        rho = np.full(M, 1 / (2 * math.pi))
    elif kind == "vmf":
        mu = np.asarray(init["mu"], dtype=float)
        kappa = float(init["kappa"])
        phi = math.atan2(mu[1], mu[0])
        tail_k = max(4 * K, int(40 * math.sqrt(kappa + 1)) + 2 * K)
        c = _vmf_coefficients(kappa, tail_k)
        coef = np.zeros(M, complex)
        kk = np.arange(-K, K + 1)
        coef[np.mod(kk, M)] = c[np.abs(kk)] * np.exp(-1j * kk * phi) / (2 * math.pi)
        rho = np.real(np.fft.ifft(coef) * M)
        peak = float(np.sum(c[:tail_k + 1]) * 2 - 1) / (2 * math.pi)     # ρ(θ_μ) = (1 + 2 Σ_k≥1 I_k/I_0)/2π
        truncated = float(2 * np.sum(c[K + 1:]) / (2 * math.pi)) / max(peak, 1e-300)
    elif kind == "circle_modes":
        rho = np.ones(M)
        for k, a, ph in init["modes"]:
            if int(k) > K:
                raise InputError("grid", f"the initial mode k = {int(k)} is not resolved by {M} points (needs "
                                 f"--grid >= {2 * int(k) + 2})")
            rho += float(a) * np.cos(int(k) * theta - float(ph))
        rho = rho / (2 * math.pi)
    else:
        raise InputError("init.type", f"{kind!r} has no density on the circle (atoms); the spectral solver takes "
                                      "uniform_sphere, vmf or circle_modes")
    if truncated > MAX_TRUNCATED:
        raise InputError("grid", f"{M} points drop {truncated:.3g} of the initial law's peak density (above "
                         f"{MAX_TRUNCATED:g}): raise --grid{_suggest(init, M)}")
    if float(rho.min()) < -NEGATIVE_TOL / (2 * math.pi):
        raise InputError("init", f"the initial density is negative (min {float(rho.min()):.3g})")
    R = resolution(rho)
    if R > RESOLUTION_TOL / 10:
        raise InputError("grid", f"{M} points do not resolve the initial law (its top third of modes has relative "
                         f"size {R:.3g} > {RESOLUTION_TOL / 10:g}): raise --grid{_suggest(init, M)}")
    return rho, truncated


def _suggest(init, M) -> str:
    for m in (2 * M, 4 * M, 8 * M, 16 * M, 32 * M, 64 * M):
        if m > 1 << 16:
            break
        try:
            project_initial(init, m)
            return f" to {m}"
        except InputError:
            continue
    return " (beyond 65536 points: the law is too concentrated for the spectral solver)"


def initial_density(init: dict, M: int) -> np.ndarray:
    """The projected initial density values at the ``M`` points ``θ_j = 2πj/M`` (:func:`project_initial`)."""
    return project_initial(init, M)[0]


def trig_moments(rho, kmax: int) -> np.ndarray:
    """``m_k = ∫ e^{ikθ} ρ(θ) dθ``, ``k = 1..kmax`` (exact for a band-limited density: the trapezoid rule)."""
    rho = np.asarray(rho, dtype=float)
    c = np.fft.fft(rho) * (2 * math.pi / len(rho))        # ∫ e^{-ikθ} ρ
    return np.conj(c[1:kmax + 1])
