"""Numerics layer: particle fields, integrators, estimators and distances (no SymPy at module level)."""
