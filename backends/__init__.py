"""tex.backends: the NumPy reference (the oracle) and the llvmlite JIT."""
