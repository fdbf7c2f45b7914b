"""Matrix products against numpy's BLAS (on the same thread count), and the thread
scaling of an elementwise kernel."""
from functools import partial

import numpy as np

import tex

from .harness import Options, compare, interleave_all, tex_threads, workload
from .peak import peak_notes


def _rng():
    return np.random.default_rng(0)


def _operand(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape, dtype=dtype)
    return rng.integers(-128, 128, shape, dtype=dtype)


def _matmul_options(opts, max_repeat=None):
    """Samples of at least 200 ms (the first calls after a pause, with threads asleep
    and clocks down, are slower for both libraries), at most `max_repeat` rounds."""
    opts = Options(**{**vars(opts), "min_sample_s": max(opts.min_sample_s, 0.2)})
    if max_repeat:
        opts = Options(**{**vars(opts), "repeat": min(opts.repeat, max_repeat)})
    return opts


def exact_reference(a, b, acc):
    """a @ b with integer products summed exactly (int64), cast to `acc`: the check of
    an integer matmul, independent of both the tex kernel and the float BLAS route."""
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(acc)


def _matmul(opts, m, k, n, dtype="float32", acc=None, max_repeat=None, parts=False):
    """C[m x n] = A[m x k] @ B[k x n] in index notation with the auto schedule vs a @ b
    (BLAS); `acc`: products and sum in that integer dtype, against the float64 BLAS route
    (exact while k * 128 * 128 < 2**53) and numpy's own integer matmul (naive: no BLAS)."""
    M, N, K = tex.sizes("M N K")
    i, j, kk = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), dtype), tex.tensor("B", (K, N), dtype)
    rng = _rng()
    a, b = _operand(rng, (m, k), dtype), _operand(rng, (k, n), dtype)
    if acc is None:
        body = A[i, kk] * B[kk, j]
        baselines = {"a @ b": partial(np.matmul, a, b)}
        reference = None
    else:
        body = A[i, kk].astype(acc) * B[kk, j].astype(acc)
        assert k * 128 * 128 < 2**53, "the float64 route is exact only below 2**53"

        def f64_route():
            return (a.astype(np.float64) @ b.astype(np.float64)).astype(acc)

        def int_naive():
            return np.matmul(a.astype(acc), b.astype(acc))
        baselines = {"f64 BLAS route": f64_route, "int matmul (naive)": int_naive}
        reference = partial(exact_reference, a, b, acc)
    f = tex.compile(tex.compute("C", (i, j), tex.sum(body, over=kk, dtype=acc)))
    result = compare(partial(f, a, b), baselines, _matmul_options(opts, max_repeat),
                     unit="GFLOP/s", work=2 * m * n * k, reference=reference)
    if parts:
        result.extra["parts"] = auto_parts(f, {"M": m, "K": k, "N": n})
    return peak_notes(result, dtype)


def _square_matmul(name, n, dtype="float32", max_repeat=None, note=""):
    """Register `name`: an n x n x n `_matmul`."""
    def run_case(opts):
        return _matmul(opts, n, n, n, dtype, max_repeat=max_repeat)
    run_case.__name__ = name
    run_case.__doc__ = (f"C = A @ B in index notation, {n}x{n} {dtype}, auto schedule, vs "
                        f"a @ b (BLAS, same threads).{note}")
    return workload(run_case)


_square_matmul("matmul_f32_256", 256)
_square_matmul("matmul_f32_512", 512)
_square_matmul("matmul_f32_1000", 1000, note=" 1000 is not a multiple of any tile.")
_square_matmul("matmul_f32_1023", 1023, note=" One short of 1024: no cliff at non-multiples.")
_square_matmul("matmul_f32_1024", 1024)
_square_matmul("matmul_f32_2048", 2048, max_repeat=3)
_square_matmul("matmul_f64_1024", 1024, "float64",
               note=" Its fraction is of the measured float64 FMA peak.")


@workload
def matmul_i8_i32_1024(opts):
    """C = A @ B, 1024x1024 int8 operands, products and sums in int32, auto schedule, vs
    the float64 BLAS route (a.astype(f64) @ b.astype(f64)).astype(i32), exact here; numpy's
    int32 matmul (no BLAS) is a naive note. Checked against an int64 product."""
    return _matmul(opts, 1024, 1024, 1024, "int8", acc="int32", max_repeat=3)


@workload
def batched_bmk_bkn_32x128x128x128(opts):
    """tex.einsum("bmk,bkn->bmn") on 32 float32 128x128 matrix pairs vs np.matmul (a @ b
    over the batch) and np.einsum(..., optimize=True)."""
    rng = _rng()
    a, b = (rng.standard_normal((32, 128, 128), dtype=np.float32) for _ in range(2))
    result = compare(partial(tex.einsum, "bmk,bkn->bmn", a, b),
                     {"a @ b": partial(np.matmul, a, b),
                      "einsum optimize": partial(np.einsum, "bmk,bkn->bmn", a, b,
                                                 optimize=True)},
                     _matmul_options(opts), unit="GFLOP/s", work=2 * 32 * 128**3)
    return peak_notes(result, np.float32)


@workload
def splitk_123x51234x456(opts):
    """C[123x456] = A[123x51234] @ B[51234x456] float32 with the auto schedule vs a @ b.
    Split-K (several parts of K on several threads) happens only with few blocks of rows
    per thread; `parts` in the notes says how many this run's kernel used (one part on
    one thread: then the row is not a split-K figure)."""
    return _matmul(opts, 123, 51234, 456, max_repeat=3, parts=True)


@workload
def splitk_4x65536x512(opts):
    """C[4x512] = A[4x65536] @ B[65536x512] float32, auto schedule, vs a @ b: few rows and
    a long K, where the auto schedule splits K into four parts a thread (see `parts`)."""
    return _matmul(opts, 4, 65536, 512, max_repeat=5, parts=True)


def auto_parts(f, sizes):
    """The parts of K the call path gives compiled matmul `f` at these sizes ({size name:
    value}) and tex's thread count, in a loop (as benches call): the most over the
    split-K rules of the nests such a call runs (the specializations whose conditions
    hold: a few rows split K by their rule, the blocked schedule by its blocks); 1 when
    they have no split-K."""
    import tex.symbolic as sym

    from tex.backends.llvm import runtime
    from tex.expr import AutoParts
    from tex.scheduler.ir import Guard, Loop

    def value(e):
        e = sym.sympify(e)
        return e.subs({s: sizes[str(s)] for s in e.free_symbols if str(s) in sizes})

    def run(node):
        """The split-K AutoParts in the loop extents of the nests the call runs."""
        if isinstance(node, Guard) and node.choice and not bool(value(node.cond)):
            return
        if isinstance(node, Loop):
            yield from (p for p in sym.sympify(node.extent).free_symbols
                        if isinstance(p, AutoParts) and p.rule in runtime.PART_RULES and
                        p.rule.startswith("split_k"))
        for child in getattr(node, "body", ()):
            yield from run(child)
    parts = [eval(runtime.PART_RULES[p.rule].format(                  # noqa: S307 - the
                  t=tex.get_num_threads(), rows=int(value(p.rows)),     # runtime's own
                  length=int(value(p.length)), block=p.block),          # rules
                  {"_looping": lambda t: True})
             for p in set(run(f.kernel))]
    return max(parts, default=1)


@workload
def matvec_1x4096x4096(opts):
    """A row times a matrix, 1x4096 @ 4096x4096 float32 (a weak spot), vs a @ b."""
    return _matmul(opts, 1, 4096, 4096, max_repeat=5)


@workload
def matvec_1x1000x1000(opts):
    """A row times a matrix, 1x1000 @ 1000x1000 float32, vs a @ b: K under 1024 a thread,
    split across the threads only for calls that come as in a loop, as here (`parts`)."""
    return _matmul(opts, 1, 1000, 1000, max_repeat=5, parts=True)


@workload
def matmul_tall_2048x3(opts):
    """C[2048x2048] = A[2048x3] @ B[3x2048] float32 (a rank-3 product: K = 3) vs a @ b."""
    return _matmul(opts, 2048, 3, 2048, max_repeat=5)


def _narrow(name, cols):
    def run_case(opts):
        return _matmul(opts, 1024, 1024, cols, max_repeat=5)
    run_case.__name__ = name
    run_case.__doc__ = (f"C[1024x{cols}] = A[1024x1024] @ B[1024x{cols}] float32 (few "
                        "columns, a weak spot) vs a @ b.")
    return workload(run_case)


for _cols in (8, 16, 32, 60):
    _narrow(f"matmul_narrow_1024x1024x{_cols}", _cols)


def _few_rows(name, rows, cols):
    def run_case(opts):
        return _matmul(opts, rows, 1000, cols, max_repeat=5)
    run_case.__name__ = name
    run_case.__doc__ = (f"C[{rows}x{cols}] = A[{rows}x1000] @ B[1000x{cols}] float32 (a few "
                        "rows, B read in place; columns no tile divides) vs a @ b.")
    return workload(run_case)


for _rows, _cols in ((5, 48), (3, 100)):
    _few_rows(f"matmul_few_rows_{_rows}x1000x{_cols}", _rows, _cols)


@workload
def matvec_narrow_1x4000x32(opts):
    """A row times a matrix of 32 columns, 1x4000 @ 4000x32 float32 (one register tile's
    width or less: the tile stays in registers for all of K), vs a @ b."""
    return _matmul(opts, 1, 4000, 32, max_repeat=5)


def _linear(opts, m, k, n, max_repeat=None):
    """A linear layer's x @ W.T, C[i, j] = sum_k X[i, k] W[j, k] with a symbolic number
    of rows (both operands read along k), float32, vs x @ w.T."""
    M, N, K = tex.sizes("M N K")
    i, j, kk = tex.indices("i j k")
    X, W = tex.tensor("X", (M, K), "float32"), tex.tensor("W", (N, K), "float32")
    rng = _rng()
    x, w = _operand(rng, (m, k), "float32"), _operand(rng, (n, k), "float32")
    f = tex.compile(tex.compute("C", (i, j), tex.sum(X[i, kk] * W[j, kk], over=kk)))
    result = compare(partial(f, x, w), {"x @ w.T": lambda: x @ w.T},
                     _matmul_options(opts, max_repeat), unit="GFLOP/s", work=2 * m * n * k)
    return peak_notes(result, "float32")


@workload
def linear_1x1024x1024(opts):
    """One row through a linear layer, x @ W.T with x 1x1024 and W 1024x1024 float32 (dot
    products by columns: each row of W read once), vs x @ w.T."""
    return _linear(opts, 1, 1024, 1024, max_repeat=5)


@workload
def linear_5x512x4096(opts):
    """Five rows through a linear layer, x @ W.T with x 5x512 and W 4096x512 float32, vs
    x @ w.T."""
    return _linear(opts, 5, 512, 4096, max_repeat=5)


@workload
def threads_scale_scaled_add_64mib(opts):
    """y = 2*x + 1 over 64 MiB of float32 (a parallel elementwise kernel, into its own
    out= buffer) vs numpy's np.multiply(x, 2, out=o); np.add(o, 1, out=o) (one thread, its
    own buffer). Notes: tex on one thread, and the speedup of tex's threads. The rate counts
    bytes read + written."""
    n = 16 * 1024 * 1024
    N = tex.sizes("N")
    i = tex.indices("i")
    X = tex.tensor("X", (N,), "float32")
    f = tex.compile(tex.compute("Y", (i,), X[i] * 2 + 1))
    x = _rng().standard_normal(n, dtype=np.float32)
    y, o = np.empty_like(x), np.empty_like(x)

    def numpy_fn():
        np.multiply(x, np.float32(2), out=o)
        return np.add(o, np.float32(1), out=o)
    result = compare(partial(f, x, out=y), {"np.multiply, np.add": numpy_fn}, opts, unit="GB/s",
                     work=2 * x.nbytes, reference=lambda: (2 * x.astype(np.float64) + 1).astype(np.float32),
                     threads=1, same_threads=False)
    with tex_threads(1):
        one, = interleave_all([partial(f, x, out=y)], opts.repeat, opts.min_sample_s)
    result.extra["tex 1T GB/s"] = result.rate(one)
    result.extra["thread speedup"] = f"{one / result.tex_s:.2f}x"
    return result

