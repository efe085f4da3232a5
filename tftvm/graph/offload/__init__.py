"""Offloading a TF graph's clusters to TVM: the pipeline (`pipeline.offload`), partitioning,
the replay of the graph with the clusters' kernels, the safety net that keeps TF where it is
faster, the conversion report, and loop and branch bodies (control flow)."""
