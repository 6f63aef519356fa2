"""Pure data shared by every layer (no SymPy, numpy only for validation): the registry of attention kinds
(:mod:`.kinds`) and the one Gaussian state layout (:mod:`.layout`)."""
