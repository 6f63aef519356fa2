"""Benchmark: the sphere right-hand side (attention at unit tokens + projection P⊥ + renormalisation) against
the R^d softmax particle field, same run, same n, d, same A = βI, V = I (README "Sphere").

For n tokens (default 8000) at d = 2 and d = 64: CPU seconds per evaluation of
* R^d:    ``fields.field(X, softmax head)`` on the same points,
* sphere: ``numerics.sphere.sphere_velocity(X, sphere_sa head, "post")`` (which calls the same field), and the
  per-step renormalisation of the state,
reported in ns per pair (seconds / n²) and as the ratio sphere / R^d (target: close to 1, the projection is
O(n d) against the field's O(n² d)).  CPU time of this process (the machine is shared: wall time mostly
measures the neighbours); the best of ``--repeat`` evaluations.

Run: python numerics/bench_sphere.py [--n 8000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from symbolic_tpde.numerics.particles.fields import field
from symbolic_tpde.numerics.particles.sphere import sphere_velocity
from symbolic_tpde.weights import make_head, make_weights


def best(f, repeat):
    f()                                          # warm-up (kernel build, caches)
    out = []
    for _ in range(repeat):
        t0 = time.process_time()
        f()
        out.append(time.process_time() - t0)
    return min(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = args.n
    print(f"n = {n}, A = 2 I, V = I, CPU seconds (best of {args.repeat})")
    print(f"{'d':>4} {'R^d ns/pair':>12} {'sphere ns/pair':>15} {'ratio':>7}")
    for d in (2, 64):
        X = np.random.default_rng(0).standard_normal((n, d))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        w_r = make_weights([make_head("softmax", A=2 * np.eye(d), V=np.eye(d))])
        w_s = make_weights([make_head("sphere_sa", A=np.eye(d), V=np.eye(d), beta=2.0)])
        t_r = best(lambda: field(X, w_r), args.repeat)

        def sphere_step():
            v = sphere_velocity(X, w_s, "post")
            Y = X + 1e-3 * v
            return Y / np.linalg.norm(Y, axis=1, keepdims=True)

        t_s = best(sphere_step, args.repeat)
        print(f"{d:>4} {1e9 * t_r / n ** 2:>12.3f} {1e9 * t_s / n ** 2:>15.3f} {t_s / t_r:>7.3f}")


if __name__ == "__main__":
    main()
