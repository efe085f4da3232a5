"""tftvm's converters, one module per family of TF ops; importing this package registers
them all in the converter table (registry.CONVERTERS)."""
from . import indexing, math, matmul, nn, shape, spatial, training  # noqa: F401
