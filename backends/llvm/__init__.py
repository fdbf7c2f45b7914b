"""tex.backends.llvm: LLVM IR generation (codegen), compilation and cache (jit), calling (runtime)."""
