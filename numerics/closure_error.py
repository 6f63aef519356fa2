"""Gaussian-closure error against particles, per kind and parameter scale (README table "closure (approximate)").

For each kind that does not preserve Gaussians and each scale ``s`` of the interaction matrix (``A = s A₀``),
:func:`symbolic_tpde.gaussian.closure.closure_vs_particles` runs ``RUNS`` clouds of ``N`` tokens from
``N(α₀, Σ₀)`` to ``T`` and compares their moments with the closure started from each cloud's own initial
moments (paired): ``max|err|`` is the closure error (max over the packed ``(α, Σ)`` entries), ``SE`` its
Monte-Carlo standard error (``∝ n^{-1/2}``), ``z = max|err|/SE`` says whether it is resolved (``z ≳ 3``) or
below the noise.  A finite-``n`` bias ``O(1/n)`` is included in ``err``.  Rows where the particles overflow (an
unnormalised kernel ``e^{<Ax,x>}`` blows a tail token up in finite time) or the closure ceases to be defined
say so.  The error at two ``n`` separates a closure error (the same at both) from the finite-``n`` bias
(shrinks like ``1/n``) and the noise (``SE`` like ``n^{-1/2}``).
Run: ``PYTHONPATH=. python numerics/closure_error.py [N1 N2 ... RUNS]`` (default 500 2000, 6 runs).
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


def main(ns=(500, 2000), runs: int = 6) -> None:
    print(f"{LABEL}: d = 2, T = {T}, runs = {runs}; A = s·A0; per n: max|err| (SE, z)")
    print("| kind | s | " + " | ".join(f"n = {n}" for n in ns) + " | quadrature est. | time |")
    print("|---|---|" + "---|" * len(ns) + "---|---|")
    for kind, s, prm in CASES:
        t0 = time.perf_counter()
        cells, quad = [], "—"
        for n in ns:
            try:
                ce = closure_vs_particles(make_weights([make_head(kind, **prm)]), ALPHA0, SIGMA0, T, n=n, runs=runs)
            except (BlowupError, InputError) as exc:
                cells.append(f"{type(exc).__name__}: {exc}")
                continue
            i = int(np.argmax(np.abs(ce.error) / ce.se))
            cells.append(f"{np.abs(ce.error).max():.2e} ({ce.se[i]:.1e}, {ce.z:.1f})")
            quad = f"{ce.quadrature:.0e}"
        print(f"| {kind} | {s} | " + " | ".join(cells) + f" | {quad} | {time.perf_counter() - t0:.0f} s |", flush=True)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(tuple(args[:-1]) or (500, 2000), *(args[-1:] or []))
