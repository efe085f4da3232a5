"""The frontend: TF nodes -> Relax.

- `registry`: the converter table, `register_converter` (the one way into it), `Context`,
  `Unsupported`, `ShapeValue` and `same_dims`;
- `helpers`: what converters share (static dims, shape operands, padding);
- `ops/`: tftvm's converters, one module per family of TF ops;
- `support`: whether a node can go to TVM, and why not, before partitioning;
- `driver`: `to_relax` (a cluster) and `convert_node` (one node).
"""
from .driver import convert_node, to_relax
from .registry import CONVERTERS, Context, ShapeValue, Unsupported, register_converter, same_dims

__all__ = ["CONVERTERS", "Context", "ShapeValue", "Unsupported", "convert_node", "register_converter",
           "same_dims", "to_relax"]
