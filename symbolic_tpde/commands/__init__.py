"""One module per ``tpde`` subcommand; see :mod:`symbolic_tpde.cli`."""
