"""Sphinx configuration of the symbolic_tpde documentation site.

Build (what CI runs; warnings are errors, broken references are warnings):

    python -m sphinx -W --keep-going -n -b html docs docs/_build/html

At build time ``_ext/tpde_docs.py`` writes one page per ``tpde`` command from the argparse parser
(``docs/cli/``), draws the gallery's figures on quick settings (``docs/_generated/``), runs every
```` ```python ```` block of every page and shows its output under it (a failing block fails the build), and
checks every ``{test}`` and ``{verify}`` reference of the mathematics page against the repository.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))            # document this tree's package, not another installed copy
sys.path.insert(0, str(DOCS / "_ext"))
os.environ.setdefault("MPLBACKEND", "Agg")

project = "symbolic_tpde"
author = "the symbolic_tpde authors"
copyright = "the symbolic_tpde authors (MIT licence)"
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",            # MathJax 3 copied into the site: math renders without a network
    "tpde_docs",
]

smartquotes = False                      # `--option` stays two hyphens, quotes stay straight
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]   # _generated/*.md are included, not pages

myst_enable_extensions = ["dollarmath", "amsmath", "deflist", "colon_fence", "attrs_inline"]
myst_heading_anchors = 3                 # `[text](page.md#a-heading)` links resolve (and fail the build if not)

autosummary_generate = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"        # hints go into the description, where unresolved names stay text
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "show-inheritance": False}

# Nitpicky mode (-n) makes every broken page link, heading anchor, image and toctree entry of the site an error.
# Python cross-references inside docstrings are excused: autodoc documents the public names
# (``symbolic_tpde.__all__``), while docstrings also point at internal modules and at numpy/SymPy types, which
# have no page here (documenting every module, or fetching other projects' inventories over the network, would
# be the only way to resolve them).  The public names themselves resolve (the autosummary table links to them).
nitpick_ignore_regex = [(r"py:.*", r".*")]


html_theme = "furo"
html_title = "symbolic_tpde"
html_static_path = ["_static"]
html_css_files = ["tpde.css"]
html_theme_options = {"navigation_with_keys": True}
html_last_updated_fmt = None
