"""The README's example: index notation, einsum and compile, checked against numpy."""
import numpy as np

import tex

# Index notation: C = A @ B, then the maximum of each row of C.
M, N, K = tex.sizes("M N K")                    # symbolic sizes, bound at call time
i, j, k = tex.indices("i j k")
A = tex.tensor("A", (M, K), "float32")
B = tex.tensor("B", (K, N), "float32")
C = tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))
R = tex.compute("R", (i,), tex.max(C[i, j], over=j))

f = tex.compile(R)                              # loop nest -> LLVM IR -> machine code
print(f.loop_nest)

rng = np.random.default_rng(0)
a = rng.standard_normal((200, 300), dtype=np.float32)
b = rng.standard_normal((300, 100), dtype=np.float32)
r = f(A=a, B=b)                                 # or f(a, b): inputs in order of use
np.testing.assert_allclose(r, (a @ b).max(axis=1), rtol=1e-4)

# numpy.einsum's semantics, computed by compiled kernels (cached after the first call)
x = rng.integers(-128, 128, (1000, 64), dtype=np.int8)
s = tex.einsum("ij->i", x, dtype=np.int32)      # accumulate int8 in int32
assert np.array_equal(s, np.einsum("ij->i", x, dtype=np.int32))
d = tex.einsum("ij,jk,kl->il", a, b, b.T)       # any number of operands, views included
np.testing.assert_allclose(d, a @ b @ b.T, rtol=1e-3, atol=1e-2)
print("quickstart: all results match numpy")
