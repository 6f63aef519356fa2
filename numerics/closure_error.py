"""Gaussian-closure error against particles, per kind and parameter scale (README table "closure (approximate)").

For each kind that does not preserve Gaussians and each scale ``s`` of the interaction matrix (``A = s A₀``),
:func:`symbolic_tpde.gaussian.closure.closure_vs_particles` runs ``RUNS`` clouds of ``N`` tokens from
``N(α₀, Σ₀)`` to ``T`` and compares their moments with the closure started from each cloud's own initial
moments (paired): ``max|err|`` is the closure error (max over the packed ``(α, Σ)`` entries), ``SE`` its
Monte-Carlo standard error (``∝ n^{-1/2}``), ``z = max|err|/SE`` says whether it is resolved (``z ≳ 3``) or
below the noise.  A finite-``n`` bias ``O(1/n)`` is included in ``err``.  Rows where the particles overflow (an
unnormalised kernel ``e^{<Ax,x>}`` blows a tail token up in finite time) or the closure ceases to be defined
say so.  Run: ``PYTHONPATH=. python numerics/closure_error.py [N] [RUNS]``.
"""

import sys
import time

import numpy as np

from symbolic_tpde.errors import BlowupError, InputError
from symbolic_tpde.gaussian.closure import LABEL, closure_vs_particles
from symbolic_tpde.weights import make_head, make_weights

A0 = np.array([[0.3, 0.1], [-0.2, 0.2]])
V0 = np.array([[1.0, 0.2], [-0.3, 0.8]])
ALPHA0 = np.array([0.4, -0.2])
SIGMA0 = np.array([[0.6, 0.1], [0.1, 0.4]])
T = 0.25
CASES = [("softmax_unnormalized", s, {"A": s * A0, "V": V0}) for s in (0.25, 0.5, 1.0)] + \
        [("sigmoid", s, {"A": s * A0, "V": V0, "b": 0.5}) for s in (1.5, 3.0, 6.0)]


def main(n: int = 2000, runs: int = 6) -> None:
    print(f"{LABEL}: d = 2, T = {T}, n = {n}, runs = {runs}; A = s·A0")
    print("| kind | s | max abs err | SE | z | rel err (vs max abs Σ) | quadrature est. | time |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, s, prm in CASES:
        t0 = time.perf_counter()
        try:
            ce = closure_vs_particles(make_weights([make_head(kind, **prm)]), ALPHA0, SIGMA0, T, n=n, runs=runs)
        except (BlowupError, InputError) as exc:
            print(f"| {kind} | {s} | — | — | — | {type(exc).__name__}: {exc} | — | {time.perf_counter() - t0:.0f} s |")
            continue
        i = int(np.argmax(np.abs(ce.error) / ce.se))
        print(f"| {kind} | {s} | {np.abs(ce.error).max():.2e} | {ce.se[i]:.1e} | {ce.z:.1f} | {ce.rel:.1e} | "
              f"{ce.quadrature:.0e} | {time.perf_counter() - t0:.0f} s |", flush=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
