"""What this CPU's matrix units can do (features) and TVM kernels written for them (amx)."""
