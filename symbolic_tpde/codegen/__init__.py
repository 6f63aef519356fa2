"""Code generation: SymPy expressions to fast callables (numpy, optional C), with a content-hash cache."""
