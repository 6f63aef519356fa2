"""Cross-checks symbolic <-> mpmath <-> numpy <-> compiled <-> particles, and the `tpde verify` runner."""
