"""symbolic_tpde: deep Transformers as interacting particles, symbolically and numerically.

Public API (re-exported explicitly; nothing is computed at import time).  See README.md.
"""

from .errors import BlowupError, ConvergenceError, InputError
from .model import FFN, Head, Scenario, Schedule, Sink, Weights, make_head, make_weights

__all__ = [
    "BlowupError", "ConvergenceError", "InputError",
    "FFN", "Head", "Scenario", "Schedule", "Sink", "Weights", "make_head", "make_weights",
]

__version__ = "0.1.0"
