"""Derivation documents: step objects, their checks, and the text/LaTeX/JSON renderers."""
