"""Row reductions against numpy's (single-threaded) reductions: each row says so and gives
the ratio with tex on one thread too, and the streaming bandwidth that bounds them."""
import functools
import statistics
from functools import partial

import numpy as np

import tex

from .harness import BLAS, compare, tex_threads, time_per_call, workload

REDUCTION_STRATEGIES = ("inner_parallel", "inner_reduction", "vector_accumulator")
_STREAM_GBS = {}        # "1T", "all": this run's streaming read bandwidth, for the notes


def _rng():
    return np.random.default_rng(0)


def _independent_sum(a, axis, dtype):
    """A row sum computed differently from a.sum (through float64 or int64, then cast)."""
    wide = np.float64 if a.dtype.kind == "f" else np.int64
    return np.add.reduce(a.astype(wide), axis=axis).astype(dtype)


def _rowsum(opts, shape, dtype, acc):
    """Row sums of a `dtype` matrix accumulated in `acc` (None: numpy's default) vs a.sum(1)."""
    R, C = tex.sizes("R C")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (R, C), dtype)
    f = tex.compile(tex.compute("S", (i,), tex.sum(X[i, j], over=j, dtype=acc)))
    rng = _rng()
    if np.dtype(dtype).kind == "f":
        a = rng.random(shape, dtype=dtype)
    else:
        a = rng.integers(-128, 128, shape, dtype=dtype)
    want_dtype = None if acc is None else np.dtype(acc)
    out = np.dtype(acc or dtype)
    return compare(partial(f, a), {"a.sum(axis=1)": partial(a.sum, axis=1, dtype=want_dtype)},
                   opts, unit="GB/s", work=a.nbytes + shape[0] * out.itemsize,
                   reference=partial(_independent_sum, a, 1, out), threads=1)


@workload
def rowsum_f32_4096x4096(opts):
    """Row sums of a 4096x4096 float32 matrix (64 MiB) vs a.sum(axis=1) (one thread)."""
    return _rowsum(opts, (4096, 4096), "float32", None)


@workload
def rowsum_i8_4096x16384_i32(opts):
    """Row sums of a 4096x16384 int8 matrix (64 MiB) into int32 vs a.sum(axis=1, dtype=int32)."""
    return _rowsum(opts, (4096, 16384), "int8", "int32")


@functools.lru_cache(maxsize=1)
def _matrix(shape, dtype):
    """One input at a time, shared by a workload and its per-strategy rows: uniform(0, 1)
    floats or int8 over its whole range (numpy's allocation: huge pages for big ones)."""
    rng = _rng()
    if np.dtype(dtype).kind == "f":
        return rng.random(shape, dtype=dtype)
    return rng.integers(-128, 128, shape, dtype=dtype)


def _row_reduction(combiner, dtype, acc=None):
    R, C = tex.sizes("R C")
    i, j = tex.indices("i j")
    X = tex.tensor("X", (R, C), dtype)
    kw = {} if acc is None else {"dtype": acc}
    return tex.compute("S", (i,), getattr(tex, combiner)(X[i, j], over=j, **kw))


def _with_strategy(defn, strategy, parallel=True):
    """`reduction_strategy(strategy)`, plus the outermost loop shared among the threads
    as the auto schedule does (`--threads 1` gives the one-thread table)."""
    s = tex.schedule(defn)
    s[defn].reduction_strategy(strategy)
    if parallel:
        s[defn].parallel(s[defn].loops[0])
    return tex.compile(s)


def _stream_note(result, nbytes):
    """Notes: the fraction of this run's measured streaming bandwidth (inputs beyond the
    caches only; run `stream_read_bandwidth` first, as the default order does). The
    64 MiB inputs are only twice the 32 MiB L3 of the reference machine: above 100%
    means part of the input was read from L3, which happens mostly on 2 threads."""
    if nbytes >= 32 * 2**20 and _STREAM_GBS.get("all") and result.tex_s:
        result.extra["of stream"] = f"{result.rate(result.tex_s) / _STREAM_GBS['all']:.0%}"
    return result


def _independent(combiner, a, acc):
    if combiner == "sum":
        return _independent_sum(a, 1, np.dtype(acc or a.dtype))
    # max/min: the sorted row's last/first element, not numpy's reduction loop
    s = np.sort(a, axis=1)
    return s[:, -1] if combiner == "max" else s[:, 0]


def _reduce(opts, combiner, shape, dtype, acc=None, strategy=None):
    a = _matrix(shape, dtype)
    defn = _row_reduction(combiner, dtype, acc)
    # in-cache inputs stay on one thread: a team costs more than the whole reduction
    # (the runtime's own rule would decide so, but its work estimate multiplies the
    # extents of sibling loops, which these nests have, and wakes the team)
    f = (tex.compile(defn) if strategy is None else
         _with_strategy(defn, strategy, parallel=a.nbytes >= 32 * 2**20))
    if combiner == "sum":
        label = "a.sum(axis=1)"
        numpy_fn = partial(a.sum, axis=1, dtype=None if acc is None else np.dtype(acc))
    else:
        label = f"a.{combiner}(axis=1)"
        numpy_fn = partial(getattr(a, combiner), axis=1)
    out_bytes = shape[0] * np.dtype(acc or dtype).itemsize
    result = compare(partial(f, a), {label: numpy_fn}, opts, unit="GB/s",
                     work=a.nbytes + out_bytes, threads=1,
                     reference=partial(_independent, combiner, a, acc))
    return _stream_note(result, a.nbytes)


@workload
def stream_read_bandwidth(opts):
    """Streaming read bandwidth of this machine: row sums of a 256 MiB float32 matrix by
    the fastest of tex's schedules (auto and each strategy; see notes), against numpy's
    np.add.reduce(a, axis=1) (one thread) for scale. Notes: the 1-thread rate, the schedule."""
    a = _matrix((8192, 8192), "float32")
    defn = _row_reduction("sum", "float32")
    candidates = {"auto": tex.compile(defn)}
    candidates.update((st, _with_strategy(defn, st)) for st in REDUCTION_STRATEGIES)
    quick = {}
    for name, f in candidates.items():
        f(a)
        quick[name] = statistics.median(time_per_call(partial(f, a), 1) for _ in range(3))
    best = min(quick, key=quick.get)
    f = candidates[best]
    result = compare(partial(f, a), {"np.add.reduce": partial(np.add.reduce, a, axis=1)},
                     opts, unit="GB/s", work=a.nbytes, threads=1, same_threads=False,
                     reference=partial(_independent_sum, a, 1, np.float32))
    with tex_threads(1):
        one = statistics.median(time_per_call(partial(f, a), 2) for _ in range(opts.repeat))
    _STREAM_GBS.update({"all": result.rate(result.tex_s), "1T": result.rate(one)})
    result.extra.update({"1T GB/s": _STREAM_GBS["1T"], "schedule": best})
    return result


# operands in other layouts (tex/layout.py, schedule/order.py's stream_reads)
def _layout_case(opts, subscripts, operands, baseline, label, threads=1):
    total = sum(a.nbytes for a in operands)
    return compare(partial(tex.einsum, subscripts, *operands), {label: baseline}, opts,
                   unit="GB/s", work=total, threads=threads,
                   reference=lambda: np.einsum(subscripts, *[a.astype(np.float64)
                                                             for a in operands]
                                               ).astype(np.float32))


@workload
def layout_row_sums_fortran_4096x1024(opts):
    """tex.einsum("ij->i") over a Fortran-ordered float32[4096x1024] (16 MiB) vs
    a.sum(axis=1): the kernel of `ji->i` runs on its row-major transpose."""
    a = np.asfortranarray(_rng().random((4096, 1024), dtype=np.float32))
    return _layout_case(opts, "ij->i", [a], partial(a.sum, axis=1), "a.sum(axis=1)")


@workload
def layout_sum_middle_axis_transposed_256x64x128(opts):
    """tex.einsum("bij->bi") over float32[64x128x256].transpose(2, 0, 1) (8 MiB: its
    b axis has unit stride) vs x.sum(axis=2): `ijb->bi`, b in blocks inside the sum."""
    x = _rng().random((64, 128, 256), dtype=np.float32).transpose(2, 0, 1)
    return _layout_case(opts, "bij->bi", [x], partial(x.sum, axis=2), "x.sum(axis=2)")


@workload
def layout_row_times_fortran_1x4096x4096(opts):
    """tex.einsum("k,kj->j") of float32[4096] and a Fortran-ordered float32[4096x4096]
    (64 MiB) vs x @ b: the kernel of `k,jk->j` (dot products along b's columns)."""
    rng = _rng()
    x, b = rng.random(4096, dtype=np.float32), np.asfortranarray(
        rng.random((4096, 4096), dtype=np.float32))
    return _layout_case(opts, "k,kj->j", [x, b], partial(np.matmul, x, b), "x @ b",
                        threads=BLAS)


# (name, docstring, combiner, shape, dtype, accumulator)
_REDUCE_CASES = [
    ("reduce_i8_384x512", "int8[384x512] -> int32 row sums (the seed's reference case, in "
     "cache) vs a.sum(axis=1, dtype=np.int32).", "sum", (384, 512), "int8", "int32"),
    ("reduce_i8_4096x16384", "int8[4096x16384] (64 MiB) -> int32 row sums vs "
     "a.sum(axis=1, dtype=np.int32).", "sum", (4096, 16384), "int8", "int32"),
    ("reduce_f32_4096x4096", "float32[4096x4096] (64 MiB) row sums vs a.sum(axis=1).",
     "sum", (4096, 4096), "float32", None),
    ("reduce_f32_384x512", "float32[384x512] row sums (in cache) vs a.sum(axis=1).",
     "sum", (384, 512), "float32", None),
    ("reduce_max_f32_4096x4096", "float32[4096x4096] (64 MiB) row maxima vs a.max(axis=1).",
     "max", (4096, 4096), "float32", None),
]


def _register_reductions():
    """Each case with the auto schedule (`tex.compile(S)`), then one row per strategy,
    e.g. `reduce_i8_384x512[vector_accumulator]`. numpy's reductions run on one thread:
    the notes give the ratio with tex on one thread as well."""
    from .harness import WORKLOADS
    for name, doc, combiner, shape, dtype, acc in _REDUCE_CASES:
        for strategy in (None, *REDUCTION_STRATEGIES):
            def run_case(opts, combiner=combiner, shape=shape, dtype=dtype, acc=acc,
                         strategy=strategy):
                return _reduce(opts, combiner, shape, dtype, acc, strategy)
            if strategy is None:
                run_case.__doc__ = doc + " Auto schedule."
                WORKLOADS[name] = run_case
            else:
                run_case.__doc__ = (doc + f" reduction_strategy({strategy!r}); the outer "
                                    "loop parallel when the input exceeds the caches.")
                WORKLOADS[f"{name}[{strategy}]"] = run_case


_register_reductions()
