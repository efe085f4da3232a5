"""A Relax program -> tftvm kernels: legalization (NaN semantics, fast math, packed conv
weights), scale folding, fusion and the chain of TvmCall ops that runs the fused kernels
(`program.RelaxProgram`)."""
