"""Graph integration: TF graphs with the parts TVM can run replaced by tftvm ops.

`optimize` (optimize.py) freezes a function, marks the nodes TVM can run (mark.py), clusters
them (partition.py), converts each cluster to Relax (convert*.py), lowers it to TvmCall nodes
(lower.py) and replays the graph with them (rewrite.py), keeping TF's nodes where TVM cannot
run or is slower (measure.py); loop and branch bodies go the same way (control_flow.py).
`function_pass.py` runs that pipeline on the graphs TF instantiates, for `tftvm.enable()`;
`whole.py` converts a whole graph for `tftvm.compile_model`.
"""
