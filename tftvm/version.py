"""tftvm's version: one place, read by the package, the CLI, generated projects and pyproject."""
__version__ = "0.1.0"
