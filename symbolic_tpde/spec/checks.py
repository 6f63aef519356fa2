"""The one set of input validators: every layer checks user input with these (numpy only, no SymPy).

Each raises :class:`~symbolic_tpde.errors.InputError` naming the field and the problem (shape, NaN/Inf, sign,
type, symmetry, definiteness), so the CLI can print one line and exit with status 2.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["finite_array", "check_shape", "positive_int", "positive_number", "spd"]

_KIND = {0: "a number", 1: "a vector", 2: "a matrix"}


def finite_array(value: Any, field: str, ndim: int | None = None, dtype=float, shape: tuple | None = None,
                 readonly: bool = True) -> np.ndarray:
    """``value`` as a finite array of ``dtype`` (``ndim`` dimensions and/or exactly ``shape``), read-only
    unless ``readonly=False``."""
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


def check_shape(arr: np.ndarray, shape: tuple, field: str) -> None:
    if tuple(arr.shape) != tuple(shape):
        raise InputError(field, f"expected shape {tuple(shape)}, got {tuple(arr.shape)}")


def positive_int(value: Any, field: str, allow_none: bool = False) -> int | None:
    """A positive integer (booleans and floats refused)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(field, f"must be a positive integer, got {value!r}")
    return int(value)


def positive_number(value: Any, field: str, allow_zero: bool = False) -> float:
    """A finite real number ``> 0`` (``>= 0`` with ``allow_zero``); booleans and strings refused."""
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(field, f"must be a number, got {value!r}")
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
