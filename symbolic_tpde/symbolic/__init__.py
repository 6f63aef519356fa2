"""Symbolic layer: kernels, Gaussian tilt, moment ODEs, energy, metric, second variation (SymPy only)."""
