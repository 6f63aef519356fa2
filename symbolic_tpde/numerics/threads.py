"""One policy for processes × threads: never more busy threads than usable cores.

Two kinds of threads compete for the cores: process-pool workers (``tpde sweep``, ``tpde figures``,
``tpde meanfield``) and the threads each worker starts itself (OpenBLAS / OpenMP inside numpy and scipy,
the fused particle kernel of :mod:`.fused`, the row-block threads of
:func:`~symbolic_tpde.numerics.particles.attend.attend_numpy`).  Left alone, ``W`` workers each use all ``C``
cores: ``W · C`` threads on ``C`` cores, which on a 2-core machine turned ``meanfield --quick`` into minutes of
system time (issue 12, README "Benchmarks").  The policy:

* :func:`usable_cores`: the cores this process may run on (``sched_getaffinity``), not the machine's count;
* :func:`pool_plan`: ``(workers, threads_per_worker)`` with ``workers ≤ min(cores, tasks, requested)`` and
  ``workers · threads_per_worker ≤ cores``;
* :func:`limit_threads`: a context manager holding BLAS/OpenMP (through ``threadpoolctl``, when installed) and
  the package's own kernels (:func:`kernel_threads`) to ``n`` threads, restoring them afterwards;
* :func:`worker_initializer`: the same limit for the lifetime of a pool worker
  (``ProcessPoolExecutor(initializer=worker_initializer, initargs=(threads,))``), also exporting
  ``OMP_NUM_THREADS`` etc. so libraries loaded later in the worker start with it.

No SymPy here (numerics layer).
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["usable_cores", "pool_plan", "limit_threads", "worker_initializer", "kernel_threads"]

_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
             "NUMEXPR_NUM_THREADS")

_lock = threading.Lock()
_kernel_limit: int | None = None   # None: no limit beyond the usable cores


def usable_cores() -> int:
    """Cores this process may use (CPU affinity where the OS reports it, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def kernel_threads(default: int | None = None) -> int:
    """Threads the package's own kernels may start: the active :func:`limit_threads` limit, else
    ``default`` (else the usable cores), never more than the usable cores."""
    cores = usable_cores()
    want = cores if default is None else max(1, int(default))
    lim = _kernel_limit
    return max(1, min(want, cores, lim if lim is not None else cores))


def pool_plan(tasks: int | None = None, requested: int | None = None) -> tuple[int, int]:
    """``(workers, threads_per_worker)`` for a process pool over ``tasks`` independent tasks.

    ``requested`` (e.g. ``--workers``) is an upper bound, never exceeded; ``workers`` is at most the usable
    cores and the number of tasks, and at least 1; the threads of each worker share the remaining cores:
    ``threads_per_worker = max(1, cores // workers)``, so ``workers · threads ≤ cores`` whenever
    ``workers ≤ cores``.
    """
    cores = usable_cores()
    w = cores if requested is None else max(1, int(requested))
    w = min(w, cores)
    if tasks is not None:
        w = min(w, max(1, int(tasks)))
    return w, max(1, cores // w)


@contextlib.contextmanager
def limit_threads(n: int):
    """Hold BLAS/OpenMP pools and the package's kernels to ``n`` threads inside the block (restored after).

    BLAS/OpenMP go through ``threadpoolctl`` (process-wide; skipped when it is not installed); the package's
    kernels read :func:`kernel_threads`.  Nested blocks keep the tighter limit.
    """
    global _kernel_limit
    n = max(1, int(n))
    with _lock:
        saved = _kernel_limit
        _kernel_limit = n if saved is None else min(saved, n)
    ctl = None
    try:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover - optional
            threadpool_limits = None
        if threadpool_limits is not None:
            ctl = threadpool_limits(limits=n)
        yield n
    finally:
        if ctl is not None:
            ctl.restore_original_limits()
        with _lock:
            _kernel_limit = saved


def worker_initializer(threads: int = 1) -> None:
    """Initializer of a pool worker: ``threads`` BLAS/OpenMP/kernel threads for the worker's lifetime.

    Use as ``ProcessPoolExecutor(max_workers=w, initializer=worker_initializer, initargs=(t,))`` with
    ``(w, t) = pool_plan(...)``.
    """
    global _kernel_limit
    threads = max(1, int(threads))
    for var in _ENV_VARS:
        os.environ[var] = str(threads)
    _kernel_limit = threads
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        return
    threadpool_limits(limits=threads)  # kept for the process lifetime (not restored)
