"""TF-side graph helpers: freezing, inlining calls, topological order, tensor names and
the functions a graph calls. Nothing here knows about TVM."""
