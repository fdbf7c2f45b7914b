"""The machine's measured FMA peak (float32 and float64) and the matmul rows' fraction of it.

The probe is plain llvmlite IR compiled for tex's host target (tex.backends.llvm.jit):
independent chains of vector FMAs, as many as cover the FMA latency times the FMA
ports, but never more than the register file holds beside the two broadcast operands
(a spilled chain reloads from memory every iteration and halves the figure).
"""
import ctypes
import functools
import threading
import time
from collections import namedtuple
from functools import partial

import numpy as np

import tex

from .harness import Result, time_per_call, workload

# Cycles before an FMA's result can feed the next (4 on Skylake, Zen 1-5; 5 on Haswell
# and Broadwell) times the FMAs issued a cycle (two ports on every AVX2/AVX-512 core
# tex targets): the independent chains that keep both ports busy.
FMA_LATENCY = 5
FMA_PORTS = 2
_X, _Y = 0.999999, 1e-6         # acc = acc * x + y stays finite, converging to y/(1-x) = 1


def fma_chains(target=None):
    """Independent FMA chains of the probe on `target` (default tex's): enough to cover
    latency x throughput, at most the vector registers less the two broadcasts."""
    from tex.scheduler import target as targets
    t = target or targets.target()
    return min(FMA_LATENCY * FMA_PORTS, t.vector_registers - 2)


def _fma_peak_ir(lanes, chains, dtype):
    """LLVM IR of `T fma_peak(i64 n, T x, T y)`: n >= 1 iterations of `chains`
    independent `acc = fma(acc, x, y)` on <lanes x T>, returning the sum of every
    accumulator's lanes so that no chain is dead. On x86 also `i64 clock_chain(i64 n,
    i64 y)`: n iterations of 64 dependent register adds in inline asm, one cycle each."""
    from llvmlite import ir
    ft = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    tag = "f32" if dtype == "float32" else "f64"
    i64 = ir.IntType(64)
    vec = ir.VectorType(ft, lanes)
    mod = ir.Module("tex_bench_peak")
    fma = ir.Function(mod, ir.FunctionType(vec, [vec] * 3), f"llvm.fma.v{lanes}{tag}")
    reduce = ir.Function(mod, ir.FunctionType(ft, [ft, vec]),
                         f"llvm.vector.reduce.fadd.v{lanes}{tag}")
    fn = ir.Function(mod, ir.FunctionType(ft, [i64, ft, ft]), "fma_peak")
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
    phis = [b.phi(vec) for _ in range(chains)]
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
    b.ret(b.call(reduce, [ir.Constant(ft, 0.0), total]))

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


_FmaKernels = namedtuple("_FmaKernels", "peak clock flops_per_iter asm engine lanes chains")


@functools.lru_cache(maxsize=2)
def _fma_kernels(dtype="float32"):
    """fma_peak and clock_chain (None off x86) as ctypes functions, the FLOPs of one
    fma_peak iteration, the assembly, and the engine that holds the code: compiled at O3
    for this host's CPU and features, as tex's own kernels are."""
    import llvmlite.binding as llvm
    from tex.backends.llvm import jit
    host = _host()
    llvm.initialize_native_asmparser()     # for the inline asm of clock_chain
    bits = 512 if host.has_feature("avx512f") else 256 if host.has_feature("avx") else 128
    lanes = bits // (8 * np.dtype(dtype).itemsize)
    chains = fma_chains()
    mod = jit.optimized_module(_fma_peak_ir(lanes, chains, dtype))
    asm = host.machine.emit_assembly(mod)
    engine = llvm.create_mcjit_compiler(mod, host.new_machine())
    engine.finalize_object()
    # CFUNCTYPE calls release the GIL: threads calling it run in parallel
    ct = ctypes.c_float if dtype == "float32" else ctypes.c_double
    peak = ctypes.CFUNCTYPE(ct, ctypes.c_int64, ct, ct)(engine.get_function_address("fma_peak"))
    clock = None
    if _is_x86():
        clock = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(
            engine.get_function_address("clock_chain"))
    return _FmaKernels(peak, clock, 2 * lanes * chains, asm, engine, lanes, chains)


def expected_sum(iters, dtype="float32"):
    """What fma_peak(iters, x, y) returns, computed independently in float64 numpy: chain
    c starts at 1 + c/64 and after n steps of acc*x + y holds 1 + x**n * c/64."""
    k = _fma_kernels(dtype)
    x = float(np.asarray(_X, dtype))
    y = float(np.asarray(_Y, dtype))
    fixed = y / (1 - x)
    c = np.arange(k.chains) / 64
    return k.lanes * float(np.sum(fixed + x ** iters * (1 + c - fixed)))


def spills(asm):
    """Whether the probe's loop reads or writes the stack (a spilled accumulator)."""
    return any(("rsp" in ln or "rbp" in ln) and "vfmadd" in ln for ln in asm.splitlines())


def _concurrent_seconds(fn, threads):
    """Wall seconds of `threads` concurrent calls of fn(), from a common start."""
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


MORE_SAMPLES = 3


@functools.lru_cache(maxsize=None)
def fma_peak(threads, samples=9, sample_s=0.05, dtype="float32"):
    """Measured FMA peak of this machine on `threads` threads, once per process:
    (seconds of the fastest sample, FLOPs of one sample on all threads). The fastest, not
    the median: it is a peak, and other processes on the cores only ever lower it. A
    sample on several threads needs every one of them undisturbed at once, which a busy
    shared machine grants rarely (Emerald Rapids VM, 2 threads, 9 samples: 89 GFLOP/s
    of AVX2 code where one thread made 92 and the matmuls 113, so every 2-thread row
    read "above 100% of the peak"), so those take MORE_SAMPLES times as many."""
    kernels = _fma_kernels(dtype)
    peak, flops_per_iter = kernels.peak, kernels.flops_per_iter
    iters = 1 << 16
    while True:                                 # iterations for one thread's sample_s
        t0 = time.perf_counter()
        peak(iters, _X, _Y)
        elapsed = time.perf_counter() - t0
        if elapsed >= sample_s / 4:
            break
        iters *= 4
    iters = max(1, int(iters * sample_s / elapsed))
    run = partial(peak, iters, _X, _Y)
    if threads > 1:
        samples *= MORE_SAMPLES
    seconds = min(_concurrent_seconds(run, threads) for _ in range(samples))
    return seconds, threads * iters * flops_per_iter


def fma_peak_gflops(threads, dtype="float32"):
    seconds, flops = fma_peak(threads, dtype=dtype)
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


def _peak_workload(dtype):
    def run_case(opts):
        threads = tex.get_num_threads()
        k = _fma_kernels(dtype)
        got, want = k.peak(1000, _X, _Y), expected_sum(1000, dtype)
        if abs(got - want) > 1e-3 * abs(want):          # the kernel computes what it says
            raise AssertionError(f"fma_peak returned {got}, numpy says {want}")
        seconds, flops = fma_peak(threads, dtype=dtype)
        one = fma_peak_gflops(1, dtype)
        result = Result("GFLOP/s", tex_s=seconds, work=flops, tex_threads=threads,
                        extra={"chains": k.chains, "1T GFLOP/s": one})
        ghz = clock_ghz()
        if ghz:
            result.extra.update({"GHz": round(ghz, 2), "1T FLOP/cycle": one / ghz,
                                 "FLOP/cycle/core": result.rate(seconds) / threads / ghz})
        fma = next((ln.split() for ln in k.asm.splitlines() if "vfmadd" in ln), None)
        result.extra["asm"] = f"{fma[0]} {fma[-1].strip('%')[:3]}" if fma else "no vfmadd"
        if spills(k.asm):
            result.extra["spills"] = "yes: the figure is below the real peak"
        return result
    bits = "FP32" if dtype == "float32" else "FP64"
    run_case.__name__ = f"fma_peak_{dtype[0]}{dtype[-2:]}"
    run_case.__doc__ = (
        f"This machine's measured {bits} FMA peak.\n\nmin(latency x ports, registers - 2) "
        "independent chains of vector FMAs on the host's widest vector (an llvmlite "
        "kernel), called through ctypes on tex.get_num_threads() Python threads at once "
        "(rate) and on one thread (notes). The matmul rows give their fraction of it.")
    return workload(run_case)


fma_peak_f32 = _peak_workload("float32")
fma_peak_f64 = _peak_workload("float64")


def peak_notes(result, dtype):
    """Fractions of the measured FMA peak of `dtype` at each side's thread count; a
    fraction above 100% is a measurement error and the notes say so. Integer matmuls have
    no float FMA peak to compare with."""
    dtype = np.dtype(dtype)
    if dtype.kind != "f" or not result.tex_s:
        return result
    sides = [("peak_fraction", result.tex_s, result.tex_threads or tex.get_num_threads())]
    if result.numpy_s:
        sides.append(("numpy_peak_fraction", result.numpy_s, result.numpy_threads or 1))
    bad = []
    for key, seconds, threads in sides:
        fraction = result.rate(seconds) / fma_peak_gflops(threads, dtype.name)
        result.extra[key] = fraction
        if fraction > 1.0:
            bad.append(key)
    if bad:
        result.extra["MEASUREMENT ERROR"] = f"{' and '.join(bad)} above 100% of the peak"
    return result
