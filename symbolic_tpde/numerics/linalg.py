"""Small dense linear-algebra helpers shared by the numeric layer (numpy only)."""

from __future__ import annotations

import numpy as np


def sqrtm_psd(S: np.ndarray, return_eig: bool = False):
    """Principal square root of a symmetric positive semi-definite matrix by an eigen-decomposition (the one
    PSD square root of the package).

    ``S`` is symmetrised first and eigenvalues below zero (round-off) are clipped to zero, so the result is
    symmetric PSD with ``R @ R ≈ S`` to float64 round-off times ``‖S‖``.  ``return_eig``: also return the
    clipped eigenvalues and eigenvectors, ``(R, lam, U)``.
    """
    S = np.asarray(S, dtype=float)
    lam, U = np.linalg.eigh(0.5 * (S + S.T))
    lam = np.clip(lam, 0.0, None)
    R = (U * np.sqrt(lam)) @ U.T
    return (R, lam, U) if return_eig else R


def logsumexp_rows(Z: np.ndarray) -> np.ndarray:
    """Stable ``log Σ_j exp(Z_ij)`` per row, the row maximum subtracted first (the one log-sum-exp of the
    package's Sinkhorn and entropic solvers).  ``Z`` is overwritten (it becomes ``exp(Z - max)``)."""
    m = Z.max(axis=1)
    Z -= m[:, None]
    np.exp(Z, out=Z)
    return m + np.log(Z.sum(axis=1))
