"""The benchmark harness behind `python -m tex bench`.

The machines are shared and noisy, so every figure is a ratio against numpy measured in
the same process and the same minutes: tex and numpy samples alternate (t, n, t, n, ...)
for several rounds and the medians are compared. A sample runs enough calls to last at
least `min_sample_s`, so that timer resolution and one-off hiccups do not dominate.

A workload is a function registered with `@workload`; its name is the function's name and
its docstring the description. It gets the `Options` and returns a `Result`, usually from
`compare(tex_fn, numpy_fn, ...)`. Later issues add theirs the same way:

    @workload
    def rowsum_f32_4096x4096(opts):
        "Row sums of a float32 matrix against a.sum(axis=1)."
        ...
        return compare(lambda: f(a), lambda: a.sum(axis=1), opts, unit="GB/s", work=a.nbytes)

This module uses only tex's public API, as an outside user would, except for the FMA peak
kernel: plain llvmlite IR compiled for tex's host target (tex.backends.llvm.jit).
"""
import contextlib
import datetime
import functools
import gc
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import namedtuple
from dataclasses import asdict, dataclass, field
from functools import partial

import numpy as np

import tex

THROUGHPUT_UNITS = ("GFLOP/s", "GB/s")      # work / time / 1e9
LATENCY_UNITS = {"ns/call": 1e9, "ms": 1e3}


@dataclass
class Options:
    repeat: int = 7                 # interleaved rounds (or fresh processes) per workload
    min_sample_s: float = 0.002     # each timed sample runs calls for at least this long


@dataclass
class Result:
    """One workload's medians (seconds per call). `numpy_s` is None when numpy has no
    counterpart (compile times); `work` is FLOPs or bytes per call for throughput units."""
    unit: str
    tex_s: float = None
    numpy_s: float = None
    work: float = None
    extra: dict = field(default_factory=dict)
    name: str = ""
    error: str = None

    @property
    def ratio(self):
        """numpy time / tex time: above 1 means tex is faster."""
        if self.tex_s and self.numpy_s:
            return self.numpy_s / self.tex_s
        return None

    def rate(self, seconds):
        """`seconds` expressed in this result's unit."""
        if seconds is None:
            return None
        if self.unit in THROUGHPUT_UNITS:
            return self.work / seconds / 1e9
        return seconds * LATENCY_UNITS[self.unit]

    def as_dict(self):
        d = asdict(self)
        d.update(ratio=self.ratio, tex_rate=self.rate(self.tex_s),
                 numpy_rate=self.rate(self.numpy_s))
        return d


WORKLOADS = {}


def workload(fn):
    """Register `fn(opts) -> Result` under its function name."""
    WORKLOADS[fn.__name__] = fn
    return fn


# ---------------------------------------------------------------- timing

@contextlib.contextmanager
def _gc_paused():
    # a collection inside one sample would be charged to whichever side it hit
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def time_per_call(fn, calls):
    """Seconds per call of `fn()` over `calls` back-to-back calls."""
    it = itertools.repeat(None, calls)
    t0 = time.perf_counter()
    for _ in it:
        fn()
    return (time.perf_counter() - t0) / calls


def calls_per_sample(fn, min_sample_s):
    """How many calls of `fn` make one sample last at least `min_sample_s`."""
    calls = 1
    while True:
        per_call = time_per_call(fn, calls)
        if per_call * calls >= min_sample_s:
            return calls
        calls = max(2 * calls, int(1.2 * min_sample_s / max(per_call, 1e-9)))


# OpenBLAS's worker threads spin for about 110 ms after each call before they sleep
# (measured here from /proc); on a 2-core machine they take a core from whatever runs next (measured:
# a 2-thread tex matmul at 199 GFLOP/s right after numpy, 314 after a pause). tex's
# threads sleep at once (OMP_WAIT_POLICY=PASSIVE). With more than one thread each
# sample therefore starts after this pause, so neither library runs against the other's
# leftover threads.
SETTLE_S = 0.25


def interleave(tex_fn, numpy_fn, rounds, min_sample_s=0.002):
    """Median seconds per call of each, sampled alternately (t, n, t, n, ...)."""
    n_tex = calls_per_sample(tex_fn, min_sample_s)
    n_np = calls_per_sample(numpy_fn, min_sample_s)
    settle = SETTLE_S if tex.get_num_threads() > 1 else 0.0
    tex_samples, np_samples = [], []
    with _gc_paused():
        for _ in range(rounds):
            time.sleep(settle)
            tex_samples.append(time_per_call(tex_fn, n_tex))
            time.sleep(settle)
            np_samples.append(time_per_call(numpy_fn, n_np))
    return statistics.median(tex_samples), statistics.median(np_samples)


def check_close(got, want):
    """tex must give numpy's answer (dtype, shape, values) before it is timed: exact for
    integers and bools, to a float tolerance scaled by the result's magnitude otherwise."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        raise AssertionError(f"dtype {got.dtype}, numpy gives {want.dtype}")
    if want.dtype.kind in "fc":
        rtol = {2: 1e-2, 4: 1e-4}.get(want.dtype.itemsize, 1e-9)
        atol = rtol * float(np.max(np.abs(want), initial=0.0))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


def compare(tex_fn, numpy_fn, opts, *, unit, work=None):
    """Check that tex_fn() matches numpy_fn() (the first calls also compile), then time both."""
    check_close(tex_fn(), numpy_fn())
    tex_s, numpy_s = interleave(tex_fn, numpy_fn, opts.repeat, opts.min_sample_s)
    return Result(unit, tex_s, numpy_s, work)


# ---------------------------------------------------------------- workloads

def _rng():
    return np.random.default_rng(0)


@workload
def call_overhead_einsum_i_i_8(opts):
    """tex.einsum("i,i->") on 8-element float32 arrays (a cached kernel) vs numpy.einsum."""
    x, y = _rng().standard_normal((2, 8), dtype=np.float32)
    return compare(partial(tex.einsum, "i,i->", x, y), partial(np.einsum, "i,i->", x, y),
                   opts, unit="ns/call")


@workload
def call_overhead_compiled_8(opts):
    """A compiled dot product called as f(x=..., y=...) on 8 float32 elements vs numpy.einsum."""
    n = tex.sizes("n")
    i = tex.indices("i")
    X, Y = tex.tensor("x", (n,), "float32"), tex.tensor("y", (n,), "float32")
    f = tex.compile(tex.compute("dot", (), tex.sum(X[i] * Y[i], over=i)))
    x, y = _rng().standard_normal((2, 8), dtype=np.float32)
    return compare(partial(f, x=x, y=y), partial(np.einsum, "i,i->", x, y), opts,
                   unit="ns/call")


# The child times `import tex` (numpy already loaded) and the first einsum call, which
# compiles the kernel or loads it from TEX_CACHE_DIR. 64x64 keeps the run itself negligible.
_FIRST_CALL = """
import time, numpy as np
t0 = time.perf_counter()
import tex
t1 = time.perf_counter()
a = np.ones((64, 64), np.float32)
tex.einsum("ik,kj->ij", a, a)
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def _fresh_process_first_call(cache_dir):
    """(import seconds, first-call seconds) in a new interpreter using `cache_dir`."""
    env = dict(os.environ, TEX_CACHE_DIR=cache_dir)
    proc = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        err = proc.stderr.strip()
        raise RuntimeError(f"child process failed: {err.splitlines()[-1] if err else ''}"
                           f"\n{err[-2000:]}")
    import_s, first_s = map(float, proc.stdout.split()[-2:])
    return import_s, first_s


def _first_call_result(runs):
    return Result("ms", tex_s=statistics.median(r[1] for r in runs),
                  extra={"import_ms": 1e3 * statistics.median(r[0] for r in runs)})


@workload
def compile_cold_matmul_f32(opts):
    """First tex.einsum("ik,kj->ij") float32 call in a new process with an empty kernel
    cache: parsing, lowering, LLVM O3 and codegen. `import_ms` is `import tex` alone."""
    runs = []
    for _ in range(opts.repeat):
        with tempfile.TemporaryDirectory(prefix="tex-bench-cache-") as cache:
            runs.append(_fresh_process_first_call(cache))
    return _first_call_result(runs)


@workload
def compile_warm_disk_matmul_f32(opts):
    """The same first call in a new process whose kernel cache on disk already holds the
    kernel (filled by one untimed process first)."""
    with tempfile.TemporaryDirectory(prefix="tex-bench-cache-") as cache:
        _fresh_process_first_call(cache)
        runs = [_fresh_process_first_call(cache) for _ in range(opts.repeat)]
    return _first_call_result(runs)


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
    return compare(partial(f, a), partial(a.sum, axis=1, dtype=want_dtype), opts,
                   unit="GB/s", work=a.nbytes + shape[0] * np.dtype(acc or dtype).itemsize)


@workload
def rowsum_f32_4096x4096(opts):
    """Row sums of a 4096x4096 float32 matrix (64 MiB) vs a.sum(axis=1)."""
    return _rowsum(opts, (4096, 4096), "float32", None)


@workload
def rowsum_i8_4096x16384_i32(opts):
    """Row sums of a 4096x16384 int8 matrix (64 MiB) into int32 vs a.sum(axis=1, dtype=int32)."""
    return _rowsum(opts, (4096, 16384), "int8", "int32")


# ---------------------------------------------------------------- matmul and the FMA peak

_FMA_CHAINS = 16        # independent accumulators: more than FMA latency x FMA ports


def _fma_peak_ir(lanes):
    """LLVM IR of `float fma_peak(i64 n, float x, float y)`: n >= 1 iterations of
    _FMA_CHAINS independent `acc = fma(acc, x, y)` on <lanes x float>, returning the sum of
    every accumulator's lanes so that no chain is dead. On x86 also `i64 clock_chain(i64 n,
    i64 y)`: n iterations of 64 dependent register adds in inline asm, one cycle each."""
    from llvmlite import ir
    f32, i64 = ir.FloatType(), ir.IntType(64)
    vec = ir.VectorType(f32, lanes)
    mod = ir.Module("tex_bench_peak")
    fma = ir.Function(mod, ir.FunctionType(vec, [vec] * 3), f"llvm.fma.v{lanes}f32")
    reduce = ir.Function(mod, ir.FunctionType(f32, [f32, vec]),
                         f"llvm.vector.reduce.fadd.v{lanes}f32")
    fn = ir.Function(mod, ir.FunctionType(f32, [i64, f32, f32]), "fma_peak")
    n, x, y = fn.args
    entry, loop, done = (fn.append_basic_block(b) for b in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)

    def splat(v):
        undef = ir.Constant(vec, ir.Undefined)
        one = b.insert_element(undef, v, ir.Constant(ir.IntType(32), 0))
        return b.shuffle_vector(one, undef, ir.Constant(ir.VectorType(ir.IntType(32), lanes),
                                                         [0] * lanes))
    vx, vy = splat(x), splat(y)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    phis = [b.phi(vec) for _ in range(_FMA_CHAINS)]
    accs = [b.call(fma, [acc, vx, vy]) for acc in phis]
    for c, (acc, nxt) in enumerate(zip(phis, accs)):
        acc.add_incoming(ir.Constant(vec, [1.0 + c / 64] * lanes), entry)
        acc.add_incoming(nxt, loop)
    i_next = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(i_next, loop)
    b.cbranch(b.icmp_unsigned("<", i_next, n), loop, done)
    b.position_at_end(done)
    total = accs[0]
    for acc in accs[1:]:
        total = b.fadd(total, acc)
    b.ret(b.call(reduce, [ir.Constant(f32, 0.0), total]))

    if _is_x86():
        fn = ir.Function(mod, ir.FunctionType(i64, [i64, i64]), "clock_chain")
        n, y = fn.args
        entry, loop, done = (fn.append_basic_block(b) for b in ("entry", "loop", "done"))
        b = ir.IRBuilder(entry)
        b.branch(loop)
        b.position_at_end(loop)
        i, acc = b.phi(i64), b.phi(i64)
        i.add_incoming(ir.Constant(i64, 0), entry)
        acc.add_incoming(y, entry)
        nxt = b.asm(ir.FunctionType(i64, [i64, i64]), "\n\t".join(["add $1, $0"] * 64),
                    "=r,r,0,~{flags}", [y, acc], side_effect=False)
        acc.add_incoming(nxt, loop)
        i_next = b.add(i, ir.Constant(i64, 1))
        i.add_incoming(i_next, loop)
        b.cbranch(b.icmp_unsigned("<", i_next, n), loop, done)
        b.position_at_end(done)
        b.ret(nxt)
    return str(mod)


def _host():
    from tex.backends.llvm import jit
    return jit.Host.get()


def _is_x86():
    return _host().triple.startswith(("x86_64", "i686", "i386"))


_FmaKernels = namedtuple("_FmaKernels", "peak clock flops_per_iter asm engine")


@functools.lru_cache(maxsize=1)
def _fma_kernels():
    """fma_peak and clock_chain (None off x86) as ctypes functions, the FLOPs of one
    fma_peak iteration, the assembly, and the engine that holds the code: compiled at O3
    for this host's CPU and features, as tex's own kernels are."""
    import ctypes

    import llvmlite.binding as llvm
    from tex.backends.llvm import jit
    host = _host()
    llvm.initialize_native_asmparser()     # for the inline asm of clock_chain
    lanes = 16 if host.has_feature("avx512f") else 8 if host.has_feature("avx") else 4
    mod = jit.optimized_module(_fma_peak_ir(lanes))
    asm = host.machine.emit_assembly(mod)
    engine = llvm.create_mcjit_compiler(mod, host.new_machine())
    engine.finalize_object()
    # CFUNCTYPE calls release the GIL: threads calling it run in parallel
    peak = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float, ctypes.c_float)(
        engine.get_function_address("fma_peak"))
    clock = None
    if _is_x86():
        clock = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(
            engine.get_function_address("clock_chain"))
    return _FmaKernels(peak, clock, 2 * lanes * _FMA_CHAINS, asm, engine)


def _concurrent_seconds(fn, threads):
    """Wall seconds of `threads` concurrent calls of fn(), from a common start."""
    import threading
    start = threading.Barrier(threads + 1)

    def worker():
        start.wait()
        fn()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    return time.perf_counter() - t0


@functools.lru_cache(maxsize=None)
def fma_peak(threads, samples=9, sample_s=0.05):
    """Measured FP32 FMA peak of this machine on `threads` threads, once per process:
    (seconds of the fastest sample, FLOPs of one sample on all threads). The fastest, not
    the median: it is a peak, and other processes on the cores only ever lower it."""
    kernels = _fma_kernels()
    peak, flops_per_iter = kernels.peak, kernels.flops_per_iter
    iters = 1 << 16
    while True:                                 # iterations for one thread's sample_s
        t0 = time.perf_counter()
        peak(iters, 0.999999, 1e-6)
        elapsed = time.perf_counter() - t0
        if elapsed >= sample_s / 4:
            break
        iters *= 4
    iters = max(1, int(iters * sample_s / elapsed))
    run = partial(peak, iters, 0.999999, 1e-6)
    seconds = min(_concurrent_seconds(run, threads) for _ in range(samples))
    return seconds, threads * iters * flops_per_iter


def fma_peak_gflops(threads):
    seconds, flops = fma_peak(threads)
    return flops / seconds / 1e9


@functools.lru_cache(maxsize=1)
def clock_ghz():
    """One core's clock in GHz from a chain of dependent adds (one cycle each; the fastest
    of 5 runs), or None off x86."""
    clock = _fma_kernels().clock
    if clock is None:
        return None
    n = 1 << 20
    clock(n, 1)
    seconds = min(time_per_call(partial(clock, n, 1), 1) for _ in range(5))
    return 64 * n / seconds / 1e9


@workload
def fma_peak_f32(opts):
    """This machine's measured FP32 peak: 16 independent chains of vector FMAs
    (llvm.fma on the host's widest float vector, <16 x float> with AVX-512) from an
    llvmlite kernel, called through ctypes on tex.get_num_threads() Python threads at
    once (rate), and on one thread (notes). The matmul rows give their fraction of it."""
    threads = tex.get_num_threads()
    asm = _fma_kernels().asm
    seconds, flops = fma_peak(threads)
    result = Result("GFLOP/s", tex_s=seconds, work=flops,
                    extra={"threads": threads, "1T GFLOP/s": fma_peak_gflops(1)})
    ghz = clock_ghz()
    if ghz:
        result.extra.update({"GHz": round(ghz, 2),
                             "1T FLOP/cycle": fma_peak_gflops(1) / ghz,
                             "FLOP/cycle/core": result.rate(seconds) / threads / ghz})
    fma = next((ln.split() for ln in asm.splitlines() if "vfmadd" in ln), None)
    result.extra["asm"] = f"{fma[0]} {fma[-1].strip('%')[:3]}" if fma else "no vfmadd"
    return result


def _peak_notes(result, dtype):
    """Fractions of the measured FMA peak at tex's thread count (float64: half the lanes);
    integer matmuls have no float FMA peak to compare with."""
    dtype = np.dtype(dtype)
    if dtype.kind != "f" or not result.tex_s:
        return result
    peak = fma_peak_gflops(tex.get_num_threads()) * 4 / dtype.itemsize
    result.extra["peak_fraction"] = result.rate(result.tex_s) / peak
    if result.numpy_s:
        result.extra["numpy_peak_fraction"] = result.rate(result.numpy_s) / peak
    return result


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


def _matmul(opts, m, k, n, dtype="float32", acc=None, max_repeat=None):
    """C[m x n] = A[m x k] @ B[k x n] in index notation with the auto schedule vs
    np.matmul; `acc`: products and sum in that dtype (numpy: both operands cast first)."""
    M, N, K = tex.sizes("M N K")
    i, j, kk = tex.indices("i j k")
    A, B = tex.tensor("A", (M, K), dtype), tex.tensor("B", (K, N), dtype)
    if acc is None:
        body, numpy_fn = A[i, kk] * B[kk, j], np.matmul
    else:
        body = A[i, kk].astype(acc) * B[kk, j].astype(acc)

        def numpy_fn(x, y):
            return np.matmul(x.astype(acc), y.astype(acc))
    f = tex.compile(tex.compute("C", (i, j), tex.sum(body, over=kk, dtype=acc)))
    rng = _rng()
    a, b = _operand(rng, (m, k), dtype), _operand(rng, (k, n), dtype)
    result = compare(partial(f, a, b), partial(numpy_fn, a, b),
                     _matmul_options(opts, max_repeat), unit="GFLOP/s", work=2 * m * n * k)
    return _peak_notes(result, dtype)


def _square_matmul(name, n, dtype="float32", max_repeat=None, note=""):
    """Register `name`: an n x n x n `_matmul`."""
    def run_case(opts):
        return _matmul(opts, n, n, n, dtype, max_repeat=max_repeat)
    run_case.__name__ = name
    run_case.__doc__ = (f"C = A @ B in index notation, {n}x{n} {dtype}, auto schedule, vs "
                        f"np.matmul (BLAS).{note}")
    return workload(run_case)


_square_matmul("matmul_f32_256", 256)
_square_matmul("matmul_f32_512", 512)
_square_matmul("matmul_f32_1000", 1000, note=" 1000 is not a multiple of any tile.")
_square_matmul("matmul_f32_1023", 1023, note=" One short of 1024: no cliff at non-multiples.")
_square_matmul("matmul_f32_1024", 1024)
_square_matmul("matmul_f32_2048", 2048, max_repeat=3)
_square_matmul("matmul_f64_1024", 1024, "float64",
               note=" Its peak is half the float32 FMA peak (half the lanes).")


@workload
def matmul_i8_i32_1024(opts):
    """C = A @ B, 1024x1024 int8 operands, products and sums in int32, auto schedule, vs
    np.matmul(a.astype(np.int32), b.astype(np.int32)): numpy has no int8 (or integer)
    BLAS, so its column is numpy's own integer loop and the casts."""
    return _matmul(opts, 1024, 1024, 1024, "int8", acc="int32", max_repeat=3)


@workload
def batched_bmk_bkn_32x128x128x128(opts):
    """tex.einsum("bmk,bkn->bmn") on 32 float32 128x128 matrix pairs vs np.matmul."""
    rng = _rng()
    a, b = (rng.standard_normal((32, 128, 128), dtype=np.float32) for _ in range(2))
    result = compare(partial(tex.einsum, "bmk,bkn->bmn", a, b), partial(np.matmul, a, b),
                     _matmul_options(opts), unit="GFLOP/s", work=2 * 32 * 128**3)
    return _peak_notes(result, np.float32)


@workload
def splitk_123x51234x456(opts):
    """C[123x456] = A[123x51234] @ B[51234x456] float32 with the auto schedule (its
    split-K decision included) vs numpy's BLAS, the shape of the split-K discussion."""
    return _matmul(opts, 123, 51234, 456, max_repeat=3)


@workload
def threads_scale_scaled_add_64mib(opts):
    """y = 2*x + 1 over 64 MiB of float32 (a parallel elementwise kernel): tex on all
    threads ("tex") against tex on one thread (in the numpy column), so the ratio is the
    speedup of the threads; the rate is the bandwidth counted as bytes read + written."""
    n = 16 * 1024 * 1024
    N = tex.sizes("N")
    i = tex.indices("i")
    X = tex.tensor("X", (N,), "float32")
    f = tex.compile(tex.compute("Y", (i,), X[i] * 2 + 1))
    x = _rng().standard_normal(n, dtype=np.float32)
    y = np.empty_like(x)
    threads = tex.get_num_threads()

    def one_thread():
        tex.set_num_threads(1)
        try:
            return f(x, out=y)
        finally:
            tex.set_num_threads(threads)
    return compare(partial(f, x, out=y), one_thread, opts, unit="GB/s", work=2 * x.nbytes)


# ---------------------------------------------------------------- innermost reductions

REDUCTION_STRATEGIES = ("inner_parallel", "inner_reduction", "vector_accumulator")
_STREAM_GBS = {}        # "1T", "all": this run's streaming read bandwidth, for the notes


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


def _reduce(opts, combiner, shape, dtype, acc=None, strategy=None):
    a = _matrix(shape, dtype)
    defn = _row_reduction(combiner, dtype, acc)
    # in-cache inputs stay on one thread: a team costs more than the whole reduction
    # (the runtime's own rule would decide so, but its work estimate multiplies the
    # extents of sibling loops, which these nests have, and wakes the team)
    f = (tex.compile(defn) if strategy is None else
         _with_strategy(defn, strategy, parallel=a.nbytes >= 32 * 2**20))
    if combiner == "sum":
        numpy_fn = partial(a.sum, axis=1, dtype=None if acc is None else np.dtype(acc))
    else:
        numpy_fn = partial(getattr(a, combiner), axis=1)
    out_bytes = shape[0] * np.dtype(acc or dtype).itemsize
    result = compare(partial(f, a), numpy_fn, opts, unit="GB/s", work=a.nbytes + out_bytes)
    return _stream_note(result, a.nbytes)


@workload
def stream_read_bandwidth(opts):
    """Streaming read bandwidth of this machine: row sums of a 256 MiB float32 matrix by
    the fastest of tex's schedules (auto and each strategy; see notes), against numpy's
    np.add.reduce(a, axis=1) for scale. Notes: the 1-thread rate, the schedule."""
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
    result = compare(partial(f, a), partial(np.add.reduce, a, axis=1), opts, unit="GB/s",
                     work=a.nbytes)
    threads = tex.get_num_threads()
    tex.set_num_threads(1)
    try:
        one = statistics.median(time_per_call(partial(f, a), 2) for _ in range(opts.repeat))
    finally:
        tex.set_num_threads(threads)
    _STREAM_GBS.update({"all": result.rate(result.tex_s), "1T": result.rate(one)})
    result.extra.update({"1T GB/s": _STREAM_GBS["1T"], "threads": threads, "schedule": best})
    return result


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
    e.g. `reduce_i8_384x512[vector_accumulator]`."""
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


# ---------------------------------------------------------------- running and reporting

def select(substring=None):
    """Workload names containing `substring` (all when None), in registration order."""
    return [name for name in WORKLOADS if not substring or substring in name]


def run(names, opts, report=print):
    """Run the named workloads; a failing one is recorded with its error, not raised."""
    results = []
    report(_row(HEADER))
    for name in names:
        try:
            result = WORKLOADS[name](opts)
        except Exception as err:    # noqa: BLE001 - one broken workload must not hide the rest
            result = Result("", error=f"{type(err).__name__}: {err}".strip())
        result.name = name
        results.append(result)
        report(_row(_cells(result)))
    return results


def environment(opts):
    """What the figures depend on, stored with them in the JSON file."""
    import llvmlite
    import llvmlite.binding as llvm
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "llvmlite": llvmlite.__version__,
        "tex": tex.__version__,
        "cpu": llvm.get_host_cpu_name(),
        "cpus_available": len(os.sched_getaffinity(0)),
        "threads_env": {k: os.environ.get(k) for k in
                        ("TEX_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")},
        "repeat": opts.repeat,
        "min_sample_s": opts.min_sample_s,
    }


def write_json(path, results, opts):
    with open(path, "w") as fh:
        json.dump({"environment": environment(opts),
                   "results": [r.as_dict() for r in results]}, fh, indent=2)
        fh.write("\n")


HEADER = ("workload", "tex", "numpy", "numpy/tex", "tex rate", "numpy rate", "notes")
_WIDTHS = (40, 10, 10, 10, 16, 16, 0)


def _row(cells):
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, _WIDTHS)).rstrip()


def _cells(r):
    if r.error:
        return (r.name, "ERROR", "", "", "", "", r.error.splitlines()[0])
    rates = ("", "")
    if r.unit in THROUGHPUT_UNITS:
        rates = tuple(f"{r.rate(s):.2f} {r.unit}" if s else "" for s in (r.tex_s, r.numpy_s))
    notes = ", ".join(_note(k, v) for k, v in r.extra.items())
    ratio = f"{r.ratio:.2f}x" if r.ratio else ""
    return (r.name, format_seconds(r.tex_s), format_seconds(r.numpy_s), ratio, *rates, notes)


def _note(key, value):
    if key.endswith("fraction"):
        return f"{key} {value:.0%}"
    return f"{key} {value:.1f}" if isinstance(value, float) else f"{key} {value}"


def format_seconds(s):
    if s is None:
        return ""
    for scale, unit in ((1e-6, "ns"), (1e-3, "us"), (1.0, "ms")):
        if s < scale:
            return f"{s / scale * 1e3:.3g} {unit}"
    return f"{s:.3g} s"
