"""Sphinx configuration: the README, the serving and RPC tuning guides, the XLA design note, the tutorials gallery.

Build: `sphinx-build -W -b html docs docs/_build/html` (offline; the tutorials are
rendered, not run: the test suite runs them).
"""
project = "tftvm"
author = "the tftvm authors"
extensions = ["myst_parser", "sphinx_gallery.gen_gallery"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "tutorials"]  # sphinx-gallery reads tutorials/ itself
html_theme = "alabaster"
sphinx_gallery_conf = {
    "examples_dirs": "tutorials",
    "gallery_dirs": "generated/tutorials",
    "filename_pattern": r"/\d\d_",
    "plot_gallery": "False",  # tests/test_tutorials.py runs them; the docs only render them
    "download_all_examples": False,
    "within_subsection_order": "FileNameSortKey",
}
