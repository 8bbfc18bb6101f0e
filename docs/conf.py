# SPDX-License-Identifier: Apache-2.0
"""Sphinx configuration: the API reference from the docstrings (numpydoc) and Markdown pages (MyST).

Build: ``python -m sphinx -W -b html docs docs/_build/html`` (warnings are errors, as in CI).
The topic pages include the README's sections between ``<!-- docs:NAME -->`` markers, so the
README and these pages never drift apart.
"""

from __future__ import annotations

import warnings

import redist

# numpydoc reports malformed docstring sections as Python warnings, which sphinx -W does not see
warnings.filterwarnings("error", category=UserWarning, module="numpydoc")

project = "redist"
author = "The redist developers"
copyright = "the redist developers, Apache-2.0"  # noqa: A001 -- Sphinx's name
release = version = redist.__version__

extensions = ["sphinx.ext.autodoc", "numpydoc", "myst_parser"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = f"redist {release}"

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
numpydoc_show_class_members = False  # members are listed by autodoc itself
numpydoc_class_members_toctree = False
myst_heading_anchors = 3
# The README's sections keep their own heading levels (## and ###) inside a page's # title.
suppress_warnings = ["myst.header"]
