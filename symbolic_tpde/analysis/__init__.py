"""Analysis: blow-up, clustering limits, rank, phase diagrams, mean-field experiments."""
