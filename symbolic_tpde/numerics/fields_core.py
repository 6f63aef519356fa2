"""Blocked attention kernel shared by every softmax-type particle field.

Everything here works on plain arrays.  The one primitive, :func:`attend`, evaluates for each query ``i``

* ``mode="softmax"``: ``out_i = Σ_j w_ij v_j / Σ_j w_ij`` with ``w_ij = exp(q_i·k_j + β_j)`` (stable
  log-sum-exp: the row maximum is subtracted before ``exp``), optionally restricted to a causal prefix
  ``j < prefix_i`` and optionally with one extra *sink* key of log-weight ``s_i`` and value ``v_s``;
* ``mode="sigmoid"``: ``out_i = (1/n_k) Σ_j σ(q_i·k_j + shift) v_j`` (no normalisation);
* ``mode="exp"``: ``out_i = (1/n_k) Σ_j exp(q_i·k_j) v_j`` (unnormalised softmax; computed as
  ``exp(m_i - log n_k) Σ_j exp(q_i·k_j - m_i) v_j`` so that only a genuinely overflowing result is ``inf``).

The pairwise work is done over row blocks of queries, so the memory is ``O(block · n_k)`` and never
``O(n_q · n_k)`` (``../shared/PERF_NOTES.md``).  All work happens in the dtype of the inputs (float32 or
float64); ``exp`` is applied in place, and the softmax row sums come out of the same matrix product as the
numerators (a column of ones is appended to the values).

BLAS threads: OpenBLAS's own threading is slower than single-threaded BLAS driven from two Python threads over
row blocks, and catastrophic when the machine is busy (PERF_NOTES: up to 15x; measured here: 40-90 ns/pair
instead of ~6 once a block crosses OpenBLAS's threading threshold).  Inside :func:`attend` BLAS is
therefore limited to one thread *for the calling thread only*: with ``threadpoolctl`` when it is installed,
otherwise through OpenBLAS's thread-local ``openblas_set_num_threads_local`` of numpy's bundled OpenBLAS
(restored on exit), otherwise not at all (``BLAS_CONTROL`` says which).  Row blocks are then spread over
``threads`` Python threads (default: 2 when the BLAS limit is available and the work is large; numpy's
``exp`` and matmul release the GIL).  No SymPy here.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import InputError

#: Target number of logits per row block at feature dimension <= 8 (2^18: 2 MB in float64; cache-sized),
#: scaled by p/8 above that so matrix products keep a good shape; see :func:`default_block`.
BLOCK_ELEMENTS = 1 << 18

#: Below this many pairs per call, everything runs in the calling thread (thread start-up would dominate).
THREADS_MIN_PAIRS = 1 << 20


def _find_blas_control():
    """``(name, enter, exit)`` for limiting BLAS to one thread in the calling thread, or ``(None, ...)``."""
    try:
        from threadpoolctl import threadpool_limits

        holder = {}

        def enter():
            holder[threading.get_ident()] = threadpool_limits(limits=1, user_api="blas")

        def leave():
            holder.pop(threading.get_ident()).restore_original_limits()

        return "threadpoolctl", enter, leave
    except ImportError:
        pass
    try:
        import ctypes
        import glob
        import os

        libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
        libs = sorted(glob.glob(os.path.join(libdir, "libscipy_openblas*.so*")))
        if libs:
            lib = ctypes.CDLL(libs[0])  # already loaded by numpy: this returns the same handle
            set_local = lib.openblas_set_num_threads_local
            set_local.restype = ctypes.c_int
            set_local.argtypes = [ctypes.c_int]
            previous = threading.local()

            def enter():
                previous.value = set_local(1)

            def leave():
                set_local(previous.value)

            return "openblas-local", enter, leave
    except (OSError, AttributeError):
        pass
    return None, (lambda: None), (lambda: None)


BLAS_CONTROL, _blas_enter, _blas_exit = _find_blas_control()


def default_block(n_keys: int, p: int = 2) -> int:
    """Rows per block: about ``BLOCK_ELEMENTS · max(1, p/8)`` logits per block, clipped to 16..256 rows.

    Measured on the 2-core box (d = 2: 16-64 rows best, cache-bound ``exp``; d = 64: 128-256 rows best,
    matmul-bound); the memory stays ``O(block · n_keys)``.
    """
    target = BLOCK_ELEMENTS * max(1.0, p / 8)
    return int(min(256, max(16, target // max(1, n_keys))))


def work_dtype(X: np.ndarray, dtype) -> np.dtype:
    """The dtype all work is done in: ``dtype`` if given, else X's if it is float32/float64, else float64."""
    if dtype is None:
        dt = np.asarray(X).dtype
        dt = dt if dt in (np.float32, np.float64) else np.dtype(np.float64)
    else:
        dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        raise InputError("dtype", f"must be float32 or float64, got {dt}")
    return dt


def as_points(X, dtype=None, name: str = "X") -> np.ndarray:
    """Validate a point cloud ``(n, d)`` (finite, n >= 1) and return it C-contiguous in the work dtype."""
    dt = work_dtype(X, dtype)
    try:
        arr = np.ascontiguousarray(X, dtype=dt)
    except (TypeError, ValueError) as exc:
        raise InputError(name, f"not a numeric array ({exc})") from None
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise InputError(name, f"expected an array of shape (n, d) with n >= 1, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise InputError(name, "contains NaN or Inf")
    return arr


def as_matrix(M, shape: tuple[int, ...], dtype: np.dtype, name: str) -> np.ndarray:
    """A parameter as a C-contiguous array of the given shape in the work dtype (InputError otherwise)."""
    try:
        arr = np.ascontiguousarray(M, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise InputError(name, f"not a numeric array ({exc})") from None
    if arr.shape != shape:
        raise InputError(name, f"expected shape {shape}, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise InputError(name, "contains NaN or Inf")
    return arr


def _check_block(block, n_keys: int, p: int = 2) -> int:
    if block is None:
        return default_block(n_keys, p)
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise InputError("block", f"must be a positive integer, got {block!r}")
    return int(block)


def attend(q: np.ndarray, k: np.ndarray, values: np.ndarray, *, mode: str = "softmax",
           key_bias: np.ndarray | None = None, shift: float = 0.0, prefix: np.ndarray | None = None,
           sink_logit: np.ndarray | None = None, sink_value: np.ndarray | None = None,
           block: int | None = None, threads: int | None = None) -> np.ndarray:
    """Blocked attention average (see the module docstring for the three modes).

    ``q (n_q, p)``, ``k (n_k, p)``, ``values (n_k, d)``, all in one float dtype; ``key_bias (n_k,)``;
    ``prefix (n_q,)`` integer counts (query ``i`` sees keys ``0 .. prefix_i - 1``, must be >= 1 unless a
    sink is given); ``sink_logit (n_q,)`` and ``sink_value (d,)`` add one extra key to every query
    (softmax mode only).  Returns ``(n_q, d)`` in the input dtype.
    """
    dt = values.dtype
    n_q, n_k, d = q.shape[0], k.shape[0], values.shape[1]
    block = _check_block(block, n_k, q.shape[1])
    if mode == "softmax":
        vals = np.empty((n_k, d + 1), dtype=dt)
        vals[:, :d] = values
        vals[:, d] = 1.0  # row sums of the weights come out of the same product
    else:
        vals = values
    kT = np.ascontiguousarray(k.T)
    out = np.empty((n_q, d), dtype=dt)
    log_nk = math.log(n_k)

    def one_block(lo: int) -> None:
        hi = min(lo + block, n_q)
        kmax = n_k if prefix is None else int(prefix[lo:hi].max())
        if kmax == 0:  # only the sink is visible (masked attention with a sink)
            out[lo:hi] = sink_value
            return
        L = q[lo:hi] @ kT[:, :kmax]
        if mode == "sigmoid":
            L += shift
            # σ(z) = 1 / (1 + e^{-z}), written in place; e^{-z} = inf for very negative z gives σ = 0 exactly
            np.negative(L, out=L)
            with np.errstate(over="ignore"):  # e^{-z} = inf is the intended limit σ = 0
                np.exp(L, out=L)
            L += 1.0
            np.reciprocal(L, out=L)
            np.matmul(L, vals[:kmax], out=out[lo:hi])
            out[lo:hi] /= n_k
            return
        if key_bias is not None:
            L += key_bias[:kmax]
        if prefix is not None:
            cols = np.arange(kmax)
            L[cols[None, :] >= prefix[lo:hi, None]] = -np.inf
        m = L.max(axis=1)
        if sink_logit is not None:
            m = np.maximum(m, sink_logit[lo:hi])
        L -= m[:, None]
        np.exp(L, out=L)
        R = L @ vals[:kmax]
        if mode == "exp":
            with np.errstate(over="ignore", invalid="ignore"):
                scale = np.exp(m - log_nk)  # inf only when the true result overflows
                res = R * scale[:, None]
            res[R == 0] = 0.0  # inf * 0: the sum really is 0
            out[lo:hi] = res
            return
        num, den = R[:, :d], R[:, d]
        if sink_logit is not None:
            ws = np.exp(sink_logit[lo:hi] - m)
            num = num + ws[:, None] * sink_value[None, :]
            den = den + ws
        out[lo:hi] = num / den[:, None]

    starts = range(0, n_q, block)
    if threads is None:
        threads = 2 if (BLAS_CONTROL and n_q * n_k >= THREADS_MIN_PAIRS and (os.cpu_count() or 1) > 1) else 1
    n_threads = max(1, min(int(threads), len(starts)))

    def worker(chunk: range) -> None:
        _blas_enter()
        try:
            for lo in chunk:
                one_block(lo)
        finally:
            _blas_exit()

    if n_threads == 1:
        worker(starts)
    else:  # interleaved row blocks: thread r takes blocks r, r + T, r + 2T, ...
        with ThreadPoolExecutor(n_threads) as pool:
            list(pool.map(worker, [starts[r::n_threads] for r in range(n_threads)]))
    return out
