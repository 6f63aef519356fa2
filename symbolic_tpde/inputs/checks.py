"""The one set of input validators: every layer checks user input with these (numpy only, no SymPy).

Each raises :class:`~symbolic_tpde.errors.InputError` naming the field and the problem (shape, NaN/Inf, sign,
type, symmetry, definiteness), so the CLI can print one line and exit with status 2.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["finite_array", "check_shape", "positive_int", "positive_number", "spd", "read_json", "parse_json",
           "number_tree", "field_name", "one_line", "strict_json", "horizon", "sweep_axis", "MAX_ENTRY", "T_MAX",
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


def read_json(path, field: str = "scenario", max_bytes: int = MAX_BYTES) -> Any:
    """:func:`parse_json` of a file, read in binary and bounded by ``max_bytes`` before decoding."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(field, f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    return parse_json(data, field, max_bytes)


def read_arrays(path, field: str, suffix: str):
    """The arrays of a ``.npy`` (``suffix=".npy"``: one array) or ``.npz`` file (a ``dict``, read in full), never
    unpickling.  Every way the file can be bad is an InputError naming ``field``: unreadable, not numpy, pickled
    object arrays, a truncated archive or member, or the other format than its suffix (``np.load`` goes by the
    content, so a ``.npz`` name may hold one array)."""
    import zipfile
    import zlib

    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.ndarray):
            got = ".npy"
        else:
            got = ".npz"
            with data as z:
                data = {k: np.asarray(z[k]) for k in z.files}
    except OSError as exc:
        raise InputError(field, f"cannot read {str(path)[-80:]!r}: {exc.strerror or exc}"[:200]) from None
    except (ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise InputError(field, f"not a readable {suffix} file without pickles ({str(exc)[:120]})") from None
    if got != suffix:
        held = "one array (.npy)" if got == ".npy" else "an archive (.npz)"
        raise InputError(field, f"expected a {suffix} file, but it holds {held}")
    return data


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
