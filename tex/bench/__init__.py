"""The benchmark suite behind `python -m tex bench`.

    harness      Options, Result, @workload, interleaved timing, checks, thread counts
    peak         the measured FMA peak (float32, float64) and fractions of it
    calls        per-call overhead and compile times
    linalg       matrix products vs numpy's BLAS, thread scaling
    reductions   row reductions and the streaming bandwidth
    programs     fusions and whole programs (attention, LayerNorm, GEGLU, conv1d, ...)
    report       running, the table, the JSON file

A workload is a function registered with `@workload`; its name is the function's name and
its docstring the description. It gets the `Options` and returns a `Result`, usually from
`compare(tex_fn, {label: numpy_fn, ...}, opts, ...)`, which checks every side against an
independent numpy result before timing:

    @workload
    def rowsum_f32_4096x4096(opts):
        "Row sums of a float32 matrix against a.sum(axis=1)."
        ...
        return compare(lambda: f(a), {"a.sum(axis=1)": lambda: a.sum(axis=1)}, opts,
                       unit="GB/s", work=a.nbytes, threads=1)

This package uses only tex's public API, as an outside user would, except for the FMA
peak kernel: plain llvmlite IR compiled for tex's host target (tex.backends.llvm.jit).
"""
from . import calls, peak, linalg, reductions, programs  # noqa: F401  (registers the workloads)
from .harness import (BLAS, SETTLE_S, WORKLOADS, Options, Result, blas_threads,  # noqa: F401
                      check_close, compare, interleave, interleave_all, match_blas_threads,
                      tex_threads, time_per_call, workload)
from .peak import _fma_kernels, clock_ghz, fma_chains, fma_peak, fma_peak_gflops  # noqa: F401
from .report import (HEADER, code_target, cpu_description, environment,  # noqa: F401
                     format_seconds, run, select, threads_cell, write_json)
