"""The one set of input validators: every layer checks user input with these (numpy only, no SymPy).

Each raises :class:`~symbolic_tpde.errors.InputError` naming the field and the problem (shape, NaN/Inf, sign,
type, symmetry, definiteness), so the CLI can print one line and exit with status 2.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["finite_array", "check_shape", "positive_int", "positive_number", "spd", "read_json", "parse_json",
           "number_tree", "read_input", "read_arrays", "writable_output", "field_name", "one_line", "strict_json", "horizon", "sweep_axis", "MAX_ENTRY", "T_MAX",
           "MAX_BYTES", "MAX_DEPTH", "MAX_DIM", "MAX_DIM_NUMERIC"]

#: Largest magnitude of an entry of a user-given parameter or initial datum.  The moment right-hand sides are
#: polynomials of degree up to 4 in the entries (``V Σ A Σ``, README Mathematics §3), so entries below
#: ``1e75`` (``(1e75)⁴ = 1e300 < 1.8e308``, the float64 maximum) keep every product finite; larger entries
#: would overflow downstream (or burn the evaluation cap before stalling) and are refused before any
#: float conversion.
MAX_ENTRY = 1e75
#: Largest horizon ``T`` a scenario file or ``--T`` may give: a run to ``T`` needs at least ``T / h`` steps, and
#: with step sizes ``h ≲ 1/|rate|`` and the evaluation cap of the integrator (10⁶ right-hand sides) horizons
#: above 10⁶ in units of the weights' time scale cannot be reached; they are refused instead of stalling.
T_MAX = 1e6
#: Largest scenario file (bytes) and deepest JSON nesting: a scenario holds a few matrices; 4 levels are
#: needed (layers → heads → matrix → row), 32 leave room for any future format and keep the parser's
#: recursion far from Python's limit.
MAX_BYTES = 16 * 2 ** 20
MAX_DEPTH = 32
#: Largest dimension ``d`` (and head dimension): the symbolic derivation of the entrywise moment ODE grows like
#: ``d⁶``; 64 is far beyond what it can do in reasonable time, and keeps arrays read from files small.
MAX_DIM = 64
#: Largest ``d`` where no entrywise symbolic form is needed (weights read from model files; particles through
#: BLAS and the matrix-form moment ODE numerically, :mod:`symbolic_tpde.numerics.particles.lowrank`): a ``d × d``
#: covariance of float64 is 8 MB at 1024.
MAX_DIM_NUMERIC = 1024

_KIND = {0: "a number", 1: "a vector", 2: "a matrix"}


def finite_array(value: Any, field: str, ndim: int | None = None, dtype=float, shape: tuple | None = None,
                 readonly: bool = True) -> np.ndarray:
    """``value`` as a finite array of ``dtype`` (``ndim`` dimensions and/or exactly ``shape``), read-only
    unless ``readonly=False``.  Nested lists (what JSON gives) are checked by :func:`number_tree` first:
    numbers only (no strings, booleans or ``null``), rectangular, magnitudes ``<= MAX_ENTRY``."""
    if isinstance(value, (list, tuple, int, float)) or _is_scalar_like(value):  # scalars get the range check too
        value = number_tree(value, field, ndim)
    elif isinstance(value, np.ndarray) and value.dtype.kind not in "iuf":
        raise InputError(field, f"must hold real numbers, got an array of dtype {value.dtype}")
    try:
        arr = np.array(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputError(field, f"not a numeric array ({exc})") from None
    if ndim is not None and arr.ndim != ndim:
        raise InputError(field, f"expected {_KIND.get(ndim, f'{ndim}-d array')}, got an array of shape {arr.shape}")
    if shape is not None:
        check_shape(arr, shape, field)
    if not np.all(np.isfinite(arr)):
        raise InputError(field, "contains NaN or Inf")
    if readonly:
        arr.setflags(write=False)
    return arr


class TooLarge:
    """A JSON number literal that does not fit a float (an integer of ``digits`` digits, or a float literal that
    rounds to infinity): kept as text by :func:`parse_json` so that the field it sits in can be named."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def describe(self) -> str:
        t = self.text.lstrip("-")
        if t.isdigit():
            return f"an integer of {len(t)} digits, too large for a float"
        return f"{self.text[:20]}{'...' if len(self.text) > 20 else ''}, too large for a float"

    def __repr__(self) -> str:
        return f"<number too large: {self.text[:20]}>"


def _is_scalar_like(value: Any) -> bool:
    return isinstance(value, (bool, str, TooLarge)) or value is None


def field_name(key: Any) -> str:
    """A key as it may appear in a one-line message: printable keys as they are, others JSON-escaped
    (a key holding a newline cannot forge a second message line)."""
    key = str(key)
    if key.isprintable() and '"' not in key and len(key) <= 80:
        return key
    return json.dumps(key[:80] + ("..." if len(key) > 80 else ""), ensure_ascii=True)


def one_line(text: str) -> str:
    """``text`` with control characters escaped: what the CLI prints is always exactly one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _check_number(x: Any, field: str) -> float | int:
    if isinstance(x, bool) or x is None or isinstance(x, str):
        raise InputError(field, f"must be a number, got {json.dumps(x)[:40]}")
    if isinstance(x, TooLarge):
        raise InputError(field, f"{x.describe()} (entries must have magnitude <= {MAX_ENTRY:g})")
    if isinstance(x, int):
        if abs(x) > MAX_ENTRY:  # exact integer comparison, no float conversion of a huge integer
            raise InputError(field, f"magnitude {_short(x)} exceeds {MAX_ENTRY:g}")
        return x
    if isinstance(x, (float, np.integer, np.floating)):
        if not math.isfinite(x):
            raise InputError(field, "contains NaN or Inf")
        if abs(x) > MAX_ENTRY:
            raise InputError(field, f"magnitude {float(x):.3g} exceeds {MAX_ENTRY:g}")
        return x
    raise InputError(field, f"must be a number, got {type(x).__name__}")


def _short(x: int) -> str:
    s = str(abs(x)) if x.bit_length() < 4000 else None
    return f"~1e{len(s) - 1}" if s else f"~2^{x.bit_length()}"


def number_tree(value: Any, field: str, ndim: int | None = None):
    """Check a nested list of JSON numbers without converting it: every leaf an ``int``/``float`` (never a
    boolean, string or ``null``) of magnitude ``<= MAX_ENTRY``, rows of equal length, at most ``ndim`` levels
    (any ``ndim`` is allowed when ``None``).  Returns ``value`` unchanged (safe for ``np.array``)."""
    def walk(v, depth, where):
        if isinstance(v, (list, tuple)):
            if ndim is not None and depth >= ndim:
                raise InputError(field, f"expected {_KIND.get(ndim, f'{ndim}-d array')}, got deeper nesting")
            if depth >= MAX_DEPTH:
                raise InputError(field, "nested too deeply")
            shapes = {walk(u, depth + 1, where) for u in v}
            if len(shapes) > 1:
                raise InputError(field, "rows of different lengths or depths (not a rectangular array)")
            return (len(v),) + (shapes.pop() if shapes else ())
        _check_number(v, field)
        return ()

    shape = walk(value, 0, field)
    if ndim is not None and len(shape) != ndim:
        raise InputError(field, f"expected {_KIND.get(ndim, f'{ndim}-d array')}, got an array of shape {shape}")
    return value


def _reject_constant(name: str, field: str = "scenario") -> Any:
    raise InputError(field, f"{name} is not allowed (use finite numbers)")


def _parse_int(text: str):
    # digits beyond 76 exceed MAX_ENTRY anyway; never call int() on thousands of digits (CPython refuses
    # over 4300 digits with a ValueError, and it is quadratic below that)
    if len(text.lstrip("-")) > 400:
        return TooLarge(text)
    return int(text)


def _parse_float(text: str):
    v = float(text)
    return TooLarge(text) if math.isinf(v) else v


def _no_duplicates(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise InputError(field_name(key), "key given twice in the same object")
        out[key] = value
    return out


def _depth(text: str) -> int:
    """Largest nesting depth of ``[``/``{`` outside JSON strings (strings removed first)."""
    stripped = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    arr = np.frombuffer(stripped.encode("utf-8", "replace"), dtype=np.uint8)
    step = (np.isin(arr, (0x5B, 0x7B)).astype(np.int64) - np.isin(arr, (0x5D, 0x7D)))
    return int(np.cumsum(step).max()) if step.size else 0


def parse_json(data: bytes | str, field: str = "scenario", max_bytes: int = MAX_BYTES,
               max_depth: int = MAX_DEPTH) -> Any:
    """Strict JSON: UTF-8 only (a BOM or UTF-16 is refused with that message), at most ``max_bytes`` bytes and
    ``max_depth`` levels of nesting, no ``NaN``/``Infinity``, no duplicate keys; number literals too large for
    a float become :class:`TooLarge` placeholders (refused, with the field named, by :func:`number_tree`).
    Nothing is evaluated.  Every problem is an :class:`InputError` naming ``field``."""
    if isinstance(data, str):
        text = data
        if len(text) > max_bytes:
            raise InputError(field, f"larger than {max_bytes} bytes")
    else:
        if len(data) > max_bytes:
            raise InputError(field, f"larger than {max_bytes} bytes")
        if data[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(data) > 1 and b"\x00" in data[:4]):
            raise InputError(field, "not UTF-8 (looks like UTF-16); save the file as UTF-8")
        if data[:3] == b"\xef\xbb\xbf":
            raise InputError(field, "starts with a byte-order mark; save the file as UTF-8 without BOM")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(field, f"not valid UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from None
    if text[:1] == "\ufeff":
        raise InputError(field, "starts with a byte-order mark; save the file as UTF-8 without BOM")
    depth = _depth(text)
    if depth > max_depth:
        raise InputError(field, f"nested {depth} levels deep (at most {max_depth})")
    try:
        return json.loads(text, parse_constant=lambda tok: _reject_constant(tok, field),
                          object_pairs_hook=_no_duplicates,
                          parse_int=_parse_int, parse_float=_parse_float)
    except json.JSONDecodeError as exc:
        raise InputError(field, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:  # pragma: no cover - excluded by the depth bound
        raise InputError(field, "nested too deeply") from None


#: How long an input given as an anonymous pipe (``--scenario <(cat f.json)``, ``/dev/stdin``) may take to
#: deliver its data: a writer that produces nothing for this long is refused, never waited on forever.
PIPE_WAIT_SECONDS = 10.0
#: Largest array file (``.npy``/``.npz``: an empirical initial law, a model's weights, observations) read.
MAX_ARRAY_BYTES = 2 ** 31
_READ_CACHE: dict = {}


def _anonymous_pipe(path: str) -> bool:
    """Whether ``path`` names an anonymous pipe (``/dev/fd/N`` of a process substitution, ``/dev/stdin`` fed by
    a pipe): it resolves to ``pipe:[inode]`` (Linux ``/proc``), whereas a named FIFO resolves to its own path."""
    return os.path.basename(os.path.realpath(path)).startswith("pipe:[")


def _read_pipe(path: str, field: str, max_bytes: int) -> bytes:
    """Read an anonymous pipe to its end without ever blocking for more than :data:`PIPE_WAIT_SECONDS`."""
    import select
    import time

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks, size, deadline = [], 0, time.monotonic() + PIPE_WAIT_SECONDS
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise InputError(field, f"{path!r}: the pipe delivered no end of data within "
                                 f"{PIPE_WAIT_SECONDS:g} s (give a regular file)")
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                return b"".join(chunks)
    finally:
        os.close(fd)


def read_input(path, field: str = "scenario", max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of an input file (at most ``max_bytes + 1``, so that the caller can refuse a larger one): the
    one reader of every user input file.

    * read once per process: a second read of the same file (same device, inode, size and modification time)
      or of the same anonymous pipe returns the same bytes, so ``--scenario <(cat f.json)`` works wherever a
      command looks at its scenario more than once;
    * a regular file or an anonymous pipe (process substitution, ``/dev/stdin``; read with a deadline,
      :data:`PIPE_WAIT_SECONDS`); a named pipe (FIFO), a device, a socket or a directory is refused by name
      before any open, so nothing ever blocks on a FIFO that has no writer.
    """
    import stat as st_

    name = os.fspath(path)
    shown = repr(str(name)[-80:])
    try:
        st = os.stat(name)
    except (OSError, ValueError) as exc:
        raise InputError(field, f"cannot read {shown}: {getattr(exc, 'strerror', None) or exc}"[:200]) from None
    mode = st.st_mode
    if st_.S_ISDIR(mode):
        raise InputError(field, f"{shown} is a directory, not a file")
    if st_.S_ISFIFO(mode):
        if not _anonymous_pipe(name):
            raise InputError(field, f"{shown} is a named pipe (FIFO), not a regular file (a FIFO blocks until "
                             "a writer opens it; give a file, or <(cat FILE))")
        key = ("pipe", st.st_dev, st.st_ino)
    elif st_.S_ISREG(mode):
        key = ("file", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    else:
        what = ("a character device" if st_.S_ISCHR(mode) else "a block device" if st_.S_ISBLK(mode)
                else "a socket" if st_.S_ISSOCK(mode) else "not a regular file")
        raise InputError(field, f"{shown} is {what}, not a regular file")
    if key in _READ_CACHE:
        return _READ_CACHE[key]
    try:
        if key[0] == "pipe":
            data = _read_pipe(name, field, max_bytes)
        else:
            with open(name, "rb") as fh:
                data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(field, f"cannot read {shown}: {exc.strerror or exc}"[:200]) from None
    if len(_READ_CACHE) >= 8:         # a few inputs per command; bounded memory in long-lived processes
        _READ_CACHE.pop(next(iter(_READ_CACHE)))
    _READ_CACHE[key] = data
    return data


def read_json(path, field: str = "scenario", max_bytes: int = MAX_BYTES) -> Any:
    """:func:`parse_json` of a file, read once by :func:`read_input` and bounded by ``max_bytes`` before
    decoding."""
    return parse_json(read_input(path, field, max_bytes), field, max_bytes)


def read_arrays(path, field: str, suffix: str):
    """The arrays of a ``.npy`` (``suffix=".npy"``: one array) or ``.npz`` file (a ``dict``, read in full), never
    unpickling.  Every way the file can be bad is an InputError naming ``field``: unreadable, not numpy, pickled
    object arrays, a truncated archive or member, or the other format than its suffix (``np.load`` goes by the
    content, so a ``.npz`` name may hold one array).  Read by :func:`read_input` (FIFOs and devices refused)."""
    import io
    import zipfile
    import zlib

    raw = read_input(path, field, MAX_ARRAY_BYTES)
    if len(raw) > MAX_ARRAY_BYTES:
        raise InputError(field, f"larger than {MAX_ARRAY_BYTES} bytes")
    try:
        data = np.load(io.BytesIO(raw), allow_pickle=False)
        if isinstance(data, np.ndarray):
            got = ".npy"
        else:
            got = ".npz"
            with data as z:
                data = {k: np.asarray(z[k]) for k in z.files}
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, zlib.error) as exc:
        raise InputError(field, f"not a readable {suffix} file without pickles ({str(exc)[:120]})") from None
    if got != suffix:
        held = "one array (.npy)" if got == ".npy" else "an archive (.npz)"
        raise InputError(field, f"expected a {suffix} file, but it holds {held}")
    return data


def writable_output(path, field: str, *, suffixes: tuple = (), directory: bool = False) -> None:
    """Check, before any work, that an output can be written: a non-empty name (``--save ''`` is refused, not
    ignored), with one of ``suffixes`` when given, not an existing directory (``directory=False``), FIFO or
    device, in a directory that exists or can be created and that accepts a new file (a real probe: ``os.access``
    does not know read-only mounts).  ``directory=True``: ``path`` is an output directory (existing or
    creatable)."""
    import stat as st_
    import tempfile
    from pathlib import Path

    name = os.fspath(path) if path is not None else ""
    if not name or not name.strip():
        raise InputError(field, "an empty file name (give a path, or omit the option)")
    if "\x00" in name:
        raise InputError(field, "a file name with a NUL character")
    p = Path(name)
    if not directory:
        if name.endswith(os.sep) or p.name in ("", ".", ".."):
            raise InputError(field, f"must name a file, got {name!r}"[:200])
        if suffixes and not name.endswith(tuple(suffixes)):
            raise InputError(field, f"expected a file name ending in {' or '.join(suffixes)}, got {name!r}"[:200])
    try:
        st = os.stat(name)
    except OSError:
        st = None
    if st is not None:
        if directory and not st_.S_ISDIR(st.st_mode):
            raise InputError(field, f"{name!r} exists and is not a directory"[:200])
        if not directory and st_.S_ISDIR(st.st_mode):
            raise InputError(field, f"{name!r} is a directory"[:200])
        if not directory and not st_.S_ISREG(st.st_mode):
            raise InputError(field, f"{name!r} is not a regular file (a FIFO or a device)"[:200])
    probe = p.resolve() if directory and st is not None else (p.parent.resolve() if str(p.parent) else Path.cwd())
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise InputError(field, f"{probe} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise InputError(field, f"directory {probe} is not writable ({exc.strerror or exc})"[:200]) from None


def horizon(value: Any, field: str = "T", allow_zero: bool = True) -> float:
    """A horizon ``0 <= T <= T_MAX`` (``> 0`` unless ``allow_zero``)."""
    if isinstance(value, TooLarge):
        raise InputError(field, f"{value.describe()}; horizons are limited to {T_MAX:g}")
    v = positive_number(value, field, allow_zero=allow_zero)
    if v > T_MAX:
        raise InputError(field, f"{v:g} exceeds the largest supported horizon {T_MAX:g} (the integrators' step "
                         "and evaluation caps cannot reach it)")
    return v


def sweep_axis(args, bounds: str = "SMIN < SMAX") -> tuple[float, float, float]:
    """``(smin, smax, T)`` of a sweep's command-line arguments ``range``, ``n``, ``T``, ``seed`` (``tpde sweep``
    on ℝᵈ and on the sphere): finite bounds ``smin < smax`` (equal only with ``n = 1``), a horizon ``T > 0``,
    ``seed >= 0``."""
    smin, smax = args.range
    for x in (smin, smax):
        if not (math.isfinite(x) and abs(x) <= MAX_ENTRY):
            raise InputError("range", f"must be finite numbers with |x| <= {MAX_ENTRY:g}, got {x}")
    if not (smin < smax or (smin == smax and args.n == 1)):
        raise InputError("range", f"must be {bounds} (equal only with --n 1), got {smin:g} {smax:g}")
    T = horizon(args.T, "T")
    if not T > 0:
        raise InputError("T", f"must be > 0, got {args.T}")
    if args.seed < 0:
        raise InputError("seed", f"must be >= 0, got {args.seed}")
    return smin, smax, T


def _finite_or_none(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite_or_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_or_none(v) for v in x]
    return x


def has_nonfinite(x) -> bool:
    """Whether a JSON-able value holds a NaN or an infinity anywhere."""
    if isinstance(x, float):
        return not math.isfinite(x)
    if isinstance(x, dict):
        return any(has_nonfinite(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(has_nonfinite(v) for v in x)
    return False


def strict_json(obj: Any, **kwargs) -> str:
    """``json.dumps(obj, allow_nan=False)``: strict JSON, never a bare ``NaN``/``Infinity``.  Callers map
    non-finite results to a status or event first (:func:`has_nonfinite`); a non-finite value that got
    through anyway is written as ``null``."""
    return json.dumps(_finite_or_none(obj) if has_nonfinite(obj) else obj, allow_nan=False, **kwargs)


def check_shape(arr: np.ndarray, shape: tuple, field: str) -> None:
    if tuple(arr.shape) != tuple(shape):
        raise InputError(field, f"expected shape {tuple(shape)}, got {tuple(arr.shape)}")


def positive_int(value: Any, field: str, allow_none: bool = False) -> int | None:
    """A positive integer (booleans and floats refused)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(field, f"must be a positive integer, got {value!r}"[:120])
    return int(value)


def positive_number(value: Any, field: str, allow_zero: bool = False) -> float:
    """A finite real number ``> 0`` (``>= 0`` with ``allow_zero``); booleans and strings refused."""
    if isinstance(value, TooLarge):
        raise InputError(field, value.describe())
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(field, f"must be a number, got {value!r}"[:120])
    if isinstance(value, int) and value.bit_length() > 1024:
        raise InputError(field, f"is too large for a float ({_short(value)})")
    try:
        v = float(value)
    except OverflowError:
        raise InputError(field, f"is too large for a float: {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise InputError(field, f"must be finite and {'>=' if allow_zero else '>'} 0, got {value!r}")
    return v


def spd(Sigma: Any, d: int, field: str = "Sigma0") -> np.ndarray:
    """A symmetric positive definite ``d×d`` matrix (read-only).  Symmetry to a relative 1e-10 of
    ``max|Σ|`` (JSON round-trips are exact, so anything larger is a real asymmetry); definiteness by a
    Cholesky factorisation."""
    S = finite_array(Sigma, field, 2, shape=(d, d))
    asym = float(np.max(np.abs(S - S.T))) if d else 0.0
    if asym > 1e-10 * max(1.0, float(np.max(np.abs(S)))):
        raise InputError(field, f"not symmetric (max |S - Sᵀ| = {asym:.3g})")
    try:
        np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        lam = float(np.linalg.eigvalsh(S).min())
        raise InputError(field, f"not positive definite (smallest eigenvalue {lam:.3g})") from None
    return S
