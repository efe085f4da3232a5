"""Graph integration: TF graphs with the parts TVM can run replaced by tftvm ops.

- `tfgraph/`: TF-side helpers (freeze, inline calls, order, tensor names, called functions);
- `frontend/`: TF node -> Relax (the converter table, `register_converter`, the converters);
- `lowering/`: a Relax program -> tftvm kernels (legalizations, folding, fusion);
- `offload/`: the pipeline that marks, partitions, converts, compiles and replays a graph,
  with the safety net, the report and loop and branch bodies;
- entry points: `optimize.py` (`tftvm.optimize`), `adaptive.py` (optimize without a
  signature), `function_pass.py` (`tftvm.enable()`'s pass) and `whole.py` (a whole graph for
  `tftvm.compile_model`).

`register_converter` is the public hook for converters of TF ops tftvm lacks (or replaces).
"""
from .frontend import CONVERTERS, Context, ShapeValue, Unsupported, register_converter, same_dims

__all__ = ["CONVERTERS", "Context", "ShapeValue", "Unsupported", "register_converter", "same_dims"]
