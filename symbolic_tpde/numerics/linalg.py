"""Small dense linear-algebra helpers shared by the numeric layer (numpy only)."""

from __future__ import annotations

import numpy as np


def sqrtm_psd(S: np.ndarray) -> np.ndarray:
    """Principal square root of a symmetric positive semi-definite matrix by an eigen-decomposition.

    ``S`` is symmetrised first and eigenvalues below zero (round-off) are clipped to zero, so the result is
    symmetric PSD with ``R @ R ≈ S`` to float64 round-off times ``‖S‖``.
    """
    S = np.asarray(S, dtype=float)
    lam, U = np.linalg.eigh(0.5 * (S + S.T))
    return (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T
