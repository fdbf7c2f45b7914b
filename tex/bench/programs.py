"""Whole programs: fusions (a gemm and its consumer in one kernel) and the workloads
users write (attention, LayerNorm, GEGLU, conv1d, a bilinear form, a distance matrix, a
classifier's argmax), each against the best numpy version a careful user writes (BLAS
products on tex's thread count, preallocated buffers, in-place ufuncs).

Fused workloads also time tex's own unfused program (`tex.compile(out, fuse=False)`)
and, where the consumer should be nearly free, tex's gemm alone; the notes give both
ratios (issue 11's goals: rowmax within 1.10x of the gemm, gelu within 1.25x, every
fusion faster than fuse=False).
"""
import numpy as np

import tex

from .harness import Result, blas_threads, compare, interleave_all, workload
from .linalg import _matmul_options

GELU_C = 0.7978845608028654         # sqrt(2 / pi)


def _gemm_program(dtype="float32"):
    M, N, K = tex.sizes("M N K")
    i, j, k = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), dtype), tex.tensor("B", (K, N), dtype)
    return i, j, k, A, B, tex.compute("C", (i, j), tex.sum(A[i, k] * B[k, j], over=k))


def _normal(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape, dtype=dtype)


def _fused(opts, out, inputs, baseline, work, against_gemm=None, check=None):
    """The fused program against numpy's `baseline` ({label: fn}), then against tex's
    unfused program and (if given) tex's gemm alone, interleaved; ratios in the notes.
    `check(got)`: a check of tex's result of its own (argmax: ties at rounding level)."""
    fused, unfused = tex.compile(out), tex.compile(out, fuse=False)

    def run():
        return fused(*inputs)
    if check is None:
        result = compare(run, baseline, opts, unit="GFLOP/s", work=work)
    else:
        check(run())
        (label, fn), = baseline.items()
        tex_s, np_s = interleave_all([run, fn], opts.repeat, opts.min_sample_s)
        result = Result("GFLOP/s", tex_s, np_s, work, baseline=label,
                        tex_threads=tex.get_num_threads(), numpy_threads=blas_threads())
    sides = [run, lambda: unfused(*inputs)]
    if against_gemm is not None:
        gemm = tex.compile(against_gemm)
        sides.append(lambda: gemm(*inputs[:2]))
    times = interleave_all(sides, opts.repeat, opts.min_sample_s)
    result.extra["unfused/fused"] = f"{times[1] / times[0]:.2f}x"
    if against_gemm is not None:
        result.extra["fused/gemm alone"] = f"{times[0] / times[2]:.2f}x"
    result.extra["buffers"] = ", ".join(b.name for b in fused.buffers) or "none"
    return result


@workload
def matmul_rowmax_1024(opts):
    """R[i] = max over j of (A @ B)[i, j], 1024³ float32, fused into the gemm's register
    tile, vs (a @ b).max(axis=1). Notes: against tex's gemm alone and unfused."""
    i, j, k, A, B, C = _gemm_program()
    a, b = _normal((1024, 1024), 1), _normal((1024, 1024), 2)
    return _fused(_matmul_options(opts), tex.compute("R", (i,), tex.max(C[i, j], over=j)),
                  (a, b), {"(a @ b).max(axis=1)": lambda: (a @ b).max(axis=1)}, 2 * 1024**3,
                  against_gemm=C)


@workload
def matmul_rowsum_1024(opts):
    """S[i] = sum over j of (A @ B)[i, j], 1024³ float32: the sum distributes into B's
    row sums (a matrix-vector product), vs (a @ b).sum(axis=1)."""
    i, j, k, A, B, C = _gemm_program()
    a, b = _normal((1024, 1024), 1), _normal((1024, 1024), 2)
    return _fused(opts, tex.compute("S", (i,), tex.sum(C[i, j], over=j)),
                  (a, b), {"(a @ b).sum(axis=1)": lambda: (a @ b).sum(axis=1),
                           "a @ b.sum(axis=1)": lambda: a @ b.sum(axis=1)}, 2 * 1024**3)


@workload
def logits_argmax_4096x512x1000(opts):
    """A classifier's prediction: argmax over classes of x @ w (4096x512 @ 512x1000
    float32), fused, vs (x @ w).argmax(axis=1). Checked as: each chosen class's logit
    is the row's maximum to float32 rounding."""
    i, j, k, A, B, C = _gemm_program()
    x, w = _normal((4096, 512), 1), _normal((512, 1000), 2)

    def check(got):
        logits = x.astype(np.float64) @ w
        picked = logits[np.arange(len(got)), got]
        if not np.all(picked >= logits.max(axis=1) - 1e-4 * np.abs(logits).max()):
            raise AssertionError("argmax picks a class that is not the row's maximum")
    return _fused(_matmul_options(opts), tex.compute("P", (i,), tex.argmax(C[i, j], over=j)),
                  (x, w), {"(x @ w).argmax(axis=1)": lambda: (x @ w).argmax(axis=1)},
                  2 * 4096 * 512 * 1000,
                  against_gemm=C, check=check)


@workload
def matmul_bias_transpose_1024(opts):
    """T[j, i] = (A @ B)[i, j] + bias[j], 1024³ float32, written transposed from the
    register tile, vs np.add(a @ b, bias, out=c) then a contiguous transpose copy."""
    i, j, k, A, B, C = _gemm_program()
    bias = tex.tensor("bias", (C.shape[1],), "float32")
    a, b, v = _normal((1024, 1024), 1), _normal((1024, 1024), 2), _normal(1024, 3)
    c, t = np.empty((1024, 1024), np.float32), np.empty((1024, 1024), np.float32)

    def numpy_fn():
        np.matmul(a, b, out=c)
        np.add(c, v, out=c)
        np.copyto(t, c.T)
        return t
    return _fused(_matmul_options(opts), tex.compute("T", (j, i), C[i, j] + bias[j]),
                  (a, b, v), {"a @ b + bias, transposed copy": numpy_fn}, 2 * 1024**3,
                  against_gemm=C)


def _numpy_gelu_tanh(x, tmp):
    """gelu(x) with the tanh approximation, in place in x, with one temporary."""
    np.multiply(x, x, out=tmp)
    np.multiply(tmp, x, out=tmp)
    tmp *= 0.044715
    tmp += x
    tmp *= GELU_C
    np.tanh(tmp, out=tmp)
    tmp += 1.0
    tmp *= 0.5
    x *= tmp
    return x


@workload
def geglu_512x1024x4096(opts):
    """GEGLU: G = gelu_tanh(C[:, :2048]) * C[:, 2048:] with C = x @ W (512x1024 @
    1024x4096 float32): the two halves are two gemms sharing x's panel, combined in
    registers; vs numpy with one gemm, preallocated buffers and in-place ufuncs."""
    i, j, k, A, B, C = _gemm_program()
    h = 2048
    x, w = _normal((512, 1024), 1), _normal((1024, 2 * h), 2)
    c, tmp = np.empty((512, 2 * h), np.float32), np.empty((512, h), np.float32)
    left = np.empty((512, h), np.float32)

    def numpy_fn():
        np.matmul(x, w, out=c)
        np.copyto(left, c[:, :h])
        _numpy_gelu_tanh(left, tmp)
        np.multiply(left, c[:, h:], out=left)
        return left
    G = tex.compute("G", (i, j), tex.gelu(C[i, j], approximate="tanh") * C[i, j + h])
    return _fused(_matmul_options(opts), G, (x, w), {"x @ w, in-place gelu": numpy_fn},
                  2 * 512 * 1024 * 2 * h,
                  against_gemm=C)


@workload
def gelu_of_gemm_1024(opts):
    """E = gelu_tanh(sum over k of A[i, k] B[k, j]), 1024³ float32: the sum is used five
    times in gelu's formula and computed once, with gelu on the register tile; vs
    numpy's gemm and in-place gelu. Notes: against tex's gemm alone (goal: within 1.25x)."""
    i, j, k, A, B, C = _gemm_program()
    a, b = _normal((1024, 1024), 1), _normal((1024, 1024), 2)
    c, tmp = np.empty((1024, 1024), np.float32), np.empty((1024, 1024), np.float32)

    def numpy_fn():
        np.matmul(a, b, out=c)
        return _numpy_gelu_tanh(c, tmp)
    E = tex.compute("E", (i, j), tex.gelu(tex.sum(A[i, k] * B[k, j], over=k),
                                           approximate="tanh"))
    return _fused(_matmul_options(opts), E, (a, b), {"a @ b, in-place gelu": numpy_fn},
                  2 * 1024**3, against_gemm=C)


@workload
def layernorm_4096x1024(opts):
    """LayerNorm over rows of a 4096x1024 float32 matrix with tex.mean and tex.var, vs
    numpy's mean/var with keepdims and in-place arithmetic into a preallocated output."""
    R, D = tex.sizes("R D")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (R, D), "float32")
    mu = tex.compute("mu", (i,), tex.mean(X[i, j], over=j))
    var = tex.compute("var", (i,), tex.mean((X[i, j] - mu[i]) ** 2, over=j))
    Y = tex.compute("Y", (i, j), (X[i, j] - mu[i]) * tex.rsqrt(var[i] + 1e-5))
    f = tex.compile(Y)
    x = _normal((4096, 1024), 1)
    out = np.empty_like(x)

    def numpy_fn():
        m = x.mean(axis=1, keepdims=True)
        np.subtract(x, m, out=out)
        v = np.mean(np.square(out), axis=1, keepdims=True)
        v += 1e-5
        np.sqrt(v, out=v)
        np.divide(out, v, out=out)
        return out
    return compare(lambda: f(x), {"mean, var, in place": numpy_fn}, opts, unit="GB/s",
                   work=2 * x.nbytes)


@workload
def attention_head_512x64(opts):
    """One attention head: softmax(Q K^T / sqrt(d)) V with L = 512, d = 64, float32, as
    two contractions and tex.softmax, vs numpy with BLAS and in-place softmax."""
    L, D = tex.sizes("L D")
    i, j, k, d = tex.indices("i j k d")
    Q, K_, V = (tex.tensor(n, (L, D), "float32") for n in "QKV")
    S = tex.compute("S", (i, j), tex.sum(Q[i, d] * K_[j, d], over=d) * (1 / 8.0))
    P = tex.compute("P", (i, j), tex.softmax(S[i, j], over=j))
    O = tex.compute("O", (i, d), tex.sum(P[i, k] * V[k, d], over=k))
    f = tex.compile(O)
    q, kk, v = (_normal((512, 64), n) for n in (1, 2, 3))
    s = np.empty((512, 512), np.float32)

    def numpy_fn():
        np.matmul(q, kk.T, out=s)
        np.multiply(s, 1 / 8.0, out=s)
        np.subtract(s, s.max(axis=1, keepdims=True), out=s)
        np.exp(s, out=s)
        np.divide(s, s.sum(axis=1, keepdims=True), out=s)
        return s @ v
    return compare(lambda: f(q, kk, v), {"BLAS, in-place softmax": numpy_fn}, opts, unit="GFLOP/s",
                   work=4 * 512 * 512 * 64)


@workload
def conv1d_8x64x1024_w7(opts):
    """A valid 1-D convolution y[b, o, t] = sum over c, r of x[b, c, t + r] w[o, c, r]
    (batch 8, 64 -> 64 channels, length 1024, window 7) vs numpy's best: one BLAS
    product over a sliding-window view (an im2col without the copy)."""
    B_, C_, O_, T_, R_ = tex.sizes("B C O T R")
    b, c, o, t, r = tex.indices("b c o t r")
    X = tex.tensor("x", (B_, C_, T_), "float32")
    W = tex.tensor("w", (O_, C_, R_), "float32")
    Y = tex.compute("y", (b, o, t), tex.sum(X[b, c, t + r] * W[o, c, r], over=(c, r)))
    f = tex.compile(Y)
    x, w = _normal((8, 64, 1024), 1), _normal((64, 64, 7), 2)

    def numpy_fn():
        win = np.lib.stride_tricks.sliding_window_view(x, 7, axis=2)   # b, c, t, r
        return np.einsum("bctr,ocr->bot", win, w, optimize=True)
    def per_tap():
        y = np.matmul(w[:, :, 0], x[:, :, :1018])
        for r in range(1, 7):
            y += np.matmul(w[:, :, r], x[:, :, r:r + 1018])
        return y
    return compare(lambda: f(x, w), {"einsum optimize over a window view": numpy_fn,
                                     "a BLAS product per tap": per_tap}, opts, unit="GFLOP/s",
                   work=2 * 8 * 64 * 64 * 7 * (1024 - 6))


@workload
def bilinear_4096x256(opts):
    """A bilinear form per row: s[b] = x[b] . (M y[b]) for 4096 rows of 256, float32,
    as tex.einsum("bi,ij,bj->b"), vs np.einsum(..., optimize=True)."""
    x, m, y = _normal((4096, 256), 1), _normal((256, 256), 2), _normal((4096, 256), 3)
    return compare(lambda: tex.einsum("bi,ij,bj->b", x, m, y),
                   {"einsum optimize": lambda: np.einsum("bi,ij,bj->b", x, m, y, optimize=True),
                    "((x @ m) * y).sum(1)": lambda: np.einsum("bj,bj->b", x @ m, y)}, opts,
                   unit="GFLOP/s", work=2 * 4096 * 256 * 256 + 2 * 4096 * 256)


@workload
def distance_matrix_2048x2048x64(opts):
    """Squared Euclidean distances between two sets of 2048 points in 64 dimensions,
    written as sum over d of (x[i, d] - y[j, d])**2, vs numpy's BLAS formulation
    |x|² + |y|² - 2 x y^T with in-place updates."""
    P, Q, D = tex.sizes("P Q D")
    i, j, d = tex.indices("i j d")
    X, Y = tex.tensor("X", (P, D), "float32"), tex.tensor("Y", (Q, D), "float32")
    Dist = tex.compute("Dist", (i, j), tex.sum((X[i, d] - Y[j, d]) ** 2, over=d))
    f = tex.compile(Dist)
    x, y = _normal((2048, 64), 1), _normal((2048, 64), 2)
    out = np.empty((2048, 2048), np.float32)

    def numpy_fn():
        np.matmul(x, y.T, out=out)
        np.multiply(out, -2, out=out)
        np.add(out, np.einsum("id,id->i", x, x)[:, None], out=out)
        np.add(out, np.einsum("jd,jd->j", y, y)[None, :], out=out)
        return out
    return compare(lambda: f(x, y), {"|x|² + |y|² - 2 x y^T (BLAS)": numpy_fn}, opts,
                   unit="GFLOP/s", work=3 * 2048 * 2048 * 64)
