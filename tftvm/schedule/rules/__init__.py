"""The default schedule's block rules, one module per strategy; schedule/__init__.py orders them."""
