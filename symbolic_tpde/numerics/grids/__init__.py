"""Grid solvers of the Transformer PDE: finite volumes in R^1, R^2 and the spectral circle solver."""
