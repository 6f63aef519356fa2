"""Blocked attention kernel shared by every softmax-type particle field.

Everything here works on plain arrays.  The one primitive, :func:`attend`, evaluates for each query ``i``

* ``mode="softmax"``: ``out_i = Σ_j w_ij v_j / Σ_j w_ij`` with ``w_ij = exp(q_i·k_j + β_j)`` (stable
  log-sum-exp: the row maximum is subtracted before ``exp``), optionally restricted to a causal prefix
  ``j < prefix_i`` and optionally with one extra *sink* key of log-weight ``s_i`` and value ``v_s``;
* ``mode="sigmoid"``: ``out_i = (1/n_k) Σ_j σ(q_i·k_j + shift) v_j`` (no normalisation);
* ``mode="exp"``: ``out_i = (1/n_k) Σ_j exp(q_i·k_j) v_j`` (unnormalised softmax; computed as
  ``exp(m_i - log n_k) Σ_j exp(q_i·k_j - m_i) v_j`` so that only a genuinely overflowing result is ``inf``).

Four implementations, one semantics:

* the fused C kernel of :mod:`.fused` (all three modes, key bias, causal prefix, sink): per query, row maximum
  then ``exp``-and-accumulate in one thread, queries spread over POSIX threads; it runs when the feature
  dimension p and the value dimension d are both at most the crossover :data:`.fused.CROSSOVER` of the loops
  this machine's build runs (AVX-512: 10, AVX2: 8, plain C: 8; measured by
  ``numerics/bench_particles.py --crossover``, a fixed table: a call's path and bits depend on its shapes and
  the machine, never on the load);
* above the crossover, up to p, d <= 256, softmax and exp modes on AVX-512 / AVX2 builds: the key-blocked
  kernel of :mod:`.fused_flash` (per tile of queries and block of keys, logits and value sums by
  register-blocked micro-kernels with the online softmax between them);
* other large heads (sigmoid, plain-C builds, factored trained-model heads with values wider than 256): the
  blocked path below with the logits from BLAS and the row maximum, ``exp`` and row sums in one compiled pass
  (:mod:`.fused_rows`; the value-weighted sum again BLAS);
* the blocked numpy path :func:`attend_numpy` (no compiler: announced once): row blocks of
  queries, memory ``O(block · n_k)``, never ``O(n_q · n_k)``; ``exp`` in place, the softmax row sums out of
  the same matrix product as the numerators (a column of ones appended to the values).

All work happens in the dtype of the inputs (float32 or float64; the fused kernel accumulates float32 in
float64).

BLAS threads (numpy path): OpenBLAS's own threading is slower than single-threaded BLAS driven from two
Python threads over row blocks, and catastrophic when the machine is busy (measured here: 40-90 ns/pair
instead of ~6 once a block crosses OpenBLAS's threading threshold); and OpenBLAS's multi-threaded gemm sums
in a different order, so a BLAS thread count that changes mid-run changes the bits of the result.  Inside
:func:`attend_numpy` BLAS is therefore held at one thread for the whole call (:class:`_BlasControl`:
OpenBLAS's thread-local ``openblas_set_num_threads_local`` of numpy's bundled OpenBLAS when present, else
``threadpoolctl`` set once by the first caller and restored by the last; ``BLAS_CONTROL`` says which).  Each
row block is computed by one thread with one-thread BLAS, so the result does not depend on ``threads``
(default: 2 when the BLAS limit is available and the work is large; numpy's ``exp`` and matmul release the
GIL).  The calling thread computes its share of the blocks; the other threads are those of one executor kept
for the process (:class:`_Helpers`), not threads started per call.  No SymPy here.
"""

from __future__ import annotations

import functools
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...errors import InputError
from ...inputs.checks import finite_array, positive_int

#: Target number of logits per row block at feature dimension <= 8 (2^18: 2 MB in float64; cache-sized),
#: scaled by p/8 above that so matrix products keep a good shape; see :func:`default_block`.
BLOCK_ELEMENTS = 1 << 18

#: The rows path's key tiles (issue 33): keys and values of one tile take about this many bytes, and a row block
#: at most ``ROW_TILE_BYTES`` of the tile's logits, so a tile's keys, values and logits stay in L2 (1 MB per core
#: on this kind of machine); used when the keys exceed two tiles and there is no causal prefix.  A fixed size:
#: a call's bits depend on its shapes only.
#: Measured at d = 64, n = 32 000, float64 (numerics/bench_particles.py conditions, load ~10): 1 MB / 2 MB 1.14x
#: the untiled path, 256 KB / 512 KB and 512 KB / 1 MB level with it (docs/performance.md).
KEY_TILE_BYTES = 1 << 20
ROW_TILE_BYTES = 1 << 21

#: Below this many pairs per call, everything runs in the calling thread (thread start-up would dominate).
THREADS_MIN_PAIRS = 1 << 20


class _BlasControl:
    """Single-threaded BLAS while the numpy path runs, without races between threads.

    ``thread_local``: OpenBLAS's ``openblas_set_num_threads_local`` (numpy's bundled OpenBLAS): each thread
    sets and restores its own limit, nothing else is affected.  Otherwise ``threadpoolctl`` (process-wide):
    the limit is set by the first thread that enters and restored by the last one that leaves (a counter under
    a lock), so no thread ever restores a limit while another is still computing.  (Before: every worker
    thread called ``threadpool_limits`` itself; one worker's restore let the other's next product run with
    two BLAS threads, and OpenBLAS's multi-threaded gemm sums in another order: run-to-run differences.)
    """

    def __init__(self):
        self.name, self.thread_local = None, False
        self._lock = threading.Lock()
        self._depth = 0
        self._saved = None
        self._local = threading.local()
        self._set_local = self._find_openblas_local()
        if self._set_local is not None:
            self.name, self.thread_local = "openblas-local", True
            return
        import importlib.util

        if importlib.util.find_spec("threadpoolctl") is not None:
            self.name = "threadpoolctl"

    @staticmethod
    def _find_openblas_local():
        try:
            import ctypes
            import glob

            libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
            libs = sorted(glob.glob(os.path.join(libdir, "libscipy_openblas*.so*")))
            if libs:
                lib = ctypes.CDLL(libs[0])  # already loaded by numpy: this returns the same handle
                set_local = lib.openblas_set_num_threads_local
                set_local.restype = ctypes.c_int
                set_local.argtypes = [ctypes.c_int]
                return set_local
        except (OSError, AttributeError):
            pass
        return None

    def enter(self) -> None:
        """Limit BLAS to one thread (for this thread, or process-wide while anyone is inside)."""
        if self.thread_local:
            stack = getattr(self._local, "stack", None)
            if stack is None:
                stack = self._local.stack = []
            stack.append(self._set_local(1))
        elif self.name == "threadpoolctl":
            with self._lock:
                if self._depth == 0:
                    from threadpoolctl import threadpool_limits

                    self._saved = threadpool_limits(limits=1, user_api="blas")
                self._depth += 1

    def exit(self) -> None:
        if self.thread_local:
            self._set_local(self._local.stack.pop())
        elif self.name == "threadpoolctl":
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._saved.restore_original_limits()
                    self._saved = None


class _Helpers:
    """The row-block threads of :func:`attend_numpy` besides the caller: one executor kept for the process
    (created at the first threaded call, replaced by a larger one when a call asks for more threads, and by a
    new one in a forked child, whose copy has no threads), instead of threads started and joined per call
    (35-870 us late each on a 2-vCPU VM, docs/performance.md).  Two callers at once share it: their blocks
    queue, each caller computes its own share, and no task waits on another, so nothing can deadlock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._size = 0
        self._pid = 0

    def get(self, n: int) -> ThreadPoolExecutor:
        with self._lock:
            pid = os.getpid()
            if self._pool is None or self._pid != pid or self._size < n:
                old = self._pool if self._pid == pid else None
                self._pool, self._size, self._pid = ThreadPoolExecutor(n, thread_name_prefix="tpde-rows"), n, pid
                if old is not None:
                    old.shutdown(wait=False)  # its running tasks finish; its idle threads exit
            return self._pool


_HELPERS = _Helpers()
_BLAS = _BlasControl()
BLAS_CONTROL = _BLAS.name
_blas_enter, _blas_exit = _BLAS.enter, _BLAS.exit


def one_blas_thread(fn):
    """Decorator: ``fn`` runs with BLAS held at one thread in the calling thread (:class:`_BlasControl`).

    For the particle fields, whose projections (``X @ A.T``, ``... @ V.T``) are small products around a kernel
    that runs its own threads: left to OpenBLAS, a product of n = 2000 tokens at d = 24 already crosses its
    threading threshold, and its idle worker then busy-waits (~0.1 s, measured in docs/performance.md) on the
    core the kernel's second thread needs.  Measured on the 2-core machine, float32 n = 2000, one softmax head,
    ms per :func:`~symbolic_tpde.numerics.particles.fields.softmax_field` call against the kernel alone
    (``attend``): d = 64 34.7 against 12.4 with threaded BLAS, 12.5 with one BLAS thread; d = 24 5.2 against 3.1
    (docs/performance.md, "BLAS threads around the kernel").  One thread also fixes the products' summation
    order, so the bits do not depend on OpenBLAS's thread count."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        _blas_enter()
        try:
            return fn(*args, **kwargs)
        finally:
            _blas_exit()

    return wrapped

#: Set to False to force the numpy path (benchmarks, tests); ``TPDE_FUSED=0`` in the environment does the same.
USE_FUSED = True


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
    return np.ascontiguousarray(finite_array(M, name, shape=shape, dtype=dtype, readonly=False))


def _check_block(block, n_keys: int, p: int = 2) -> int:
    if block is None:
        return default_block(n_keys, p)
    return positive_int(block, "block")


def attend(q: np.ndarray, k: np.ndarray, values: np.ndarray, *, mode: str = "softmax",
           key_bias: np.ndarray | None = None, shift: float = 0.0, prefix: np.ndarray | None = None,
           sink_logit: np.ndarray | None = None, sink_value: np.ndarray | None = None,
           block: int | None = None, threads: int | None = None) -> np.ndarray:
    """Attention average (see the module docstring for the three modes).

    ``q (n_q, p)``, ``k (n_k, p)``, ``values (n_k, d)``, all in one float dtype; ``key_bias (n_k,)``;
    ``prefix (n_q,)`` integer counts (query ``i`` sees keys ``0 .. prefix_i - 1``, must be >= 1 unless a
    sink is given); ``sink_logit (n_q,)`` and ``sink_value (d,)`` add one extra key to every query
    (softmax mode only).  Returns ``(n_q, d)`` in the input dtype.

    Runs the fused C kernel (:mod:`.fused`) when :func:`.fused.prefers` the shapes (p and d at most the
    machine's crossover) and it can be built; above the crossover the key-blocked kernel (:mod:`.fused_flash`)
    when :func:`.fused_flash.prefers` the call; else the blocked path with BLAS logits and the compiled row pass
    (:mod:`.fused_rows`), or the fused kernel for a variant the row pass lacks; else the blocked numpy path (:func:`attend_numpy`; ``block`` applies to the blocked paths only).  Every
    way the result is bitwise the same for every ``threads`` and from run to run.
    """
    block = _check_block(block, k.shape[0], q.shape[1])
    if USE_FUSED:
        from .fused import attend_fused, prefers

        kw = dict(mode=mode, key_bias=key_bias, shift=shift, prefix=prefix, sink_logit=sink_logit,
                  sink_value=sink_value)
        same = q.dtype == k.dtype == values.dtype
        fused_first = same and prefers(mode, q.shape[1], values.shape[1], values.dtype)
        if fused_first:
            out = attend_fused(q, k, values, threads=threads, **kw)
            if out is not None:
                return out
        elif same:  # above the crossover: the key-blocked kernel where it covers the call
            from .fused_flash import attend_flash, prefers as flash_prefers

            if flash_prefers(mode, q.shape[1], values.shape[1], values.dtype):
                out = attend_flash(q, k, values, threads=threads, **kw)
                if out is not None:
                    return out
        if same and values.dtype in (np.float32, np.float64):  # BLAS logits, fused row pass
            from .fused_rows import row_pass

            rows = row_pass(mode, values.dtype, key_bias=key_bias, shift=shift, prefix=prefix,
                            sink_logit=sink_logit, sink_value=sink_value)
            if rows is not None:
                return attend_numpy(q, k, values, block=block, threads=threads, rows=rows, **kw)
        if not fused_first:  # a variant the row pass does not cover (sigmoid with a bias, ...)
            out = attend_fused(q, k, values, threads=threads, **kw)
            if out is not None:
                return out
    return attend_numpy(q, k, values, mode=mode, key_bias=key_bias, shift=shift, prefix=prefix,
                        sink_logit=sink_logit, sink_value=sink_value, block=block, threads=threads)


def attend_numpy(q: np.ndarray, k: np.ndarray, values: np.ndarray, *, mode: str = "softmax",
                 key_bias: np.ndarray | None = None, shift: float = 0.0, prefix: np.ndarray | None = None,
                 sink_logit: np.ndarray | None = None, sink_value: np.ndarray | None = None,
                 block: int | None = None, threads: int | None = None, rows=None) -> np.ndarray:
    """The blocked numpy path of :func:`attend` (same arguments): row blocks, BLAS at one thread per thread.

    ``rows``: a compiled row pass (:func:`.fused_rows.row_pass`) that turns each logit block into weights in
    place and returns the row maxima and weight sums; otherwise numpy does those passes."""
    dt = values.dtype
    n_q, n_k, d = q.shape[0], k.shape[0], values.shape[1]
    block = _check_block(block, n_k, q.shape[1])
    if mode == "softmax" and rows is None:
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
        if rows is not None and prefix is None and n_k > 2 * key_tile:
            tiled(lo, hi)
            return
        L = q[lo:hi] @ kT[:, :kmax]
        if rows is not None:
            m, den = rows(L, lo, hi)  # L becomes the weights (0 for invisible keys)
            R = L @ vals[:kmax]
            if mode == "sigmoid":
                out[lo:hi] = R
                out[lo:hi] /= n_k
                return
            finish(lo, hi, R, m, den)
            return
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
        finish(lo, hi, R[:, :d], m, R[:, d] if mode == "softmax" else None)

    def tiled(lo: int, hi: int) -> None:
        """Rows ``lo:hi`` over key tiles of ``key_tile`` keys (online softmax): per tile the logits by BLAS, the
        row pass, the tile's value-weighted sums by BLAS, merged into float64 running sums rescaled to the
        running row maximum; the tile's keys, values and logits stay in cache."""
        acc = np.zeros((hi - lo, d))
        den = np.zeros(hi - lo)
        m_run = np.full(hi - lo, -np.inf)
        for j0 in range(0, n_k, key_tile):
            j1 = min(j0 + key_tile, n_k)
            L = q[lo:hi] @ kT[:, j0:j1]
            mt, dt_ = rows(L, lo, hi, j0)
            R = L @ vals[j0:j1]
            if mode == "sigmoid":
                acc += R
                continue
            mt = mt.astype(np.float64)
            empty = mt == -np.inf  # no visible key in this tile (biases -inf): its weights are NaN, not 0
            if empty.any():
                R[empty], dt_[empty] = 0, 0
            m_new = np.maximum(m_run, mt)
            live = m_new > -np.inf  # rows with a finite logit so far (else both scales are 0)
            with np.errstate(invalid="ignore"):
                a_old = np.where(live, np.exp(m_run - m_new), 0.0)
                a_t = np.where(live, np.exp(mt - m_new), 0.0)
            acc *= a_old[:, None]
            acc += a_t[:, None] * R
            den = den * a_old + dt_ * a_t
            m_run = m_new
        if mode == "sigmoid":
            out[lo:hi] = acc / n_k
            return
        finish(lo, hi, acc, m_run, den)

    def finish(lo: int, hi: int, num, m, den) -> None:
        """Normalise the value-weighted sums ``num`` of rows ``lo:hi`` (row maxima ``m``, weight sums ``den``)."""
        if mode == "exp":  # e^{m - log n_k} * num formed in float64, like the fused kernel (templates/fused_attend.c)
            num = np.asarray(num, dtype=np.float64)
            ls = np.asarray(m, dtype=np.float64)[:, None] - log_nk
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                res = np.exp(ls) * num
                # e^ls alone overflows, the product may not: ±e^{ls + log|num|}, inf only on true overflow
                redo = np.isinf(np.exp(ls)) & (num != 0) & np.isfinite(num)
                res[redo] = np.copysign(np.exp((ls + np.log(np.abs(num)))[redo]), num[redo])
                res[num == 0] = 0.0  # inf * 0: the sum really is 0
                out[lo:hi] = res  # cast to the work dtype: inf there only where the true value overflows it
            return
        if sink_logit is not None:
            ws = np.exp(sink_logit[lo:hi] - m)
            num = num + ws[:, None] * sink_value[None, :]
            den = den + ws
        out[lo:hi] = num / den[:, None]

    key_tile = KEY_TILE_BYTES // (dt.itemsize * (q.shape[1] + d))
    if rows is not None and prefix is None and n_k > 2 * key_tile:  # key tiles: row blocks that fill L2 with logits
        block = max(16, min(256, ROW_TILE_BYTES // (dt.itemsize * key_tile)))
    starts = range(0, n_q, block)
    if threads is None:
        from ..threads import kernel_threads

        threads = kernel_threads(2) if (BLAS_CONTROL and n_q * n_k >= THREADS_MIN_PAIRS) else 1
    n_threads = max(1, min(int(threads), len(starts)))

    def worker(chunk: range) -> None:
        if _BLAS.thread_local:
            _blas_enter()
        try:
            for lo in chunk:
                one_block(lo)
        finally:
            if _BLAS.thread_local:
                _blas_exit()

    # the calling thread holds the limit for the whole call (process-wide control: set once, not per worker)
    _blas_enter()
    try:
        if n_threads == 1:
            for lo in starts:
                one_block(lo)
        else:  # interleaved row blocks: thread r takes blocks r, r + T, r + 2T, ...; the caller takes r = 0
            helpers = _HELPERS.get(n_threads - 1)
            futs = [helpers.submit(worker, starts[r::n_threads]) for r in range(1, n_threads)]
            try:
                for lo in starts[::n_threads]:
                    one_block(lo)
            finally:
                for f in futs:
                    f.result()
    finally:
        _blas_exit()
    return out
