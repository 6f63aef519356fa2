"""Figure family 'histograms_softmax' of the dynamics atlas (README Mathematics §7); thin wrapper of `tpde figures --only histograms_softmax`.

Usage: python numerics/fig_histograms_softmax.py [OUT_DIR]   (default ./figures)
"""

import sys

from symbolic_tpde.cli import main

if __name__ == "__main__":
    sys.exit(main(["figures", "--only", "histograms_softmax", "--out", sys.argv[1] if len(sys.argv) > 1 else "figures"]))
