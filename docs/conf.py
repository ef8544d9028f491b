"""Sphinx configuration of the roofline docs.

Build (warnings are errors, as in CI), from the repository root::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

At build time this file writes ``docs/_generated/`` (ignored by git): the output of every
proof (``roofline prove <name> --verbose``), the lesson's two charts (``roofline plot``)
and one page per test file so that the derivations page can link to each test. The
derivations page itself is committed; ``python docs/_generate.py`` rewrites it and
``tests/test_docs.py`` fails when it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # the checkout's roofline, not an installed copy
sys.path.insert(0, str(DOCS))

import _generate  # noqa: E402  (docs/_generate.py, needs the paths above)

import roofline  # noqa: E402

project = "roofline"
author = "roofline developers"
copyright = "roofline developers"  # noqa: A001
release = roofline.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
# No math extension: MathJax would be loaded from a CDN and, offline, the formulas would show as
# raw LaTeX. The derivations page writes each formula as MathML from its SymPy expression
# (docs/_generate.py, ``mathml``), which browsers render natively; LaTeX math anywhere fails the
# build (``_generate.refuse_latex_math``).

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]

# Markdown (MyST): ``:::`` fences, definition lists, anchors on headings so that
# ``conventions.md#memory`` links work. No ``dollarmath``: a "$" is a dollar sign.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# API reference: numpydoc docstrings through napoleon.
# Members are chosen by where they are defined, not by ``__all__``: a package that re-exports
# names (``roofline``, ``roofline.sim``, ``roofline.formulas``) would otherwise describe each
# object twice, once under each name.
autodoc_default_options = {
    "members": True,
    "member-order": "bysource",
    "show-inheritance": True,
    "ignore-module-all": True,
}
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
# The docstrings' types are free text with units ("[bytes] > 0", "shape [batch, heads]"); as a
# field list they stay text instead of becoming cross-references that Sphinx would resolve,
# fuzzily, to unrelated attributes (``StepRecord.bytes``, ``DecodePoint.batch``).
napoleon_use_param = False
napoleon_use_ivar = True

html_theme = "alabaster"
html_title = "roofline"
html_static_path = ["_static"]
# roofline.css: code blocks wrap instead of running past the column (the proofs' output has
# lines of 250 characters), wide formulas scroll inside their own box, and a math font is named
# for the MathML.
html_css_files = ["roofline.css"]
html_theme_options = {"description": "LLM decode serving, derived and checked", "fixed_sidebar": True}


def setup(app):  # type: ignore[no-untyped-def]
    """Write docs/_generated before the documents are read; refuse LaTeX math."""
    app.add_config_value("roofline_build_time_pages", True, "env", bool)
    app.connect("builder-inited", _generate.build_time_pages)
    app.connect("doctree-resolved", _generate.refuse_latex_math)
    app.add_role("source", _generate.source_role)
    app.connect("viewcode-find-source", _generate.find_source)
    app.connect("viewcode-follow-imported", _generate.follow_imported)
    app.connect("build-finished", _generate.check_source_links)
    return {"parallel_read_safe": True}
